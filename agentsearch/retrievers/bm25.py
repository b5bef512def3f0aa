"""BM25 with ``bm25s`` (pure Python + numpy/numba, no Java): kind ``"bm25s"``.

Scoring is Lucene's BM25 (``k1=0.9, b=0.4``, Pyserini's defaults) over the same kind of
analysis Lucene's English analyzer does: lower-case word tokens, Lucene's 33 English stop
words, and a stemmer. The stemmer is Snowball English when PyStemmer is installed, else
Harman's "S" stemmer (plurals only); the choice is recorded in the manifest, so queries are
always analysed like the documents were.

Queries with no term in the vocabulary (including empty queries) return no hits, as Lucene
does; documents that match no query term are never returned.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import re
import threading
from pathlib import Path

import numpy as np

from agentsearch.retrievers.base import Hit, RetrieverError, SyncRetrieverMixin, register_retriever
from agentsearch.retrievers.store import DocStore

__all__ = ["Bm25sRetriever", "Analyzer", "LUCENE_STOPWORDS"]

# org.apache.lucene.analysis.en.EnglishAnalyzer.ENGLISH_STOP_WORDS_SET
LUCENE_STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their "
    "then there these they this to was will with".split())
_WORD = re.compile(r"\w+")


def _s_stem(w: str) -> str:
    """Harman's S stemmer (1991): strips English plural endings, nothing else."""
    if len(w) > 3:
        if w.endswith("ies") and not w.endswith(("eies", "aies")):
            return w[:-3] + "y"
        if w.endswith("es") and not w.endswith(("aes", "ees", "oes")):
            return w[:-1]
        if w.endswith("s") and not w.endswith(("us", "ss")):
            return w[:-1]
    return w



def _bm25s():
    """bm25s, with its logger at WARNING: on import it sets its own logger to DEBUG, which
    prints "Building index from tokens" for every index through the root handler."""
    import bm25s

    logging.getLogger("bm25s").setLevel(logging.WARNING)
    return bm25s

class Analyzer:
    """Text -> terms: lower-case, ``\\w+`` tokens, stop words out, stemmed."""

    def __init__(self, stemmer: str = "auto"):
        if stemmer == "auto":
            try:
                import Stemmer  # noqa: F401  (PyStemmer)

                stemmer = "snowball"
            except ImportError:
                stemmer = "s"
        if stemmer == "snowball":
            try:
                import Stemmer
            except ImportError as e:
                raise RetrieverError("this index was built with the Snowball stemmer; install "
                                     "PyStemmer (pip install PyStemmer) or rebuild with "
                                     "stemmer='s'") from e
            self._stem = Stemmer.Stemmer("english").stemWord
        elif stemmer == "s":
            self._stem = _s_stem
        elif stemmer == "none":
            self._stem = lambda w: w
        else:
            raise ValueError(f"unknown stemmer {stemmer!r}; use 'auto', 'snowball', 's' or 'none'")
        self.stemmer = stemmer

    def __call__(self, text: str) -> list[str]:
        return [self._stem(w) for w in _WORD.findall(text.lower()) if w not in LUCENE_STOPWORDS]


_numba_cached = False


def _cache_numba_kernels() -> None:
    """Keep bm25s's numba kernels in numba's on-disk cache. bm25s compiles them without
    ``cache=True``, which costs 5-7 s in every new process; cached, the first search of a
    process takes ~0.2 s (only the first process on a machine compiles)."""
    global _numba_cached
    if _numba_cached:
        return
    try:
        from bm25s.numba import retrieve_utils
    except ImportError as e:
        raise ImportError("backend='numba' needs numba: pip install numba") from e
    for kernel in (retrieve_utils._retrieve_internal_jitted_parallel,
                   retrieve_utils._retrieve_internal_jitted_serial):
        try:
            kernel.enable_caching()
        except Exception:  # noqa: BLE001 - no writable cache location: compile per process
            pass
    _numba_cached = True


@register_retriever("bm25s")
class Bm25sRetriever(SyncRetrieverMixin):
    """In-process BM25 over an index folder built by ``build_index(..., kind="bm25s")``.

    ``threads``: numba worker threads per batch. The default, 1, runs numba's serial
    kernel (30k+ queries/s on 10k documents) and starts no thread pool to compete with
    torch; raise it on a dedicated search machine. The numpy backend always scores in the
    calling thread (bm25s would otherwise start a process pool per call).
    Load options: ``backend`` ("auto", "numba", "numpy"), ``threads``.
    """

    kind = "bm25s"

    def __init__(self, model, docs: DocStore, analyzer: Analyzer, threads: int | None = None):
        self.model, self.docs, self.analyzer = model, docs, analyzer
        self.threads = threads or 1
        self.num_docs = len(docs)
        # numba's thread pool is process-global; one batch at a time keeps it sized as asked.
        self._lock = threading.Lock()

    # -- building ---------------------------------------------------------------
    @classmethod
    def build(cls, docs: DocStore, out_dir: Path, *, progress=None, stemmer: str = "auto",
              k1: float = 0.9, b: float = 0.4, **_) -> dict:
        """Write the bm25s arrays into ``out_dir``; return the manifest fields."""
        bm25s = _bm25s()
        analyzer = Analyzer(stemmer)
        tokens = []
        step = max(1, len(docs) // 100)
        for i, text in enumerate(docs.contents):
            tokens.append(analyzer(text))
            if progress and (i + 1) % step == 0:
                progress.advance(step)
        if progress:
            progress.update(len(docs))
        model = bm25s.BM25(k1=k1, b=b, method="lucene")
        model.index(tokens, show_progress=False)
        model.save(str(out_dir / "bm25s"))
        return {"stemmer": analyzer.stemmer, "k1": k1, "b": b,
                "vocab_size": len(model.vocab_dict)}

    @classmethod
    def load(cls, index_dir: Path, manifest: dict, *, threads: int | None = None,
             backend: str = "auto", **_):
        """Open the index. ``backend``: ``"numba"`` (compiled, parallel; 10-30x faster than
        numpy on 10k+ documents), ``"numpy"``, or ``"auto"`` (numba when installed)."""
        bm25s = _bm25s()
        if backend == "auto":
            backend = "numba" if importlib.util.find_spec("numba") else "numpy"
        if backend not in ("numpy", "numba"):
            raise ValueError(f"backend must be 'auto', 'numpy' or 'numba', got {backend!r}")
        try:
            model = bm25s.BM25.load(str(index_dir / "bm25s"), mmap=False, load_vocab=True)
        except (OSError, ValueError, json.JSONDecodeError) as e:
            raise RetrieverError(f"cannot read the bm25s index in {index_dir}: {e}; "
                                 "rebuild it") from e
        if backend == "numba":
            _cache_numba_kernels()
        model.backend = backend
        return cls(model, DocStore.load(index_dir, manifest), Analyzer(manifest["stemmer"]),
                   threads)

    # -- search -----------------------------------------------------------------
    def search(self, queries: list[str], k: int = 3) -> list[list[Hit]]:
        """One ranked list of at most ``k`` hits per query (fewer when few documents match)."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        vocab = self.model.vocab_dict
        ids = [[vocab[t] for t in self.analyzer(q) if t in vocab] for q in queries]
        todo = [i for i, q in enumerate(ids) if q]
        out: list[list[Hit]] = [[] for _ in queries]
        if not todo:
            return out
        kk = min(k, self.num_docs)
        n_threads = self.threads if self.model.backend == "numba" else 0
        with self._lock:
            docs, scores = self.model.retrieve([ids[i] for i in todo], k=kk, show_progress=False,
                                               n_threads=n_threads, return_as="tuple")
        docs, scores = np.asarray(docs), np.asarray(scores)
        for row, i in enumerate(todo):
            out[i] = [self.docs.hit(int(d), s) for d, s in zip(docs[row], scores[row]) if s > 0]
        return out
