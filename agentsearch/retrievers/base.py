"""The retriever contract: batched search over a corpus of ``{"id", "contents"}`` rows.

Every backend (FAISS dense, Pyserini and bm25s BM25, hybrid fusion, the HTTP client)
implements ``Retriever``, so environments do not care whether search is local or
remote. Search is batched by design: one call takes many queries, because batching
(not concurrency) is what makes retrieval fast.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from agentsearch.core.reliability import InfraError

__all__ = ["Hit", "Retriever", "RetrieverError", "RetrieverUnavailable", "format_hits", "REGISTRY",
           "register_retriever"]


class RetrieverError(RuntimeError):
    """Search failed for a reason the caller can report (dead server, bad index, ...)."""


class RetrieverUnavailable(RetrieverError, InfraError):
    """The retrieval service could not be reached or kept failing (connection refused,
    timeouts, 5xx): an infrastructure failure, which envs wait out instead of answering."""


@dataclass(frozen=True)
class Hit:
    """One retrieved passage. ``contents`` is ``"Title"\\ntext`` as in the corpus."""

    doc_id: str
    contents: str
    score: float

    @property
    def title(self) -> str:
        return self.contents.partition("\n")[0].strip().strip('"')

    @property
    def text(self) -> str:
        return self.contents.partition("\n")[2]


@runtime_checkable
class Retriever(Protocol):
    """``search(queries, k)`` returns one ranked list of ``k`` hits per query."""

    def search(self, queries: list[str], k: int = 3) -> list[list[Hit]]: ...

    async def asearch(self, queries: list[str], k: int = 3) -> list[list[Hit]]: ...


class SyncRetrieverMixin:
    """Gives a synchronous ``search`` an ``asearch`` that runs it in a worker thread."""

    async def asearch(self, queries: list[str], k: int = 3) -> list[list[Hit]]:
        return await asyncio.to_thread(self.search, queries, k)


def format_hits(hits: list[Hit]) -> str:
    """Search-R1's passage formatting, exactly: ``Doc i(Title: "t") text`` one per line.

    Like Search-R1's ``_passages2string``, the title is the contents' first line as it is
    (with the corpus's quotes), the text the rest.
    """
    return "\n".join(f"Doc {i + 1}(Title: {h.contents.partition(chr(10))[0]}) {h.text}"
                     for i, h in enumerate(hits))


REGISTRY: dict[str, type] = {}


def register_retriever(kind: str):
    """Class decorator: make a retriever kind loadable by name from an index manifest."""

    def deco(cls):
        REGISTRY[kind] = cls
        return cls

    return deco
