"""Micro-batching: many concurrent ``asearch`` calls become one batched search.

Agentic RL runs many episodes at once, and each episode asks one query at a time. Search
is fast in batches and slow one by one (on this machine Search-R1's BM25 server does ~450
q/s for single queries and ~1,900 q/s for batches of 64; concurrency alone does not help).
``MicroBatcher`` waits up to ``window_ms`` for more callers, then sends all waiting queries
as one call. While a batch is in flight the next one fills up, so batches grow with load
and never wait longer than the window when the system is idle. With ``idle_fire`` (what the
server uses) a caller that finds nothing waiting and nothing in flight does not wait at all,
and callers queued behind a batch go the moment it ends: a lone query costs no window, and
under load batches form behind the one in flight.

The HTTP client (``agentsearch.retrievers.client``) uses the same ``MicroBatcher`` with an
HTTP request as the batch function; ``BatchingRetriever`` uses it around any in-process
retriever.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from agentsearch.retrievers.base import Hit, Retriever

__all__ = ["MicroBatcher", "BatchingRetriever"]

BatchFn = Callable[[list[str], int], Awaitable[list[list[Hit]]]]


@dataclass
class _Item:
    queries: list[str]
    k: int
    future: asyncio.Future
    n_unique: int = 0


@dataclass
class _LoopState:
    loop: asyncio.AbstractEventLoop
    sem: asyncio.Semaphore
    pending: list[_Item] = field(default_factory=list)
    pending_queries: int = 0
    timer: asyncio.TimerHandle | None = None
    armed: bool = False
    running: int = 0  # fn calls in flight


class MicroBatcher:
    """Coalesce concurrent ``submit(queries, k)`` calls into calls of ``fn(queries, k)``.

    - ``window_ms``: how long the first waiting caller waits for company.
    - ``max_batch``: most unique queries per ``fn`` call; a full batch goes at once, and a
      single caller with more queries is split into several calls.
    - ``max_inflight``: most ``fn`` calls running at once; later batches wait and grow.
    - ``idle_fire``: a caller that finds the batcher idle (nothing pending, nothing in
      flight) goes at once instead of waiting ``window_ms`` for company, and callers waiting
      behind a batch go as soon as it is done, window or not.

    Identical queries in one batch are sent once (GRPO groups often repeat a query). Each
    batch uses the largest ``k`` asked for and every caller gets its own first ``k`` hits.
    An exception from ``fn`` reaches exactly the callers whose queries were in that call.
    Works in any event loop; state is per loop.
    """

    def __init__(self, fn: BatchFn, window_ms: float = 5.0, max_batch: int = 256,
                 max_inflight: int = 4, idle_fire: bool = False):
        if max_batch < 1 or max_inflight < 1 or window_ms < 0:
            raise ValueError("need max_batch >= 1, max_inflight >= 1 and window_ms >= 0")
        self.fn, self.window, self.max_batch = fn, window_ms / 1000.0, max_batch
        self.max_inflight, self.idle_fire = max_inflight, idle_fire
        self._state: _LoopState | None = None
        self.stats = {"calls": 0, "batches": 0, "queries_sent": 0}

    def _loop_state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        if self._state is None or self._state.loop is not loop:
            self._state = _LoopState(loop, asyncio.Semaphore(self.max_inflight))
        return self._state

    async def submit(self, queries: list[str], k: int) -> list[list[Hit]]:
        """Search ``queries`` as part of the next batch; returns one hit list per query."""
        if not queries:
            return []
        st = self._loop_state()
        item = _Item(list(queries), int(k), st.loop.create_future(), len(set(queries)))
        st.pending.append(item)
        st.pending_queries += item.n_unique
        self.stats["calls"] += 1
        if st.pending_queries >= self.max_batch:
            self._arm(st, 0.0)
        elif not st.armed:
            idle = self.idle_fire and st.running == 0 and len(st.pending) == 1
            self._arm(st, 0.0 if idle else self.window)
        return await item.future

    def _arm(self, st: _LoopState, delay: float) -> None:
        if st.timer is not None:
            st.timer.cancel()
            st.timer = None
        st.armed = True
        if delay > 0:
            st.timer = st.loop.call_later(delay, self._fire, st)
        else:
            self._fire(st)

    def _fire(self, st: _LoopState) -> None:
        st.timer = None
        st.loop.create_task(self._drain(st))

    def _take(self, st: _LoopState) -> list[_Item]:
        items, n = [], 0
        while st.pending and (not items or n + st.pending[0].n_unique <= self.max_batch):
            it = st.pending.pop(0)
            n += it.n_unique
            st.pending_queries -= it.n_unique
            if not it.future.done():  # skip callers that were cancelled while waiting
                items.append(it)
        return items

    async def _drain(self, st: _LoopState) -> None:
        async with st.sem:
            # Taken only once a slot is free, so the batch holds everyone who came meanwhile.
            st.armed = False
            items = self._take(st)
            if st.pending and not st.armed:
                self._arm(st, 0.0 if st.pending_queries >= self.max_batch else self.window)
            if items:
                st.running += 1
                try:
                    await self._run(items)
                finally:
                    st.running -= 1
                    if self.idle_fire and st.running == 0 and st.pending:
                        self._arm(st, 0.0)  # idle again: who waits for company goes now

    async def _run(self, items: list[_Item]) -> None:
        unique: dict[str, int] = {}
        for it in items:
            for q in it.queries:
                unique.setdefault(q, len(unique))
        queries, k = list(unique), max(it.k for it in items)
        results: list[list[Hit]] = []
        try:
            for s in range(0, len(queries), self.max_batch):
                chunk = queries[s:s + self.max_batch]
                got = await self.fn(chunk, k)
                if len(got) != len(chunk):
                    raise RuntimeError(f"batch search returned {len(got)} lists for {len(chunk)} "
                                       "queries")
                results.extend(got)
                self.stats["batches"] += 1
                self.stats["queries_sent"] += len(chunk)
        except BaseException as e:  # noqa: BLE001 - delivered to the waiting callers
            for it in items:
                if not it.future.done():
                    it.future.set_exception(e)
            if not isinstance(e, Exception):
                raise
            return
        for it in items:
            if not it.future.done():
                it.future.set_result([results[unique[q]][:it.k] for q in it.queries])


class BatchingRetriever:
    """Wrap any retriever so concurrent ``asearch`` calls share batched ``search`` calls.

    >>> r = BatchingRetriever(load_retriever(world_index()), window_ms=5, max_batch=256)
    >>> hits = await asyncio.gather(*(r.asearch([q], 3) for q in questions))

    ``search`` (sync) passes straight through: a sync caller already holds its batch.
    """

    def __init__(self, retriever: Retriever, window_ms: float = 5.0, max_batch: int = 256,
                 max_inflight: int = 2, idle_fire: bool = False):
        self.retriever = retriever
        self.batcher = MicroBatcher(retriever.asearch, window_ms, max_batch, max_inflight,
                                    idle_fire)

    def search(self, queries: list[str], k: int = 3) -> list[list[Hit]]:
        return self.retriever.search(queries, k)

    async def asearch(self, queries: list[str], k: int = 3) -> list[list[Hit]]:
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        return await self.batcher.submit(queries, k)

    def __getattr__(self, name):  # num_docs, manifest, ... of the wrapped retriever
        if name == "retriever":
            raise AttributeError(name)
        return getattr(self.retriever, name)
