"""``LatencyTool``: a tool with added latency, to model a remote search API in benchmarks;
``ToolService``: the capacity of that API, shared by every episode's tool (calls queue for it)."""

from __future__ import annotations

import asyncio
import math
import random
import threading
import time

__all__ = ["LatencyTool", "ToolService", "lognormal_s"]


def lognormal_s(rng: random.Random, mean_s: float, sigma: float) -> float:
    """One log-normal draw of shape ``sigma`` whose mean is ``mean_s``."""
    mu = math.log(max(mean_s, 1e-9)) - sigma ** 2 / 2  # E[X] = mean_s
    return rng.lognormvariate(mu, sigma)


class ToolService:
    """A search service that serves ``concurrency`` calls at once, first come first served.

    Each call reserves the slot that frees first: it starts when that slot is free (or now)
    and holds it for its service time, so a burst of ``n`` calls takes about ``n /
    concurrency`` service times, as a retrieval server or a rate-limited API does. The
    reservation is bookkeeping on the monotonic clock under a thread lock, so one service is
    shared by any number of episodes, event loops and threads.
    """

    def __init__(self, concurrency: int):
        if concurrency < 1:
            raise ValueError(f"ToolService: concurrency must be >= 1, got {concurrency}")
        self._free_at = [0.0] * concurrency  # monotonic time each slot frees
        self._lock = threading.Lock()

    def reserve(self, service_s: float, now: float | None = None) -> float:
        """The monotonic time a call arriving ``now`` that takes ``service_s`` finishes."""
        now = time.monotonic() if now is None else now
        with self._lock:
            slot = min(range(len(self._free_at)), key=self._free_at.__getitem__)
            end = max(now, self._free_at[slot]) + service_s
            self._free_at[slot] = end
        return end


class LatencyTool:
    """Wrap a tool with extra latency per call, to model a remote search API in benchmarks.

    ``kind="fixed"``: ``mean_s`` every call; ``"lognormal"``: log-normal with mean ``mean_s``
    and shape ``sigma``. The sleep is asyncio, so concurrent episodes overlap it; with a
    ``service`` (``tool_latency.concurrency`` > 0) the calls also queue for its slots.
    """

    def __init__(self, tool, profile, seed: int = 0, service: ToolService | None = None):
        self.tool, self.profile, self.service = tool, profile, service
        self.name, self.description = tool.name, tool.description
        self.parameters, self.timeout_s = tool.parameters, tool.timeout_s + 10 * profile.mean_s
        if service is not None:  # a queued call waits for every call ahead of it: an hour of queue
            self.timeout_s += 3600.0
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
            service_s = max(0.0, self.service.reserve(service_s) - time.monotonic())
        await asyncio.sleep(service_s)
        return await self.tool(**kwargs)

    async def aclose(self) -> None:
        if hasattr(self.tool, "aclose"):
            await self.tool.aclose()
