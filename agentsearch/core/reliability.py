"""Infrastructure failures, told apart from the policy's.

A tool call can fail because the policy asked for something wrong (an empty query, a bad
argument, code that raises): that is the policy's failure, an error observation it learns
from. Or it fails because a service the environment depends on failed (the retrieval server
is down, times out, answers 5xx; a sandbox crashed): that is an *infra* failure, and
training on it would teach the policy that searching fails. Tools say which by raising
``InfraError`` (``RemoteRetriever`` raises ``RetrieverUnavailable``, one, once its own
retries are spent; each failure its retries absorb is reported to ``transient()``: counted,
and warned about on the first).

An env (``TextEnv._call_tool``) that meets an ``InfraError`` does not answer the episode: it
waits and calls the tool again, with exponential backoff, for as long as the process's
outage lasts, up to ``budget_s`` (``reliability.outage_budget_s``); the episode is paused, not
failed. ``OutageTracker`` is that shared state: one outage per process (every env talks to the
same services), a warning on its *first* error, then one line at most every ``warn_every_s``
(what fails, since when, the next try), a line when it recovers, and past the budget an
``OutageError`` that stops the run (the trainer checkpoints first, so ``--resume`` continues
once the service is back). Counters: ``errors`` (infra errors seen) and ``outage_seconds()``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["InfraError", "OutageError", "OutageTracker", "outages", "call_until_up"]

log = logging.getLogger("agentsearch.reliability")


class InfraError(RuntimeError):
    """A service the environment depends on failed (unreachable, timed out, 5xx, crashed):
    not the policy's doing. A tool raises it to have the call retried instead of answered."""


class OutageError(InfraError):
    """An infrastructure outage lasted past its budget: the run stops (and can resume)."""


class OutageTracker:
    """The process's view of infrastructure outages (module notes)."""

    def __init__(self, budget_s: float = 600.0, warn_every_s: float = 30.0, backoff_s: float = 0.5,
                 backoff_max_s: float = 10.0):
        self.configure(budget_s=budget_s, warn_every_s=warn_every_s, backoff_s=backoff_s,
                       backoff_max_s=backoff_max_s)
        self.errors = 0
        self.transient_errors = 0  # failures a client's own retry absorbed (see transient())
        self._transient_warned: float | None = None
        self.since: float | None = None  # when the current outage began (None: no outage)
        self._closed_s = 0.0  # seconds of outages that have ended
        self._warned = 0.0
        self._rng = random.Random()

    def configure(self, *, budget_s: float, warn_every_s: float = 30.0, backoff_s: float = 0.5,
                  backoff_max_s: float = 10.0) -> None:
        if budget_s < 0 or warn_every_s <= 0 or backoff_s <= 0 or backoff_max_s < backoff_s:
            raise ValueError("outage settings: budget_s >= 0, warn_every_s > 0, 0 < backoff_s <= "
                             "backoff_max_s")
        self.budget_s, self.warn_every_s = float(budget_s), float(warn_every_s)
        self.backoff_s, self.backoff_max_s = float(backoff_s), float(backoff_max_s)
        # a (re)configured tracker (a new run) warns on its first error again
        self._transient_warned = None

    def outage_seconds(self) -> float:
        """Seconds spent in outages so far, the current one included."""
        return self._closed_s + (time.monotonic() - self.since if self.since is not None else 0.0)

    def mark(self) -> tuple[float, int]:
        """Where the counters stand now; ``since_mark(mark)`` reports what happened after."""
        return self.outage_seconds(), self.transient_errors

    def since_mark(self, mark: tuple[float, int]) -> dict[str, float]:
        """Since ``mark``: seconds in outages (``health/infra_outage_s``) and failures a
        client's retry absorbed (``rollout/infra_retried``): one step's metrics."""
        return {"health/infra_outage_s": self.outage_seconds() - mark[0],
                "rollout/infra_retried": float(self.transient_errors - mark[1])}

    def failed(self, what: str, error: BaseException, attempt: int) -> float:
        """Record an infra error of ``what`` (its ``attempt``-th in a row, from 0); returns the
        seconds to wait before trying again, or raises ``OutageError`` past the budget."""
        now = time.monotonic()
        self.errors += 1
        if self.since is None:
            self.since, self._warned = now, now
            log.warning("infrastructure error: %s failed (%s: %s); its episodes wait and retry, "
                        "for up to %.0f s (reliability.outage_budget_s)", what,
                        type(error).__name__, str(error)[:200], self.budget_s)
        lasted = now - self.since
        if lasted > self.budget_s:
            raise OutageError(f"{what} has failed for {lasted:.0f} s, past "
                              f"reliability.outage_budget_s={self.budget_s:g} (last: "
                              f"{type(error).__name__}: {str(error)[:200]}); the run stops here: "
                              "start the service again and resume with --resume RUN_DIR")
        delay = (min(self.backoff_s * 2 ** min(attempt, 30), self.backoff_max_s)
                 * (1 + 0.25 * self._rng.random()))
        if now - self._warned >= self.warn_every_s:
            self._warned = now
            log.warning("infrastructure still failing: %s, for %.0f s (%d errors so far); next try "
                        "in %.1f s, the run stops after %.0f s", what, lasted, self.errors, delay,
                        self.budget_s)
        return delay

    def transient(self, what: str, reason: str) -> None:
        """A failure that a client's own retry absorbed (a 5xx, a refused connection, a
        shed request that answered on a later try): no episode waited, but it is an infra
        error all the same. Counted in ``transient_errors``; the first is logged at once,
        then one line at most every ``warn_every_s``."""
        self.transient_errors += 1
        now = time.monotonic()
        if self._transient_warned is None or now - self._transient_warned >= self.warn_every_s:
            self._transient_warned = now
            log.warning("infrastructure error, retried: %s (%s); %d such errors so far", what,
                        str(reason)[:200], self.transient_errors)

    def recovered(self) -> None:
        """A call succeeded: the outage (if any) is over."""
        if self.since is not None:
            lasted = time.monotonic() - self.since
            self._closed_s += lasted
            self.since = None
            log.warning("infrastructure recovered after %.1f s (%d infra errors so far)", lasted,
                        self.errors)


outages = OutageTracker()
"""The process's tracker: envs report to it; the trainer configures it and reads its counters."""


async def call_until_up(call: Callable[[], Awaitable[Any]], what: str,
                        counts: dict | None = None) -> Any:
    """``await call()``; an ``InfraError`` is not an answer: wait (``outages``' backoff) and
    call again until it answers, or ``OutageError`` past the budget. ``counts["infra_errors"]``
    (if given) counts the errors waited out."""
    for attempt in itertools.count():
        try:
            out = await call()
        except OutageError:
            raise
        except InfraError as e:
            if counts is not None:
                counts["infra_errors"] = counts.get("infra_errors", 0) + 1
            await asyncio.sleep(outages.failed(what, e, attempt))
            continue
        outages.recovered()
        return out
