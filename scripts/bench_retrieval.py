"""Benchmark retrieval: batching, backends and ANN indexes, side by side on one corpus.

Prints one JSON line per comparison (all on the same index folders, built and cached
under ``$AGENTSEARCH_CACHE/bench/<corpus>`` on first use):

- ``a_client_batching``: 64 concurrent episodes, each making ``--turns`` search calls in a
  row, against ``agentsearch serve`` in a subprocess: the micro-batching ``RemoteRetriever``
  vs one HTTP request per tool call (same client, ``micro_batch=False``). Target >= 3x q/s.
  Run for the bm25s index and the dense-flat index.
- ``b_pyserini_batch``: Pyserini ``batch_search`` (batches of ``--batch``, ``--threads``
  Java threads) vs a loop of one ``LuceneSearcher.search`` per query, as Search-R1's BM25
  server does. Target >= 3x; the gain is Java-side parallelism, so it needs free cores.
- ``c_bm25s_vs_pyserini``: q/s of bm25s (numba, the default when installed, and numpy
  backends) and Pyserini, batched, and how often their top-1 documents agree (plus
  recall@3 on single-hop world questions). ``first_call_s`` shows numba's compile cost
  (~0.2 s once its on-disk cache is warm, 5-7 s before).
- ``d_dense_ann``: FAISS Flat vs HNSW vs IVF on the same MiniLM vectors: search-only q/s
  (query vectors encoded once) and recall@10 against Flat; query encoding q/s on its own.
- ``e_servers`` and ``f_lone_query`` (``bench_servers.py``): ``agentsearch serve`` against
  Search-R1's own server (``--search-r1 CHECKOUT``) at ``--clients`` concurrent single-query
  clients, dense and BM25, and a lone query's latency; then one dense query stage by stage.

Corpora: ``--corpus world`` (the synthetic world, seed 0; queries are its train questions)
or ``--corpus wiki`` (the 10k Wikipedia lead summaries from ``wiki_corpus``; queries are the
first sentence of each article, cut to 24 words).

    OMP_NUM_THREADS=1 python scripts/bench_retrieval.py --corpus world
    OMP_NUM_THREADS=1 python scripts/bench_retrieval.py --corpus wiki --only a,d
    python scripts/bench_retrieval.py --only e,f --search-r1 ~/Search-R1 --clients 64 --seconds 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import time
from pathlib import Path

import bench_servers  # this folder
import numpy as np
from bench_servers import index

from agentsearch.core.cache import cache_dir
from agentsearch.core.provenance import ALLOW_DIRTY_HELP, require_clean
from agentsearch.data import read_jsonl, wiki_corpus, world_dir
from agentsearch.retrievers import RemoteRetriever, load_retriever
from agentsearch.retrievers.process import ServerProcess

ROOT = Path(__file__).resolve().parent.parent


def corpus_and_queries(name: str, seed: int) -> tuple[Path, list[str], list[dict]]:
    """(corpus.jsonl, benchmark queries, single-hop questions with gold ids or [])."""
    if name == "world":
        w = world_dir(seed=seed)
        train = [q["question"] for q in read_jsonl(w / "train.jsonl")]
        single = [q for q in read_jsonl(w / "test.jsonl") if q["type"] == "single"]
        return w / "corpus.jsonl", train, single
    path = cache_dir() / "bench" / "wiki" / "corpus.jsonl"
    rows = list(read_jsonl(path)) if path.exists() else wiki_corpus(path)
    queries = []
    for r in rows:
        first = re.split(r"(?<=[.!?])\s", r["contents"].partition("\n")[2], maxsplit=1)[0]
        queries.append(" ".join(first.split()[:24]))
    return path, queries, []


def rate(fn, n: int, repeat: int = 3) -> float:
    """Best-of-``repeat`` queries/s of ``fn()`` that handles ``n`` queries."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return n / best


def batched(search, queries: list[str], batch: int, k: int):
    return [h for s in range(0, len(queries), batch) for h in search(queries[s:s + batch], k)]


PROVENANCE: dict = {}  # this run's stamp (main): every emitted line carries it


def emit(row: dict) -> None:
    row["load_avg_1m"] = round(os.getloadavg()[0], 2)
    print(json.dumps({**row, "provenance": PROVENANCE}), flush=True)


# -- (a) micro-batching client vs one request per call ------------------------------------
def bench_a(name, idx_dir, queries, episodes, turns, threads, k=3):
    server = ServerProcess(idx_dir, threads=threads).start()
    url = server.url
    try:
        async def run(micro: bool) -> tuple[float, int]:
            async with RemoteRetriever(url, micro_batch=micro, window_ms=5) as c:
                async def episode(e):
                    for t in range(turns):
                        await c.asearch([queries[(e * turns + t) % len(queries)]], k)

                await c.asearch([queries[0]], k)  # connect + warm up
                n0 = c.stats["requests"]
                t0 = time.perf_counter()
                await asyncio.gather(*(episode(e) for e in range(episodes)))
                return episodes * turns / (time.perf_counter() - t0), c.stats["requests"] - n0

        res = {True: [], False: []}
        for _ in range(2):  # interleaved, best of two each
            for micro in (False, True):
                res[micro].append(asyncio.run(run(micro)))
        mb, pc = max(res[True]), max(res[False])
        emit({"bench": "a_client_batching", "corpus": name, "index": idx_dir.name,
              "episodes": episodes, "turns": turns, "topk": k,
              "micro_batched_qps": round(mb[0], 1), "micro_batched_requests": mb[1],
              "per_call_qps": round(pc[0], 1), "per_call_requests": pc[1],
              "speedup": round(mb[0] / pc[0], 2)})
    finally:
        server.kill()


# -- (b) and (c) BM25 backends ------------------------------------------------------------
def bench_bc(name, corpus, queries, single, threads, batch, only):
    from agentsearch.retrievers.lucene import LuceneRetriever

    n = min(len(queries), 2048)
    qs, k = queries[:n], 3
    lucene = load_retriever(index(corpus, name, "bm25", threads), threads=threads)
    assert isinstance(lucene, LuceneRetriever)
    for _ in range(6):  # JIT warm-up for both paths: two passes over 512 queries left the Java
        batched(lucene.search_batch, qs, batch, k)  # side cold, and the ratio measured the JIT
        [lucene.search_one(q, k) for q in qs]
    lucene_qps = rate(lambda: batched(lucene.search_batch, qs, batch, k), n)
    if "b" in only:
        loop_qps = rate(lambda: [lucene.search_one(q, k) for q in qs], n)
        emit({"bench": "b_pyserini_batch", "corpus": name, "queries": n, "batch": batch, "topk": k,
              "java_threads": threads, "batch_search_qps": round(lucene_qps, 1),
              "one_at_a_time_qps": round(loop_qps, 1), "speedup": round(lucene_qps / loop_qps, 2)})
    if "c" not in only:
        return
    bm25s_dir = index(corpus, name, "bm25s", threads)
    row = {"bench": "c_bm25s_vs_pyserini", "corpus": name, "queries": n, "batch": batch, "topk": k,
           "pyserini_qps": round(lucene_qps, 1)}
    ref = batched(lucene.search_batch, qs, batch, 1)
    for backend in ("numpy", "numba"):
        r = load_retriever(bm25s_dir, threads=threads, backend=backend)
        t = time.perf_counter()
        r.search(qs[:1], k)  # numba compiles here
        row[f"bm25s_{backend}_first_call_s"] = round(time.perf_counter() - t, 2)
        row[f"bm25s_{backend}_qps"] = round(rate(lambda r=r: batched(r.search, qs, batch, k), n), 1)
    top1 = batched(r.search, qs, batch, 1)
    row["top1_agreement"] = round(np.mean([bool(a and b and a[0].doc_id == b[0].doc_id)
                                           for a, b in zip(ref, top1)]), 4)
    if single:
        for label, ret in (("pyserini", lucene), ("bm25s", r)):
            hits = ret.search([q["question"] for q in single], 3)
            row[f"{label}_recall@3_single"] = round(np.mean(
                [any(h.doc_id in q["gold_doc_ids"] for h in hs) for q, hs in zip(single, hits)]), 4)
    row["speedup_bm25s_numba_over_pyserini"] = round(row["bm25s_numba_qps"] / lucene_qps, 2)
    emit(row)


# -- (d) dense ANN ------------------------------------------------------------------------
def bench_d(name, corpus, queries, single, threads, batch):
    flat_dir = index(corpus, name, "dense-flat", threads, batch_size=32)
    dirs = {"flat": flat_dir,
            "hnsw": index(corpus, name, "dense-hnsw", threads, vectors_from=flat_dir),
            "ivf": index(corpus, name, "dense-ivf", threads, vectors_from=flat_dir)}
    rs = {kind: load_retriever(d, threads=threads) for kind, d in dirs.items()}
    n = min(len(queries), 1024)
    qs = queries[:n]
    enc = rs["flat"].encoder
    t = time.perf_counter()
    vecs = enc.encode(qs, batch_size=batch)
    row = {"bench": "d_dense_ann", "corpus": name, "queries": n, "num_docs": rs["flat"].num_docs,
           "encoder": enc.name, "encode_qps": round(n / (time.perf_counter() - t), 1), "k": 10}
    _, ref = rs["flat"].index.search(vecs, 10)
    for kind, r in rs.items():
        row[f"{kind}_search_qps"] = round(rate(lambda r=r: r.index.search(vecs, 10), n,
                                               repeat=5), 1)
        _, got = r.index.search(vecs, 10)
        row[f"{kind}_recall@10_vs_flat"] = round(np.mean([len(set(a) & set(b)) / 10
                                                          for a, b in zip(ref, got)]), 4)
        if single:
            hits = r.search([q["question"] for q in single], 3)
            row[f"{kind}_recall@3_single"] = round(np.mean(
                [any(h.doc_id in q["gold_doc_ids"] for h in hs) for q, hs in zip(single, hits)]), 4)
    m = rs["hnsw"].manifest, rs["ivf"].manifest
    row.update(hnsw_m=m[0]["hnsw_m"], ef_search=m[0]["ef_search"], nlist=m[1]["nlist"],
               nprobe=m[1]["nprobe"])
    emit(row)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", choices=["world", "wiki"], default="world")
    p.add_argument("--seed", type=int, default=0, help="world seed")
    p.add_argument("--only", default="a,b,c,d",
                   help="comma list of a,b,c,d,e,f (e needs --search-r1)")
    p.add_argument("--episodes", type=int, default=64)
    p.add_argument("--turns", type=int, default=4, help="search calls per episode in (a)")
    p.add_argument("--batch", type=int, default=256, help="queries per batch in (b)-(d)")
    p.add_argument("--threads", type=int,
                   default=int(os.environ.get("OMP_NUM_THREADS", 0)) or os.cpu_count(),
                   help="torch/FAISS/Java threads (default: $OMP_NUM_THREADS, else all cores)")
    p.add_argument("--search-r1", type=Path, help="a Search-R1 checkout, for (e)")
    p.add_argument("--clients", type=int, default=64, help="concurrent single-query clients in (e)")
    p.add_argument("--seconds", type=float, default=20.0, help="measured seconds per server in (e)")
    p.add_argument("--windows", default="0",
                   help="extra --batch-window-ms values to try in (e), comma list")
    p.add_argument("--rounds", type=int, default=2,
                   help="interleaved rounds per server in (e); best reported")
    p.add_argument("--allow-dirty", action="store_true", help=ALLOW_DIRTY_HELP)
    a = p.parse_args()
    PROVENANCE.update(require_clean("bench_retrieval", a.allow_dirty))
    os.environ.setdefault("AGENTSEARCH_JAVA_THREADS", str(a.threads))
    only = set(a.only.split(","))
    corpus, queries, single = corpus_and_queries(a.corpus, a.seed)
    print(f"# corpus {a.corpus}: {corpus}, {len(queries)} queries, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.2f}", file=sys.stderr)
    if "a" in only:
        for kind in ("bm25s", "dense-flat"):
            bench_a(a.corpus, index(corpus, a.corpus, kind, a.threads), queries, a.episodes,
                    a.turns, a.threads)
    if only & {"b", "c"}:
        bench_bc(a.corpus, corpus, queries, single, a.threads, a.batch, only)
    if "d" in only:
        bench_d(a.corpus, corpus, queries, single, a.threads, a.batch)
    if "e" in only:
        if a.search_r1 is None:
            p.error("(e) needs --search-r1 CHECKOUT "
                    "(a clone of github.com/PeterGriffinJin/Search-R1)")
        windows = [float(w) for w in a.windows.split(",") if w.strip()]
        bench_servers.bench_e(corpus, a.corpus, queries, a.search_r1, a.threads, a.clients,
                              a.seconds, windows, emit, a.rounds)
    if "f" in only:
        bench_servers.bench_f(corpus, a.corpus, queries, a.threads, emit)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
