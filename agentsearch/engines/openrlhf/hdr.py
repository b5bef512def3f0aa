"""Headroom-Drift Replay inside OpenRLHF: a trainer, a sample generator, an experience maker.

OpenRLHF's step (``PPOTrainer.fit``): ``SamplesGenerator.generate_samples`` plays
``rollout.batch_size`` prompts x ``n_samples_per_prompt``; ``train_step`` hands them to
``RemoteExperienceMaker.make_experience_batch`` (actor/reference forwards, then the group
advantages), the actor trains, weights go to vLLM. With replay the step becomes:

1. **scan** (``HDRExperienceMaker.scan``, before generation): our replay strategy
   (``agentsearch.replay.make_replay``: ``hdr`` or any registered kind) scores the stored
   groups with the actor's own teacher-forced forward (``forward`` on the actor group, policy
   tokens only) and accepts up to ``k_rep`` whole groups (Headroom order, Drift gate);
2. **generate** ``batch_size - k`` fresh prompts' groups (``HDRSamplesGenerator``);
3. **make experience**: fresh rows through OpenRLHF's own ``make_experience``; replayed rows
   are deep copies of the stored ones, with their stored generation-time
   ``action_log_probs`` (the old policy of the PPO ratio), reference logprobs and KL, raw
   rewards and the same ``info`` keys; then fresh + replayed (whole, contiguous groups) go
   through OpenRLHF's own ``compute_advantages_and_returns``; group estimators
   (``group_norm``, ``rloo``, ``dr_grpo``, ...) give replayed rows exactly their stored
   advantages, because they see the same raw rewards of the same group;
4. **ingress**: this step's fresh groups, with their behaviour logprobs and advantages,
   are offered to the buffer (mixed-outcome groups are kept).

``replay/*`` and ``time/replay_scan`` join OpenRLHF's step logs; the buffer (groups, rows,
RNG, stats) is saved next to OpenRLHF's checkpoints and restored on resume.

Alignment: OpenRLHF's ``action_mask`` and ``action_log_probs`` are ``[B, T-1]`` (position
``j`` scores token ``j+1``); a ``ReplayGroup`` is ``[n, T]`` aligned with ``token_ids``, so
column 0 (never a policy token) is prepended.
"""

from __future__ import annotations

import copy
import os
import time
from types import SimpleNamespace

import torch

from agentsearch.engines.openrlhf.compat import import_openrlhf

import_openrlhf()
import ray  # noqa: E402
from openrlhf.trainer.ppo_trainer import PPOTrainer  # noqa: E402
from openrlhf.trainer.ppo_utils.experience import Experience  # noqa: E402
from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker  # noqa: E402
from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator  # noqa: E402
from openrlhf.trainer.ray.vllm_engine import batch_vllm_engine_call  # noqa: E402

from agentsearch.replay import ReplayGroup, make_replay  # noqa: E402

__all__ = ["HDRExperienceMaker", "HDRSamplesGenerator", "HDRPPOTrainer", "HDRPPOTrainerActor",
           "rows_to_group", "REPLAY_STATE_FILE", "GROUP_ESTIMATORS"]

REPLAY_STATE_FILE = "agentsearch_replay.pt"
GROUP_ESTIMATORS = ("group_norm", "rloo", "reinforce_baseline", "dr_grpo")
"""Advantage estimators computed within a prompt's group: replay needs one (a replayed
group's advantages are then recomputed exactly from its raw rewards)."""


def _pad_left_col(x: torch.Tensor) -> torch.Tensor:
    """[n, T-1] -> [n, T] with a zero column 0 (OpenRLHF's action axis -> token axis)."""
    return torch.cat([x.new_zeros(x.shape[0], 1), x], dim=1)


def _width(batch: Experience, r: int) -> int:
    """Row ``r``'s own action-axis length in a right-padded micro-batch (its tokens - 1)."""
    return int(batch.attention_mask[r].sum()) - 1


def _rows_batch(rows: list[Experience], pad_token_id: int) -> Experience:
    return Experience.concat_experiences(rows, pad_token_id)


def rows_to_group(key: str, rows: list[Experience], advantages: torch.Tensor, step: int) -> ReplayGroup:
    """A ``ReplayGroup`` from one group's per-sample rows (each ``Experience`` with batch 1,
    ``action_log_probs`` = behaviour logprobs) and its per-row advantages ``[n]``."""
    batch = _rows_batch(rows, 0)
    mask = _pad_left_col(batch.action_mask.bool())                       # [n, T]
    lp = _pad_left_col(batch.action_log_probs.float())                   # [n, T]
    correct = [r.info.get("answer_correct") for r in rows]
    return ReplayGroup(prompt_id=key, token_ids=batch.sequences, action_mask=mask, gen_logprobs=lp,
                       advantages=advantages, rewards=torch.cat([r.rewards.float() for r in rows]),
                       answer_correct=None if any(c is None for c in correct)
                       else torch.cat([c.bool() for c in correct]), born_step=step)


class HDRExperienceMaker(RemoteExperienceMaker):
    """OpenRLHF's experience maker with a cross-step replay buffer (module doc)."""

    def __init__(self, *args, replay=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.replay = replay
        self.rows: dict[str, list[Experience]] = {}   # group key -> stored per-sample rows
        self.step = 0
        self.pending: list[str] = []                   # accepted at the last scan
        self.metrics: dict[str, float] = {}

    # -- scan ---------------------------------------------------------------------------
    def _actor_logprobs(self, rows: list[Experience]) -> list[torch.Tensor]:
        """Current-policy logprobs of each row's tokens, ``[1, T_i - 1]`` each (one batched
        ``forward`` per micro-batch on the actor group)."""
        size = max(1, int(self.args.rollout.micro_batch_size))
        actors = max(1, len(getattr(self.actor_model_group, "_actor_handlers", [None]))
                     // max(1, getattr(self.actor_model_group, "duplicate_actors", 1)))
        if -(-len(rows) // size) < actors:
            size = max(1, len(rows) // actors)
        batches = [_rows_batch(rows[i:i + size], self.tokenizer.pad_token_id) for i in range(0, len(rows), size)]
        dup = self.args.ds.ring_attn_size * self.args.ds.tensor_parallel_size
        refs = self.actor_model_group.async_run_method_batch(
            method_name="forward", sequences=[b.sequences for b in batches],
            action_mask=[b.action_mask for b in batches], attention_mask=[b.attention_mask for b in batches])
        out = []
        for b, lp in zip(batches, self._flatten_results(refs, dup), strict=True):
            out += [lp[i:i + 1, : _width(b, i)] for i in range(lp.shape[0])]
        return out

    def score_fn(self, groups: list[ReplayGroup]) -> list[torch.Tensor]:
        """``ScoreFn`` for ``select``: ``[n, T]`` current logprobs per group (column 0 = 0)."""
        rows = [r for g in groups for r in self.rows[g.prompt_id]]
        lps = self._actor_logprobs(rows)
        out, i = [], 0
        for g in groups:
            n = g.n
            T = g.token_ids.shape[1]
            block = torch.zeros(n, T)
            for j in range(n):
                lp = lps[i + j][0].float()
                block[j, 1:1 + lp.numel()] = lp
            out.append(block)
            i += n
        return out

    def scan(self) -> int:
        """Select this step's replayed groups (before generation); returns how many."""
        t0 = time.perf_counter()
        sel = self.replay.select(self.score_fn, self.step)
        self.pending = [g.prompt_id for g in sel.accepted]
        self.metrics = {**sel.stats, "time/replay_scan": time.perf_counter() - t0}
        return len(self.pending)

    # -- experience ---------------------------------------------------------------------
    def make_experience_batch(self, rollout_samples) -> list[Experience]:
        n = self.args.rollout.n_samples_per_prompt
        fresh_rows = [copy.deepcopy(s) for s in rollout_samples]      # raw rewards, before shaping
        fresh = self.make_experience(self.split_rollout_samples(rollout_samples))
        behaviour = self._per_row(fresh, ("action_log_probs", "base_action_log_probs", "kl"))
        replayed = [copy.deepcopy(r) for key in self.pending for r in self.rows[key]]
        for i, r in enumerate(replayed):
            r.index = [len(rollout_samples) + i]
        size = max(1, int(self.args.rollout.micro_batch_size))
        replay_batches = [_rows_batch(replayed[i:i + size], self.tokenizer.pad_token_id)
                          for i in range(0, len(replayed), size)]
        experiences = self.compute_advantages_and_returns(fresh + replay_batches)
        advantages = self._per_row(experiences, ("advantages",))
        for row, extra in zip(fresh_rows, behaviour, strict=True):
            row.action_log_probs, row.kl = extra["action_log_probs"], extra["kl"]
            row.base_action_log_probs = extra["base_action_log_probs"]
            row.info = {**row.info, **extra["info"]}   # the keys make_experience adds
        self._ingress(fresh_rows, [a["advantages"] for a in advantages[: len(fresh_rows)]], n)
        self.metrics.update({"replay/rows": float(len(replayed)), "replay/fresh_rows": float(len(fresh_rows)),
                             **self.replay.metrics()})
        self.pending = []
        self.step += 1
        return experiences

    @staticmethod
    def _per_row(batches: list[Experience], names: tuple[str, ...]) -> list[dict]:
        """Per-sample slices (by ``index``) of step tensors of micro-batched experiences, plus
        ``info['kl']``/``info['logprobs_diff']`` when asked for ``kl``."""
        out: dict[int, dict] = {}
        for b in batches:
            for r, idx in enumerate(b.index):
                width = _width(b, r)
                row = {}
                for name in names:
                    t = getattr(b, name)
                    row[name] = None if t is None else t[r:r + 1, :width].clone()
                if "kl" in names:
                    row["info"] = {k: b.info[k][r:r + 1].clone() for k in ("kl", "logprobs_diff")}
                out[idx] = row
        return [out[i] for i in sorted(out)]

    def _ingress(self, rows: list[Experience], advantages: list[torch.Tensor], n: int) -> None:
        """Offer this step's fresh groups (rows with behaviour logprobs; advantages
        ``[1, A_i]`` per row, constant over a row's action tokens for group estimators)."""
        groups = []
        for g in range(len(rows) // n):
            key = f"{self.step}:{g}"
            block = rows[g * n:(g + 1) * n]
            adv = torch.stack([advantages[g * n + j][0][block[j].action_mask[0].bool()][0]
                               if block[j].action_mask.any() else torch.tensor(0.0) for j in range(n)])
            self.rows[key] = block
            groups.append(rows_to_group(key, block, adv, self.step))
        self.replay.add(groups, self.step)
        live = {g.prompt_id for g in self.replay.groups} if hasattr(self.replay, "groups") else set(self.rows)
        self.rows = {k: v for k, v in self.rows.items() if k in live}

    # -- checkpoint ---------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"replay": self.replay.state_dict(), "rows": self.rows, "step": self.step}

    def load_state_dict(self, state: dict) -> None:
        self.replay.load_state_dict(state["replay"])
        self.rows, self.step = state["rows"], int(state["step"])


class HDRSamplesGenerator(SamplesGenerator):
    """OpenRLHF's sample generator that generates ``batch_size - k`` prompts, ``k`` being the
    number of groups the maker's scan accepted just before."""

    maker: HDRExperienceMaker | None = None

    def generate_samples(self, **generate_kwargs):
        k = self.maker.scan() if self.maker is not None else 0
        if getattr(self, "_dataloader_iter", None) is None:
            self._dataloader_iter = iter(self.prompts_dataloader)
        if self.args.vllm.enable_sleep:
            batch_vllm_engine_call(self.vllm_engines, "wake_up")
        experiences, consumed, exhausted = self._generate_vllm(
            dataloader_iter=self._dataloader_iter, num_prompts=self.args.rollout.batch_size - k,
            dynamic_filtering=self.args.algo.dynamic_filtering_enable, **generate_kwargs)
        if self.args.vllm.enable_sleep:
            batch_vllm_engine_call(self.vllm_engines, "sleep")
        rate = len(experiences) / consumed * 100 if self.args.algo.dynamic_filtering_enable and consumed else None
        if exhausted:
            self._dataloader_iter = None
        return experiences, rate, consumed, exhausted


def replay_settings(args) -> SimpleNamespace:
    """The ``agentsearch`` settings the launcher's entry point put on OpenRLHF's args."""
    cfg = getattr(args, "agentsearch", None)
    if cfg is None:
        raise ValueError("HDRPPOTrainer needs args.agentsearch (run through "
                         "`python -m agentsearch.engines.openrlhf.entry`)")
    return cfg


class HDRPPOTrainer(PPOTrainer.__ray_actor_class__):
    """OpenRLHF's ``PPOTrainer`` with ``HDRSamplesGenerator`` + ``HDRExperienceMaker``."""

    def __init__(self, pretrain, strategy, actor_model_group, critic_model_group, reward_model_group,
                 reference_model_group, vllm_engines, **generate_kwargs):
        super().__init__(pretrain, strategy, actor_model_group, critic_model_group, reward_model_group,
                         reference_model_group, vllm_engines, **generate_kwargs)
        r = replay_settings(strategy.args).replay
        buffer = make_replay(r["kind"], **{k: v for k, v in r.items() if k != "kind"})
        old = self.experience_maker
        self.experience_maker = HDRExperienceMaker(
            old.actor_model_group, old.critic_model_group, old.reward_model_group, old.initial_model_group,
            old.kl_ctl, old.strategy, old.tokenizer, replay=buffer)
        gen = self.samples_generator
        self.samples_generator = HDRSamplesGenerator(strategy, gen.prompts_dataloader, gen.eval_dataloader,
                                                     gen.tokenizer, gen.vllm_engines)
        self.samples_generator.maker = self.experience_maker
        self._replay_path = os.path.join(self.args.ckpt.path, REPLAY_STATE_FILE)

    def train_step(self, rollout_samples, global_step):
        status, step = super().train_step(rollout_samples, global_step)
        status.update(self.experience_maker.metrics)
        return status, step

    def save_logs_and_checkpoints(self, global_step, logs_dict=None, client_states=None):
        super().save_logs_and_checkpoints(global_step, logs_dict, client_states)
        if global_step % self.args.ckpt.save_steps == 0:
            os.makedirs(self.args.ckpt.path, exist_ok=True)
            tmp = self._replay_path + ".tmp"
            torch.save(self.experience_maker.state_dict(), tmp)
            os.replace(tmp, self._replay_path)

    def init_checkpoint_states(self):
        states = super().init_checkpoint_states()
        if self.args.ckpt.load_enable and states.get("global_step", 0) > 0 and os.path.exists(self._replay_path):
            self.experience_maker.load_state_dict(torch.load(self._replay_path, weights_only=False))
        return states


HDRPPOTrainerActor = ray.remote(HDRPPOTrainer)
