"""Dense indexes at scale: memory, build time, recall@10 and latency per kind and size.

Vectors: the 10k Wikipedia lead summaries (``wiki_corpus``) encoded with all-MiniLM-L6-v2
(384-d; *real*), then *synthetic clustered* vectors to reach each size: a real passage
vector plus Gaussian noise (``--noise`` per coordinate; 0.03 puts a synthetic vector at
cosine ~0.86 from its real centre), unit-normed, ~N/10k per real passage. Queries: the
first sentence of real articles (24 words), encoded by the same encoder, so every query's
neighbourhood holds real and synthetic vectors. Recall@10 is against exact search (Flat)
on the same vectors and queries.

One JSON line per (kind, size): ``build_s`` (FAISS training and adding; ``folder_build_s`` adds
reading the corpus, loading the encoder, writing the documents), ``index_bytes`` (the FAISS
files: the memory a served index holds when its codes are resident), ``disk_bytes`` (plus
``vectors.npy`` for re-ranking), ``flat_bytes`` and the ratio, ``build_s``, ``recall10``,
``search_ms`` (one query at a time, search only, p50 and p99) and ``batch_qps`` (256 at a time).
``--serve`` adds one line for the largest size: q/s and p50/p99 at ``--episodes`` concurrent
episodes through ``agentsearch serve`` (queries encoded by the server). Results are kept in
``$AGENTSEARCH_CACHE/bench/scale/results.jsonl`` (a rerun skips what is there) and ``--curves``
writes the points ``agentsearch index plan`` fits.

    OMP_NUM_THREADS=2 python scripts/bench_index_scale.py --sizes 100000,300000,1000000
    python scripts/bench_index_scale.py --sizes 1000000 --kinds dense-ivfpq --serve
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import sys
import time
from pathlib import Path

import numpy as np

from agentsearch.core.cache import cache_dir
from agentsearch.core.provenance import ALLOW_DIRTY_HELP, require_clean
from agentsearch.data import read_jsonl, wiki_corpus
from agentsearch.retrievers import RemoteRetriever, build_index, load_retriever
from agentsearch.retrievers.process import ServerProcess
from agentsearch.retrievers.store import MANIFEST

# settings chosen for recall@10 >= 0.95 at <= 1/8 of Flat's memory (docs/retrieval.md#planning)
KIND_ARGS = {
    "dense-flat": {},
    # nlist: --nlist (k-means on 2 cores: ~sqrt(N) cells, not 4 sqrt(N))
    "dense-ivf": {"nprobe": 32},
    "dense-ivfpq": {"nprobe": 32, "refine": 8},
    "dense-hnsw-sq8": {"hnsw_m": 32, "ef_search": 128},
}


def real_slice(root: Path, threads: int) -> tuple[np.ndarray, list[dict], list[str]]:
    """(real passage vectors [r, d], their corpus rows, query texts), encoded once and cached."""
    from agentsearch.retrievers.encoder import Encoder

    rows = (list(read_jsonl(root / "wiki.jsonl")) if (root / "wiki.jsonl").exists()
            else wiki_corpus(root / "wiki.jsonl"))
    queries = [" ".join(re.split(r"(?<=[.!?])\s", r["contents"].partition("\n")[2],
                                 maxsplit=1)[0].split()[:24])
               for r in rows]
    if not (root / "real.npy").exists():
        enc = Encoder(None, threads=threads)
        np.save(root / "real.npy", enc.encode([r["contents"] for r in rows], kind="passage",
                                              batch_size=64))
        np.save(root / "queries.npy", enc.encode(queries, kind="query", batch_size=64))
    return np.load(root / "real.npy"), rows, queries


def make_world(root: Path, n: int, real: np.ndarray, rows: list[dict], noise: float) -> Path:
    """``root/n/{corpus.jsonl, vectors.npy}``: the real rows first, then synthetic ones."""
    out = root / str(n)
    if (out / "vectors.npy").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    r, d = real.shape
    vecs = np.lib.format.open_memmap(out / "vectors.tmp.npy", mode="w+", dtype=np.float32,
                                     shape=(n, d))
    rng = np.random.default_rng(n)
    vecs[:min(r, n)] = real[:n]
    for a in range(r, n, 100_000):
        b = min(a + 100_000, n)
        v = (real[rng.integers(0, r, b - a)]
             + rng.standard_normal((b - a, d), dtype=np.float32) * noise)
        vecs[a:b] = v / np.linalg.norm(v, axis=1, keepdims=True)
    vecs.flush()
    del vecs
    with open(out / "corpus.jsonl", "w", encoding="utf-8") as f:
        for i in range(n):
            row = rows[i] if i < r else {"id": f"syn-{i}",
                                         "contents": f'"Synthetic {i}"\nsynthetic passage {i}'}
            f.write(json.dumps({"id": row["id"], "contents": row["contents"]}) + "\n")
    os.replace(out / "vectors.tmp.npy", out / "vectors.npy")
    return out


def exact_top10(world: Path, q: np.ndarray) -> np.ndarray:
    path = world / "exact10.npy"
    if not path.exists():
        v = np.load(world / "vectors.npy", mmap_mode="r")
        best = np.full((len(q), 10), -np.inf, np.float32), np.zeros((len(q), 10), np.int64)
        for a in range(0, len(v), 200_000):
            s = q @ np.asarray(v[a:a + 200_000]).T  # [q, chunk]
            ids = np.concatenate([best[1], np.argsort(-s, axis=1)[:, :10] + a], axis=1)
            sc = np.concatenate([best[0], np.take_along_axis(s, ids[:, 10:] - a, axis=1)], axis=1)
            o = np.argsort(-sc, axis=1)[:, :10]
            best = np.take_along_axis(sc, o, axis=1), np.take_along_axis(ids, o, axis=1)
        np.save(path, best[1])
    return np.load(path)


def measure(world: Path, kind: str, q: np.ndarray, threads: int, nlist: int) -> dict:
    n = len(np.load(world / "vectors.npy", mmap_mode="r"))
    idx = world / kind
    if not (idx / MANIFEST).exists():
        from agentsearch.retrievers.encoder import DEFAULT_ENCODER

        build_index(world / "corpus.jsonl", kind, idx, vectors_from=world / "vectors.npy",
                    encoder=DEFAULT_ENCODER, threads=threads, progress=False, **KIND_ARGS[kind],
                    **({"nlist": min(nlist, n // 39)} if "ivf" in kind else {}))
    m = json.loads((idx / MANIFEST).read_text())
    r = load_retriever(idx, threads=threads)
    truth = exact_top10(world, q)
    _, got = r.search_vectors(q, 10)
    recall = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(truth, got)]))
    lat = []
    for i in range(min(300, len(q))):
        t = time.perf_counter()
        r.search_vectors(q[i:i + 1], 10)
        lat.append((time.perf_counter() - t) * 1e3)
    t = time.perf_counter()
    for a in range(0, len(q), 256):
        r.search_vectors(q[a:a + 256], 10)
    qps = len(q) / (time.perf_counter() - t)
    files = sum(f["bytes"] for f in m["faiss_files"])
    disk = files + ((idx / "vectors.npy").stat().st_size if (idx / "vectors.npy").exists() else 0)
    flat = 4 * m["dim"] * n
    return {"bench": "index_scale", "kind": kind, "n": n, "dim": m["dim"], "factory": m["factory"],
            "search": m["search"], "refine": m["refine"], "index_bytes": files, "disk_bytes": disk,
            "flat_bytes": flat, "memory_vs_flat": round(files / flat, 4),
            "build_s": m["faiss_build_seconds"], "folder_build_s": m["build_seconds"],
            "recall10": round(recall, 4), "search_ms": round(float(np.median(lat)), 3),
            "search_p99_ms": round(float(np.percentile(lat, 99)), 3), "batch_qps": round(qps, 1),
            "threads": threads}


def serve(world: Path, kind: str, queries: list[str], episodes: int, turns: int,
          threads: int) -> dict:
    server = ServerProcess(world / kind, threads=threads).start()
    try:
        async def run():
            async with RemoteRetriever(server.url, window_ms=5) as c:
                lat: list[float] = []

                async def episode(e):
                    for t in range(turns):
                        t0 = time.perf_counter()
                        await c.asearch([queries[(e * turns + t) % len(queries)]], 3)
                        lat.append((time.perf_counter() - t0) * 1e3)

                await c.asearch([queries[0]], 3)
                t0 = time.perf_counter()
                await asyncio.gather(*(episode(e) for e in range(episodes)))
                return episodes * turns / (time.perf_counter() - t0), lat

        qps, lat = asyncio.run(run())
    finally:
        server.kill()
    return {"bench": "index_scale_serve", "kind": kind,
            "n": len(np.load(world / "vectors.npy", mmap_mode="r")),
            "episodes": episodes, "turns": turns, "qps": round(qps, 1),
            "p50_ms": round(float(np.median(lat)), 1),
            "p99_ms": round(float(np.percentile(lat, 99)), 1)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="100000,300000,1000000")
    p.add_argument("--kinds", default=",".join(KIND_ARGS))
    p.add_argument("--noise", type=float, default=0.03)
    p.add_argument("--nlist", type=int, default=1024, help="IVF cells (capped at N/39)")
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--threads", type=int,
                   default=int(os.environ.get("OMP_NUM_THREADS", 0)) or os.cpu_count())
    p.add_argument("--serve", action="store_true",
                   help="also serve the largest size's first kind to --episodes")
    p.add_argument("--episodes", type=int, default=64)
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--root", default=str(cache_dir() / "bench" / "scale"))
    p.add_argument("--curves", default=None, help="write the plan curves (plan_curves.json) here")
    p.add_argument("--allow-dirty", action="store_true", help=ALLOW_DIRTY_HELP)
    a = p.parse_args()
    prov = require_clean("bench_index_scale", a.allow_dirty)
    root = Path(a.root)
    root.mkdir(parents=True, exist_ok=True)
    real, rows, texts = real_slice(root, a.threads)
    q = np.load(root / "queries.npy")[: a.queries]
    done_path = root / "results.jsonl"
    done = {(d["kind"], d["n"]): d for d in read_jsonl(done_path)} if done_path.exists() else {}
    sizes = [int(float(s)) for s in a.sizes.split(",")]
    for n in sizes:
        world = make_world(root, n, real, rows, a.noise)
        for kind in a.kinds.split(","):
            row = done.get((kind, n))
            if row is None:
                row = done[(kind, n)] = {**measure(world, kind, q, a.threads, a.nlist),
                                         "provenance": prov}
                with open(done_path, "a") as f:
                    f.write(json.dumps(row) + "\n")
            print(json.dumps({**row, "provenance": row.get("provenance", prov)}), flush=True)
    if a.serve:
        print(json.dumps({**serve(root / str(max(sizes)), a.kinds.split(",")[0], texts,
                                  a.episodes, a.turns, a.threads), "provenance": prov}),
              flush=True)
    if a.curves:
        machine = f"{platform.machine()} {os.cpu_count()} cores, {a.threads} threads"
        kinds = {}
        for (kind, _n), d in sorted(done.items()):
            settings = {**d["search"], **({"refine": d["refine"]} if d["refine"] else {})}
            k = kinds.setdefault(kind, {"settings": ", ".join(f"{x}={y}"
                                                              for x, y in settings.items()),
                                        "points": []})
            k["points"].append({x: d[x] for x in ("n", "dim", "build_s", "search_ms", "recall10",
                                                  "memory_vs_flat")})
        Path(a.curves).write_text(json.dumps({"machine": machine, "noise": a.noise,
                                              "kinds": kinds}, indent=1) + "\n")
        print(f"# wrote {a.curves}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
