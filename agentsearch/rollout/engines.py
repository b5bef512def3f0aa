"""Generation engines for streaming rollouts: episodes ask for one turn at a time
(``await engine.generate(ids, params)``) and the engine batches whoever is waiting.

- ``MicroBatcher(backend)``: any batch-synchronous backend (``HFBackend``, ``ScriptedBackend``,
  an async backend). When the model is free it takes the waiting requests (at most
  ``max_batch``), after waiting at most ``max_wait_s`` from the oldest request for episodes
  that are about to ask; it does not wait when every live episode outside the env is already
  waiting (so with instant tools it batches exactly like the lock-step rollout). A batch is
  generated with the largest ``max_new_tokens`` it asks for; each request's turn is then cut
  to its own budget.
- ``VLLMStream(backend)`` (``vllm_stream.py``): a ``VLLMBackend``'s in-process engine stepped
  by one driver task (continuous batching): new requests are added between engine steps,
  finished ones leave after the step that finished them.

``MicroBatcher`` runs the model on one worker thread, so the event loop serves tool calls
while a batch generates; ``VLLMStream`` runs each (short) engine step on the loop's thread.
Both count busy seconds (``busy_s``) and tag each turn with ``version`` (bumped by ``sync``).
``make_stream_engine(backend)`` picks one. Engines bind to the running event loop on first
use and rebind when called from another loop; what they share is ``stream_engine.StreamEngine``.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from dataclasses import replace
from functools import partial

from agentsearch.rollout.backends import Generation
from agentsearch.rollout.stream_engine import StreamEngine, TurnRequest
from agentsearch.rollout.vllm_stream import VLLMStream

__all__ = ["StreamEngine", "MicroBatcher", "VLLMStream", "make_stream_engine"]


def _cut_to(g: Generation, k: int) -> Generation:
    if len(g.token_ids) <= k:
        return g
    return replace(g, token_ids=g.token_ids[:k], logprobs=g.logprobs[:k], finish_reason="length")


class MicroBatcher(StreamEngine):
    """Batch whichever episodes are waiting, for a batch-synchronous backend (module notes)."""

    def __init__(self, backend, *, max_batch: int = 256, max_wait_s: float = 0.05):
        super().__init__(backend)
        if max_batch < 1 or max_wait_s < 0:
            raise ValueError(f"max_batch must be >= 1 and max_wait_s >= 0, got {max_batch}, "
                             f"{max_wait_s}")
        self.max_batch, self.max_wait_s = max_batch, max_wait_s
        self._queue: list[TurnRequest] = []
        self._wake: asyncio.Event | None = None
        self._async_backend = inspect.iscoroutinefunction(backend.generate)

    def _rebind(self) -> None:
        self._queue, self._wake = [], asyncio.Event()

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def generate(self, ids, params, images=None) -> Generation:
        if images and not getattr(self.backend, "accepts_images", False):
            raise ValueError(f"the env gives images but {type(self.backend).__name__} is "
                             "text-only; use a vision-language model (e.g. model=tiny-vlm)")
        loop = self._bind()
        request = TurnRequest(list(ids), params, images, loop.create_future(), time.perf_counter())
        self._queue.append(request)
        self._poke()
        self._ensure_driver()
        return await request.future

    async def _drive(self) -> None:
        while self._queue:
            deadline = self._queue[0].since + self.max_wait_s
            while len(self._queue) < min(self.max_batch, self.ready_to_ask()):
                left = deadline - time.perf_counter()
                if left <= 0:
                    break
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), left)
                except TimeoutError:
                    break
            batch = [r for r in self._queue[: self.max_batch] if not r.future.done()]
            del self._queue[: self.max_batch]
            if batch:
                await self._run(batch)

    async def _run(self, batch: list[TurnRequest]) -> None:
        p = replace(batch[0].params, max_new_tokens=max(r.params.max_new_tokens for r in batch))
        prompts = [r.ids for r in batch]
        kwargs = {"images": [r.images or [] for r in batch]} if any(r.images for r in batch) else {}
        t0 = time.perf_counter()
        try:
            if self._async_backend:
                version, gens = self.version, await self.backend.generate(prompts, p, **kwargs)
            else:
                version, gens = await self._loop.run_in_executor(
                    self._pool, partial(self._generate_locked, prompts, p, kwargs))
        except Exception as e:  # noqa: BLE001 - the batch's episodes get the error
            for r in batch:
                if not r.future.done():
                    r.future.set_exception(e)
            return
        finally:
            self.busy_s += time.perf_counter() - t0
            self.calls += 1
            self.requests += len(batch)
        for r, g in zip(batch, gens):
            if not r.future.done():
                r.future.set_result(replace(_cut_to(g, r.params.max_new_tokens), version=version))

    def _generate_locked(self, prompts, p, kwargs) -> tuple[int, list[Generation]]:
        with self.model_lock:  # the version read with the weights that generate
            return self.version, self.backend.generate(prompts, p, **kwargs)

    def _fail_all(self, error: Exception) -> None:
        for r in self._queue:
            if not r.future.done():
                r.future.set_exception(error)
        self._queue = []


def make_stream_engine(backend, *, max_batch: int = 256, max_wait_s: float = 0.05) -> StreamEngine:
    """``VLLMStream`` for a ``VLLMBackend``, else a ``MicroBatcher`` over ``backend``."""
    if hasattr(backend, "llm") and type(backend).__name__ == "VLLMBackend":
        return VLLMStream(backend)
    return MicroBatcher(backend, max_batch=max_batch, max_wait_s=max_wait_s)
