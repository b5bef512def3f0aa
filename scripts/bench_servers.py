"""Server against server: ``agentsearch serve`` beside Search-R1's own retrieval server.

Modes (e) and (f) of ``bench_retrieval.py`` (which imports this file):

- ``e_servers``: for each index (``dense``: FAISS Flat over MiniLM; ``bm25``: our default
  bm25s index, and the same Pyserini index Search-R1's BM25 server reads), one server at a
  time in a subprocess on 127.0.0.1, the same corpus, encoder and FAISS file: ``--clients``
  closed-loop clients, each sending one query per request (what an agent framework that
  searches per episode does) for ``--seconds``, then a lone client sending one request at a
  time (``lone_p50_ms``). Ours runs with the defaults a user gets, and again with each
  ``--batch-window-ms`` in ``--windows`` (0 = coalescing off).
- ``f_lone_query``: where one dense query's time goes, in process, stage by stage (tokenise,
  encoder forward, pooling, FAISS, documents, JSON), beside the lone HTTP round trips of (e).

The clients are raw asyncio streams on kept-alive connections (an httpx pool costs more CPU
than the servers do on two cores); both servers face the same clients. Search-R1's server
runs through ``scripts/search_r1_cpu.py`` (CPU, fp32, access log off; its code unchanged)
from the checkout ``--search-r1`` names; its corpus rows are numbered ``0..N-1`` as its
dense path needs, and our indexes are built from the same file.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

from bench_load import pct  # this folder

from agentsearch.core.cache import cache_dir
from agentsearch.data import read_jsonl, write_jsonl
from agentsearch.retrievers import build_index, load_retriever
from agentsearch.retrievers.process import ServerProcess
from agentsearch.retrievers.store import MANIFEST

HERE = Path(__file__).resolve().parent


def numbered_corpus(corpus: Path, name: str) -> Path:
    """``corpus`` with ids ``"0".."N-1"`` (Search-R1 reads documents by row number)."""
    out = cache_dir() / "bench" / f"{name}-numbered" / "corpus.jsonl"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        write_jsonl([{"id": str(i), "contents": r["contents"]}
                     for i, r in enumerate(read_jsonl(corpus))], out)
    return out


def index(corpus: Path, name: str, kind: str, threads: int, **kw) -> Path:
    """The ``kind`` index of ``corpus`` under ``$AGENTSEARCH_CACHE/bench/<name>``, built on first
    use (bench_retrieval.py's modes use it too)."""
    out = cache_dir() / "bench" / name / kind
    if not (out / MANIFEST).exists():
        t = time.perf_counter()
        build_index(corpus, kind, out, threads=threads, **kw)
        print(f"# built {kind} for {name} in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    return out


async def _post(reader, writer, body: bytes) -> bytes:
    writer.write(b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    await writer.drain()
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
    status = int(head.split(" ", 2)[1])
    length = next((int(h.split(":", 1)[1]) for h in head.split("\r\n")
                   if h.lower().startswith("content-length:")), None)
    if length is None:
        raise RuntimeError(f"answer without Content-Length: {head!r}")
    payload = await reader.readexactly(length)
    if status != 200:
        raise RuntimeError(f"HTTP {status}: {payload[:200]!r}")
    return payload


def _body(q: str, k: int) -> bytes:
    return json.dumps({"queries": [q], "topk": k, "return_scores": True}).encode()


async def load(port: int, queries: list[str], clients: int, seconds: float, k: int = 3) -> dict:
    """``clients`` closed-loop single-query clients for ``seconds`` (after 2 s of warm-up)."""
    conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(clients)]
    lat: list[float] = []
    t_start = time.perf_counter()
    t_measure, t_end = t_start + 2.0, t_start + 2.0 + seconds
    done = 0

    async def client(i: int, reader, writer):
        nonlocal done
        j = i * 7919
        while (t := time.perf_counter()) < t_end:
            got = await _post(reader, writer, _body(queries[j % len(queries)], k))
            if b'"result"' not in got[:16]:
                raise RuntimeError(f"not a /retrieve answer: {got[:120]!r}")
            j += 1
            if t >= t_measure:
                lat.append(time.perf_counter() - t)
                done += 1

    await asyncio.gather(*(client(i, r, w) for i, (r, w) in enumerate(conns)))
    elapsed = time.perf_counter() - t_measure
    for _, w in conns:
        w.close()
    return {"qps": round(done / elapsed, 1), "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99),
            "requests": done}


async def lone(port: int, queries: list[str], n: int = 200, k: int = 3) -> dict:
    """One client, one request at a time: the latency a single episode sees on an idle server."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    lat = []
    for i in range(n + 20):
        t = time.perf_counter()
        await _post(reader, writer, _body(queries[i % len(queries)], k))
        if i >= 20:
            lat.append(time.perf_counter() - t)
    writer.close()
    return {"lone_p50_ms": pct(lat, 50), "lone_p99_ms": pct(lat, 99)}


def measure(server: ServerProcess, queries, clients, seconds) -> dict:
    server.start()
    try:
        row = asyncio.run(load(server.port, queries, clients, seconds))
        row.update(asyncio.run(lone(server.port, queries)))
        row["rss_mb"] = round(server.rss_mb() or 0, 1)
        return row
    finally:
        server.stop()


def search_r1(checkout: Path, index_path: Path, corpus: Path, name: str, threads: int,
              log: Path) -> ServerProcess:
    model = []
    if name != "bm25":
        from agentsearch.retrievers.encoder import resolve_encoder

        model = ["--retriever_model", resolve_encoder(None)[1]]
    cmd = [sys.executable, str(HERE / "search_r1_cpu.py"), "--search-r1", str(checkout),
           "--port", "{port}", "--",
           "--index_path", str(index_path), "--corpus_path", str(corpus), "--topk", "3",
           "--retriever_name", name, *model]
    return ServerProcess([], threads=threads, command=cmd, log=log, start_timeout_s=600)


def bench_e(corpus: Path, name: str, queries: list[str], checkout: Path, threads: int, clients: int,
            seconds: float, windows: list[float], emit, rounds: int = 2) -> None:
    """Each server ``rounds`` times, interleaved (a slow spell of the machine hits every server
    alike); per server the round with the most q/s is reported, with every round's q/s."""
    corpus = numbered_corpus(corpus, name)
    log = corpus.parent / "servers.log"
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    flat, lucene, bm25s = (index(corpus, f"{name}-numbered", k, threads)
                           for k in ("dense-flat", "bm25", "bm25s"))

    def ours(index: Path, *args: str):
        return lambda: ServerProcess(index, threads=threads, log=log, args=args)

    setups = {
        "dense": {"search_r1": lambda: search_r1(checkout, flat / "index.faiss", corpus, "minilm",
                                                 threads, log),
                  "ours_default": ours(flat)},
        "bm25": {"search_r1": lambda: search_r1(checkout, lucene / "lucene", corpus, "bm25",
                                                threads, log),
                 "ours_default": ours(bm25s),
                 "ours_pyserini": ours(lucene)},  # the very index Search-R1 reads, served by us
    }
    for mode, servers in setups.items():
        ours_dir = flat if mode == "dense" else bm25s
        for w in windows:
            servers[f"ours_window_{w:g}ms"] = ours(ours_dir, "--batch-window-ms", str(w))
        runs: dict[str, list[dict]] = {label: [] for label in servers}
        for _ in range(rounds):
            for label, make in servers.items():
                runs[label].append(measure(make(), queries, clients, seconds))
        row = {"bench": "e_servers", "mode": mode, "corpus": name, "clients": clients,
               "seconds": seconds, "threads": threads, "rounds": rounds}
        for label, rs in runs.items():
            row[label] = {**max(rs, key=lambda r: r["qps"]), "qps_rounds": [r["qps"] for r in rs]}
        row["speedup_default"] = round(row["ours_default"]["qps"] / row["search_r1"]["qps"], 2)
        row["lone_ratio_default"] = round(row["ours_default"]["lone_p50_ms"]
                                          / row["search_r1"]["lone_p50_ms"], 3)
        emit(row)


def bench_f(corpus: Path, name: str, queries: list[str], threads: int, emit, n: int = 200) -> None:
    """Stage times (ms, median of ``n``) of one dense query in process."""
    import torch

    from agentsearch.retrievers.server import render_lists

    r = load_retriever(index(numbered_corpus(corpus, name), f"{name}-numbered", "dense-flat",
                             threads), threads=threads)
    enc = r.encoder
    stages: dict[str, list[float]] = {s: [] for s in ("tokenize", "forward", "pool", "faiss",
                                                      "docs", "json", "search")}
    for i in range(n + 20):
        q = queries[i % len(queries)]
        t0 = time.perf_counter()
        batch = enc.tokenizer([enc.query_prefix + q], padding=True, truncation=True,
                              max_length=enc.max_length, return_tensors="pt")
        t1 = time.perf_counter()
        with torch.inference_mode():
            states = enc.model(**batch).last_hidden_state
            t2 = time.perf_counter()
            mask = batch["attention_mask"].unsqueeze(-1).to(states.dtype)
            vec = torch.nn.functional.normalize((states * mask).sum(1) / mask.sum(1),
                                                dim=-1).numpy()
        t3 = time.perf_counter()
        scores, ids = r.index.search(vec, 3)
        t4 = time.perf_counter()
        hits = [[r.docs.hit(int(d), s) for d, s in zip(ids[0], scores[0])]]
        t5 = time.perf_counter()
        render_lists(hits, True)
        t6 = time.perf_counter()
        r.search([q], 3)
        t7 = time.perf_counter()
        if i >= 20:
            for s, dt in zip(stages, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5,
                                      t7 - t6)):
                stages[s].append(dt)
    emit({"bench": "f_lone_query", "corpus": name, "num_docs": r.num_docs, "threads": threads,
          "torch_threads": torch.get_num_threads(),
          **{f"{s}_ms": round(statistics.median(v) * 1000, 3) for s, v in stages.items()}})
