"""The FAISS files of a dense index folder: which index, how it is built, opened and tuned.

Every dense kind is a FAISS factory string, so any index FAISS can make is one ``factory=``
away (``agentsearch index build --kind dense-factory --factory "IVF65536_HNSW32,PQ64"``); the
named kinds pick the string from the corpus size N and the dimension d:

============== ===================================== ====================== ===============
kind           factory                               bytes per vector       query knob
============== ===================================== ====================== ===============
dense-flat     ``Flat``                              4d                     (exact)
dense-hnsw     ``HNSW{m},Flat``                      4d + ~8m               ``efSearch``
dense-ivf      ``IVF{nlist},Flat``                   4d + 8                 ``nprobe``
dense-ivfpq    ``OPQ{m}_{d},IVF{nlist},PQ{m}x{b}``   m*b/8 + 8              ``nprobe``
dense-hnsw-sq8 ``HNSW{m},SQ8``                       d + ~8m                ``efSearch``
dense-factory  yours                                 -                      yours
============== ===================================== ====================== ===============

Build (``write_faiss``): train on a sample (``train_rows``; never all N), add the vectors in
chunks from wherever they are (a memory-mapped ``vectors.npy``), optionally split into
``shards`` files ``index.000.faiss``... that are searched as one (``faiss.IndexShards``,
successive ids). Open (``read_faiss``): memory-mapped when asked (``IO_FLAG_MMAP_IFC``: the
flat and inverted-list codes stay in the file and are paged in as searched); the manifest
holds every file's size, so a truncated or replaced file is an error naming it before FAISS
reads a byte of it. Query-time settings (``nprobe``, ``efSearch``, anything FAISS's
``ParameterSpace`` knows) are applied by ``tune``; a setting the index lacks is an error.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from agentsearch.retrievers.base import RetrieverError

__all__ = ["DENSE_KINDS", "factory_for", "train_rows", "write_faiss", "read_faiss", "tune",
           "search_settings", "rerank_exact", "default_nlist", "faiss_module"]

DENSE_KINDS = ("flat", "hnsw", "ivf", "ivfpq", "hnsw-sq8", "factory")
"""Index types after ``dense-``."""

ADD_CHUNK = 65_536
"""Vectors added per ``index.add`` call: bounds the build's working memory."""


def faiss_module(threads: int | None):
    try:
        import faiss
    except ImportError as e:
        raise ImportError("dense indexes need FAISS: pip install faiss-cpu") from e
    faiss.omp_set_num_threads(threads or os.cpu_count() or 1)  # process-global OpenMP pool
    return faiss


def default_nlist(n: int) -> int:
    """~4 sqrt(N) cells, but never fewer than 39 training vectors per cell."""
    return max(1, min(int(4 * math.sqrt(n)), n // 39))


def _pq_m(dim: int) -> int:
    """PQ sub-quantizers: d/4 bytes per vector (1/16 of Flat's 4d), a divisor of d."""
    m = max(1, dim // 4)
    while dim % m:
        m -= 1
    return m


def factory_for(index_type: str, dim: int, n: int, *, hnsw_m: int = 32, ef_search: int = 128,
                nlist: int | None = None, nprobe: int | None = None, pq_m: int | None = None,
                pq_nbits: int = 8, factory: str | None = None,
                search: str | None = None) -> tuple[str, dict]:
    """``(factory string, manifest fields)`` for ``index_type`` over ``n`` vectors of ``dim``.

    The manifest fields hold the build parameters and ``search``, the query-time settings
    (``{"nprobe": 64}``) that ``tune`` applies on load.
    """
    if index_type not in DENSE_KINDS:
        raise ValueError(f"unknown dense index type {index_type!r}; "
                         f"known: {', '.join(DENSE_KINDS)}")
    if index_type == "flat":
        return "Flat", {"search": {}}
    if index_type in ("hnsw", "hnsw-sq8"):
        storage = "Flat" if index_type == "hnsw" else "SQ8"
        return f"HNSW{hnsw_m},{storage}", {"hnsw_m": hnsw_m, "ef_search": ef_search,
                                           "search": {"efSearch": ef_search}}
    if index_type == "factory":
        if not factory:
            raise ValueError("dense-factory needs factory=, a FAISS index factory string such as "
                             "'IVF4096,PQ48' "
                             "(https://github.com/facebookresearch/faiss/wiki/The-index-factory)")
        return factory, {"search": parse_settings(search or "")}
    nlist = nlist or default_nlist(n)
    if nlist > n:
        raise ValueError(f"nlist={nlist} is more than the {n} documents; use fewer cells")
    # A quarter of the cells (at least 16) kept recall@10 vs Flat >= 0.9 on our corpora (IVF-Flat).
    nprobe = nprobe or max(min(nlist, 16), nlist // 4)
    fields = {"nlist": nlist, "nprobe": nprobe, "search": {"nprobe": nprobe}}
    if index_type == "ivf":
        return f"IVF{nlist},Flat", fields
    m = pq_m or _pq_m(dim)
    if dim % m:
        raise ValueError(f"pq_m={m} must divide the dimension {dim}")
    return f"OPQ{m}_{dim},IVF{nlist},PQ{m}x{pq_nbits}", {**fields, "pq_m": m, "pq_nbits": pq_nbits}


def parse_settings(text: str) -> dict:
    """``"nprobe=64,efSearch=128"`` -> ``{"nprobe": 64, "efSearch": 128}``."""
    out: dict = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, eq, value = part.partition("=")
        if not eq:
            raise ValueError(f"search setting {part!r} is not KEY=VALUE (e.g. nprobe=64)")
        out[key.strip()] = float(value) if "." in value else int(value)
    return out


def search_settings(manifest: dict) -> dict:
    """The query-time settings a manifest asks for (older manifests: from its fields)."""
    if "search" in manifest:
        return dict(manifest["search"])
    if manifest.get("index_type") == "hnsw":
        return {"efSearch": manifest["ef_search"]}
    if manifest.get("index_type") == "ivf":
        return {"nprobe": manifest["nprobe"]}
    return {}


def train_rows(index, n: int) -> int:
    """How many vectors to train ``index`` on: 64 per k-means centroid it must learn (FAISS
    warns under 39 and subsamples past 256; k-means costs rows x centroids x d an iteration,
    so this bounds the build on a few cores), at least 10,000, at most N. Zero for an index
    that needs no training."""
    if index.is_trained:
        return 0
    import faiss  # not faiss_module(): that would reset the caller's OpenMP thread count
    centroids = 1
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None:
        centroids = max(centroids, ivf.nlist)
    base = faiss.downcast_index(ivf if ivf is not None else index)
    pq = getattr(base, "pq", None)
    if pq is not None:
        centroids = max(centroids, 1 << pq.nbits)
    return min(n, max(10_000, 64 * centroids))


def write_faiss(vectors: np.ndarray, out_dir: Path, factory: str, *, shards: int = 1,
                ef_construction: int = 200, threads: int | None = None,
                progress=None) -> list[dict]:
    """Build ``factory`` over ``vectors`` (``[N, d]`` float32, may be a memmap) into
    ``out_dir`` and return the files written, ``[{"file", "ntotal", "bytes"}]``: one
    ``index.faiss``, or ``shards`` files each holding a contiguous range of rows."""
    faiss = faiss_module(threads)
    n, dim = vectors.shape
    try:
        index = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as e:
        raise ValueError(f"FAISS cannot make an index from factory string {factory!r}: "
                         f"{str(e).splitlines()[-1]}") from None
    hnsw = getattr(faiss.downcast_index(index), "hnsw", None)
    if hnsw is not None:
        hnsw.efConstruction = ef_construction
    t = train_rows(index, n)
    if t:
        # sorted: memmap locality
        rows = np.sort(np.random.default_rng(0).choice(n, t, replace=False))
        index.train(np.ascontiguousarray(vectors[rows], dtype=np.float32))
    if not 1 <= shards <= n:
        raise ValueError(f"shards must be between 1 and the {n} vectors, got {shards}")
    bounds = np.linspace(0, n, shards + 1).astype(int)
    files = []
    for s in range(shards):
        part = faiss.clone_index(index) if shards > 1 else index
        for a in range(bounds[s], bounds[s + 1], ADD_CHUNK):
            b = min(a + ADD_CHUNK, bounds[s + 1])
            part.add(np.ascontiguousarray(vectors[a:b], dtype=np.float32))
            if progress is not None:
                progress.advance(b - a)
        name = "index.faiss" if shards == 1 else f"index.{s:03d}.faiss"
        faiss.write_index(part, str(out_dir / name))
        files.append({"file": name, "ntotal": int(part.ntotal),
                      "bytes": (out_dir / name).stat().st_size})
        del part
    return files


def read_faiss(index_dir: Path, manifest: dict, *, mmap: bool = False, threads: int | None = None):
    """The index of ``index_dir`` (an ``IndexShards`` when it has several files), checked
    against the manifest before and after FAISS reads it. ``mmap``: leave the codes in the
    file (``IO_FLAG_MMAP_IFC``) so memory holds only what searches touch."""
    faiss = faiss_module(threads)
    entries = manifest.get("faiss_files") or [{"file": "index.faiss"}]
    parts = []
    for e in entries:
        path = index_dir / e["file"]
        if not path.is_file():
            raise RetrieverError(f"{path} is missing: the index folder is incomplete; rebuild it")
        size = path.stat().st_size
        if "bytes" in e and size != e["bytes"]:
            raise RetrieverError(f"{path} has {size:,} bytes but was written with {e['bytes']:,}: "
                                 "it is truncated or was replaced since the build; rebuild the "
                                 "index")
        try:
            part = faiss.read_index(str(path), faiss.IO_FLAG_MMAP_IFC if mmap else 0)
        except RuntimeError as err:
            raise RetrieverError(f"cannot read {path}: {str(err).splitlines()[-1]}; rebuild the "
                                 "index") from None
        if part.d != manifest["dim"] or ("ntotal" in e and part.ntotal != e["ntotal"]):
            raise RetrieverError(f"{path} holds {part.ntotal} vectors of dim {part.d}, but the "
                                 f"manifest says {e.get('ntotal', '?')} of dim {manifest['dim']}; "
                                 "rebuild the index")
        parts.append(part)
    if len(parts) == 1:
        index = parts[0]
    else:
        index = faiss.IndexShards(manifest["dim"], True, True)  # threaded, successive ids
        for p in parts:
            index.add_shard(p)  # FAISS's wrapper keeps each shard alive (referenced_objects)
    if index.ntotal != manifest["num_docs"]:
        raise RetrieverError(f"{index_dir}: the FAISS files hold {index.ntotal} vectors, but the "
                             f"manifest says {manifest['num_docs']} documents; rebuild the index")
    return index


def tune(index, settings: dict) -> None:
    """Apply query-time settings (``{"nprobe": 64}``) through FAISS's ``ParameterSpace``,
    which reaches through pre-transforms (OPQ) and shards. An index without such a setting
    (``nprobe`` on HNSW) is a ``ValueError`` saying so."""
    if not settings:
        return
    import faiss  # not faiss_module(): that would reset the caller's OpenMP thread count
    space = faiss.ParameterSpace()
    for key, value in settings.items():
        try:
            space.set_index_parameter(index, key, float(value))
        except RuntimeError:
            raise ValueError(f"search setting {key}={value} does not apply to this index "
                             f"({type(faiss.downcast_index(index)).__name__}); HNSW takes "
                             "efSearch, IVF takes nprobe") from None


def rerank_exact(queries: np.ndarray, ids: np.ndarray, vectors: np.ndarray,
                 k: int) -> tuple[np.ndarray, np.ndarray]:
    """Re-score approximate candidates exactly and keep the best ``k`` per query.

    queries ``[q, d]``, ids ``[q, c]`` (``-1`` = no candidate), vectors ``[N, d]`` (a memmap:
    only the candidates' rows are read). Returns ``(scores [q, k], ids [q, k])``, ``-1`` ids
    (score ``-inf``) where fewer than ``k`` candidates exist.
    """
    q, c = ids.shape
    out_s = np.full((q, k), -np.inf, dtype=np.float32)
    out_i = np.full((q, k), -1, dtype=np.int64)
    for r in range(q):
        cand = np.unique(ids[r][ids[r] >= 0])  # sorted rows: sequential reads of the memmap
        if not len(cand):
            continue
        s = np.asarray(vectors[cand], dtype=np.float32) @ queries[r]  # [c']
        top = np.argsort(-s, kind="stable")[:k]
        out_s[r, :len(top)], out_i[r, :len(top)] = s[top], cand[top]
    return out_s, out_i
