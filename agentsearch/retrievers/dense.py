"""Dense retrieval: FAISS over a sentence encoder. Kinds ``dense-flat``, ``dense-hnsw``,
``dense-ivf``.

- ``dense-flat``: exact inner-product search (``IndexFlatIP``). The reference.
- ``dense-hnsw``: graph search (``IndexHNSWFlat``, Malkov & Yashunin 2018); ``hnsw_m``
  links per node, ``ef_search`` candidates per query (more = better recall, slower).
- ``dense-ivf``: inverted lists (``IndexIVFFlat``): ``nlist`` k-means cells, ``nprobe``
  cells visited per query. Defaults: ~4 sqrt(N) cells with >= 39 training points each
  (FAISS's minimum), a quarter of them probed.

Vectors are unit-norm, so inner product is cosine similarity. The manifest records the
encoder (name, dim, pooling, prefixes, max length), the FAISS index type and parameters, and
the corpus hash; loading with a different encoder is an error, not silently bad results.

``device`` (build and load): where the encoder runs, ``cpu``, ``cuda[:N]`` or ``auto``. On
load, ``cuda`` also moves a Flat or IVF index to that GPU when this FAISS build has GPU
support (``faiss.get_num_gpus() > 0``, e.g. faiss-gpu); otherwise FAISS searches on the CPU
and a warning says why (HNSW always searches on the CPU: FAISS has no GPU HNSW).
"""

from __future__ import annotations

import math
import os
import threading
import warnings
from pathlib import Path

import numpy as np

from agentsearch.retrievers.base import Hit, RetrieverError, SyncRetrieverMixin, register_retriever
from agentsearch.retrievers.encoder import Encoder, resolve_device, resolve_encoder
from agentsearch.retrievers.store import DocStore

__all__ = ["DenseRetriever"]


def _faiss(threads: int | None):
    try:
        import faiss
    except ImportError as e:
        raise ImportError("dense indexes need FAISS: pip install faiss-cpu") from e
    faiss.omp_set_num_threads(threads or os.cpu_count() or 1)  # process-global OpenMP pool
    return faiss


def default_nlist(n: int) -> int:
    """~4 sqrt(N) cells, but never fewer than 39 training vectors per cell."""
    return max(1, min(int(4 * math.sqrt(n)), n // 39))


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
        warnings.warn(f"device={device}: FAISS cannot move a {type(index).__name__} to the GPU ({e}); "
                      "it searches on the CPU", RuntimeWarning, stacklevel=3)
        return index, "cpu"
    moved.gpu_resources = res  # the resources must outlive the index
    return moved, f"cuda:{gpu}"


def _stored_vectors(src: Path, docs: DocStore, encoder: str | None) -> tuple[np.ndarray, dict]:
    from agentsearch.retrievers.store import read_manifest

    m = read_manifest(src)
    if m["kind"] != "dense-flat":
        raise RetrieverError(f"vectors_from={src} is a {m['kind']} index; it must be dense-flat "
                             "(the only kind that stores exact vectors)")
    if m["corpus_sha256"] != docs.sha256():
        raise RetrieverError(f"vectors_from={src} was built from a different corpus; encode again")
    if encoder is not None and resolve_encoder(encoder)[0] != m["encoder"]:
        raise RetrieverError(f"vectors_from={src} holds {m['encoder']!r} vectors, not {encoder!r}")
    index = _faiss(None).read_index(str(src / "index.faiss"))
    keys = ("encoder", "dim", "pooling", "query_prefix", "passage_prefix", "max_length")
    return index.reconstruct_n(0, index.ntotal), {k: m[k] for k in keys}


class DenseRetriever(SyncRetrieverMixin):
    """Search a dense index folder; load it with ``load_retriever(folder)``.

    Empty (whitespace-only) queries return no hits; every other query gets ``min(k, N)``.
    """

    index_type = "flat"

    def __init__(self, index, encoder: Encoder, docs: DocStore, *, batch_size: int = 16,
                 faiss_device: str = "cpu"):
        self.index, self.encoder, self.docs, self.batch_size = index, encoder, docs, batch_size
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
              vectors_from: str | Path | None = None, device: str = "cpu", **_) -> dict:
        """Encode every document, build the FAISS index, write ``index.faiss``.

        ``vectors_from``: a ``dense-flat`` folder of the same corpus whose stored vectors
        (and encoder settings) to reuse instead of encoding again, e.g. to try HNSW or IVF.
        """
        faiss = _faiss(threads)
        if vectors_from is not None:
            vecs, cfg = _stored_vectors(Path(vectors_from), docs, encoder)
            if progress:
                progress.advance(len(docs))
        else:
            enc = Encoder(encoder, pooling=pooling, query_prefix=query_prefix, device=resolve_device(device),
                          passage_prefix=passage_prefix, max_length=max_length, threads=threads)
            vecs = enc.encode(docs.contents, kind="passage", batch_size=batch_size, progress=progress)
            cfg = enc.config()
        dim = cfg["dim"]
        params: dict = {}
        if cls.index_type == "flat":
            index = faiss.IndexFlatIP(dim)
        elif cls.index_type == "hnsw":
            index = faiss.IndexHNSWFlat(dim, hnsw_m, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = ef_construction
            params = {"hnsw_m": hnsw_m, "ef_construction": ef_construction, "ef_search": ef_search}
        else:
            nlist = nlist or default_nlist(len(docs))
            if nlist > len(docs):
                raise ValueError(f"nlist={nlist} is more than the {len(docs)} documents; use fewer cells")
            quantizer = faiss.IndexFlatIP(dim)  # kept referenced until the index is written
            index = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
            rng = np.random.default_rng(0)
            sample = vecs if len(vecs) <= 256 * nlist else vecs[rng.choice(len(vecs), 256 * nlist, replace=False)]
            index.train(sample)
            # A quarter of the cells (at least 16) kept recall@10 vs Flat >= 0.9 on our corpora.
            params = {"nlist": nlist, "nprobe": nprobe or max(min(nlist, 16), nlist // 4)}
        index.add(vecs)
        faiss.write_index(index, str(out_dir / "index.faiss"))
        return {**cfg, "index_type": cls.index_type, "metric": "inner_product", **params}

    # -- loading ----------------------------------------------------------------
    @classmethod
    def load(cls, index_dir: Path, manifest: dict, *, encoder: str | None = None,
             threads: int | None = None, ef_search: int | None = None, nprobe: int | None = None,
             batch_size: int | None = None, device: str = "cpu", **_):
        """Open the folder. ``encoder`` may name the encoder explicitly; it must be the one
        the index was built with. ``ef_search`` / ``nprobe`` override the stored values.
        ``batch_size``: queries per encoder forward (default 16 on CPU, where encoding is
        compute-bound, 256 on a GPU). ``device``: where the encoder (and, if FAISS can, the
        index) runs: ``cpu``, ``cuda[:N]``, ``auto``."""
        device = resolve_device(device)
        faiss = _faiss(threads)
        built_with = manifest["encoder"]
        if encoder is not None and resolve_encoder(encoder)[0] != built_with:
            raise RetrieverError(
                f"index {index_dir} was built with encoder {built_with!r}, not {encoder!r}: "
                "its vectors are meaningless to another encoder. Load it without encoder= "
                f"(or with encoder={built_with!r}), or rebuild it: agentsearch index build "
                f"--kind {manifest['kind']} --encoder {encoder} ...")
        try:
            index = faiss.read_index(str(index_dir / "index.faiss"))
        except RuntimeError as e:
            raise RetrieverError(f"cannot read {index_dir / 'index.faiss'}: {e}; rebuild the index") from e
        if index.d != manifest["dim"] or index.ntotal != manifest["num_docs"]:
            raise RetrieverError(
                f"{index_dir}: index.faiss holds {index.ntotal} vectors of dim {index.d}, but the "
                f"manifest says {manifest['num_docs']} documents of dim {manifest['dim']}; rebuild it")
        enc = Encoder(built_with, pooling=manifest["pooling"], query_prefix=manifest["query_prefix"],
                      passage_prefix=manifest["passage_prefix"], max_length=manifest["max_length"],
                      threads=threads, device=device)
        if enc.dim != index.d:
            raise RetrieverError(
                f"encoder {built_with!r} makes {enc.dim}-d vectors but {index_dir} holds {index.d}-d "
                "ones: the encoder files changed since the index was built; rebuild the index")
        if manifest["index_type"] == "hnsw":
            index.hnsw.efSearch = ef_search or manifest["ef_search"]
        elif manifest["index_type"] == "ivf":
            faiss.extract_index_ivf(index).nprobe = nprobe or manifest["nprobe"]
        index, where = _to_device(faiss, index, device)  # after the search parameters: they travel along
        return cls(index, enc, DocStore.load(index_dir), faiss_device=where,
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
        vecs = self.encoder.encode([queries[i] for i in todo], kind="query", batch_size=self.batch_size)
        with self._lock:
            scores, ids = self.index.search(vecs, min(k, self.num_docs))
        for row, i in enumerate(todo):
            out[i] = [self.docs.hit(int(d), s) for d, s in zip(ids[row], scores[row]) if d >= 0]
        return out


@register_retriever("dense-flat")
class DenseFlatRetriever(DenseRetriever):
    index_type = "flat"


@register_retriever("dense-hnsw")
class DenseHNSWRetriever(DenseRetriever):
    index_type = "hnsw"


@register_retriever("dense-ivf")
class DenseIVFRetriever(DenseRetriever):
    index_type = "ivf"
