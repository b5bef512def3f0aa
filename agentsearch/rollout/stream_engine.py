"""What the streaming rollout asks of a generation engine: ``StreamEngine``.

Episodes ask for one turn at a time (``await engine.generate(ids, params)``); the engine
batches whoever is waiting. The two engines (``engines.MicroBatcher``,
``vllm_stream.VLLMStream``) share what is here: the demand (how many episodes could still ask),
the counters, the weight version, the lock that keeps a weight sync apart from generation,
``hold()`` (no generation while an eval or a checkpoint runs) and the driver task bound to the
running event loop.
"""

from __future__ import annotations

import asyncio
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from agentsearch.rollout.backends import Generation, SamplingParams
from agentsearch.rollout.events import worker_thread

__all__ = ["StreamEngine", "TurnRequest"]


@dataclass
class TurnRequest:
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
        # generation and weight sync never overlap; held by a weight sync and, in the
        # micro-batcher, by each batch and by hold() (an eval or a checkpoint)
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

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Inside, no generation of this engine runs (``GroupPool.hold``: an eval or a
        checkpoint between takes): a batch being generated finishes first, none starts until
        the end; requests that arrive meanwhile wait. Here: the weight-sync lock, which the
        worker thread takes for each batch. Call it on the event loop's thread while the loop
        is not running (between two ``EventLoop.run``)."""
        with self.model_lock:
            yield

    def close(self) -> None:
        # the thread (and its OpenMP team) gone before we go on
        self._pool.shutdown(wait=True, cancel_futures=True)
