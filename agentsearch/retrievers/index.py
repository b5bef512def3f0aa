"""Build index folders and open them.

>>> from agentsearch.retrievers import build_index, load_retriever
>>> build_index("corpus.jsonl", "bm25s", "indexes/bm25s")        # or bm25, dense-flat, ...
>>> r = load_retriever("indexes/bm25s")                          # any kind, by its manifest
>>> r.search(["who founded Biagam Company?"], k=3)

Kinds: ``bm25s`` (pure Python BM25), ``bm25`` (Pyserini/Lucene BM25, needs Java 21),
``dense-flat``, ``dense-hnsw``, ``dense-ivf``, ``dense-ivfpq``, ``dense-hnsw-sq8``,
``dense-factory`` (FAISS over a sentence encoder, default the offline all-MiniLM-L6-v2; the
FAISS side is ``faiss_index``). Builds write into a temporary folder and rename it into place,
so a reader never sees half an index. Command line: ``agentsearch index build --corpus FILE
--kind KIND --out DIR``.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import time
from pathlib import Path

from agentsearch.retrievers.base import REGISTRY, Retriever, RetrieverError
from agentsearch.retrievers.store import (
    MANIFEST,
    DocStore,
    check_out_dir,
    finish_index,
    read_manifest,
    staging,
)

__all__ = ["KINDS", "build_index", "load_retriever", "world_index", "folder_index", "main"]

# kind -> module whose import registers it (imported only when that kind is used)
KINDS: dict[str, str] = {
    "bm25s": "agentsearch.retrievers.bm25",
    "bm25": "agentsearch.retrievers.lucene",
    "dense-flat": "agentsearch.retrievers.dense",
    "dense-hnsw": "agentsearch.retrievers.dense",
    "dense-ivf": "agentsearch.retrievers.dense",
    "dense-ivfpq": "agentsearch.retrievers.dense",
    "dense-hnsw-sq8": "agentsearch.retrievers.dense",
    "dense-factory": "agentsearch.retrievers.dense",
}


def _backend(kind: str):
    if kind not in REGISTRY:
        if kind not in KINDS:
            raise RetrieverError(f"unknown index kind {kind!r}; known: {', '.join(sorted(KINDS))} "
                                 "(or register your own with @register_retriever)")
        importlib.import_module(KINDS[kind])
    return REGISTRY[kind]


def build_index(corpus_path: str | Path, kind: str, out_dir: str | Path, *,
                progress: bool = True, **kw) -> Path:
    """Index ``corpus_path`` (JSONL ``{"id", "contents"}``) as ``kind`` into ``out_dir``.

    Keyword arguments go to the backend: ``threads`` (all), ``encoder``, ``batch_size``,
    ``query_prefix``, ``passage_prefix``, ``max_length``, ``vectors_from`` (dense; reuses a
    dense folder's vectors or reads a ``.npy`` of them), ``shards``, ``hnsw_m``, ``ef_search``
    (HNSW), ``nlist``, ``nprobe`` (IVF), ``pq_m``, ``pq_nbits``, ``refine`` (dense-ivfpq),
    ``factory``, ``search`` (dense-factory), ``stemmer``, ``k1``, ``b`` (bm25s and bm25). An
    existing index folder at ``out_dir`` is replaced; any other non-empty folder is left alone
    (error). Returns ``out_dir``.
    """
    from agentsearch.core.progress import Progress

    out_dir = Path(out_dir)
    backend = _backend(kind)
    check_out_dir(out_dir)
    t0 = time.perf_counter()
    docs = DocStore.from_corpus(corpus_path)
    with staging(out_dir) as tmp:
        bar = Progress(len(docs), f"index {kind}", stream=sys.stderr, enabled=progress)
        extra = backend.build(docs, tmp, progress=bar,
                              **{k: v for k, v in kw.items() if v is not None})
        bar.close()
        finish_index(tmp, docs, kind, corpus_path, t0, extra)
    return out_dir


def load_retriever(index: str | Path | list, **kw) -> Retriever:
    """Open an index folder by its ``manifest.json``; a list of 2+ folders gives a hybrid
    (reciprocal-rank fusion) retriever over all of them; an ``http://`` URL gives a
    ``RemoteRetriever`` for a running retrieval server (client settings may ride in its query
    string: ``?micro_batch=false`` for one request per search).

    Keyword arguments go to the backend: ``threads``; for dense ``encoder`` (must match the
    one the index was built with), ``ef_search`` (HNSW), ``nprobe`` (IVF), ``search``
    (``"nprobe=64,efSearch=128"``), ``refine``, ``mmap``, ``batch_size``.
    """
    if isinstance(index, (list, tuple)):
        if len(index) == 1:
            return load_retriever(index[0], **kw)
        from agentsearch.retrievers.hybrid import HybridRetriever

        return HybridRetriever([load_retriever(p, **kw) for p in index])
    if str(index).startswith(("http://", "https://")):  # a running `agentsearch serve`
        from agentsearch.retrievers.client import RemoteRetriever

        return RemoteRetriever.from_url(str(index), **kw)  # ?micro_batch=false etc. (client.py)
    index = Path(index)
    manifest = read_manifest(index)
    retriever = _backend(manifest["kind"]).load(index, manifest, **kw)
    retriever.manifest = manifest
    return retriever


def world_index(seed: int = 0, kind: str = "bm25s", entities: int | None = None, **kw) -> Path:
    """The index of the synthetic world ``world_dir(seed, entities)``, built on first use
    (``folder_index``; chain questions share it: same corpus)."""
    from agentsearch.data import world_dir

    return folder_index(world_dir(seed=seed, entities=entities), kind, **kw)


def folder_index(world: str | Path, kind: str = "bm25s", **kw) -> Path:
    """The ``kind`` index of ``WORLD/corpus.jsonl`` (a generated world's folder), built on
    first use.

    Cached under ``$AGENTSEARCH_CACHE/indexes``; concurrent first uses each build into a
    private folder and the first rename wins, so readers never see a partial index.
    """
    from agentsearch.core.cache import cache_dir, publish_dir

    world = Path(world)
    # A non-default encoder is part of the cache key; threads and the like are not.
    tag = ("-" + re.sub(r"[^A-Za-z0-9._-]+", "_", str(kw["encoder"]))[-60:] if kw.get("encoder")
           else "")
    out = cache_dir() / "indexes" / f"world-{world.name}-{kind}{tag}"
    if (out / MANIFEST).exists():
        return out
    tmp = out.with_name(f"{out.name}.build{os.getpid()}")
    build_index(world / "corpus.jsonl", kind, tmp, progress=False, **kw)
    return publish_dir(tmp, out)


def main(a) -> int:
    """``agentsearch index build --corpus FILE --kind KIND --out DIR [--encoder E] [--device D]``;
    ``agentsearch index adopt ...`` is ``adopt.main``."""
    if getattr(a, "index_command", "build") == "plan":
        from agentsearch.retrievers.plan import main as plan_main

        return plan_main(a)
    if getattr(a, "index_command", "build") == "adopt":
        from agentsearch.retrievers.adopt import main as adopt_main

        return adopt_main(a)
    kw = {"threads": a.threads}
    if a.kind.startswith("dense"):
        kw.update(encoder=a.encoder, batch_size=a.batch_size, device=getattr(a, "device", None),
                  **{k: getattr(a, k, None) for k in ("vectors_from", "shards", "nlist", "nprobe",
                                                      "pq_m", "refine", "hnsw_m", "ef_search",
                                                      "factory", "search")})
    elif a.encoder:
        print(f"agentsearch index: --encoder is ignored for kind {a.kind}", file=sys.stderr)
    try:
        out = build_index(a.corpus, a.kind, a.out, **kw)
    except (RetrieverError, ValueError) as e:
        print(f"agentsearch index: error: {e}", file=sys.stderr)
        return 2
    m = read_manifest(out)
    print(f"built {m['kind']} index of {m['num_docs']:,} documents in {m['build_seconds']} s: "
          f"{out}")
    return 0
