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

Helpers: ``setup.py`` and ``start.py`` (building and starting), ``rollouts.py`` (phases 1-2),
``agentsearch.algorithms`` (losses, the update), ``agentsearch.replay``.
"""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path

from agentsearch.algorithms.grouping import drop_zero_signal
from agentsearch.algorithms.update import policy_update, rows_of
from agentsearch.core.config import to_dict
from agentsearch.core.failpoints import crash_point
from agentsearch.core.progress import Progress
from agentsearch.core.reliability import OutageError, outages
from agentsearch.models.lora import count_parameters
from agentsearch.rollout import EventLoop
from agentsearch.rollout.events import worker_thread
from agentsearch.trainer.checkpoint import save_checkpoint, save_final, set_rng_state
from agentsearch.trainer.episode_log import EpisodeLog
from agentsearch.trainer.eval import eval_settings, evaluate
from agentsearch.trainer.metrics import MetricsLogger, memory_metrics, progress_line
from agentsearch.trainer.rollouts import StepRollouts, fresh_groups
from agentsearch.trainer.setup import build_health, build_policy, build_replay
from agentsearch.trainer.start import (
    CountingScorer,
    build_optimizer,
    open_engines,
    open_envs,
    open_run,
    resume_run,
    warm_start_run,
)
from agentsearch.trainer.timing import PhaseTimer
from agentsearch.trainer.train_config import TrainConfig

log = logging.getLogger("agentsearch.train")
__all__ = ["train"]


def train(cfg: TrainConfig, run_dir: str | Path, *, resume: bool = False,
          quiet: bool = False) -> dict:
    """Run (or resume) the training of ``cfg`` in ``run_dir``; returns the last eval's metrics.
    One event loop serves every rollout of the run; it and the envs' clients are closed at
    the end, also when the run fails."""
    with EventLoop() as events:
        return _train(cfg, Path(run_dir), events, resume=resume, quiet=quiet)


def _train(cfg: TrainConfig, run_dir: Path, events: EventLoop, *, resume: bool,
           quiet: bool) -> dict:
    open_run(cfg, run_dir)  # config.yaml, provenance, seeds, threads, outage budget

    # --- policy, optimizer, replay, health, environments; the checkpoint; the warm start
    model, tok = build_policy(cfg)
    optimizer, scheduler = build_optimizer(cfg, model)
    replay = build_replay(cfg)
    health = build_health(cfg)  # health/* alarms: a run that learns nothing says so
    envs, sampler, (eval_env_list, eval_tasks) = open_envs(cfg, events)  # checked, owned
    score_fn = CountingScorer(cfg, model)  # fresh groups and the replay scan; tokens/scored
    step, state, rng = resume_run(run_dir, resume, model=model, optimizer=optimizer,
                                  scheduler=scheduler, replay=replay, sampler=sampler,
                                  health=health)
    sft_metrics, ref_logprobs = warm_start_run(cfg, run_dir, step, model, tok, envs)
    backend, scorer = open_engines(cfg, model, tok, events)  # eval.backend=vllm: its own
    rollouts = StepRollouts(cfg, envs, backend, sampler, events, state)  # phase 1 of each step
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
            if scorer is not backend:
                scorer.sync(model)
            return evaluate(scorer, eval_env_list, eval_tasks, **eval_settings(cfg),
                            samples_to=run_dir / "samples" / f"step-{step}.txt", loop=events)

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

    def reached() -> bool:  # the last eval met cfg.eval.stop_at: a run timed to a target ends
        return cfg.eval.stop_at is not None and \
            last.get("eval/mean_at_n", float("-inf")) >= cfg.eval.stop_at

    while step < cfg.steps and not spent() and not reached():
        step, mark = step + 1, outages.mark()
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
                                         ref_logprobs_fn=ref_logprobs)
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
        if lmetrics.get("train/nonfinite"):
            state["nonfinite_steps"] += 1
            log.warning("step %d: non-finite loss or gradient; update skipped (%d so far)",
                        step, state["nonfinite_steps"])
        # 7. metrics, eval and checkpoint (the last two excluded from training time)
        metrics = {**rstats.metrics(), **lmetrics, **replay.metrics(), **rollouts.metrics(),
                   **outages.since_mark(mark),
                   "train/nonfinite_steps": float(state["nonfinite_steps"]),
                   "tokens/generated": float(rstats.tokens_generated),
                   "tokens/scored": score_fn.reset(),
                   "tokens/trained": lmetrics.get("train/tokens", 0.0), **memory_metrics()}
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
        if step % cfg.checkpoint_every == 0 or final or outage or reached():
            checkpoint(step)  # (its seconds count in the next step's time/checkpoint)
        progress.update(step, progress_line(metrics, last), force="eval/mean_at_n" in metrics)
        if outage:
            raise outage
    progress.close()
    save_final(model, tok, run_dir / "final")
    logger.close()
    return last

