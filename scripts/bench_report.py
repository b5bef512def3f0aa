"""Benchmark of ``agentsearch report``: a report of RUNS synthetic runs of STEPS steps each
(``agentsearch.analysis.report.synthetic_runs``: every metric family, four 300-token episodes a
step, the replay scan), its build seconds and its size. The target (issue 52): 50 runs of 200
steps build in at most 10 s into at most 5 MB. Prints one JSON line.

    python scripts/bench_report.py [--runs 50] [--steps 200] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

from agentsearch.analysis.report import build_report
from agentsearch.analysis.report.synthetic_runs import write_run
from agentsearch.core.provenance import ALLOW_DIRTY_HELP, emit_records, require_clean

METHODS = (("hdr", 1.0), ("none", 1.25), ("naive", 1.1), ("recency", 1.1), ("drift_only", 1.0))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=50)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--keep", default=None, help="write the runs and the page here (kept)")
    p.add_argument("--out", default=None, help="append the JSON line to this record file too")
    p.add_argument("--allow-dirty", action="store_true", help=ALLOW_DIRTY_HELP)
    a = p.parse_args()
    prov = require_clean("bench_report", a.allow_dirty)
    if a.keep:
        line = bench(Path(a.keep), a.runs, a.steps)
    else:
        with tempfile.TemporaryDirectory(prefix="bench_report-") as root:
            line = bench(Path(root), a.runs, a.steps)
    emit_records([{**line, "provenance": prov}], a.out)


def bench(root: Path, n_runs: int, steps: int) -> dict:
    """Write the runs under ``root``, build their report, and say how long and how large."""
    t0 = time.perf_counter()
    runs = []
    for i in range(n_runs):
        kind, speed = METHODS[i % len(METHODS)]
        seed = i // len(METHODS)
        runs.append(write_run(root / f"{kind}-s{seed}", kind=kind, seed=seed, steps=steps,
                              speed=speed, alarms=seed == 0, async_=kind == "hdr"))
    written = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = build_report(runs, root / "report.html")
    build = time.perf_counter() - t0
    size = out.stat().st_size
    inputs = sum(f.stat().st_size for r in runs for f in r.iterdir())
    return {"runs": n_runs, "steps": steps, "build_s": round(build, 2),
            "size_mb": round(size / 2**20, 2), "bytes": size, "input_mb": round(inputs / 2**20, 1),
            "write_runs_s": round(written, 1), "target": "build_s <= 10, size_mb <= 5",
            "ok": build <= 10 and size <= 5 * 2**20, "machine": platform.machine(),
            "cores": os.cpu_count()}

if __name__ == "__main__":
    main()
