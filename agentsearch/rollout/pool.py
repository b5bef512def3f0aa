"""Groups played across step boundaries: the trainer takes groups as they finish.

``GroupPool(envs, engine, params, group_size=n, in_flight=b + m, sample=...)`` keeps
``in_flight`` groups being played at all times (each episode on its own, ``streaming.Player``).
``await pool.take(b)`` starts new groups (tasks from ``sample``) until ``in_flight`` are in
play, waits for ``b`` to complete, and returns their episodes (a group's ``n`` episodes
together); the other groups go on being played and are *carried* into the next take. That is
over-sampling (``async.oversample = m``): a group held up by a slow tool call or a long answer
no longer holds up the step. Carried groups are taken first, and a group carried
``max_carry`` times (default 1) is waited for: completion order alone kept the longest groups
carried, take after take, ever staler: the first the drift gate would drop.

With ``enough`` (a future the trainer completes when it has nothing left to do) a take
returns as soon as ``enough`` is done and at least ``min_take`` groups are complete: the
trainer tops the batch up with replayed groups instead of waiting (``async/fresh_short``).

The price is a length bias: the groups that finish first are the short ones (fewer turns,
shorter answers), and a carried group trains on weights older than it was started with. Both
are measured on every take (``extra_metrics``): ``async/carried_groups`` (in play after the
take), ``async/taken_carried`` (taken groups that had been carried), the mean policy tokens
per episode of taken groups that were and were not carried (``async/len_carried``,
``async/len_uncarried``) and the most takes a taken group was carried (``async/carry_max``);
stale turns go through the trainer's drift gate like any others.

Between takes the groups in play go on (beside the trainer's update); what they do then
(tokens, engine and env seconds) is charged to the next take, whose window opens where the
last one closed. ``with pool.hold():`` stops them from starting any turn or tool call (an
eval or a checkpoint: off the training clock, and an eval must not share the engine with
them); a tool call in flight runs out, and the engine's ``hold()`` finishes what it is
generating for them first: the micro-batcher's batch in progress, or every turn of theirs
inside vLLM (stepped to its end before the hold returns; none joins until it ends), so an
eval on the same vLLM engine runs alone.

Seeds: group ``s`` (the pool's ``s``-th) resets its envs with ``derive_seed(seed, s,
"reset")`` and episode ``j``'s turn ``t`` samples with ``derive_seed(params.seed, s, j, t)``.
A checkpoint keeps ``state_dict()``: the tasks in play restart first after a resume (from
their first turn: half-played episodes are not saved).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from agentsearch.envs.text_env import TextEnv
from agentsearch.rollout.backends import SamplingParams, derive_seed
from agentsearch.rollout.engines import StreamEngine
from agentsearch.rollout.streaming import Player, charge_engine, engine_mark
from agentsearch.rollout.turns import (
    Episode,
    EpisodeState,
    RolloutStats,
    finish_episodes,
    start_episodes,
)

__all__ = ["GroupPool"]


@dataclass(eq=False)  # by identity: groups are found in lists
class _Group:
    serial: int
    task: dict
    envs: list[TextEnv]
    runs: list[EpisodeState]
    job: asyncio.Task
    carried: int = 0


class GroupPool:
    """See the module notes. ``envs`` must hold ``in_flight * group_size`` envs."""

    def __init__(self, envs: Sequence[TextEnv], engine: StreamEngine, params: SamplingParams, *,
                 group_size: int, in_flight: int, sample: Callable[[int], list[dict]], seed: int,
                 max_turns: int | None = None, max_seq_len: int | None = None,
                 max_carry: int | None = 1):
        if len(envs) < in_flight * group_size:
            raise ValueError(f"{in_flight} groups of {group_size} in play need "
                             f"{in_flight * group_size} envs, got {len(envs)}")
        self.engine, self.params, self.sample, self.seed = engine, params, sample, seed
        self.group_size, self.in_flight = group_size, in_flight
        self.max_turns, self.max_seq_len, self.max_carry = max_turns, max_seq_len, max_carry
        self.free: list[TextEnv] = list(envs)
        self.groups: list[_Group] = []  # in play, in start order
        self.finished: list[_Group] = []  # complete, in completion order
        self.serial = 0
        self.player: Player | None = None
        self._restart: list[dict] = []
        self.last_taken: list[dict] = []
        self._gate = asyncio.Event()  # clear while held
        self._gate.set()
        self._next = RolloutStats()  # the next take's window: open since the last take closed
        self._mark: tuple[float, int, int] | None = None  # the engine's counters then
        self._env_mark = 0.0

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Inside, the groups in play start no turn and no env step, and none of their turns
        is being generated (module notes); on the event loop's thread, between takes."""
        self._gate.clear()  # first: a turn the engine finishes now waits before its env step
        try:
            with self.engine.hold():
                yield
        finally:
            self._gate.set()

    def state_dict(self, *, last_take_trained: bool = True) -> dict:
        """What a checkpoint keeps: the group serial and the tasks of the groups in play (and
        of the last take, unless its episodes were trained); ``load_state_dict`` restarts
        those groups (from their first turn) before sampling new tasks."""
        tasks = (([] if last_take_trained else self.last_taken) + [g.task for g in self.groups]
                 + self._restart)
        return {"serial": self.serial, "tasks": tasks}

    def load_state_dict(self, state: dict) -> None:
        self.serial, self._restart = int(state["serial"]), list(state["tasks"])

    def _start(self, task: dict, stats: RolloutStats) -> None:
        n = self.group_size
        envs, self.free = self.free[:n], self.free[n:]
        runs, started, stop = start_episodes(envs, [task], self.engine.tokenizer, self.params,
                                             n_per_task=n,
                                             seed=derive_seed(self.seed, self.serial, "reset"),
                                             max_seq_len=self.max_seq_len)
        stats.time_tokenize += started.time_tokenize
        if self.player is None:
            self.player = Player(self.engine, self.params, stop, self.max_turns, self.max_seq_len,
                                 stats, gate=self._gate)
        self.engine.expect(n)
        serial = self.serial
        job = asyncio.get_running_loop().create_task(self._play_group(runs, serial))
        group = _Group(serial, task, envs, runs, job)
        job.add_done_callback(lambda _: self.finished.append(group))
        self.groups.append(group)
        self.serial += 1

    async def _play_group(self, runs: list[EpisodeState], serial: int) -> None:
        # a task (not a bare gather future), so a loop that closes cancels and collects it
        await asyncio.gather(*(self.player.play(r, serial, j) for j, r in enumerate(runs)))

    async def _fail(self) -> None:
        """An episode raised: stop every group, collect them all (no exception left unread
        for the garbage collector to log at a random moment), raise the first error."""
        jobs = [g.job for g in self.groups]
        for job in jobs:
            job.cancel()
        results = await asyncio.gather(*jobs, return_exceptions=True)
        self.groups, self.finished = [], []
        for r in results:
            if isinstance(r, Exception):
                raise r

    async def take(self, b: int, *, enough: asyncio.Future | None = None,
                   min_take: int | None = None) -> tuple[list[Episode], RolloutStats]:
        """The episodes of the first ``b`` groups to complete (fewer, but at least
        ``min_take``, once ``enough`` is done), and the take's stats: what the engine and the
        envs did since the last take ended, over every group in play; ``extra_metrics`` holds
        the ``async/*`` keys of the module notes."""
        t_start = time.perf_counter()
        stats, env0 = self._next, self._env_mark
        mark = self._mark or engine_mark(self.engine)
        while len(self.groups) < self.in_flight:
            task = self._restart.pop(0) if self._restart else self.sample(1)[0]
            self._start(task, stats)
        assert self.player is not None
        self.player.stats = stats  # this take's window collects what every group in play does
        min_take = b if min_take is None else max(1, min(min_take, b))
        try:
            while not self._complete(b, enough, min_take):
                waiting = {g.job for g in self.groups if not g.job.done()}
                if enough is not None and not enough.done():
                    waiting.add(enough)
                await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                if any(g.job.exception() for g in self.finished if not g.job.cancelled()):
                    await self._fail()
        except asyncio.CancelledError:
            await asyncio.shield(self.aclose())
            raise
        taken = sorted(self.finished, key=lambda g: -g.carried)[:b]  # carried first, then in
        self.finished = [g for g in self.finished if g not in taken]  # completion order
        for g in taken:
            self.groups.remove(g)
            self.free.extend(g.envs)
        for g in self.groups:
            g.carried += 1
        self.last_taken = [g.task for g in taken]
        episodes = finish_episodes([r for g in taken for r in g.runs], stats, t_start)
        stats.episodes = len(episodes)
        charge_engine(stats, self.engine, mark)
        stats.time_env = max(self.player.env_clock.busy - env0 - stats.time_reward, 0.0)
        stats.extra_metrics = self._metrics(taken, b)
        self._next = self.player.stats = RolloutStats()  # the next take's window opens now
        self._mark, self._env_mark = engine_mark(self.engine), self.player.env_clock.busy
        return episodes, stats

    def _complete(self, b: int, enough: asyncio.Future | None, min_take: int) -> bool:
        """Whether a take may return: ``b`` groups complete (``min_take`` once ``enough`` is
        done), none of them a group carried ``max_carry`` times still in play."""
        overdue = self.max_carry is not None and any(
            g.carried >= self.max_carry and g not in self.finished for g in self.groups)
        done = len(self.finished) >= b or (enough is not None and enough.done()
                                           and len(self.finished) >= min_take)
        return done and not overdue

    def _metrics(self, taken: list[_Group], b: int) -> dict[str, float]:
        def tokens_per_episode(groups):
            eps = [r for g in groups for r in g.runs]
            return sum(sum(r.mask) for r in eps) / len(eps) if eps else 0.0

        carried = [g for g in taken if g.carried]
        return {"async/carried_groups": float(len(self.groups)),
                "async/taken_carried": float(len(carried)),
                "async/len_carried": tokens_per_episode(carried),
                "async/len_uncarried": tokens_per_episode([g for g in taken if not g.carried]),
                "async/carry_max": float(max((g.carried for g in taken), default=0)),
                "async/fresh_short": float(b - len(taken))}

    async def aclose(self) -> None:
        """Cancel the groups in play (their engine requests are dropped with them)."""
        for g in self.groups:
            g.job.cancel()
        await asyncio.gather(*(g.job for g in self.groups), return_exceptions=True)
        self.groups = []
