"""OpenRLHF's ``PPOTrainer`` as agentsearch runs it: replay, our logs, replay checkpoints.

The launcher's entry point swaps ``AgentsearchPPOTrainerActor`` in for every run (on-policy
or replay). Against OpenRLHF's trainer it changes:

- **replay** (``train.replay`` on): ``hdr.HDRExperienceMaker`` + ``hdr.HDRSamplesGenerator``
  (``prompts_per_step`` fresh prompts a step, up to ``k_rep`` replayed groups, empty slots
  padded); ``get_max_steps`` counts steps by fresh prompts, so the LR schedule ends with
  the run (OpenRLHF divides the prompts by ``train.batch_size``, the slots);
- **logs**: OpenRLHF's rollout stats are recomputed over fresh rows only (replayed and
  padding rows are not this step's rollout); the scan is booked as ``timing/replay_scan``,
  not inside ``timing/make_experience``; and every step and evaluation is appended to
  ``OUT/metrics.jsonl`` in the local trainer's keys (``time/*`` phases,
  ``time/train_cumulative``, ``rollout/*``, ``replay/*``, ``eval/mean_at_n``), so
  ``agentsearch pareto`` reads an OpenRLHF run as it reads a local one;
- **evaluation**: the local trainer's schedule (``eval_due``): step 0, every ``eval.every``
  steps and the last step (``eval.every=0``: step 0 and the last). OpenRLHF's own schedule
  (``--eval.steps``) is off; a best-eval checkpoint is saved at any evaluation after step 0;
- **steps without signal** (no advantage on any policy token, no KL loss or entropy term:
  ``carries_gradient``) take no optimizer or LR step, as the local update: the rows never
  reach the actors (OpenRLHF's update would step Adam on a zero gradient, and its momentum
  and weight decay would move the weights); ``train/skipped_no_signal`` says so;
- **replay checkpoints**: one file per OpenRLHF checkpoint tag, ``global_stepN`` and
  ``best_global_stepN`` alike (``CKPT/agentsearch_replay/global_stepN.pt``, the last
  ``ckpt.max_num`` kept): DeepSpeed makes either tag ``latest``, the one a resume loads. The
  train time (``time/train_cumulative``) goes into both tags' client states. A resume whose
  restored ``global_step`` has no replay file of that step stops with the reason.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import torch

from agentsearch.engines.openrlhf.compat import import_openrlhf

import_openrlhf()
import ray  # noqa: E402
from openrlhf.trainer.ppo_trainer import PPOTrainer, compute_eval_metrics  # noqa: E402

__all__ = ["AgentsearchPPOTrainer", "AgentsearchPPOTrainerActor", "replay_state_path",
           "step_record", "fresh_rollout_stats", "eval_record", "REPLAY_DIR", "eval_due",
           "carries_gradient"]

REPLAY_DIR = "agentsearch_replay"
TIMING = {"timing/generation": "time/generate", "timing/make_experience": "time/logprobs",
          "timing/replay_scan": "time/replay_scan", "timing/ppo_train": "time/update",
          "timing/broadcast": "time/sync"}
"""OpenRLHF's per-phase timings -> the local trainer's ``time/*`` phases (disjoint)."""
TRAIN = {"policy_loss": "train/loss", "actor_grad_norm": "train/grad_norm", "actor_lr": "train/lr",
         "ppo_clip_ratio": "train/clip_frac", "ppo_kl": "train/approx_kl", "kl": "train/kl_ref"}


def eval_due(step: int, every: int, last: int) -> bool:
    """Whether the local trainer (``trainer/loop.py``) evaluates at ``step``: step 0, every
    ``every``-th step and the ``last`` one (``every=0``: step 0 and the last)."""
    return step == 0 or step == last or (every > 0 and step % every == 0)


def carries_gradient(experiences, pull: bool) -> bool:
    """Whether an update on ``experiences`` has a gradient, the local update's rule
    (``algorithms.update.carries_gradient``): a nonzero advantage on a policy token, or a
    term that pulls whatever the advantages (``pull``: a KL loss or an entropy bonus)."""
    return pull or any(bool(((e.advantages != 0) & e.action_mask.bool()).any())
                       for e in experiences if e.advantages is not None)


class _NoSignal(Exception):
    """Raised inside OpenRLHF's ``train_step`` after the experience is made and before the
    rows go to the actors (``stats``: the step's rollout stats)."""

    def __init__(self, stats: dict):
        super().__init__("no signal")
        self.stats = stats


def replay_state_path(ckpt_path: str | Path, global_step: int) -> Path:
    return Path(ckpt_path) / REPLAY_DIR / f"global_step{int(global_step)}.pt"


def fresh_rollout_stats(experiences, n_fresh: int | None) -> dict[str, float]:
    """OpenRLHF's ``rollout/*`` stats over the rows with ``index < n_fresh`` (None = all)."""
    rewards, lengths, truncated, correct = [], [], [], []
    for e in experiences:
        for r, idx in enumerate(e.index):
            if n_fresh is not None and idx >= n_fresh:
                continue
            rewards.append(float(e.info["reward"][r]))
            if e.response_length is not None:
                lengths.append(float(e.response_length[r]))
            if e.truncated is not None:
                truncated.append(float(e.truncated[r]))
            if "answer_correct" in e.info:
                correct.append(float(e.info["answer_correct"][r]))
    t = torch.tensor(rewards)
    out = {"rollout/reward_mean": float(t.mean()) if rewards else 0.0,
           "rollout/reward_std": float(t.std()) if len(rewards) > 1 else 0.0,
           "rollout/response_length_mean": sum(lengths) / max(len(lengths), 1),
           "rollout/truncated_rate": sum(truncated) / max(len(truncated), 1),
           "rollout/num_samples": float(len(rewards))}
    if correct:
        out["rollout/answer_correct"] = sum(correct) / len(correct)
    return out


def step_record(status: dict, train_cumulative: float) -> dict:
    """One ``metrics.jsonl`` record (without ``step``) from a step's OpenRLHF status."""
    rec = {v: float(status[k]) for k, v in TIMING.items() if k in status}
    rec["time/step"] = sum(rec.values())
    rec.update({v: float(status[k]) for k, v in TRAIN.items()
                if isinstance(status.get(k), (int, float))})
    rec.update({k: float(v) for k, v in status.items()
                if k.startswith(("rollout/", "replay/", "train/")) and isinstance(v, (int, float))})
    rec["time/train_cumulative"] = train_cumulative
    return rec


def eval_record(samples, n: int) -> dict[str, float]:
    """``eval/*`` in the local trainer's keys from OpenRLHF's eval samples (``n`` per
    question, in order): mean and best of ``answer_correct`` over each question's samples."""
    correct = [float(c) for s in samples for c in s.info["answer_correct"]]
    per_q = [correct[i:i + n] for i in range(0, len(correct) - len(correct) % n, n)]
    if not per_q:
        return {}
    return {"eval/mean_at_n": sum(sum(q) / n for q in per_q) / len(per_q),
            "eval/best_at_n": sum(max(q) for q in per_q) / len(per_q),
            "eval/questions": float(len(per_q)), "eval/n": float(n)}


class AgentsearchPPOTrainer(PPOTrainer.__ray_actor_class__):
    """OpenRLHF's ``PPOTrainer`` with agentsearch's replay, logs and checkpoints (module doc)."""

    def __init__(self, pretrain, strategy, actor_model_group, critic_model_group,
                 reward_model_group, reference_model_group, vllm_engines, **generate_kwargs):
        super().__init__(pretrain, strategy, actor_model_group, critic_model_group,
                         reward_model_group, reference_model_group, vllm_engines,
                         **generate_kwargs)
        cfg = getattr(strategy.args, "agentsearch", None)
        if cfg is None:
            raise ValueError("AgentsearchPPOTrainer needs args.agentsearch (run through "
                             "`python -m agentsearch.engines.openrlhf.entry`)")
        self.settings = cfg
        self.eval_every = int(getattr(cfg, "eval_every", 0))
        strategy.args.eval.steps = float("inf")  # OpenRLHF's own eval schedule off: ours (eval_due)
        self.fresh_per_step = int(cfg.fresh_per_step)
        self.run_dir = Path(cfg.out)
        self.train_cumulative = 0.0
        self.replaying = bool(cfg.replay)
        if self.replaying:
            from agentsearch.engines.openrlhf.hdr import (
                HDRExperienceMaker,
                HDRSamplesGenerator,
                check_estimator,
            )
            from agentsearch.replay import make_replay

            check_estimator(self.args.algo.advantage.estimator)
            r = cfg.replay
            old = self.experience_maker
            self.experience_maker = HDRExperienceMaker(
                old.actor_model_group, old.critic_model_group, old.reward_model_group,
                old.initial_model_group, old.kl_ctl, old.strategy, old.tokenizer,
                replay=make_replay(r["kind"], **{k: v for k, v in r.items() if k != "kind"}))
            gen = self.samples_generator
            self.samples_generator = HDRSamplesGenerator(strategy, gen.prompts_dataloader,
                                                         gen.eval_dataloader, gen.tokenizer,
                                                         gen.vllm_engines)
            self.samples_generator.fresh = self.fresh_per_step

    def get_max_steps(self):
        """Optimizer steps of the run (the LR schedule's length): training steps, one per
        ``fresh_per_step`` prompts (replay or not), times the optimizer steps of each."""
        per_step = int(getattr(self.settings, "optimizer_steps_per_step", 1))
        return len(self.prompts_dataloader.dataset) // self.fresh_per_step * per_step

    def last_step(self) -> int:
        """The run's training steps (``steps``: one per ``fresh_per_step`` prompts)."""
        return len(self.prompts_dataloader.dataset) // self.fresh_per_step

    # -- a step -------------------------------------------------------------------------
    def _compute_rollout_stats(self, experiences):
        stats = fresh_rollout_stats(experiences, getattr(self.experience_maker, "n_fresh", None)
                                    if self.replaying else None)
        # OpenRLHF calls this between making the experience and handing it to the actors
        if self.critic_model_group is None and not carries_gradient(experiences, self._pulls()):
            raise _NoSignal(stats)
        return stats

    def _pulls(self) -> bool:
        """A KL loss or an entropy bonus: a gradient whatever the advantages."""
        a = self.args
        kl = bool(a.algo.kl.use_loss) and float(a.algo.kl.init_coef or 0) > 0
        return kl or float(a.actor.entropy_coef or 0) > 0

    def train_step(self, rollout_samples, global_step):
        t0 = time.time()
        try:
            status, step = super().train_step(rollout_samples, global_step)
            status.update({"train/skipped": 0.0, "train/skipped_no_signal": 0.0})
        except _NoSignal as e:  # no update: the weights, Adam and the LR schedule stay as they are
            status, step = {**e.stats, "timing/make_experience": time.time() - t0,
                            "train/skipped": 1.0, "train/skipped_no_signal": 1.0}, global_step + 1
        if self.replaying:
            metrics = dict(self.experience_maker.metrics)
            scan = metrics.pop("time/replay_scan", 0.0)
            status["timing/make_experience"] = status.get("timing/make_experience", 0.0) - scan
            status["timing/replay_scan"] = scan
            status.update(metrics)
        return status, step

    # -- logs and checkpoints -----------------------------------------------------------
    def _log(self, record: dict) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with open(self.run_dir / "metrics.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    def save_logs_and_checkpoints(self, global_step, logs_dict=None, client_states=None):
        logs = logs_dict or {}
        # fit() adds timing/generation and timing/step_total after train_step
        self.train_cumulative += sum(float(logs[k]) for k in TIMING if k in logs)
        self._log({"step": int(global_step), **step_record(logs, self.train_cumulative)})
        super().save_logs_and_checkpoints(global_step, logs_dict,
                                          self._client_states(client_states))
        if global_step % self.args.ckpt.save_steps == 0:
            self._save_replay(global_step)
        self._evaluate_if_due(global_step, client_states)

    def _evaluate_if_due(self, global_step: int, client_states=None) -> None:
        """Evaluate at the steps ``eval_due`` names (OpenRLHF's ``fit`` calls
        ``save_logs_and_checkpoints`` right after each step, where its own evaluation was);
        after step 0, OpenRLHF's best-eval checkpoint follows as in its ``fit``."""
        if not self.eval_dataloader or not eval_due(global_step, self.eval_every, self.last_step()):
            return
        kwargs = {**self.generate_kwargs, "temperature": self.args.eval.temperature,
                  "n_samples_per_prompt": self.args.eval.n_samples_per_prompt}
        logs = self.evaluate(global_step, **kwargs)
        if global_step > 0:
            self.save_best_checkpoint(logs, global_step, client_states)

    def save_best_checkpoint(self, eval_metrics, global_step, client_states=None):
        """OpenRLHF's best checkpoint (``best_global_stepN``) with what a resume needs: DeepSpeed
        makes that tag ``latest`` as well, so a relaunch resumes from it; the replay state and
        train time of step N are saved with it (a best step need not be a ``save_steps`` one)."""
        best = self.best_eval_metric_value
        super().save_best_checkpoint(eval_metrics, global_step, self._client_states(client_states))
        if self.best_eval_metric_value != best:  # OpenRLHF saved one (a new best)
            self._save_replay(global_step)

    def _client_states(self, client_states) -> dict:
        return {**(client_states or {}), "agentsearch_train_cumulative": self.train_cumulative}

    def _save_replay(self, global_step: int) -> None:
        """The replay state of ``global_step`` next to OpenRLHF's checkpoint of that step;
        the newest ``ckpt.max_num`` files are kept (the latest tag's is always the newest)."""
        if not self.replaying:
            return
        path = replay_state_path(self.args.ckpt.path, global_step)
        path.parent.mkdir(parents=True, exist_ok=True)
        state = {"global_step": int(global_step), **self.experience_maker.state_dict()}
        torch.save(state, str(path) + ".tmp")
        os.replace(str(path) + ".tmp", path)
        kept = sorted(path.parent.glob("global_step*.pt"),
                      key=lambda p: int(p.stem.removeprefix("global_step")))
        for old in kept[: max(0, len(kept) - int(self.args.ckpt.max_num))]:
            old.unlink()

    def init_checkpoint_states(self):
        states = super().init_checkpoint_states()
        step = int(states.get("global_step", 0))
        self.train_cumulative = float(states.get("agentsearch_train_cumulative", 0.0))
        self._truncate_log(step if step > 0 else -1)  # from scratch: step 0 is evaluated again
        if self.replaying and step > 0:
            path = replay_state_path(self.args.ckpt.path, step)
            if not path.exists():
                raise RuntimeError(f"OpenRLHF restored global_step {step} but {path} is missing: "
                                   "the replay buffer of that step is gone, so the run cannot "
                                   "resume as it was (start a new run folder, or restore the file)")
            state = torch.load(path, weights_only=False)
            if int(state["global_step"]) != step:
                raise RuntimeError(f"{path} holds the replay state of step "
                                   f"{state['global_step']}, not {step}")
            self.experience_maker.load_state_dict(state)
        if step == 0:  # OpenRLHF's fit calls this before its first step: the step-0 evaluation
            self._evaluate_if_due(0)
        return states

    def _truncate_log(self, step: int) -> None:
        """A resumed run re-logs the steps after its checkpoint: drop their old records."""
        path = self.run_dir / "metrics.jsonl"
        if path.exists():
            keep = [ln for ln in path.read_text().splitlines()
                    if ln.strip() and json.loads(ln).get("step", 0) <= step]
            path.write_text("".join(ln + "\n" for ln in keep))

    @torch.no_grad()
    def evaluate(self, global_step, **generate_kwargs):
        """OpenRLHF's evaluation (its ``eval_*`` logs) plus ``eval/*`` in ``metrics.jsonl``."""
        t0 = time.time()
        samples = self.samples_generator.generate_eval_samples(**generate_kwargs)
        n = generate_kwargs["n_samples_per_prompt"]
        logs = compute_eval_metrics(self.eval_dataloader, samples, n)
        for sink in (self.wandb_logger, self.tensorboard_logger):
            if sink:
                sink.log_eval(global_step, logs)
        self._log({"step": int(global_step), **eval_record(samples, n),
                   "time/eval": time.time() - t0, "time/train_cumulative": self.train_cumulative})
        return logs


AgentsearchPPOTrainerActor = ray.remote(AgentsearchPPOTrainer)
