"""Where a training step's episodes come from (phase 1) and how they become the update's
fresh groups (phase 2); the loop (``loop.py``) calls these two.

``StepRollouts`` picks the rollout ``cfg`` asks for: lock-step turns (``rollout.episodes``),
each episode on its own (``async.enabled``: ``rollout.streaming``), or groups carried across
steps (``async.oversample`` / ``async.replay_topup``: ``rollout.pool``). It owns the task
sampler's position for checkpoints: a resume replays a rollout that was played ahead of its
update (the sampler state from before it), or restarts the pool's untrained groups.

With ``regenerate_rounds`` (DAPO's dynamic sampling with regeneration) a lock-step step plays
more rounds on new prompts until it holds ``prompts_per_step`` groups with signal; every
rollout reports its groups' outcomes to the sampler (GRESO-style skipping, ``prompt_skip``).

``fresh_groups`` turns episodes into GRPO groups scored by the trainer (the ratio
denominator and the replay state) and sends stale ones through the drift gate; those it
refuses are neither trained on nor stored.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import replace

from agentsearch.algorithms.grouping import episodes_have_signal, episodes_to_groups, rescore
from agentsearch.algorithms.staleness import (
    as_sampled,
    gate_stale_groups,
    group_staleness,
    stale_token_mask,
)
from agentsearch.core.reliability import OutageError
from agentsearch.rollout import EventLoop, SamplingParams, arollout, derive_seed
from agentsearch.rollout.engines import make_stream_engine
from agentsearch.rollout.pool import GroupPool
from agentsearch.rollout.streaming import astream_rollout
from agentsearch.trainer.setup import TaskSampler
from agentsearch.trainer.train_config import TrainConfig

__all__ = ["StepRollouts", "fresh_groups"]


class StepRollouts:
    """``of(step)``: the coroutine that plays step ``step``'s episodes; ``stream`` (the
    streaming engine, if any) and ``pool`` (if any) are closed with ``events``."""

    def __init__(self, cfg: TrainConfig, envs: list, backend, sampler: TaskSampler,
                 events: EventLoop, state: dict):
        self.cfg, self.envs, self.backend, self.sampler = cfg, envs, backend, sampler
        self.sampling = SamplingParams(max_new_tokens=cfg.generation.max_new_tokens,
                                       temperature=cfg.generation.temperature,
                                       top_p=cfg.generation.top_p)
        a = cfg.async_
        self.stream = make_stream_engine(backend, max_batch=a.max_batch, max_wait_s=a.max_wait_s) \
            if a.enabled else None
        self.pool = None
        if a.oversample or a.replay_topup:
            self.pool = GroupPool(envs, self.stream,
                                  replace(self.sampling, seed=derive_seed(cfg.seed, "pool")),
                                  group_size=cfg.group_size,
                                  in_flight=cfg.prompts_per_step + a.oversample,
                                  sample=sampler.sample,
                                  seed=derive_seed(cfg.seed, "pool", "reset"),
                                  max_turns=cfg.max_turns, max_seq_len=cfg.max_seq_len)
            self.pool.load_state_dict(state.get("pool", {"serial": 0, "tasks": []}))
        events.own(self.stream, self.pool)
        self._sampler_before = sampler.state_dict()
        self.untrained = 0  # rollouts played and not yet trained (1: the step played ahead)
        self.failed = False  # the last rollout stopped on an outage (its tasks were sampled)

    @property
    def version(self) -> int:
        """The weight version the generation engine holds (bumped by each sync)."""
        return self.stream.version if self.stream else 0

    def of(self, step: int, learned=None):
        """Step ``step``'s rollout: ``(episodes, stats)``, or the ``OutageError`` that stopped it
        (returned, not raised, so the update beside it still finishes and is logged);
        ``learned`` (a future, done when the update beside this rollout is) lets the pool stop
        waiting and leave the rest to replay (top-up)."""
        return self._guard(self._rollout(step, learned))

    async def _guard(self, coro):
        try:
            out = await coro
        except OutageError as e:
            self.failed = True
            return e
        self.untrained += 1
        if self.pool:  # (lock-step rollouts report each round in _play)
            self.sampler.observe(out[0], self.cfg.group_size)
        return out

    def trained(self) -> None:
        """The update took the oldest untrained rollout."""
        self.untrained -= 1

    def _rollout(self, step: int, learned):
        cfg = self.cfg
        if self.pool:
            return self.pool.take(cfg.prompts_per_step,
                                  enough=learned if cfg.async_.replay_topup else None,
                                  min_take=math.ceil(cfg.prompts_per_step / 2))
        self._sampler_before = self.sampler.state_dict()
        first = self._play(step, self.sampler.sample(cfg.prompts_per_step))
        return self._regenerate(step, first) if cfg.regenerate_rounds else first

    async def _play(self, step: int, tasks: list[dict], *tag):
        """``group_size`` episodes of each task, seeded by the step (and ``tag``: a regeneration
        round); the groups' outcomes go to the sampler."""
        cfg = self.cfg
        # the rollout derives each turn's sampling seed from this one
        params = replace(self.sampling, seed=derive_seed(cfg.seed, step, *tag))
        kw = dict(n_per_task=cfg.group_size, max_turns=cfg.max_turns, max_seq_len=cfg.max_seq_len,
                  seed=derive_seed(cfg.seed, step, "reset", *tag))
        if self.stream:
            episodes, stats = await astream_rollout(self.envs, tasks, self.stream, params, **kw)
        else:
            episodes, stats = await arollout(self.envs, tasks, self.backend, params, **kw)
        self.sampler.observe(episodes, cfg.group_size)
        return episodes, stats

    async def _regenerate(self, step: int, first):
        """DAPO's dynamic sampling with regeneration (``regenerate_rounds``): while fewer than
        ``prompts_per_step`` groups have signal, play that many new prompts again. The step keeps
        the groups with signal first, then zero-variance ones, ``prompts_per_step`` in all; every
        round's cost stays in its stats."""
        cfg, n, b = self.cfg, self.cfg.group_size, self.cfg.prompts_per_step
        episodes, stats = await first
        groups = [episodes[i:i + n] for i in range(0, len(episodes), n)]
        rounds = 0
        with_signal = episodes_have_signal
        while rounds < cfg.regenerate_rounds and (need := b - sum(map(with_signal, groups))) > 0:
            rounds += 1
            more, extra = await self._play(step, self.sampler.sample(need), "regenerate", rounds)
            groups += [more[i:i + n] for i in range(0, len(more), n)]
            stats = stats.merged(extra)
        signal = [g for g in groups if episodes_have_signal(g)]
        kept = (signal + [g for g in groups if not episodes_have_signal(g)])[:b]
        stats.extra_metrics.update({
            "dynamic/rounds": float(rounds), "dynamic/groups_played": float(len(groups)),
            "dynamic/groups_with_signal": float(min(len(signal), b)),
            "dynamic/zero_variance_frac_played": 1.0 - len(signal) / len(groups)})
        return [e for g in kept for e in g], stats

    def held(self):
        """A context in which the pool's groups in play make no progress (an eval, a
        checkpoint: off the training clock); nothing to hold without a pool."""
        return self.pool.hold() if self.pool else nullcontext()

    def sync(self, model) -> None:
        """New weights to the engine (the stream engine tags later turns with the new version)."""
        engine = self.stream or self.backend
        if hasattr(engine, "sync"):
            engine.sync(model)

    def metrics(self) -> dict[str, float]:
        out = self.sampler.metrics()
        if self.stream:
            out["async/restarts"] = float(getattr(self.stream, "restarts", 0))
        return out

    def state_dict(self) -> dict:
        """For a checkpoint: a resume plays again a rollout that was played ahead (or stopped
        by an outage), from the sampler state before it; the pool restarts its groups in play
        (those an outage stopped are not kept: their tasks are skipped)."""
        if self.pool:
            return {"sampler": self.sampler.state_dict(),
                    "pool": self.pool.state_dict(last_take_trained=self.untrained == 0)}
        return {"sampler": self._sampler_before if self.untrained or self.failed
                else self.sampler.state_dict()}


def fresh_groups(cfg: TrainConfig, episodes: list, step: int, version: int, tok, score_fn):
    """The step's groups for the replay buffer (those the stale gate passed, with the logprobs
    of the policy that sampled them: the trainer's, or the engine's on stale turns), the ones
    the update takes (``gen_logprobs`` rescored by the trainer: the proximal policy) with their
    importance weights (None: generated by the current weights) and whether each takes its
    ratio denominator from the update's own forward instead (``cfg.rescore_groups``: those
    past the first k are not rescored), and the metrics."""
    fresh, metrics = episodes_to_groups(episodes, cfg.group_size, step, pad_id=tok.pad_token_id,
                                        advantage_scale=cfg.advantage_scale,
                                        overlong=cfg.overlong_shaping(),
                                        pixel_fn=getattr(tok, "pixel_values", None))
    n = cfg.group_size
    eps = [episodes[i * n:(i + 1) * n] for i in range(len(fresh))]
    staleness = [group_staleness([[t.get("version") for t in e.info["turns"]] for e in ep], version)
                 for ep in eps]
    stale = [stale_token_mask(ep, g.token_ids.shape[1], version) if s else None
             for ep, g, s in zip(eps, fresh, staleness)]
    # the engine's logprobs of the stale groups, before the rescore overwrites them
    behaviour = [g.gen_logprobs.clone() if s else None for g, s in zip(fresh, staleness)]
    k = len(fresh) if cfg.rescore_groups is None else cfg.rescore_groups
    metrics.update(rescore(fresh[:k], score_fn))  # the rest: the update's forward (rows_of)
    own = {id(g) for g in fresh[k:]}
    used, weights, smetrics = gate_stale_groups(fresh, behaviour, staleness, tau=cfg.replay.tau,
                                                cap=cfg.async_.is_cap, stale_masks=stale,
                                                drift_kind=cfg.replay.drift_kind)
    if cfg.async_.enabled:
        metrics.update(smetrics)
    sampled = {id(g): as_sampled(g, b, m)  # the buffer's copy of a stale group
               for g, b, m in zip(fresh, behaviour, stale) if b is not None}
    return ([sampled.get(id(g), g) for g in used], used, weights, [id(g) in own for g in used],
            metrics)
