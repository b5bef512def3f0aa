"""``LatencyTool``: a tool with added latency, to model a remote search API in benchmarks."""

from __future__ import annotations

import asyncio
import math
import random

__all__ = ["LatencyTool"]


class LatencyTool:
    """Wrap a tool with extra latency per call, to model a remote search API in benchmarks.

    ``kind="fixed"``: ``mean_s`` every call; ``"lognormal"``: log-normal with mean ``mean_s``
    and shape ``sigma``. The sleep is asyncio, so concurrent episodes overlap it.
    """

    def __init__(self, tool, profile, seed: int = 0):
        self.tool, self.profile = tool, profile
        self.name, self.description = tool.name, tool.description
        self.parameters, self.timeout_s = tool.parameters, tool.timeout_s + 10 * profile.mean_s
        self.timeouts_are_infra = getattr(tool, "timeouts_are_infra", False)
        self._rng = random.Random(seed)

    def delay(self) -> float:
        p = self.profile
        if p.kind == "fixed":
            return p.mean_s
        mu = math.log(max(p.mean_s, 1e-9)) - p.sigma ** 2 / 2  # E[X] = mean_s
        return self._rng.lognormvariate(mu, p.sigma)

    async def __call__(self, **kwargs):
        await asyncio.sleep(self.delay())
        return await self.tool(**kwargs)

    async def aclose(self) -> None:
        if hasattr(self.tool, "aclose"):
            await self.tool.aclose()
