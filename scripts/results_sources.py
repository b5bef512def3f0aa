"""The records behind the quoted figures and how to read them: ``Figure``, ``group``, the
records' paths under ``docs/results/`` and the value functions (each a pure function of the
checkout's root, most of them thin readers over ``agentsearch.analysis.figures``).
``results_registry.py`` lists the figures page by page with these."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agentsearch.analysis import figures as F


@dataclass(frozen=True)
class Figure:
    page: str
    quote: str
    shown: str
    records: tuple[str, ...]
    value: Callable[[Path], float]
    tol: float | None = None
    predicted: bool = False
    citable: bool = True


def group(page: str, quote: str, records, pairs, **kw) -> list[Figure]:
    recs = (records,) if isinstance(records, str) else tuple(records)
    return [Figure(page, quote, shown, recs, fn, **kw) for shown, fn in pairs]


R, README = "docs/results/", "README.md"
HW, HWP, ASYNC, RS, MATH = (R + x for x in ("hard_world.md", "hard_world/", "async.md",
                                             "replay_suite.md", "math.md"))
WORLDS, OLD = HWP + "runs-worlds/lat-0", HWP + "runs/lat-0"  # latency 0: the new and old base
LAT02, C4_02 = HWP + "runs/lat-0.2", HWP + "runs/lat-0.2-c4"
PAIR, PAIR_CAL = HWP + "worlds-lat-1.0-c4/runs", HWP + "runs-worlds/calibration"
FAULTS, LOAD, CRASH, FUZZ = (R + f"reliability/bench_{b}.jsonl"
                             for b in ("faults", "load", "crash", "fuzz"))
SERVERS, SCALE = R + "retrieval/bench_servers.jsonl", R + "retrieval/bench_index_scale.jsonl"
ROLLOUT, VISION, LEARNING = R + "async/bench_rollout.jsonl", R + "vision/summary.json", \
    R + "learning/summary.json"
MATH10, DIAG = R + "math/summary-eval-every-10.json", R + "learning/diagnose-tiny-base.json"
AL, AS, RSD = R + "async/learning/", R + "async/search_r1/", R + "replay_suite/"
mean = statistics.fmean
DEMO, ENV, CLIENT = R + "demo/", R + "envs/bench_env.jsonl", R + "retrieval/bench_client.jsonl"
SCAN, SMOKE = R + "replay/bench_scan.jsonl", R + "openrlhf/smoke.jsonl"
ROLLOUT3 = R + "async/bench_rollout_median3.jsonl"


def demo(key: str, step: int) -> Callable[[Path], float]:
    """A metric of the demo run's record at ``step`` (0: the shipped base; 40: after RL)."""
    return lambda root: F.run_metric(root / DEMO, key, step)


# ---------------------------------------------------------------- value functions
def j(record: str, dotted: str, agg: Callable | None = None, **match) -> Callable[[Path], float]:
    """A field of one JSON line (``agg`` over a list field: min, max, mean)."""
    def value(root: Path) -> float:
        v = F.field(root / record, dotted, **match)
        return agg(v) if agg else v
    return value


def every(record: str, key: str, agg: Callable) -> Callable[[Path], float]:
    """``agg`` over ``key`` of every per-env dict of every line (the fuzz record)."""
    return lambda root: agg(v[key] for d in F.json_lines(root / record) for v in d.values()
                            if isinstance(v, dict))


def math3(agg, key: str) -> Callable[[Path], float]:
    """Over the three methods of the math bench's JSON line."""
    return lambda root: agg(x for m in ("hdr", "none", "naive") for x in F.field(root / MATH10,
                                                                                 f"{m}.{key}"))


def rows(suite: str, method: str, key: str, share: float | None = 0.9):
    return lambda root: F.suite_rows(str(root / suite), share)[method][key]


def speedup(suite: str, method: str):
    return lambda root: F.suite_speedup(root / suite, method)


def reached(suite: str, method: str):
    """Seeds that reach on-policy-larger's final itself (the HDR paper's test)."""
    return lambda root: float(F.suite_rows(str(root / suite), None)[method]["reached"][0])


def ival(method: str, slots: int = 0, mean_s: float | None = None, key: str = "same_seed",
         suite: str = WORLDS) -> list[Callable]:
    """Predicted (value, lo, hi) of the work-priced clock and its fit bootstrap."""
    return [lambda root, i=i: F.predicted_interval(root / suite, method, slots, mean_s, key)[i]
            for i in range(3)]


def pair(clock: str):
    return lambda root: F.measured_pair(root / PAIR, root / WORLDS, 4, 1.0, root / PAIR_CAL, clock)


def csv_mean(csv: str, col: str, **match):
    return lambda root: mean(float(r[col]) for r in F.csv_rows(root / csv, **match)
                             if r[col] not in ("never", ""))


def old_seeds(method: str, key: str, stat: str = "mean", scale: float = 1.0):
    return lambda root: scale * F.run_mean(root / OLD, method, key, (0, 1, 2), stat)


def seed_pair(suite: str, seed: int):
    return lambda root: F.seed_pair(root / suite, "hdr", seed, F.target_of(root / OLD))


def waits(suite: str, twins: str, mean_s: float, cal: str):
    return lambda root: 100 * F.wait_error(root / suite, root / twins, 4, mean_s, root / cal)


def zipped(shown: tuple[str, ...], fns: list[Callable]) -> list[tuple[str, Callable]]:
    return list(zip(shown, fns))


