"""Dense retrieval: FAISS over a sentence encoder. Kinds ``dense-flat``, ``dense-hnsw``,
``dense-ivf``, ``dense-ivfpq``, ``dense-hnsw-sq8``, ``dense-factory``.

- ``dense-flat``: exact inner-product search (``IndexFlatIP``). The reference.
- ``dense-hnsw``: graph search (``HNSW{m},Flat``, Malkov & Yashunin 2018); ``hnsw_m``
  links per node, ``ef_search`` candidates per query (more = better recall, slower).
- ``dense-ivf``: inverted lists (``IVF{nlist},Flat``): ``nlist`` k-means cells, ``nprobe``
  cells visited per query. Defaults: ~4 sqrt(N) cells with >= 39 training points each
  (FAISS's minimum), a quarter of them probed.
- ``dense-ivfpq``: OPQ rotation, inverted lists, product-quantized codes (``pq_m`` bytes a
  vector, default d/4: 1/16 of Flat), for corpora whose Flat index does not fit in memory;
  ``refine=R`` re-scores the best ``R*k`` candidates exactly from ``vectors.npy``, kept on
  disk and memory-mapped (only the candidates' rows are read).
- ``dense-hnsw-sq8``: HNSW over 8-bit scalar-quantized vectors (``HNSW{m},SQ8``: ~1/4 of Flat).
- ``dense-factory``: any FAISS factory string (``factory=``), with ``search="nprobe=64"``.

The FAISS side (factory strings, training on a sample, shards, memory-mapping, query-time
settings) is ``faiss_index``. Vectors are unit-norm, so inner product is cosine similarity.
The manifest records the encoder (name, dim, pooling, prefixes, max length, and the vector it
gives a fixed probe text), the FAISS files and their sizes, and the corpus hash; loading with
another encoder, or with encoder files that changed since the build, is an error, not
silently bad results.

``device`` (build and load): where the encoder runs, ``cpu``, ``cuda[:N]`` or ``auto``. On
load, ``cuda`` also moves a Flat or IVF index to that GPU when this FAISS build has GPU
support (``faiss.get_num_gpus() > 0``, e.g. faiss-gpu); otherwise FAISS searches on the CPU
and a warning says why (HNSW always searches on the CPU: FAISS has no GPU HNSW).
"""

from __future__ import annotations

import shutil
import threading
import time
import warnings
from pathlib import Path

import numpy as np

from agentsearch.retrievers.base import Hit, RetrieverError, SyncRetrieverMixin, register_retriever
from agentsearch.retrievers.encoder import Encoder, resolve_device, resolve_encoder
from agentsearch.retrievers.faiss_index import (
    DENSE_KINDS,
    factory_for,
    faiss_module,
    parse_settings,
    read_faiss,
    rerank_exact,
    search_settings,
    tune,
    write_faiss,
)
from agentsearch.retrievers.store import DocStore, read_manifest

__all__ = ["DenseRetriever", "VECTORS"]

VECTORS = "vectors.npy"
"""The exact passage vectors ``[N, d]`` float32, kept beside compressed indexes that re-rank."""

PROBE = "agentsearch encoder check: who founded the company that makes it?"
"""Encoded at build and at load: a different vector means a different encoder."""


def _to_device(faiss, index, device: str):
    """``(index, where it searches)``: on ``device``'s GPU when FAISS can, else on the CPU
    with a warning that says why."""
    if not device.startswith("cuda"):
        return index, "cpu"
    if getattr(faiss, "get_num_gpus", lambda: 0)() < 1:
        warnings.warn(f"device={device}: this FAISS build has no GPU support (faiss-cpu, or no GPU "
                      "visible to FAISS), so FAISS searches on the CPU; the query encoder runs on "
                      f"{device}. For GPU search install faiss-gpu.", RuntimeWarning, stacklevel=3)
        return index, "cpu"
    gpu = int(device.split(":")[1]) if ":" in device else 0
    try:
        res = faiss.StandardGpuResources()
        moved = faiss.index_cpu_to_gpu(res, gpu, index)
    except (RuntimeError, AttributeError) as e:  # HNSW: FAISS has no GPU version
        warnings.warn(f"device={device}: FAISS cannot move a {type(index).__name__} to the GPU "
                      f"({e}); it searches on the CPU", RuntimeWarning, stacklevel=3)
        return index, "cpu"
    # The resources must outlive the index. FAISS >= 1.12 refuses unknown attributes on its
    # indexes (``moved.gpu_resources = res`` raises AttributeError); its own keep-alive list
    # is allowed.
    faiss.add_to_referenced_objects(moved, res)
    return moved, f"cuda:{gpu}"


_ENCODER_KEYS = ("encoder", "dim", "pooling", "query_prefix", "passage_prefix", "max_length",
                 "encoder_check")


def _stored_vectors(src: Path, docs: DocStore, encoder: str | None) -> tuple[np.ndarray, dict]:
    """The vectors of a dense folder (its ``vectors.npy``, or a dense-flat's index) and its
    encoder settings, for a corpus that must be the one it was built from."""
    m = read_manifest(src)
    has_file = (src / VECTORS).is_file()
    if m["kind"] != "dense-flat" and not has_file:
        raise RetrieverError(f"vectors_from={src} is a {m['kind']} index without {VECTORS}; it "
                             "must be dense-flat or keep its exact vectors (refine)")
    if m["corpus_sha256"] != docs.sha256():
        raise RetrieverError(f"vectors_from={src} was built from a different corpus; encode again")
    if encoder is not None and resolve_encoder(encoder)[0] != m["encoder"]:
        raise RetrieverError(f"vectors_from={src} holds {m['encoder']!r} vectors, not {encoder!r}")
    cfg = {k: m[k] for k in _ENCODER_KEYS if k in m}
    if has_file:
        return np.load(src / VECTORS, mmap_mode="r"), cfg
    index = read_faiss(src, m)
    return index.reconstruct_n(0, index.ntotal), cfg


def _npy_vectors(path: Path, docs: DocStore, enc: Encoder) -> np.ndarray:
    """Precomputed passage vectors (``.npy``, row i = document i) of ``enc``, memory-mapped."""
    vecs = np.load(path, mmap_mode="r")
    if vecs.ndim != 2 or vecs.shape != (len(docs), enc.dim) or vecs.dtype != np.float32:
        raise RetrieverError(f"{path} holds {vecs.dtype} vectors of shape {vecs.shape}; encoder "
                             f"{enc.name!r} over this corpus needs float32 "
                             f"({len(docs)}, {enc.dim})")
    return vecs


def _encode_to_file(enc: Encoder, texts, path: Path, batch_size: int, progress,
                    chunk: int = 16_384):
    """Encode ``texts`` as passages into ``path`` (a ``.npy`` memmap), ``chunk`` at a time, so
    the build holds one chunk of vectors, not all of them."""
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(len(texts), enc.dim))
    for a in range(0, len(texts), chunk):
        out[a:a + chunk] = enc.encode(list(texts[a:a + chunk]), kind="passage",
                                      batch_size=batch_size, progress=progress)
    out.flush()
    return out


def encoder_check(enc: Encoder) -> list[float]:
    return [round(float(x), 5) for x in enc.encode([PROBE], kind="query")[0]]


def _check_encoder(enc: Encoder, manifest: dict, index_dir: Path) -> None:
    """The encoder must give the probe the vector it gave at build (cosine >= 0.99: fp16 on a
    GPU against fp32 on a CPU differs in the third decimal; another encoder, far more)."""
    want = manifest.get("encoder_check")
    if want is None:
        return
    cos = float(np.dot(encoder_check(enc), want))
    if cos < 0.99:
        raise RetrieverError(
            f"encoder {enc.name!r} no longer encodes like the one {index_dir} was built with "
            f"(probe cosine {cos:.3f} < 0.99): its files, pooling or prefixes changed since the "
            "build; searching would return wrong documents. Rebuild the index with this encoder")


class DenseRetriever(SyncRetrieverMixin):
    """Search a dense index folder; load it with ``load_retriever(folder)``.

    Empty (whitespace-only) queries return no hits; every other query gets ``min(k, N)``.
    """

    index_type = "flat"

    def __init__(self, index, encoder: Encoder, docs, *, batch_size: int = 16,
                 faiss_device: str = "cpu", vectors: np.ndarray | None = None, refine: int = 0):
        self.index, self.encoder, self.docs, self.batch_size = index, encoder, docs, batch_size
        self.vectors, self.refine = vectors, refine if vectors is not None else 0
        self.num_docs = len(docs)
        self.kind = f"dense-{self.index_type}"
        self.devices = {"encoder": encoder.device, "faiss": faiss_device}
        self._lock = threading.Lock()

    # -- building ---------------------------------------------------------------
    @classmethod
    def build(cls, docs: DocStore, out_dir: Path, *, progress=None, encoder: str | None = None,
              batch_size: int = 64, threads: int | None = None, pooling: str | None = None,
              query_prefix: str | None = None, passage_prefix: str | None = None,
              max_length: int = 256, hnsw_m: int = 32, ef_construction: int = 200,
              ef_search: int = 128, nlist: int | None = None, nprobe: int | None = None,
              pq_m: int | None = None, pq_nbits: int = 8, factory: str | None = None,
              search: str | None = None, shards: int = 1, refine: int | None = None,
              vectors_from: str | Path | None = None, device: str = "cpu", **_) -> dict:
        """Encode every document (into ``vectors.npy``, a chunk at a time), build the FAISS
        index from the vectors, write its files.

        ``vectors_from``: a dense folder of the same corpus whose stored vectors (and encoder
        settings) to reuse instead of encoding again (e.g. to try HNSW or IVF-PQ), or a
        ``.npy`` file of precomputed passage vectors of ``encoder`` (row i = document i).
        ``refine``: keep ``vectors.npy`` and re-score ``refine * k`` candidates exactly
        (default 4 for dense-ivfpq, else 0). ``shards``: split the index into that many files.
        """
        faiss_module(threads)
        vec_file = out_dir / VECTORS
        if vectors_from is not None and Path(vectors_from).is_dir():
            vecs, cfg = _stored_vectors(Path(vectors_from), docs, encoder)
            if progress:
                progress.advance(len(docs))
        else:
            enc = Encoder(encoder, pooling=pooling, query_prefix=query_prefix,
                          device=resolve_device(device), passage_prefix=passage_prefix,
                          max_length=max_length, threads=threads)
            if vectors_from is not None:
                vecs = _npy_vectors(Path(vectors_from), docs, enc)
                if progress:
                    progress.advance(len(docs))
            else:
                vecs = _encode_to_file(enc, docs.contents, vec_file, batch_size, progress)
            cfg = {**enc.config(), "encoder_check": encoder_check(enc)}
        factory, params = factory_for(cls.index_type, cfg["dim"], len(docs), hnsw_m=hnsw_m,
                                      ef_search=ef_search, nlist=nlist, nprobe=nprobe, pq_m=pq_m,
                                      pq_nbits=pq_nbits, factory=factory, search=search)
        t0 = time.perf_counter()
        files = write_faiss(vecs, out_dir, factory, shards=shards, ef_construction=ef_construction,
                            threads=threads)
        faiss_s = round(time.perf_counter() - t0, 2)
        refine = (4 if cls.index_type == "ivfpq" else 0) if refine is None else refine
        if refine and not vec_file.exists():  # vectors from elsewhere: keep a copy to re-rank from
            src = (Path(vectors_from) / VECTORS if Path(vectors_from).is_dir()
                   else Path(vectors_from))
            if src.is_file():
                shutil.copyfile(src, vec_file)  # a .npy already checked: no trip through memory
            else:
                np.save(vec_file, vecs)  # a dense-flat's reconstructed vectors, in memory already
        del vecs  # closes the memmap before its file may go
        if not refine:
            vec_file.unlink(missing_ok=True)
        return {**cfg, "index_type": cls.index_type, "metric": "inner_product", "factory": factory,
                **params, "faiss_files": files, "faiss_build_seconds": faiss_s, "refine": refine}

    # -- loading ----------------------------------------------------------------
    @classmethod
    def load(cls, index_dir: Path, manifest: dict, *, encoder: str | None = None,
             threads: int | None = None, ef_search: int | None = None, nprobe: int | None = None,
             search: str | dict | None = None, refine: int | None = None, mmap: bool = True,
             batch_size: int | None = None, device: str = "cpu", encoder_url: str | None = None,
             **_):
        """Open the folder. ``encoder`` may name the encoder explicitly; it must be the one
        the index was built with. ``ef_search`` / ``nprobe`` / ``search`` (``"nprobe=64"``)
        override the stored query-time settings; ``refine`` the re-ranking depth (0: off).
        ``mmap``: leave the FAISS codes in their files, paged in as searched.
        ``batch_size``: queries per encoder forward (default 16 on CPU, where encoding is
        compute-bound, 256 on a GPU). ``device``: where the encoder (and, if FAISS can, the
        index) runs: ``cpu``, ``cuda[:N]``, ``auto``. ``encoder_url``: encode queries in an
        encoder service (``agentsearch serve-encoder``) instead of loading the model here; it
        must report the index's encoder config, and pass the probe check."""
        device = resolve_device(device)
        faiss = faiss_module(threads)
        built_with = manifest["encoder"]
        if encoder is not None and resolve_encoder(encoder)[0] != built_with:
            raise RetrieverError(
                f"index {index_dir} was built with encoder {built_with!r}, not {encoder!r}: "
                "its vectors are meaningless to another encoder. Load it without encoder= "
                f"(or with encoder={built_with!r}), or rebuild it: agentsearch index build "
                f"--kind {manifest['kind']} --encoder {encoder} ...")
        docs = DocStore.load(index_dir, manifest)
        index = read_faiss(index_dir, manifest, mmap=mmap and not device.startswith("cuda"),
                           threads=threads)
        if encoder_url:
            from agentsearch.retrievers.encoder_service import RemoteEncoder, check_matches

            enc = RemoteEncoder(encoder_url)
            check_matches(enc, manifest, index_dir)
        else:
            enc = Encoder(built_with, pooling=manifest["pooling"],
                          query_prefix=manifest["query_prefix"],
                          passage_prefix=manifest["passage_prefix"],
                          max_length=manifest["max_length"], threads=threads, device=device)
        if enc.dim != index.d:
            raise RetrieverError(
                f"encoder {built_with!r} makes {enc.dim}-d vectors but {index_dir} holds "
                f"{index.d}-d ones: the encoder files changed since the index was built; "
                "rebuild the index")
        _check_encoder(enc, manifest, index_dir)
        settings = search_settings(manifest)
        settings.update({k: v for k, v in (("efSearch", ef_search), ("nprobe", nprobe))
                         if v is not None})
        settings.update(parse_settings(search) if isinstance(search, str) else (search or {}))
        try:
            tune(index, settings)
        except ValueError as e:
            raise RetrieverError(f"{index_dir}: {e}") from None
        # after the search parameters: they travel along
        index, where = _to_device(faiss, index, device)
        refine = manifest.get("refine", 0) if refine is None else refine
        vectors = None
        if refine:
            if not (index_dir / VECTORS).is_file():
                raise RetrieverError(f"refine={refine} needs {index_dir / VECTORS} (exact "
                                     "vectors); this index was built without them: pass refine=0 "
                                     "or rebuild with refine")
            vectors = np.load(index_dir / VECTORS, mmap_mode="r")
            if vectors.shape != (manifest["num_docs"], manifest["dim"]):
                raise RetrieverError(f"{index_dir / VECTORS} has shape {vectors.shape}, not "
                                     f"({manifest['num_docs']}, {manifest['dim']}); rebuild the "
                                     "index")
        return cls(index, enc, docs, faiss_device=where, vectors=vectors, refine=refine,
                   batch_size=batch_size or (16 if device == "cpu" else 256))

    # -- search -----------------------------------------------------------------
    def search(self, queries: list[str], k: int = 3) -> list[list[Hit]]:
        """One list of ``min(k, num_docs)`` hits per query, best first."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        todo = [i for i, q in enumerate(queries) if q.strip()]
        out: list[list[Hit]] = [[] for _ in queries]
        if not todo:
            return out
        vecs = self.encoder.encode([queries[i] for i in todo], kind="query",
                                   batch_size=self.batch_size)
        scores, ids = self.search_vectors(vecs, k)
        for row, i in enumerate(todo):
            out[i] = [self.docs.hit(int(d), s) for d, s in zip(ids[row], scores[row]) if d >= 0]
        return out

    def search_vectors(self, vecs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """FAISS search (and exact re-ranking) of query vectors ``[q, d]``: ``(scores, ids)``,
        each ``[q, min(k, N)]``, ids ``-1`` where there are fewer hits."""
        k = min(k, self.num_docs)
        with self._lock:
            scores, ids = self.index.search(vecs, min(k * max(1, self.refine), self.num_docs))
        if self.refine:
            scores, ids = rerank_exact(vecs, ids, self.vectors, k)  # [q, k] each
        return scores, ids


# One registered class a kind (``dense-flat`` ... ``dense-factory``); they differ only
# in index_type.
_NAMES = {"flat": "Flat", "hnsw": "HNSW", "ivf": "IVF", "ivfpq": "IVFPQ", "hnsw-sq8": "HNSWSQ8",
          "factory": "Factory"}
for _type in DENSE_KINDS:
    _name = f"Dense{_NAMES[_type]}Retriever"
    globals()[_name] = register_retriever(f"dense-{_type}")(
        type(_name, (DenseRetriever,), {"index_type": _type}))
