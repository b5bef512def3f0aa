"""Serve Search-R1's prebuilt indexes unchanged: ``agentsearch index adopt``.

::

  agentsearch index adopt --faiss e5_Flat.index --corpus wiki-18.jsonl --encoder intfloat/e5-base-v2
  agentsearch index adopt --lucene bm25 --corpus wiki-18.jsonl
  agentsearch serve --index e5_Flat-agentsearch

What Search-R1 ships, and what its ``index_builder.py`` writes (read from its code):

- dense: ONE FAISS file, ``faiss.write_index`` of ``index_factory(dim, "Flat" | "HNSW64",
  METRIC_INNER_PRODUCT)``, whose vector ``i`` is corpus row ``i``. Its server encodes queries
  with mean pooling, 256 tokens, unit-norm vectors, and prefixes chosen by the retriever's
  name: ``"query: "`` for e5 (passages got ``"passage: "``), the bge search instruction for
  bge. Its ``retrieval_server.py`` answers with the corpus rows it looks up by position.
- BM25: a Pyserini/Lucene folder indexed from the corpus jsonl (``JsonCollection``, no raw
  documents stored); hits carry the corpus ``id`` and the server looks the rows up.

``adopt`` writes our index folder around them: ``manifest.json`` (the encoder settings
above, the FAISS parameters read from the file), ``docs.jsonl`` (the corpus rows, normalised
like ``index build`` does), and ``index.faiss`` or ``lucene/`` as a link to Search-R1's
file (``copy=True``: a copy). Before writing anything it checks that the FAISS file holds
one vector per corpus row, of the encoder's dimension, and that the Lucene documents are
the corpus's ids; each mismatch is a one-line ``RetrieverError``.

Differences from Search-R1's server that remain: it encodes queries in fp16 on the GPU, we
in fp32 (scores agree to about 1e-3; ranks only differ on near-ties), and its ``dpr`` rule
(no normalisation) is not reproduced.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

from agentsearch.retrievers.base import RetrieverError
from agentsearch.retrievers.store import DocStore, check_out_dir, finish_index, staging

__all__ = ["adopt_faiss", "adopt_lucene", "inspect_faiss", "search_r1_prefixes", "main"]

BGE_QUERY_PREFIX = "Represent this sentence for searching relevant passages: "


def search_r1_prefixes(name: str) -> tuple[str, str]:
    """``(query prefix, passage prefix)`` by Search-R1's rule on the retriever's name."""
    name = name.lower()
    if "e5" in name:
        return "query: ", "passage: "
    if "bge" in name:
        return BGE_QUERY_PREFIX, ""
    return "", ""


def inspect_faiss(path: str | Path) -> dict:
    """``{"ntotal", "dim", "index_type", "metric", ...}`` of a FAISS file, read without
    loading its vectors (memory-mapped where this FAISS can)."""
    from agentsearch.retrievers.faiss_index import faiss_module

    faiss = faiss_module(None)
    path = Path(path)
    if not path.is_file():
        raise RetrieverError(f"FAISS file not found: {path}")
    flags = getattr(faiss, "IO_FLAG_MMAP_IFC", 0) | getattr(faiss, "IO_FLAG_READ_ONLY", 0)
    try:
        index = faiss.read_index(str(path), flags)  # already of its own class (IndexFlatIP, ...)
    except RuntimeError as e:
        raise RetrieverError(f"cannot read {path} as a FAISS index: "
                             f"{str(e).splitlines()[0]}") from None
    metric = {faiss.METRIC_INNER_PRODUCT: "inner_product",
              faiss.METRIC_L2: "l2"}.get(index.metric_type)
    info = {"ntotal": int(index.ntotal), "dim": int(index.d),
            "metric": metric or str(index.metric_type), "faiss_class": type(index).__name__}
    if isinstance(index, faiss.IndexFlat):
        return {**info, "index_type": "flat"}
    if hasattr(index, "hnsw"):
        return {**info, "index_type": "hnsw", "ef_search": int(index.hnsw.efSearch)}
    try:
        ivf = faiss.extract_index_ivf(index)
    except RuntimeError:
        raise RetrieverError(f"{path} is a {type(index).__name__}; adopt takes Flat, HNSW and IVF "
                             "FAISS indexes") from None
    return {**info, "index_type": "ivf", "nlist": int(ivf.nlist), "nprobe": int(ivf.nprobe)}


def _place(src: Path, dest: Path, copy: bool) -> str:
    if copy:
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, dest)
        return "copy"
    os.symlink(src.resolve(), dest, target_is_directory=src.is_dir())
    return "link"


def _default_out(src: Path) -> Path:
    src = src.resolve()
    return src.with_name(f"{src.stem if src.is_file() else src.name}-agentsearch")


def adopt_faiss(faiss_path: str | Path, corpus: str | Path, encoder: str,
                out_dir: str | Path | None = None,
                *, pooling: str = "mean", max_length: int = 256, query_prefix: str | None = None,
                passage_prefix: str | None = None, copy: bool = False) -> Path:
    """Wrap Search-R1's FAISS file (vectors of ``encoder`` over ``corpus``, row order) as a
    ``dense-flat`` / ``dense-hnsw`` / ``dense-ivf`` index folder; returns the folder.
    Prefixes default to Search-R1's rule on the encoder's name (``search_r1_prefixes``)."""
    from agentsearch.retrievers.encoder import Encoder

    t0 = time.perf_counter()
    faiss_path = Path(faiss_path)
    out_dir = Path(out_dir) if out_dir else _default_out(faiss_path)
    check_out_dir(out_dir)
    info = inspect_faiss(faiss_path)
    qp, pp = search_r1_prefixes(encoder)
    enc = Encoder(encoder, pooling=pooling, max_length=max_length,
                  query_prefix=qp if query_prefix is None else query_prefix,
                  passage_prefix=pp if passage_prefix is None else passage_prefix)
    if enc.dim != info["dim"]:
        raise RetrieverError(f"{faiss_path} holds {info['dim']}-d vectors but encoder {enc.name!r} "
                             f"makes {enc.dim}-d ones; pass the encoder the index was built with "
                             "(Search-R1's e5 indexes: intfloat/e5-base-v2)")
    docs = DocStore.from_corpus(corpus)
    if info["ntotal"] != len(docs):
        raise RetrieverError(f"{faiss_path} holds {info['ntotal']:,} vectors but {corpus} has "
                             f"{len(docs):,} rows; pass the corpus the index was built from "
                             "(vector i is row i)")
    params = {k: info[k] for k in ("ef_search", "nlist", "nprobe") if k in info}
    with staging(out_dir) as tmp:
        how = _place(faiss_path, tmp / "index.faiss", copy)
        finish_index(tmp, docs, f"dense-{info['index_type']}", corpus, t0, {
            **enc.config(), "index_type": info["index_type"], "metric": info["metric"], **params,
            "adopted_from": str(faiss_path.resolve()), "adopted_as": how,
            "faiss_class": info["faiss_class"]})
    return out_dir


def adopt_lucene(lucene_dir: str | Path, corpus: str | Path, out_dir: str | Path | None = None, *,
                 copy: bool = False, k1: float = 0.9, b: float = 0.4) -> Path:
    """Wrap a Pyserini/Lucene BM25 folder (Search-R1's ``bm25/``) built from ``corpus`` as a
    ``bm25`` index folder; BM25 ``k1, b`` default to Pyserini's (what Search-R1 searches with)."""
    from agentsearch.retrievers._java import import_pyserini

    t0 = time.perf_counter()
    lucene_dir = Path(lucene_dir)
    out_dir = Path(out_dir) if out_dir else _default_out(lucene_dir)
    check_out_dir(out_dir)
    if not lucene_dir.is_dir():
        raise RetrieverError(f"Lucene index folder not found: {lucene_dir}")
    import_pyserini()
    from jnius import JavaException
    from pyserini.search.lucene import LuceneSearcher

    try:
        searcher = LuceneSearcher(str(lucene_dir))
    except JavaException as e:
        raise RetrieverError(f"cannot open {lucene_dir} as a Lucene index: {e}") from None
    n = searcher.num_docs
    docs = DocStore.from_corpus(corpus)
    if n != len(docs):
        raise RetrieverError(f"{lucene_dir} holds {n:,} documents but {corpus} has {len(docs):,} "
                             "rows; pass the corpus the index was built from")
    ids = set(docs.ids)
    strangers = [d for d in {searcher.doc(i).docid() for i in (0, n // 2, n - 1)} if d not in ids]
    if strangers:
        raise RetrieverError(f"{lucene_dir} holds documents {strangers[:3]} that are not ids of "
                             f"{corpus}; pass the corpus the index was built from")
    getattr(searcher, "close", lambda: None)()
    with staging(out_dir) as tmp:
        how = _place(lucene_dir, tmp / "lucene", copy)
        finish_index(tmp, docs, "bm25", corpus, t0, {
            "k1": k1, "b": b, "analyzer": "lucene-english-porter",
            "adopted_from": str(lucene_dir.resolve()), "adopted_as": how})
    return out_dir


def main(a) -> int:
    """``agentsearch index adopt (--faiss FILE --encoder E | --lucene DIR) --corpus FILE
    [--out DIR]``."""
    from agentsearch.retrievers.store import read_manifest

    try:
        if a.faiss:
            if not a.encoder:
                raise RetrieverError("--faiss needs --encoder: the model the vectors came from "
                                     "(Search-R1's e5 indexes: intfloat/e5-base-v2)")
            out = adopt_faiss(a.faiss, a.corpus, a.encoder, a.out, pooling=a.pooling,
                              max_length=a.max_length,
                              query_prefix=a.query_prefix, passage_prefix=a.passage_prefix,
                              copy=a.copy)
        else:
            out = adopt_lucene(a.lucene, a.corpus, a.out, copy=a.copy)
    except (RetrieverError, ValueError, OSError) as e:
        print(f"agentsearch index adopt: error: {e}", file=sys.stderr)
        return 2
    m = read_manifest(out)
    how = {"link": "linked to", "copy": "copied from"}[m["adopted_as"]]
    print(f"adopted a {m['kind']} index of {m['num_docs']:,} documents ({how} {m['adopted_from']}) "
          f"in {m['build_seconds']} s: {out}\n  serve it: agentsearch serve --index {out}")
    return 0
