"""Retrievers: dense (FAISS), sparse (Pyserini, bm25s), hybrid, and the HTTP server/client."""
from agentsearch.retrievers.base import Hit, Retriever, RetrieverError, format_hits

__all__ = ["Hit", "Retriever", "RetrieverError", "format_hits"]
