"""The ``search`` tool, the default retriever it builds, and the start-up ``preflight``."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from agentsearch.core.config import ConfigError
from agentsearch.core.reliability import InfraError

__all__ = ["SearchTool", "default_retriever", "preflight"]

_RETRIEVERS: dict[tuple, object] = {}
_lock = threading.Lock()


def default_retriever(index: str | None = None, world_seed: int = 0,
                      world_entities: int | None = None):
    """The shared default retriever: the folder ``index``, or the world's bm25s index (built
    on first use and cached on disk), behind a ``BatchingRetriever``. One per process."""
    key = (index, world_seed, world_entities)
    with _lock:
        if key not in _RETRIEVERS:
            import agentsearch.retrievers as retrievers  # bm25s, FAISS: only on first use

            if index is not None and str(index).startswith(("http://", "https://")):
                _RETRIEVERS[key] = retrievers.load_retriever(index)  # the client micro-batches
                return _RETRIEVERS[key]
            if index is not None:
                try:
                    base = retrievers.load_retriever(index)
                except OSError as e:  # a dense index whose encoder is not in the local cache, ...
                    if isinstance(e, FileNotFoundError) and not Path(index).exists():
                        raise ConfigError(f"index folder {index} does not exist "
                                          "(env_kwargs.index)") from None
                    raise ConfigError(f"index {index} does not load: "
                                      f"{str(e).splitlines()[0]}") from None
            else:
                base = retrievers.world_index(seed=world_seed, kind="bm25s",
                                              entities=world_entities)
                if isinstance(base, (str, Path)):
                    base = retrievers.load_retriever(base)
            _RETRIEVERS[key] = retrievers.BatchingRetriever(base)
        return _RETRIEVERS[key]


class SearchTool:
    """Search a corpus: returns the top-``topk`` passages as Search-R1's ``Doc i(Title: t) text``.

    ``retriever``: any ``agentsearch.retrievers.Retriever``. Without one the default is
    built on first use (and shared): a bm25s index of the synthetic world ``world_seed``,
    or the index folder ``index``, behind a ``BatchingRetriever`` so that the searches of
    concurrent episodes go to the index as one batch. ``no_results``: the text of a search
    without hits (``SearchEnv(parser="search_r1")`` passes ``""``, as Search-R1 gives).

    Failures: an empty query is the policy's (an observation that says so); the retriever's
    failures are infrastructure errors (``InfraError``, waited out by the env, never shown to
    the policy): ``RetrieverUnavailable`` from a remote server, a search past ``timeout_s``,
    and an in-process index's ``MemoryError`` or ``OSError`` (a disk, a mapped file, a
    connection). Other exceptions stay error observations.
    """

    name = "search"
    # a search that times out is the retriever's failure, not the policy's
    timeouts_are_infra = True
    description = "Search the encyclopedia. Returns the most relevant passages for a query."
    parameters = {"type": "object",
                  "properties": {"query": {"type": "string", "description": "the search query"}},
                  "required": ["query"]}

    def __init__(self, retriever=None, *, topk: int = 3, index: str | None = None,
                 world_seed: int = 0, world_entities: int | None = None, timeout_s: float = 30.0,
                 max_query_chars: int = 512, no_results: str = "No results."):
        self._retriever = retriever
        self.no_results = no_results  # Search-R1 gives "" (an empty <information></information>)
        self.topk, self.index, self.world_seed = topk, index, world_seed
        self.world_entities = world_entities
        self.timeout_s = timeout_s
        self.max_query_chars = max_query_chars

    @property
    def retriever(self):
        if self._retriever is None:
            self._retriever = default_retriever(self.index, self.world_seed, self.world_entities)
        return self._retriever

    async def __call__(self, query: str) -> str:
        from agentsearch.retrievers.base import format_hits

        query = " ".join(str(query).split())[: self.max_query_chars]
        if not query:
            return "Empty query: write the words to search for."
        try:
            hits = (await self.retriever.asearch([query], self.topk))[0]
        except (MemoryError, OSError) as e:  # the index's machine, not the query: wait it out
            raise InfraError(f"the retriever failed: {type(e).__name__}: {e}") from e
        return format_hits(hits) if hits else self.no_results

    async def aclose(self) -> None:
        """Close the retriever's async clients (``RemoteRetriever.aclose``), if it has been
        built and has any; the retriever may be shared, and closing it twice is harmless."""
        aclose = getattr(self._retriever, "aclose", None)
        if aclose is not None:
            await aclose()


def preflight(env, loop=None) -> None:
    """Call the env's search tool once before training, so a dead retriever (server down,
    bad index) is a clear error at start, not a run of error observations and zero rewards.
    ``loop``: the run's ``EventLoop`` (else a fresh loop)."""
    tool = getattr(env, "tools", {}).get("search")
    if tool is None:
        return
    inner = getattr(tool, "tool", tool)  # unwrap LatencyTool
    try:
        check = asyncio.wait_for(inner(query="preflight check"), timeout=max(inner.timeout_s, 1.0))
        (asyncio.run if loop is None else loop.run)(check)
    except Exception as e:  # noqa: BLE001 - report whatever the retriever raised
        raise ConfigError(f"search failed at start ({type(e).__name__}: {e}); is the retrieval "
                          "server running / the index folder right? (env_kwargs.index)") from None
