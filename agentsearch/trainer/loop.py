"""GRPO with Headroom-Drift Replay: the whole training loop, top to bottom.

One step (the phase names are the ``time/*`` keys):

1. ``generate`` + ``env`` + ``reward``: sample ``prompts_per_step`` tasks and play
   ``group_size`` episodes of each, all at once: lock-step turns (one batched generation call
   per turn; tool calls overlap) or, with ``async.enabled``, each episode on its own
   (``rollout.streaming``); rewards come from the envs. With ``async.max_staleness=1`` the
   next step's rollout runs while phases 2-6 of this one run on a trainer thread (the replay
   scan included); with ``async.oversample`` the step takes the first groups to finish and
   carries the rest, and ``async.replay_topup`` fills a short batch with replay
   (``rollouts.py``, ``rollout.pool``).
2. ``logprobs``: one teacher-forced forward stores the trainer's own logprobs of the sampled
   tokens (the ratio denominator and the replay state; with ``rescore_groups`` only that many
   groups, the others take the update's own forward); GRPO advantages per group; stale
   groups pass the drift gate and get the decoupled objective's weights (``staleness.py``).
3. ``replay_scan``: the replay strategy picks stored groups (HDR: by cached headroom, gated
   by drift <= tau, scored chunk by chunk with the current policy).
4. ``update``: one optimizer step on fresh + replayed groups (replayed tokens keep their
   stored generation-time logprobs and advantages).
5. ingress: fresh groups with mixed outcomes enter the buffer, *after* the update (stale ones
   that passed the gate, with their behaviour logprobs).
6. ``sync``: the new weights go to the generation engine.
7. metrics, then (excluded from training time) ``eval`` and ``checkpoint``.

Design notes: helpers live in ``setup.py`` (building things), ``rollouts.py`` (phases 1-2),
``agentsearch.algorithms`` (groups, losses, the update), ``agentsearch.warmstart`` (SFT);
the replay strategies in ``agentsearch.replay``. ``train()`` returns the final metrics.
"""

from __future__ import annotations

import json
import logging
import math
import resource
import time
from functools import partial
from pathlib import Path

import torch

from agentsearch.algorithms.grouping import drop_zero_signal
from agentsearch.algorithms.optim import make_optimizer
from agentsearch.algorithms.update import policy_update, rows_of
from agentsearch.core.config import ConfigError, apply_overrides, dump, to_dict
from agentsearch.core.failpoints import crash_point
from agentsearch.core.progress import Progress
from agentsearch.core.provenance import stamp_run, tree_state
from agentsearch.core.reliability import OutageError, outages
from agentsearch.models.logprobs import make_score_fn, token_logprobs
from agentsearch.models.lora import (
    count_parameters,
    frozen_reference,
    is_adapter,
    reference_policy,
    save_adapter,
)
from agentsearch.models.prefix_tree import make_tree_score_fn
from agentsearch.rollout import EventLoop
from agentsearch.rollout.events import worker_thread
from agentsearch.trainer.checkpoint import (
    latest_checkpoint,
    load_checkpoint,
    load_reference,
    save_checkpoint,
    save_final,
    save_reference,
    set_rng_state,
)
from agentsearch.trainer.episode_log import EpisodeLog
from agentsearch.trainer.eval import eval_envs, eval_settings, evaluate
from agentsearch.trainer.metrics import MetricsLogger, progress_line
from agentsearch.trainer.rollouts import StepRollouts, fresh_groups
from agentsearch.trainer.setup import (
    TaskSampler,
    build_backend,
    build_envs,
    build_health,
    build_policy,
    build_replay,
    preflight,
    seed_everything,
)
from agentsearch.trainer.timing import PhaseTimer
from agentsearch.trainer.train_config import TrainConfig
from agentsearch.warmstart.stages import warm_start

log = logging.getLogger("agentsearch.train")
__all__ = ["train", "main"]


def train(cfg: TrainConfig, run_dir: str | Path, *, resume: bool = False,
          quiet: bool = False) -> dict:
    """Run (or resume) the training of ``cfg`` in ``run_dir``; returns the last eval's metrics.
    One event loop serves every rollout of the run; it and the envs' clients are closed at
    the end, also when the run fails."""
    with EventLoop() as events:
        return _train(cfg, Path(run_dir), events, resume=resume, quiet=quiet)


def _train(cfg: TrainConfig, run_dir: Path, events: EventLoop, *, resume: bool,
           quiet: bool) -> dict:
    run_dir.mkdir(parents=True, exist_ok=True)
    dump(cfg, run_dir / "config.yaml")
    stamp_run(run_dir)  # provenance.json: the revision, clean or not, the machine (each start)
    seed_everything(cfg.seed)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    outages.configure(budget_s=cfg.reliability.outage_budget_s,
                      warn_every_s=cfg.reliability.warn_every_s)

    # --- policy, optimizer, replay, generation engine, environments
    model, tok = build_policy(cfg)
    optimizer, scheduler = make_optimizer(model, cfg.lr, weight_decay=cfg.weight_decay,
                                          warmup_steps=cfg.warmup_steps)
    # make_optimizer's betas are the warm start's; RL's are set
    for group in optimizer.param_groups:
        group["betas"] = tuple(cfg.adam_betas)
    replay = build_replay(cfg)
    # health/* alarms: a run that learns nothing says so
    health = build_health(cfg)
    n_episodes = (cfg.prompts_per_step + cfg.async_.oversample) * cfg.group_size
    envs = build_envs(cfg, n_episodes, split="train")
    events.own(envs)  # their tools and retriever clients close with the loop
    preflight(envs[0], loop=events)
    sampler = TaskSampler(envs[0].tasks, seed=cfg.seed, skip=cfg.prompt_skip,
                          explore=cfg.prompt_skip_explore)
    eval_env_list, eval_tasks = eval_envs(cfg)
    events.own(eval_env_list)
    scorer = (make_tree_score_fn if cfg.shared_prefix else make_score_fn)(
        model, temperature=cfg.generation.temperature)
    scored = {"tokens": 0.0}

    def score_fn(groups):  # counts every token the trainer scores (fresh + replay scan)
        scored["tokens"] += sum(g.num_policy_tokens for g in groups)
        return scorer(groups)

    step, state, rng = 0, {"train_cumulative": 0.0, "nonfinite_steps": 0}, None
    if resume and (ckpt := latest_checkpoint(run_dir)) is not None:  # its RNGs are restored last
        state = load_checkpoint(ckpt, model=model, optimizer=optimizer, scheduler=scheduler,
                                replay=replay, restore_rng=False)
        step, rng = state.pop("step"), state.pop("rng")  # not saved again: a later resume
        sampler.load_state_dict(state["sampler"])
        health.load_state_dict(state.get("health", {}))
        log.info("resuming from checkpoint %s", ckpt.name)
    sft_metrics = {}
    # warm start, before anything is measured
    if step == 0 and (cfg.sft.steps > 0 or cfg.sft.pretrain_steps > 0):
        t0 = time.perf_counter()
        sft_metrics = warm_start(cfg, model, tok, envs, make_envs=build_envs)
        sft_metrics["time/sft"] = time.perf_counter() - t0
        log.info("warm start: %s",
                 ", ".join(f"{k.split('/')[-1]} {v:.4g}" for k, v in sft_metrics.items()))
    if step == 0 and hasattr(model, "peft_config") and (sft_metrics or is_adapter(cfg.init_from)):
        save_adapter(model, run_dir / "warm_start")  # the policy RL starts from, for later evals
    # the KL reference is the policy RL starts from, after the warm start; saved once, so a
    # resumed run reads the same one
    if step == 0 and cfg.kl_coef > 0:
        save_reference(run_dir, model)
    reference = frozen_reference(model, load_reference(run_dir)) if cfg.kl_coef > 0 else None
    backend = build_backend(cfg, model, tok)
    events.own(backend)  # a vLLM engine shuts down with the run
    # phase 1's rollout of each step
    rollouts = StepRollouts(cfg, envs, backend, sampler, events, state)
    logger = MetricsLogger(run_dir, tensorboard=cfg.tensorboard, wandb_project=cfg.wandb_project,
                           config=to_dict(cfg))
    logger.truncate_after(step if step > 0 else -1)  # from scratch: step 0's record is logged again
    episode_log = EpisodeLog(run_dir, tok, keep_through=step)  # a few trained episodes per step
    timer = PhaseTimer(state["train_cumulative"])
    progress = Progress(cfg.steps, "train", start=step, every=5, enabled=not quiet)
    trainable, total = count_parameters(model)
    log.info("model %s: %d/%d trainable parameters; replay=%s", cfg.model, trainable, total,
             cfg.replay.kind)

    def run_eval() -> dict:  # a few decoded episodes go to RUN_DIR/samples/step-N.txt
        with timer.phase("eval"), rollouts.held():  # groups in play wait
            return evaluate(backend, eval_env_list, eval_tasks, **eval_settings(cfg),
                            samples_to=run_dir / "samples" / f"step-{step}.txt", loop=events)

    def ref_logprobs(ids, attn, mask):
        with reference_policy(reference) as ref:
            return token_logprobs(ref, ids, attn, temperature=cfg.generation.temperature,
                                  target_mask=mask)

    last = {}
    if step == 0:
        last = run_eval()
        logger.log(0, {**last, **sft_metrics, "time/train_cumulative": 0.0})
        progress.update(0, progress_line(last, last), force=True)
        timer.end_step()

    def checkpoint(at: int) -> None:
        with timer.phase("checkpoint"), rollouts.held():
            state.update(train_cumulative=timer.train_cumulative + timer.pending_train_time(),
                         health=health.state_dict(), **rollouts.state_dict())
            save_checkpoint(run_dir, at, model=model, optimizer=optimizer, scheduler=scheduler,
                            replay=replay, state=state)

    overlap = cfg.async_.max_staleness >= 1  # the next step's rollout runs while this step updates
    learner = worker_thread("agentsearch-train") if overlap else None
    events.own(learner)
    # outage: an infra outage past its budget stops the run after a checkpoint
    ahead = outage = None
    # last: building the engine reseeds (vLLM seeds python/numpy/torch at start)
    if rng is not None:
        set_rng_state(rng)
    def spent() -> bool:  # the training-time budget (cfg.time_budget_s) is used up
        used = timer.train_cumulative + timer.pending_train_time()
        return cfg.time_budget_s is not None and used >= cfg.time_budget_s

    while step < cfg.steps and not spent():
        step, outage_s, retried = step + 1, outages.outage_seconds(), outages.transient_errors
        # 1. generate + env + reward: all episodes of the step in one rollout (or the one played
        # ahead)
        if ahead is None:
            played = events.run(rollouts.of(step))
            if isinstance(played, OutageError):  # nothing of this step happened: keep the last one
                if step > 1:
                    checkpoint(step - 1)
                raise played
            episodes, rstats = played
            timer.account(rstats)
        else:
            (episodes, rstats), ahead = ahead, None
        version = rollouts.version  # the weights this step updates from

        # phases 2-6; with overlap, on the trainer's thread beside the next step's rollout
        def learn(step=step, episodes=episodes, version=version, rstats=rstats):
            # 2. logprobs: the trainer's own logprobs become the ratio denominator and the replay
            # state (stale groups pass the drift gate: algorithms/staleness.py)
            with timer.phase("logprobs"):
                stored, used, weights, own, gmetrics = fresh_groups(cfg, episodes, step, version,
                                                                    tok, score_fn)
            # 3. replay_scan: choose stored groups (only those stored before this step)
            with timer.phase("replay_scan"):  # (plus the slots the fresh groups left empty: top-up)
                short = int(rstats.extra_metrics.get("async/fresh_short", 0))
                selection = (replay.select(score_fn, step, extra=short) if short
                             else replay.select(score_fn, step))
            # 4. update on fresh + replayed groups
            with timer.phase("update"):
                weight_of = {id(g): (w, o) for g, w, o in zip(used, weights, own)}
                used = drop_zero_signal(used) if cfg.dynamic_sampling else used
                rows = rows_of(used, is_weights=[weight_of[id(g)][0] for g in used],
                               own_ratio=[weight_of[id(g)][1] for g in used]) + \
                    rows_of(selection.accepted, replayed=True)
                tmetrics = policy_update(model, optimizer, scheduler, rows, cfg,
                                         ref_logprobs_fn=ref_logprobs if cfg.kl_coef > 0 else None)
            episode_log.write(step, used, selection)  # a few of the rows, as the loss saw them
            # 5. ingress: after the update, mixed-outcome fresh groups enter the buffer
            admitted = replay.add(stored, step)
            # 6. sync: new weights to the generation engine (with overlap, mid-rollout)
            with timer.phase("sync"):
                rollouts.sync(model)
            topped_up = max(len(selection.accepted) - cfg.replay.k_rep, 0)
            topup = {"async/replay_topup": float(topped_up)} if rollouts.pool else {}
            return {**gmetrics, **tmetrics, **selection.stats, **topup,
                    "replay/ingress": float(admitted)}

        # (the rollout's seconds past learn: the next step's)
        if overlap and step < cfg.steps and not spent():
            beside = partial(events.run_beside, partial(rollouts.of, step + 1), thread=learner)
            ahead, lmetrics = timer.beside(beside, learn)
            # this step finishes (logged, checkpointed), then stop
            if isinstance(ahead, OutageError):
                outage, ahead = ahead, None
            else:
                timer.account(ahead[1])
        else:
            lmetrics = learn()
        rollouts.trained()
        if hasattr(replay, "recycled"):  # query recycling: zero-variance tasks come back later
            sampler.recycle(replay.recycled(), cfg.replay.recycle_after * cfg.prompts_per_step)
        tmetrics = lmetrics
        if tmetrics.get("train/nonfinite"):
            state["nonfinite_steps"] += 1
            log.warning("step %d: non-finite loss or gradient; update skipped (%d so far)",
                        step, state["nonfinite_steps"])
        # 7. metrics, eval and checkpoint (the last two excluded from training time)
        metrics = {**rstats.metrics(), **lmetrics, **replay.metrics(), **rollouts.metrics(),
                   "train/nonfinite_steps": float(state["nonfinite_steps"]),
                   "health/infra_outage_s": outages.outage_seconds() - outage_s,
                   "rollout/infra_retried": float(outages.transient_errors - retried),
                   "tokens/generated": float(rstats.tokens_generated),
                   "tokens/scored": scored["tokens"],
                   "tokens/trained": tmetrics.get("train/tokens", 0.0),
                   # this process's peak so far: trainer, in-process vLLM engine and index
                   "sys/peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6}
        hmetrics, warnings = health.update(step, metrics)
        metrics.update(hmetrics)
        for w in warnings:
            log.warning("step %d: %s", step, w)
        final = step == cfg.steps or spent()
        if (cfg.eval.every and step % cfg.eval.every == 0) or final:
            try:
                last = run_eval()
                metrics.update(last)
            except OutageError as e:  # an eval that met an outage is no score
                outage, metrics["eval/invalid"] = outage or e, 1.0
        # the record before the checkpoint: a crash between them resumes from an older step and
        # logs this one again, never skips it
        metrics.update(timer.end_step())
        logger.log(step, metrics)
        crash_point("loop:logged")
        if step % cfg.checkpoint_every == 0 or final or outage:
            checkpoint(step)  # (its seconds count in the next step's time/checkpoint)
        scored["tokens"] = 0.0
        progress.update(step, progress_line(metrics, last), force="eval/mean_at_n" in metrics)
        if outage:
            raise outage
    progress.close()
    save_final(model, tok, run_dir / "final")
    logger.close()
    return last


def main(preset: str, out: str | None, overrides: list[str], resume: str | None = None) -> int:
    """``agentsearch train``: preset + overrides, or ``--resume RUN_DIR``."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per retrieval request
    if resume:
        run_dir = Path(resume)
        if not (run_dir / "config.yaml").exists():
            raise ConfigError(f"--resume {resume}: no config.yaml there (is it a run folder?)")
        cfg = apply_overrides(TrainConfig, str(run_dir / "config.yaml"), overrides)
    else:
        if not out:
            raise ConfigError("--out RUN_DIR is required (or --resume RUN_DIR)")
        run_dir = Path(out)
        cfg = apply_overrides(TrainConfig, preset, overrides)
    # resume ignores --preset
    source = f"resume={run_dir / 'config.yaml'}" if resume else f"preset={preset}"
    tree = tree_state()
    log.info("agentsearch train: %s git=%s%s run=%s", source, tree["git"][:7],
             " (uncommitted changes)" if tree["dirty"] else "", run_dir)
    final = train(cfg, run_dir, resume=bool(resume))
    print(json.dumps({k: v for k, v in final.items() if not math.isnan(v)}, indent=1))
    return 0
