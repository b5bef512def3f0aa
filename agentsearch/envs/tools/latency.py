"""``LatencyTool``: a tool with added latency, to model a remote search API in benchmarks;
``ToolService``: the capacity of that API, shared by every episode's tool (calls queue for it)."""

from __future__ import annotations

import asyncio
import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["LatencyTool", "ToolService", "lognormal_s"]


def lognormal_s(rng: random.Random, mean_s: float, sigma: float) -> float:
    """One log-normal draw of shape ``sigma`` whose mean is ``mean_s``."""
    mu = math.log(max(mean_s, 1e-9)) - sigma ** 2 / 2  # E[X] = mean_s
    return rng.lognormvariate(mu, sigma)


@dataclass(eq=False)
class _Call:
    """One held reservation: it runs from ``start`` to ``end`` (monotonic seconds)."""

    service_s: float
    start: float
    end: float
    moved: Callable[[], None]  # tells its waiting caller that start and end changed


class ToolService:
    """A search service that serves ``concurrency`` calls at once, first come first served.

    Each call reserves the slot that frees first: it starts when that slot is free (or now)
    and holds it for its service time, so a burst of ``n`` calls takes about ``n /
    concurrency`` service times, as a retrieval server or a rate-limited API does. The
    reservation is bookkeeping on the monotonic clock under a thread lock, so one service is
    shared by any number of episodes, event loops and threads.

    ``reserve`` is that bookkeeping alone (a queue model: ``analysis.tool_queue``). A real
    call ``await``s ``hold``, which can end early: cancelled (a timeout), it gives back the
    rest of its time at once, and the calls queued behind it move up, as they would behind a
    request its client gave up on. One service is used one way or the other, not both.
    """

    def __init__(self, concurrency: int):
        if concurrency < 1:
            raise ValueError(f"ToolService: concurrency must be >= 1, got {concurrency}")
        self._free_at = [0.0] * concurrency  # monotonic time each slot frees
        self._held: list[_Call] = []  # hold()'s reservations not yet over, in arrival order
        self._lock = threading.Lock()

    def reserve(self, service_s: float, now: float | None = None) -> float:
        """The monotonic time a call arriving ``now`` that takes ``service_s`` finishes."""
        now = time.monotonic() if now is None else now
        with self._lock:
            return self._book(service_s, now)

    def _book(self, service_s: float, now: float) -> float:
        slot = min(range(len(self._free_at)), key=self._free_at.__getitem__)
        end = max(now, self._free_at[slot]) + service_s
        self._free_at[slot] = end
        return end

    async def hold(self, service_s: float) -> None:
        """Wait for a slot, then hold it for ``service_s`` seconds. Cancelled, the call's
        slot frees at once (``release``): no reservation outlives its call."""
        loop, moved = asyncio.get_running_loop(), asyncio.Event()

        def wake() -> None:  # from whichever thread released a call ahead of this one
            try:
                loop.call_soon_threadsafe(moved.set)
            except RuntimeError:  # the loop is closed: no one waits any more
                pass

        now = time.monotonic()
        with self._lock:
            self._held = [c for c in self._held if c.end > now]
            end = self._book(service_s, now)
            call = _Call(service_s, end - service_s, end, wake)
            self._held.append(call)
        try:
            while (left := call.end - time.monotonic()) > 0:  # release() may move end up
                moved.clear()
                try:
                    await asyncio.wait_for(moved.wait(), left)
                except TimeoutError:
                    pass
        finally:
            self.release(call)

    def release(self, call: _Call) -> None:
        """``call`` is over. Ended early, its slot frees now: the calls waiting behind it
        are planned again in arrival order, each on the slot that frees first, and woken."""
        now, moved = time.monotonic(), []
        with self._lock:
            early = call.end > now and call in self._held
            self._held = [c for c in self._held if c is not call and c.end > now]
            if not early:
                return
            running = sorted(c.end for c in self._held if c.start <= now)
            free = running + [now] * (len(self._free_at) - len(running))
            for c in self._held:
                if c.start > now:  # waiting: its slot is the first to free, in arrival order
                    slot = min(range(len(free)), key=free.__getitem__)
                    start = max(now, free[slot])
                    if start != c.start:
                        c.start, c.end = start, start + c.service_s
                        moved.append(c)
                    free[slot] = c.end
            self._free_at = free
        for c in moved:
            c.moved()


class LatencyTool:
    """Wrap a tool with extra latency per call, to model a remote search API in benchmarks.

    ``kind="fixed"``: ``mean_s`` every call; ``"lognormal"``: log-normal with mean ``mean_s``
    and shape ``sigma``. The sleep is asyncio, so concurrent episodes overlap it; with a
    ``service`` (``tool_latency.concurrency`` > 0) the calls also queue for its slots.

    ``timeout_s`` (the wrapped tool's, or ``async.tool_timeout_s``) bounds the wrapped call
    itself; the modelled latency and the queue come on top (``wait_allowance_s``: ten mean
    latencies, plus an hour of queue with a service), so a limit never cuts a call short for
    the calls queued ahead of it. A call cancelled while it waits or holds its slot gives the
    slot back (``ToolService.hold``).
    """

    def __init__(self, tool, profile, seed: int = 0, service: ToolService | None = None):
        self.tool, self.profile, self.service = tool, profile, service
        self.name, self.description = tool.name, tool.description
        self.parameters, self.timeout_s = tool.parameters, tool.timeout_s
        self.wait_allowance_s = 10 * profile.mean_s + (3600.0 if service is not None else 0.0)
        self.timeouts_are_infra = getattr(tool, "timeouts_are_infra", False)
        self._rng = random.Random(seed)

    def delay(self) -> float:
        p = self.profile
        if p.kind == "fixed":
            return p.mean_s
        return lognormal_s(self._rng, p.mean_s, p.sigma)

    async def __call__(self, **kwargs):
        service_s = self.delay()
        if self.service is not None:
            await self.service.hold(service_s)
        else:
            await asyncio.sleep(service_s)
        return await asyncio.wait_for(self.tool(**kwargs), self.timeout_s)

    async def aclose(self) -> None:
        if hasattr(self.tool, "aclose"):
            await self.tool.aclose()
