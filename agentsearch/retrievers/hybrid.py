"""Hybrid search by reciprocal-rank fusion (Cormack, Clarke & Büttcher, SIGIR 2009).

Each document scores ``sum over retrievers of 1 / (rrf_k + rank)`` (rank from 1) and the
fused list is sorted by that score. RRF needs no score calibration, which is why it is the
usual way to combine BM25 and dense retrieval. ``agentsearch serve --index A B`` uses it.
"""

from __future__ import annotations

import asyncio

from agentsearch.retrievers.base import Hit, Retriever, RetrieverError

__all__ = ["HybridRetriever", "rrf"]


def rrf(rankings: list[list[Hit]], k: int, rrf_k: float = 60.0) -> list[Hit]:
    """Fuse ranked hit lists for one query; ``Hit.score`` becomes the fused score."""
    score: dict[str, float] = {}
    first: dict[str, Hit] = {}
    for hits in rankings:
        for rank, h in enumerate(hits, 1):
            score[h.doc_id] = score.get(h.doc_id, 0.0) + 1.0 / (rrf_k + rank)
            first.setdefault(h.doc_id, h)
    order = sorted(score, key=score.__getitem__, reverse=True)  # stable: ties keep first-seen order
    return [Hit(d, first[d].contents, score[d]) for d in order[:k]]


class HybridRetriever:
    """Reciprocal-rank fusion of any retrievers over the same corpus.

    ``depth``: how many hits to take from each retriever before fusing (at least ``k``).
    Retrievers loaded from index folders must have been built from the same corpus
    (manifest ``corpus_sha256``): fusion is by document id.
    """

    def __init__(self, retrievers: list[Retriever], rrf_k: float = 60.0, depth: int = 20):
        if not retrievers:
            raise ValueError("HybridRetriever needs at least one retriever")
        hashes = {getattr(r, "manifest", {}).get("corpus_sha256") for r in retrievers} - {None}
        if len(hashes) > 1:
            raise RetrieverError("hybrid search needs indexes of the same corpus, but these were "
                                 "built from different corpora (manifest corpus_sha256 differs); "
                                 "rebuild them from one corpus.jsonl")
        self.retrievers, self.rrf_k, self.depth = list(retrievers), rrf_k, depth
        self.num_docs = max(getattr(r, "num_docs", 0) for r in retrievers)
        self.kind = ("hybrid("
                     + ",".join(str(getattr(r, "kind", type(r).__name__)) for r in retrievers)
                     + ")")

    def search(self, queries: list[str], k: int = 3) -> list[list[Hit]]:
        depth = max(k, self.depth)
        per = [r.search(queries, depth) for r in self.retrievers]
        return [rrf([p[i] for p in per], k, self.rrf_k) for i in range(len(queries))]

    async def asearch(self, queries: list[str], k: int = 3) -> list[list[Hit]]:
        depth = max(k, self.depth)
        per = await asyncio.gather(*(r.asearch(queries, depth) for r in self.retrievers))
        return [rrf([p[i] for p in per], k, self.rrf_k) for i in range(len(queries))]
