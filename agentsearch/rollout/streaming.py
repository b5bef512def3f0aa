"""Asynchronous rollouts: every episode advances on its own, with no turn barrier.

``astream_rollout(envs, tasks, engine, params, ...)`` runs one asyncio task per episode:
generate a turn, step the env (its tool call), generate the next turn, and so on. An episode
whose tool call is slow holds up only itself; in the lock-step rollout (``episodes``) the
slowest tool call of each turn holds up every episode. The engine batches whichever episodes
are waiting for a turn (``engines.py``):

- ``MicroBatcher`` wraps a batch-synchronous backend (HF ``generate``, scripted): when the
  model is free it takes every waiting request, after waiting at most ``max_wait_s`` for the
  episodes that are about to ask (never when every live episode already asks);
- ``VLLMStream`` steps an in-process vLLM engine (continuous batching): requests join and
  leave between engine steps.

Tool calls go on while the model generates (HF: a worker thread; vLLM: one short engine step
at a time on the loop's thread, see ``engines``). Token in, token out, masks, logprobs, truncation
and rewards are exactly the lock-step rollout's (the same ``turns`` functions apply them).
What differs:

- seeds: turn ``t`` of episode ``i`` asks for seed ``derive_seed(params.seed, i, t)``; vLLM
  seeds each request with it, HF seeds a batch with its first request's, so which episodes
  share a batch (decided by tool timing) changes HF samples: streaming HF rollouts are not
  bit-reproducible;
- each turn records the weight version that generated it (``info["turns"][k]["version"]``);
- timing: ``time/generate`` is the engine's busy seconds, ``time/env`` the seconds in which
  at least one env step was in flight (less ``time/reward``); they overlap, so they add up to
  more than ``rollout/wall_seconds``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from agentsearch.envs.text_env import TextEnv
from agentsearch.rollout.backends import SamplingParams, derive_seed
from agentsearch.rollout.engines import StreamEngine
from agentsearch.rollout.events import EventLoop
from agentsearch.rollout.turns import (
    Episode,
    EpisodeState,
    RolloutStats,
    finish_episodes,
    start_episodes,
    step_env,
    take_generation,
    take_observation,
)

__all__ = ["Player", "astream_rollout", "stream_rollout", "engine_mark", "charge_engine"]


class _BusyClock:
    """Seconds in which at least one of several overlapping activities ran (their union)."""

    def __init__(self):
        self.active, self.busy, self._since = 0, 0.0, 0.0

    def __enter__(self):
        if self.active == 0:
            self._since = time.perf_counter()
        self.active += 1

    def __exit__(self, *exc):
        self.active -= 1
        if self.active == 0:
            self.busy += time.perf_counter() - self._since


@dataclass
class Player:
    """How one episode is played on its own; shared by ``astream_rollout`` and ``GroupPool``
    (``pool.py``), which swaps ``stats`` between takes."""

    engine: StreamEngine
    params: SamplingParams
    stop: tuple[str, ...]
    max_turns: int | None
    max_seq_len: int | None
    stats: RolloutStats
    """Where generated tokens, tokenizing and reward seconds are counted."""
    env_clock: _BusyClock = field(default_factory=_BusyClock)
    gate: asyncio.Event | None = None
    """When given, no turn and no env step starts while it is clear (``GroupPool.hold``)."""

    async def _wait_gate(self) -> None:
        if self.gate is not None and not self.gate.is_set():
            with self.engine.in_env():  # a held episode is not about to ask for a turn
                await self.gate.wait()

    async def play(self, r: EpisodeState, *seed_keys: int | str) -> None:
        """Turns until the episode ends; turn ``t`` is seeded ``derive_seed(params.seed,
        *seed_keys, t)`` and tagged with the weight version that generated it."""
        engine, params, max_seq_len = self.engine, self.params, self.max_seq_len
        tok = self.engine.tokenizer
        turn = 0
        try:
            while not r.done:
                await self._wait_gate()
                room = params.max_new_tokens if max_seq_len is None else max_seq_len - len(r.ids)
                p = replace(params, stop=self.stop, max_new_tokens=min(params.max_new_tokens, room),
                            seed=None if params.seed is None
                            else derive_seed(params.seed, *seed_keys, turn))
                g = await engine.generate(r.ids, p, images=r.info.get("images") or None)
                turn += 1
                t0 = time.perf_counter()
                action = take_generation(r, g, tok, max_seq_len, self.stats)
                r.info["turns"][-1]["version"] = g.version
                self.stats.time_tokenize += time.perf_counter() - t0
                if action is None:
                    break
                await self._wait_gate()
                with self.env_clock, engine.in_env():
                    res = await step_env(r, action)
                self.stats.time_reward += res[3]
                t0 = time.perf_counter()
                obs_ids = list(tok(res[0], add_special_tokens=False)["input_ids"]) if res[0] else []
                take_observation(r, res, obs_ids, max_turns=self.max_turns, max_seq_len=max_seq_len)
                self.stats.time_tokenize += time.perf_counter() - t0
        finally:
            engine.episode_done()


def engine_mark(engine: StreamEngine) -> tuple[float, int, int]:
    """The engine's counters now (busy seconds, calls, requests), for ``charge_engine``."""
    return engine.busy_s, engine.calls, engine.requests


def charge_engine(stats: RolloutStats, engine: StreamEngine, mark: tuple[float, int, int]) -> None:
    """What the engine did since ``mark`` goes into ``stats`` (generate time, calls, requests)."""
    stats.time_generate = engine.busy_s - mark[0]
    stats.generate_calls = engine.calls - mark[1]
    stats.generate_requests = engine.requests - mark[2]


async def astream_rollout(envs_or_factory: Sequence[TextEnv] | Callable[[], TextEnv] | str,
                          tasks: list[dict], engine: StreamEngine, params: SamplingParams, *,
                          n_per_task: int = 1, max_turns: int | None = None,
                          seed: int | None = None, max_seq_len: int | None = None,
                          ) -> tuple[list[Episode], RolloutStats]:
    """Play ``len(tasks) * n_per_task`` episodes, each on its own (see the module notes);
    arguments and results as ``episodes.arollout``, with a ``StreamEngine`` for the backend."""
    t_start = time.perf_counter()
    runs, stats, stop = start_episodes(envs_or_factory, tasks, engine.tokenizer, params,
                                       n_per_task=n_per_task, seed=seed, max_seq_len=max_seq_len)
    player = Player(engine, params, stop, max_turns, max_seq_len, stats)
    mark = engine_mark(engine)
    engine.expect(len(runs))
    try:
        async with asyncio.TaskGroup() as group:  # one failing episode cancels the others
            for i, r in enumerate(runs):
                group.create_task(player.play(r, i))
    except BaseExceptionGroup as errors:
        # the first episode's error, as the lock-step rollout raises it
        raise errors.exceptions[0] from None
    charge_engine(stats, engine, mark)
    stats.time_env = max(player.env_clock.busy - stats.time_reward, 0.0)
    return finish_episodes(runs, stats, t_start), stats


def stream_rollout(envs_or_factory: Sequence[TextEnv] | Callable[[], TextEnv] | str,
                   tasks: list[dict], engine: StreamEngine, params: SamplingParams, *,
                   n_per_task: int = 1, max_turns: int | None = None, seed: int | None = None,
                   max_seq_len: int | None = None, loop: EventLoop | None = None,
                   ) -> tuple[list[Episode], RolloutStats]:
    """``astream_rollout`` from synchronous code, on ``loop`` (an ``EventLoop``) or a fresh one."""
    coro = astream_rollout(envs_or_factory, tasks, engine, params, n_per_task=n_per_task,
                           max_turns=max_turns, seed=seed, max_seq_len=max_seq_len)
    return asyncio.run(coro) if loop is None else loop.run(coro)
