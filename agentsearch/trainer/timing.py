"""Wall-clock accounting per phase, so every run yields quality-versus-time curves.

``timer.phase("generate")`` accumulates seconds under ``time/generate`` for the current
step; ``timer.end_step()`` returns the step's ``time/*`` metrics, including ``time/step``
and ``time/train_cumulative`` (training time only: ``eval`` and ``checkpoint`` are timed but
excluded, so a curve's x axis does not depend on how often one evaluates). Phases may overlap
(a streaming rollout generates while other episodes wait on tools): each ``time/<phase>`` is
that phase's busy seconds, ``time/step`` stays wall-clock, and ``time/overlap`` is how much
the phases' sum exceeds it.

With the next step's rollout played beside this step's update (``async.max_staleness=1``,
``beside``), the seconds the rollout runs past the update are the next step's: they are waited
for that step's data. So a checkpoint taken at the end of this step does not hold them, and a
resume, which plays that rollout again, counts it once.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

__all__ = ["PhaseTimer", "PHASES", "EXCLUDED"]

# Phases of one training step, in loop order (the loop's comments use the same names).
PHASES = ("generate", "env", "reward", "logprobs", "replay_scan", "update", "sync")
EXCLUDED = ("eval", "checkpoint", "sft")


class PhaseTimer:
    def __init__(self, train_cumulative: float = 0.0):
        self.train_cumulative = train_cumulative
        self._acc: dict[str, float] = defaultdict(float)
        self._start = time.perf_counter()
        self._ahead = self._carried = 0.0  # seconds moved to the next step / from the last one

    @contextmanager
    def phase(self, name: str):
        t = time.perf_counter()
        try:
            yield
        finally:
            self._acc[name] += time.perf_counter() - t

    def add(self, name: str, seconds: float) -> None:
        """Account time measured elsewhere (e.g. the rollout splits generate vs env itself)."""
        self._acc[name] += seconds

    def account(self, rollout_stats) -> None:
        """A rollout's ``generate``, ``env`` and ``reward`` seconds (its ``RolloutStats``) count
        in the step during which it ran."""
        m = rollout_stats.metrics()
        for phase in ("generate", "env", "reward"):
            self.add(phase, m[f"time/{phase}"])

    def beside(self, run_beside: Callable[[Callable[[], Any]], Any],
               work: Callable[[], Any]) -> Any:
        """``run_beside(work)``: ``work`` (this step's update) runs beside the next step's
        rollout, and the seconds ``run_beside`` goes on after ``work`` returned move to the next
        step (module notes)."""
        done: list[float] = []

        def timed():
            try:
                return work()
            finally:
                done.append(time.perf_counter())

        out = run_beside(timed)
        self._ahead += max(time.perf_counter() - done[0], 0.0) if done else 0.0
        return out

    def pending_train_time(self) -> float:
        """Training seconds of the step in progress so far (excluded phases left out; neither
        the seconds the last step moved to it nor those it moves to the next: a resume plays
        that rollout again)."""
        wall = time.perf_counter() - self._start
        return max(wall - sum(self._acc.get(k, 0.0) for k in EXCLUDED) - self._ahead, 0.0)

    def end_step(self) -> dict[str, float]:
        wall = time.perf_counter() - self._start
        excluded = sum(self._acc.get(k, 0.0) for k in EXCLUDED)
        step = max(wall - excluded - self._ahead + self._carried, 0.0)
        self._carried, self._ahead = self._ahead, 0.0
        self.train_cumulative += step
        out = {f"time/{k}": self._acc.get(k, 0.0) for k in PHASES + EXCLUDED}
        out.update({f"time/{k}": v for k, v in self._acc.items()})
        busy = sum(self._acc.get(k, 0.0) for k in PHASES)
        out["time/other"] = max(step - busy, 0.0)
        out["time/overlap"] = max(busy - step, 0.0)  # phases that ran at once (a streaming rollout)
        out["time/step"] = step
        out["time/train_cumulative"] = self.train_cumulative
        self._acc.clear()
        self._start = time.perf_counter()
        return out
