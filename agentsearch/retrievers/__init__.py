"""Retrievers: dense (FAISS), sparse (Pyserini, bm25s), hybrid, and the HTTP server/client.

Everything here speaks one protocol, ``Retriever``: ``search(queries, k)`` and
``asearch(queries, k)`` return one ranked list of ``Hit(doc_id, contents, score)`` per query.

>>> from agentsearch.retrievers import world_index, load_retriever, BatchingRetriever
>>> r = load_retriever(world_index(seed=0, kind="bm25s"))   # built and cached on first use
>>> r.search(["In what year was Ky Stethith born?"], k=3)[0][0].title
'Ky Stethith'

Heavy dependencies (bm25s, faiss, torch, pyserini, fastapi, httpx) load only when the
backend that needs them is used, so importing this package is cheap.
"""

from __future__ import annotations

import importlib

from agentsearch.retrievers.base import (
    REGISTRY,
    Hit,
    Retriever,
    RetrieverError,
    RetrieverUnavailable,
    SyncRetrieverMixin,
    format_hits,
    register_retriever,
)

__all__ = ["Hit", "Retriever", "RetrieverError", "RetrieverUnavailable", "SyncRetrieverMixin",
           "format_hits", "REGISTRY", "register_retriever", "KINDS", "build_index",
           "load_retriever", "world_index", "MicroBatcher", "BatchingRetriever", "HybridRetriever",
           "RemoteRetriever", "probe_service", "serve_in_thread", "create_app", "adopt_faiss",
           "adopt_lucene"]

_LAZY = {
    "KINDS": "index", "build_index": "index", "load_retriever": "index", "world_index": "index",
    "MicroBatcher": "batching", "BatchingRetriever": "batching",
    "HybridRetriever": "hybrid",
    "RemoteRetriever": "client", "probe_service": "retrieve_protocol",
    "adopt_faiss": "adopt", "adopt_lucene": "adopt",
    "serve_in_thread": "server", "create_app": "server",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f"agentsearch.retrievers.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'agentsearch.retrievers' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)
