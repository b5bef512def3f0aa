"""One asyncio event loop for a whole run: ``EventLoop``.

``asyncio.run`` makes a new loop per call and closes it after. Async clients are bound to
the loop that made them (an ``httpx.AsyncClient``'s connection pool, a ``MicroBatcher``'s
queue), so a training run that called ``asyncio.run`` once per rollout made a new remote
retriever client every step and never closed the old ones. A run makes one ``EventLoop``,
passes it to every ``rollout(..., loop=events)``, and at the end closes it together with
what was built on it::

    events = EventLoop()
    for step in ...:
        episodes, stats = rollout(envs, tasks, backend, params, loop=events)
    events.close(envs)   # awaits each env's aclose() (tools, retriever clients), then the loop

It is ``asyncio.Runner`` (Python 3.11+) with the closing step added; use it from
synchronous code (not inside a running loop), from one thread.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable, Coroutine, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

__all__ = ["EventLoop", "aclose_all", "worker_thread"]

log = logging.getLogger(__name__)


async def aclose_all(resources: Iterable[Any]) -> None:
    """Await ``aclose()`` (or call ``close()``, or a thread pool's ``shutdown()``) of each
    resource once (by identity); a failure is logged, not raised, so one broken resource
    does not keep others open."""
    seen: set[int] = set()
    for res in resources:
        if res is None or id(res) in seen:
            continue
        seen.add(id(res))
        try:
            if hasattr(res, "aclose"):
                await res.aclose()
            elif hasattr(res, "close"):
                res.close()
            elif hasattr(res, "shutdown"):  # a worker thread pool
                res.shutdown(wait=True, cancel_futures=True)
        except Exception as e:  # noqa: BLE001 - closing is best effort, one at a time
            log.warning("closing %s failed: %s: %s", type(res).__name__, type(e).__name__, e)


def worker_thread(name: str) -> ThreadPoolExecutor:
    """One worker thread with the caller's torch intra-op thread count (OpenMP's count is per
    thread: a new thread would otherwise use every core)."""
    torch = sys.modules.get("torch")
    n = torch.get_num_threads() if torch is not None else None

    def init():
        if n is not None:
            torch.set_num_threads(n)

    return ThreadPoolExecutor(1, thread_name_prefix=name, initializer=init)


class EventLoop:
    """One asyncio loop for a run: ``run(coro)`` runs a coroutine on it to completion;
    ``close(*resources)`` closes the resources on it (see ``aclose_all``), then the loop.
    ``own(*resources)`` registers resources that ``close()`` (and leaving a ``with`` block,
    an exception included) closes too, so a run that crashes still closes its clients."""

    def __init__(self, *, debug: bool | None = None):
        self._runner = asyncio.Runner(debug=debug)
        self._owned: list[Any] = []
        self.closed = False

    def own(self, *resources: Any) -> None:
        self._owned.extend(resources)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._runner.get_loop()

    def run(self, coro: Coroutine) -> Any:
        if self.closed:
            coro.close()
            raise RuntimeError("this EventLoop is closed")
        return self._runner.run(coro)

    def run_beside(self, coro: Coroutine | Callable[[asyncio.Future], Coroutine],
                   fn: Callable[[], Any], thread: ThreadPoolExecutor) -> tuple[Any, Any]:
        """Run ``coro`` on the loop while ``fn()`` runs on ``thread`` (e.g. the next step's
        rollout while this step updates); returns both results, after both have ended.
        ``coro`` may be a function of ``fn``'s future (done when ``fn`` returns)."""
        async def both():
            job = asyncio.get_running_loop().run_in_executor(thread, fn)
            try:
                result = await (coro(job) if callable(coro) else coro)
            except BaseException:
                await asyncio.gather(job, return_exceptions=True)  # never leave fn running
                raise
            return result, await job

        return self.run(both())

    def close(self, *resources: Any) -> None:
        """``close(envs)`` or ``close(env, retriever, ...)``: each argument is a resource or
        an iterable of them. Safe to call twice."""
        if self.closed:
            return
        flat: list[Any] = []
        for r in (*self._owned, *resources):
            if isinstance(r, (list, tuple, set)):
                flat.extend(r)
            else:
                flat.append(r)
        try:
            if flat:
                self._runner.run(aclose_all(flat))
        finally:
            self.closed = True
            self._runner.close()

    def __enter__(self) -> EventLoop:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
