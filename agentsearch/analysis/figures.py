"""Quoted figures recomputed from their kept records (``scripts/check_results.py``).

One definition of a **speed-up**, everywhere: the time the method needs to reach a target fixed
before the runs (a rule such as "90% of on-policy-larger's final", written down first) over the
time the reference needs to reach the same target, on the same clock, retriever and back-end
unless that is the variable (``to_target``, ``suite_speedup``): 0.8x reads "in 80% of the
reference's time". Any other ratio is named for what it is: the *share of the reference's
training time* (``pareto``'s ``ratio`` column: time to target over the reference's whole
training time), a *per-step ratio* (``per_step``), a *throughput ratio* (episodes/s, q/s).

A figure from a model (the work-priced clock, the queue model of a search service)
is a prediction: it says so where it is quoted and carries the fit's uncertainty
(``predicted_interval``: a bootstrap over the runs the prices were fitted on).

Pure readers: every function takes paths of records (a JSON line, a CSV the suite wrote, a
suite of archived run folders) and returns numbers; nothing is written.
"""

from __future__ import annotations

import csv
import json
import random
import statistics
from functools import cache
from pathlib import Path

from agentsearch.analysis.archive import REFERENCE_METHOD, analysed
from agentsearch.analysis.hard_world import method_table, nonnegative_lstsq, work_model
from agentsearch.analysis.runs import Run, load_run
from agentsearch.analysis.tool_queue import step_wait, turn_calls

__all__ = ["json_lines", "line", "field", "csv_rows", "to_target", "per_step", "curve_to_target",
           "suite_rows", "suite_speedup", "predicted_interval", "measured_rows", "measured_pair",
           "wait_error", "seed_pair", "target_of", "run_mean", "phase_share"]


# ---------------------------------------------------------------- JSON lines and CSVs
def json_lines(path: str | Path) -> list[dict]:
    """Every JSON object of a ``.jsonl`` record (or the one object of a ``.json`` file)."""
    text = Path(path).read_text()
    if Path(path).suffix == ".json":
        return [json.loads(text)]
    return [json.loads(ln) for ln in text.splitlines() if ln.strip()]


def _get(obj, dotted: str):
    for part in dotted.split("."):
        obj = obj[int(part)] if isinstance(obj, list) else obj[part]
    return obj


def line(path: str | Path, **match) -> dict:
    """The one JSON line of ``path`` whose keys equal ``match`` (dotted keys allowed via ``__``);
    an error unless exactly one does."""
    keys = {k.replace("__", "."): v for k, v in match.items()}
    found = [r for r in json_lines(path)
             if all(_has(r, k) and _get(r, k) == v for k, v in keys.items())]
    if len(found) != 1:
        raise LookupError(f"{path}: {len(found)} lines match {match}, expected 1")
    return found[0]


def _has(obj, dotted: str) -> bool:
    try:
        _get(obj, dotted)
        return True
    except (KeyError, IndexError, TypeError, ValueError):
        return False


def field(path: str | Path, dotted: str, **match):
    """``dotted`` (``a.b.0``) of the one line of ``path`` matching ``match``."""
    return _get(line(path, **match), dotted)


def run_metric(run_dir: str | Path, key: str, step: int) -> float:
    """``key`` of a run record's ``step`` (the last record of that step: a resumed run re-logs)."""
    recs = [r for r in load_run(run_dir).records if r.get("step") == step and key in r]
    if not recs:
        raise KeyError(f"{run_dir}: no {key!r} at step {step}")
    return recs[-1][key]


def csv_rows(path: str | Path, **match) -> list[dict]:
    """The rows of a CSV the suite wrote whose columns equal ``match`` (as text)."""
    with open(path, newline="", encoding="utf-8") as f:
        return [r for r in csv.DictReader(f) if all(r.get(k) == str(v) for k, v in match.items())]


def _reached(rows: list[dict]) -> list[float]:
    return [
        float(r["time_to_target"]) for r in rows if r["time_to_target"] not in ("never", "", None)
    ]


def to_target(ttt_csv: str | Path, method: str, reference: str) -> float:
    """Speed-up from a ``pareto_time_to_target.csv``: ``method``'s mean time to the target (over
    the seeds that reached it) over ``reference``'s mean time to the same target."""
    mine, ref = (
        _reached(csv_rows(ttt_csv, method=method)),
        _reached(csv_rows(ttt_csv, method=reference)),
    )
    return statistics.fmean(mine) / statistics.fmean(ref)


def per_step(time_csv: str | Path, method: str, reference: str, phase: str = "step") -> float:
    """Per-step ratio from a ``pareto_time.csv``: ``method``'s mean seconds a step (or of ``phase``)
    over ``reference``'s."""
    return float(csv_rows(time_csv, method=method)[0][phase]) / float(
        csv_rows(time_csv, method=reference)[0][phase]
    )


def curve_to_target(pareto_json: str | Path, method: str, target: float) -> float:
    """From an ``agentsearch pareto`` JSON's curves (every evaluation of every run: seconds,
    score, step): the mean over ``method``'s runs (folder name without ``-s<seed>``) that reach
    ``target`` of the training seconds of their first evaluation at or above it."""
    curves = json.loads(Path(pareto_json).read_text())["curves"]
    times = [
        next((t for t, q, _ in pts if q >= target - 1e-12), None)
        for run, pts in curves.items()
        if Path(run).name.rsplit("-s", 1)[0] == method
    ]
    return statistics.fmean(t for t in times if t is not None)


# ---------------------------------------------------------------- a suite of archived runs
@cache
def _analysed(suite: str, share: float | None) -> dict:
    return analysed(suite, share)


@cache
def suite_rows(suite: str, share: float | None = 0.9) -> dict[str, dict]:
    """``hard_world.method_table`` of an archived suite on the reference clock, by method, to
    ``share`` of on_policy_larger's final (``archive.analysed``)."""
    return {r["method"]: r for r in method_table(_analysed(str(suite), share))}


def suite_speedup(
    suite: str | Path, method: str, reference: str = REFERENCE_METHOD, share: float | None = 0.9
) -> float:
    """Speed-up in an archived suite: ``method``'s mean time to the target over ``reference``'s."""
    rows = suite_rows(str(suite), share)
    return rows[method]["time_to_target"] / rows[reference]["time_to_target"]


def _runs(suite: str) -> list[Run]:
    return [r for m in _analysed(suite, 0.9)["_methods"] for r in m.usable]


@cache
def measured_rows(
    suite: str | Path, twins: str | Path, slots: int, mean_s: float, calibration: str | Path
) -> list[dict]:
    """``hard_world.py predict --measured``, recomputed: each run of a latency suite (finished or
    not; seconds on the reference clock by the calibrations in ``calibration``) against its
    latency-0 twin (``tool_queue.measured_against``, to the twins' target: 90% of their
    on_policy_larger's mean final, compute priced by the twins' work model), then the same-seed
    pairs (``tool_queue.same_seed_ratios``)."""
    from agentsearch.analysis.archive import reference_clock
    from agentsearch.analysis.pareto import analyse
    from agentsearch.analysis.tool_queue import measured_against, same_seed_ratios

    twin_runs = {r.name: r for r in _runs(str(twins))}
    price = work_model(list(twin_runs.values()))["price"]
    target = 0.9 * statistics.fmean(
        r.final for r in twin_runs.values() if r.label == REFERENCE_METHOD
    )
    started = sorted(
        r
        for r in Path(suite).iterdir()
        if (r / "metrics.jsonl.gz").exists() or (r / "metrics.jsonl").exists()
    )
    rows = [
        dict(
            measured_against(r, twin_runs[r.name], slots, mean_s, target, price),
            seed=r.seed,
            method=r.label,
        )
        for r in analyse(started, label_by="dir", time_scale=reference_clock(suite, calibration))[
            "_runs"
        ]
        if r.name in twin_runs and r.points
    ]
    return rows + same_seed_ratios(rows)


def measured_pair(
    suite: str | Path,
    twins: str | Path,
    slots: int,
    mean_s: float,
    calibration: str | Path,
    clock: str = "measured",
) -> float:
    """The HDR run of ``measured_rows`` over the on_policy_larger run of its seed, on ``clock``:
    ``measured`` (its own seconds), ``priced`` (its measured waits, compute priced: a model) or
    ``predicted`` (the twin replayed under the service: a prediction)."""
    (pair,) = [
        p
        for p in measured_rows(suite, twins, slots, mean_s, calibration)
        if p.get("pair", "").startswith("hdr-")
    ]
    return pair[clock]


def wait_error(
    suite: str | Path, twins: str | Path, slots: int, mean_s: float, calibration: str | Path
) -> float:
    """The queue model's check: the largest relative gap between a run's measured tool wait a step
    and the model's for that run's own calls, over the runs of ``measured_rows``."""
    return max(
        abs(r["wait_measured"] - r["wait_model"]) / r["wait_model"]
        for r in measured_rows(suite, twins, slots, mean_s, calibration)
        if "run" in r
    )


def seed_pair(suite: str | Path, method: str, seed: int, target: float) -> float:
    """Measured, one seed: ``method``'s run over on_policy_larger's run of ``seed``, each's
    training seconds (reference clock) at its first evaluation at or above ``target``."""
    runs = {(r.label, r.seed): r for r in _runs(str(suite))}

    def first(r: Run) -> float:
        return next(t for t, q, _ in r.points if q >= target - 1e-12)

    return first(runs[(method, seed)]) / first(runs[(REFERENCE_METHOD, seed)])


def target_of(suite: str | Path, share: float = 0.9) -> float:
    """The registered target of a suite: ``share`` of on_policy_larger's mean final."""
    return share * suite_rows(str(suite), None)[REFERENCE_METHOD]["final_mean"]


def run_mean(
    suite: str | Path,
    method: str,
    key: str,
    seeds: tuple[int, ...] | None = None,
    stat: str = "mean",
) -> float:
    """Over ``method``'s runs (``seeds`` only, if given): the mean of each run's per-step mean of
    metric ``key`` (``stat="final_mean"`` / ``"final_std"``: of the runs' finals instead)."""
    from agentsearch.analysis.hard_world import _mean_metric

    rs = [r for r in _runs(str(suite)) if r.label == method and (seeds is None or r.seed in seeds)]
    if stat == "final_mean":
        return statistics.fmean(r.final for r in rs)
    if stat == "final_std":
        return statistics.stdev(r.final for r in rs)
    return statistics.fmean(_mean_metric(r, key) for r in rs)


def phase_share(suite: str | Path, method: str, phase: str = "time/replay_scan") -> float:
    """Measured: ``phase``'s seconds over the step's, pooled over ``method``'s runs and steps."""
    recs = [
        x
        for r in _runs(str(suite))
        if r.label == method
        for x in r.records
        if x.get("step", 0) > 0 and phase in x and "time/step" in x
    ]
    return statistics.fmean(x[phase] for x in recs) / statistics.fmean(x["time/step"] for x in recs)


@cache
def _clocks(suite: str, slots: int, mean_s: float | None) -> tuple:
    """What re-pricing needs, per run of the suite: its steps, their waits (drawn once, as
    ``tool_queue.predict`` draws them: the same generator, the same order), their work; and the
    work model's design (``hard_world._work``)."""
    import numpy as np

    from agentsearch.analysis.hard_world import _work

    runs = [r for r in _runs(suite) if r.points]
    rng = random.Random(0)
    steps = [
        sorted(
            {
                x["step"]: x
                for x in run.records
                if isinstance(x.get("step"), int) and x["step"] > 0
            }.items()
        )
        for run in runs
    ]
    waits = [
        np.array(
            [
                float(r.get("time/env") or 0.0)
                if mean_s is None
                else step_wait(turn_calls(r), slots, mean_s, rng)
                for _, r in st
            ]
        )
        for st in steps
    ]  # [steps] per run
    keys = list(work_model(runs)["price"])
    work = [
        np.array([[1.0 if k == "step" else float(r.get(k) or 0.0) for k in keys] for _, r in st])
        for st in steps
    ]  # [steps, prices] per run
    x = np.array([_work(r)[0] for r in runs])  # [runs, prices]: the fit's design, as work_model's
    y = np.array([_work(r)[1] for r in runs])  # [runs]: compute seconds
    return runs, steps, waits, work, x, y


@cache
def predicted_interval(
    suite: str | Path,
    method: str,
    slots: int,
    mean_s: float | None,
    key: str = "to_reference",
    n_boot: int = 400,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Predicted (``hard_world.py predict --priced-by`` the suite itself: its runs replayed under
    a service of ``slots`` x ``mean_s`` seconds a call, compute priced by the work model):
    ``method``'s ``key`` against on_policy_larger (``to_reference``: its mean time to the target
    over on_policy_larger's; ``same_seed``: the mean of its runs' times over on_policy_larger's
    run of the same seed), the value ``tool_queue.predict`` gives, and the percentile interval
    of the work model's fit: the prices refitted on ``n_boot`` resamples (with replacement) of
    the suite's runs, every run's clock re-priced with the same waits. (value, lo, hi).
    ``mean_s`` None: each step's measured wait (the runs' own service)."""
    import numpy as np

    runs, steps, waits, work, x, y = _clocks(str(suite), slots, mean_s)
    target = 0.9 * statistics.fmean(r.final for r in runs if r.label == REFERENCE_METHOD)
    mine = [i for i, r in enumerate(runs) if r.label == method]
    ref = [i for i, r in enumerate(runs) if r.label == REFERENCE_METHOD]

    def hit(i: int, price) -> float | None:
        clock = dict(zip((s for s, _ in steps[i]), np.cumsum(waits[i] + work[i] @ price)))
        return next(
            (clock.get(step, 0.0) for _, q, step in runs[i].points if q >= target - 1e-12), None
        )

    def ratio(price) -> float | None:
        a, b = {i: hit(i, price) for i in mine}, {i: hit(i, price) for i in ref}
        if key == "same_seed":
            by_seed = {runs[i].seed: t for i, t in b.items()}
            pairs = [
                (t, by_seed.get(runs[i].seed)) for i, t in a.items() if runs[i].seed in by_seed
            ]
            return (
                statistics.fmean(p / q for p, q in pairs)
                if pairs and all(p and q for p, q in pairs)
                else None
            )
        a_hit, b_hit = (
            [t for t in a.values() if t is not None],
            [t for t in b.values() if t is not None],
        )
        return statistics.fmean(a_hit) / statistics.fmean(b_hit) if a_hit and b_hit else None

    value = ratio(nonnegative_lstsq(x, y))
    boot = np.random.default_rng(seed)
    draws = sorted(
        v
        for v in (
            ratio(nonnegative_lstsq(x[i], y[i]))
            for i in (boot.integers(0, len(runs), len(runs)) for _ in range(n_boot))
        )
        if v is not None
    )
    lo, hi = (
        draws[int((1 - level) / 2 * (len(draws) - 1))],
        draws[int((1 + level) / 2 * (len(draws) - 1))],
    )
    return value, lo, hi
