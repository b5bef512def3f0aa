"""The hard world's comparison, read from run folders (docs/results/hard_world.md).

On top of ``pareto.analyse`` (curves, target, time to target) this adds what the issue asks
of every method, per latency setting:

- ``pilot_rule(points, budget)``: the pre-registered rule, true when the best score in the
  first quarter of the budget is below 90% of the score at the budget;
- final dev score: mean, std and a bootstrap 95% interval over seeds (``bootstrap_ci``);
- costs to the target: training seconds, episodes and tool calls until the first evaluation
  at or above it (``costs_to``), from the per-step ``rollout/episodes`` and
  ``rollout/tool_calls``;
- the area under the score-vs-wall-clock curve up to a common horizon, as a time-averaged
  score (``area_under``);
- mechanism averages per method over the run (``MECHANISM``): zero-variance share, mean
  |advantage|, replay accept rate, entropy, regeneration rounds, skipped prompts; and the
  final score per hop count (``eval/chain{k}/mean_at_n``);
- the load check (``pace``): each run's seconds per training step against what its work
  predicts (``work_model``: a non-negative least-squares price per generated, scored and
  trained token and per step, fitted over every run of the suite; a method's seeds differ in
  work, e.g. HDR's scan depth), and against its method's median over seeds (wall-clock is
  the currency, so a run slowed by other work on the machine is flagged for a rerun), and the
  runs it shared the machine with, from the ``clock/unix_seconds`` stamp of every record
  (written since 2026-12-02; older runs show none);
  sessions get machines of different speeds, so ``pareto.analyse(..., time_scale=...)`` with
  ``calibration_factor`` (from the machine's ``hard_world.py calibrate`` records) puts every
  run's seconds on the reference machine's clock before any time column is computed (time to
  target, ratios, area, the load check). The factor scales the compute, not the seconds spent
  waiting on the environment (``time/env``: tool latency), which a faster machine does not
  shorten (``pareto.rescaled``).

Pure functions of the records; ``hard_world_report.report`` writes them as ``hard_world.md`` and
``hard_world.csv``.
"""

from __future__ import annotations

import random
import statistics

from agentsearch.analysis.pareto import MACHINE_FREE
from agentsearch.analysis.runs import MethodCurve, Run
from agentsearch.trainer.metrics import CLOCK

__all__ = ["pilot_rule", "bootstrap_ci", "costs_to", "area_under", "method_table", "pace",
           "active_spans", "calibration_factor", "finals_table", "work_model", "MECHANISM",
           "SLOWED", "WORK", "REFERENCE_S_PER_STEP", "MACHINE_FILE"]

MECHANISM = {"zero_var": "groups/zero_variance_frac", "abs_adv": "groups/abs_advantage_mean",
             "accept": "replay/accept_rate", "entropy": "rollout/entropy",
             "regen_rounds": "dynamic/rounds", "skipped": "sampler/skipped",
             "replayed_rows": "replay/success_rows", "replayed": "replay/accepted",
             "scanned": "replay/scan_depth", "age": "replay/age_mean"}
"""Per-step metrics averaged over a run (name -> metrics.jsonl key); absent keys stay empty."""
SLOWED = 1.2
"""A run whose compute seconds exceed what its work predicts (``work_model``) by more than this
is flagged; without a model (too few runs), its seconds per step against its method's median."""
WORK = ("tokens/generated", "tokens/scored", "tokens/trained")
"""The per-step work ``work_model`` prices (with a constant per step): tokens sampled
(regeneration included), tokens run through the model without a gradient (old and reference
log-probs, the replay scan's drift scores) and tokens trained on."""
REFERENCE_S_PER_STEP = 6.64
"""Seconds per step of the calibration workload on the reference machine: the first 12 steps of
the archived on_policy-s1 (2026-12-02, before 15:00 UTC; its seed and settings are the
workload's, paired with another run as the calibration is)."""
MACHINE_FILE = "machine.json"
"""In a run folder, optional: ``{"calibration_unix": U, "why": ...}``, the calibration made on
the machine the run trained on, for runs without ``clock/unix_seconds`` stamps to place them."""
GAP = 900.0
"""Seconds without a record that end an active span (a stopped session; an evaluation takes
~3 min)."""


def pilot_rule(points: list[tuple[float, float, int]], budget: int) -> dict:
    """The pilot rule at ``budget`` steps on a curve of (seconds, score, step): F = the score
    at the last evaluation at or before ``budget`` (step 140 for a budget of 150 on a curve
    evaluated every 20 steps), E = the best score at steps 1..budget/4 (step 0, the base, is
    not learning); accepted iff E < 0.9 F. None when the curve stops before ``budget``."""
    upto = [p for p in points if p[2] <= budget]
    early = [p[1] for p in upto if 0 < p[2] <= budget / 4]
    if not upto or not early or max(p[2] for p in points) < budget:
        return {"budget": budget, "accepted": None, "why": "the curve does not reach this budget"}
    final, best_early = upto[-1][1], max(early)
    return {"budget": budget, "final": final, "best_early": best_early,
            "ratio": best_early / final if final else None, "accepted": best_early < 0.9 * final}


def bootstrap_ci(xs: list[float], n_boot: int = 10_000, seed: int = 0,
                 level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``xs`` (resampling with replacement)."""
    if not xs:
        raise ValueError("bootstrap_ci needs at least one value")
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(xs, k=len(xs))) for _ in range(n_boot))
    lo = means[int((1 - level) / 2 * (n_boot - 1))]
    hi = means[int((1 + level) / 2 * (n_boot - 1))]
    return lo, hi


def costs_to(run: Run, target: float) -> dict:
    """Seconds, step, episodes and tool calls up to the first evaluation scoring >= ``target``
    (all None when none does). Episodes and tool calls add the per-step records up to that
    step."""
    hit = next((p for p in run.points if p[1] >= target - 1e-12), None)
    if hit is None:
        return {"seconds": None, "step": None, "episodes": None, "tool_calls": None}
    # a re-logged step: its last record
    steps = {r["step"]: r for r in run.records if isinstance(r.get("step"), int)}
    upto = [r for s, r in steps.items() if 0 < s <= hit[2]]
    return {"seconds": hit[0], "step": hit[2],
            "episodes": sum(float(r.get("rollout/episodes", 0)) for r in upto),
            "tool_calls": sum(float(r.get("rollout/tool_calls", 0)) for r in upto)}


def area_under(points: list[tuple[float, float, int]], horizon: float) -> float | None:
    """The time-averaged score over [0, horizon]: the curve held at each evaluation's score
    until the next one (a step function, as a model is used until the next is evaluated),
    its area divided by ``horizon``. None without points or horizon."""
    if not points or not horizon or horizon <= 0:
        return None
    area, pts = 0.0, sorted(points)
    for (t0, q, _), nxt in zip(pts, pts[1:] + [(horizon, None, None)]):
        t1 = min(nxt[0], horizon)
        if t1 > t0:
            area += q * (t1 - max(t0, 0.0))
        if nxt[0] >= horizon:
            break
    return area / horizon


def _mean_metric(run: Run, key: str) -> float | None:
    xs = [float(r[key]) for r in run.records if isinstance(r.get("step"), int) and r["step"] > 0
          and isinstance(r.get(key), (int, float))]
    return statistics.fmean(xs) if xs else None


def _mean(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.fmean(xs) if xs else None


def method_table(result: dict, hops: tuple[int, ...] = (1, 2, 3, 4)) -> list[dict]:
    """One row per method of a ``pareto.analyse`` result (module docstring)."""
    methods: list[MethodCurve] = result["_methods"]
    target = (result.get("target") or {}).get("score")
    horizon = (result.get("target") or {}).get("baseline_train_seconds")
    rows = []
    for m in methods:
        runs = m.usable
        if not runs:
            continue
        finals = [r.final for r in runs]
        mean, std = statistics.fmean(finals), (statistics.stdev(finals) if len(finals) > 1 else 0.0)
        lo, hi = bootstrap_ci(finals)
        costs = [costs_to(r, target) for r in runs] if target is not None else []
        reached = [c for c in costs if c["seconds"] is not None]
        row = {"method": m.label, "seeds": len(runs), "final_mean": mean, "final_std": std,
               "ci_lo": lo, "ci_hi": hi,
               "train_s_mean": statistics.fmean(r.train_seconds for r in runs),
               "reached": f"{len(reached)}/{len(runs)}",
               "time_to_target": _mean([c["seconds"] for c in reached]),
               "ratio": _mean([c["seconds"] / horizon for c in reached]) if horizon else None,
               "episodes_to_target": _mean([c["episodes"] for c in reached]),
               "tool_calls_to_target": _mean([c["tool_calls"] for c in reached]),
               "auc": _mean([area_under(r.points, horizon) for r in runs]) if horizon else None}
        for name, key in MECHANISM.items():
            row[name] = _mean([_mean_metric(r, key) for r in runs])
        for k in hops:
            key = f"eval/chain{k}/mean_at_n"
            row[f"final_k{k}"] = _mean([next((rec[key] for rec in reversed(r.records)
                                              if key in rec), None)
                                        for r in runs])
        rows.append(row)
    return rows


def active_spans(records: list[dict], gap: float = GAP) -> list[tuple[float, float]]:
    """The (first, last) ``clock/unix_seconds`` stamps of each stretch of records with no pause
    longer than ``gap`` seconds: when the run was on the machine. Empty without stamps."""
    stamps = sorted(float(r[CLOCK]) for r in records if isinstance(r.get(CLOCK), (int, float)))
    spans: list[tuple[float, float]] = []
    for t in stamps:
        if spans and t - spans[-1][1] <= gap:
            spans[-1] = (spans[-1][0], t)
        else:
            spans.append((t, t))
    return spans


def _overlap(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(x1, y1) - max(x0, y0)) for x0, x1 in a for y0, y1 in b)


def calibration_factor(records: list[dict], calibrations: list[dict],
                       pinned: float | None = None) -> float | None:
    """``REFERENCE_S_PER_STEP`` over the seconds per step of the last calibration made before
    the run's first stamped record (None: no stamps, or no calibration before them): a run's
    seconds times this are seconds on the reference machine. ``pinned``: the ``unix`` of the
    calibration to use instead, for a run known to have trained on the machine that made it
    (``MACHINE_FILE``); an unknown one is an error."""
    if pinned is not None:
        match = [c for c in calibrations if c["unix"] == pinned]
        if not match:
            raise ValueError(f"no calibration made at unix {pinned} (pinned in {MACHINE_FILE})")
        return REFERENCE_S_PER_STEP / match[0]["s_per_step"]
    spans = active_spans(records)
    before = [c for c in calibrations if spans and c["unix"] <= spans[0][0]]
    return (REFERENCE_S_PER_STEP / max(before, key=lambda c: c["unix"])["s_per_step"]
            if before else None)


def _usable(result: dict) -> list[Run]:
    return [r for m in result["_methods"] for r in m.usable]


def _work(run: Run) -> tuple[list[float], float, float]:
    """``WORK`` summed over steps 1..the last evaluation's, the step count and the compute
    seconds (training seconds less those of ``MACHINE_FREE``: waiting on tools)."""
    last = run.points[-1][2]
    steps = {r["step"]: r for r in run.records
             if isinstance(r.get("step"), int) and 0 < r["step"] <= last}
    sums = [sum(float(r.get(k) or 0.0) for r in steps.values()) for k in WORK]
    waited = sum(float(r.get(k) or 0.0) for r in steps.values() for k in MACHINE_FREE)
    return sums + [float(len(steps))], run.train_seconds - waited, waited


def work_model(runs: list[Run]) -> dict | None:
    """The least-squares cost model of a suite: compute seconds ~ sum over ``WORK`` of a price
    times the run's total, plus a price per step, fitted over ``runs`` (on one clock: analyse
    with ``time_scale`` first) with every price >= 0 (``nonnegative_lstsq``: the work's totals
    are nearly collinear across a suite: a free fit priced a scored token at -0.40 ms on
    tiny-chain-base's latency-0.2 suite).
    ``{"price": {key: seconds}, "expected": {run: compute seconds}}``, or None with fewer than
    twice as many runs as prices."""
    import numpy as np

    runs = [r for r in runs if r.points and r.points[-1][2] > 0]
    if len(runs) < 2 * (len(WORK) + 1):
        return None
    work = [_work(r) for r in runs]
    x = np.array([w[0] for w in work])  # [runs, len(WORK) + 1]
    price = nonnegative_lstsq(x, np.array([w[1] for w in work]))  # [len(WORK) + 1]
    return {"price": dict(zip((*WORK, "step"), price.tolist())),
            "expected": {r.name: float(row @ price) for r, row in zip(runs, x)}}


def nonnegative_lstsq(x, y):
    """argmin ||x p - y|| over p >= 0, exactly, by trying every set of free columns (the rest
    held at 0): few columns (2^cols least-squares solves). x [n, cols], y [n] -> p [cols]."""
    import itertools

    import numpy as np

    cols = x.shape[1]
    best, best_err = np.zeros(cols), float(np.sum(y ** 2))  # all prices 0
    for k in range(1, cols + 1):
        for free in itertools.combinations(range(cols), k):
            sub, *_ = np.linalg.lstsq(x[:, free], y, rcond=None)  # [k]
            if np.any(sub < 0):
                continue
            p = np.zeros(cols)
            p[list(free)] = sub
            err = float(np.sum((x @ p - y) ** 2))
            if err < best_err - 1e-12 * max(1.0, best_err):
                best, best_err = p, err
    return best


def pace(result: dict) -> list[dict]:
    """One row per run: seconds per training step (training wall-clock at the last evaluation
    over its step, on the clock the result was analysed with: ``time_scale``), the run's factor,
    the seconds per step its work predicts (``work_model``, fitted over the result's runs; the
    seconds waiting on tools added back as measured) and ``work_ratio`` (compute seconds over
    the model's), the median of its method's runs and ``ratio`` to it, ``slowed`` when
    ``work_ratio`` is above ``SLOWED`` (without a model: ``ratio``, and a method with one run is
    not judged), and the runs whose active spans overlapped its own (with the seconds they
    shared) where the records carry ``clock/unix_seconds``."""
    runs = _usable(result)
    spans = {r.name: active_spans(r.records) for r in runs}
    factors = result.get("time_scale") or {}
    model = work_model(runs)
    rows = []
    for m in result["_methods"]:
        timed = [r for r in m.usable if r.points[-1][2] > 0]
        per_step = {r.name: r.train_seconds / r.points[-1][2] for r in timed}
        median = statistics.median(per_step.values()) if per_step else None
        for r in timed:
            sps = per_step[r.name]
            ratio = sps / median if median else None
            row = {"run": r.name, "method": m.label, "s_per_step": sps,
                   "factor": factors.get(r.name), "expected_s_per_step": None,
                   "work_ratio": None, "method_median": median, "ratio": ratio,
                   "slowed": len(per_step) > 1 and ratio is not None and ratio > SLOWED}
            if model and r.name in model["expected"]:
                (*_, n), compute, waited = _work(r)
                row["expected_s_per_step"] = (model["expected"][r.name] + waited) / n
                row["work_ratio"] = (compute / model["expected"][r.name]
                                     if model["expected"][r.name] > 0 else None)
                row["slowed"] = row["work_ratio"] is not None and row["work_ratio"] > SLOWED
            shared = {o: _overlap(spans[r.name], spans[o]) for o in spans if o != r.name}
            row["shared_with"] = "; ".join(f"{o} ({s:.0f} s)" for o, s in sorted(shared.items())
                                           if s > 0)
            rows.append(row)
    return rows


def finals_table(methods: list[MethodCurve], evals: dict[str, dict]) -> list[dict]:
    """One row per method of the final models' own evaluations (``hard_world.py finals``; by
    run name), means over its runs: pass@1/4/8 on the dev slice (8 samples at temperature 1),
    greedy dev score (``diagnose``'s natural strategy), greedy score on the never-used world, and
    per-hop success of the greedy episodes (hop j done given hop j-1 was, pooled over k)."""
    rows = []
    for m in methods:
        evs = [evals[r.name] for r in m.usable if r.name in evals]
        if not evs:
            continue
        row = {"method": m.label, "runs": len(evs)}
        row.update({k: _mean([e["dev_n8"].get(k) for e in evs])
                    for k in ("pass_at_1", "pass_at_4", "pass_at_8")})
        row["greedy"] = _mean([e["diagnose"]["table"]["natural"].get("all") for e in evs])
        row["unseen_world"] = _mean([e["unseen_world"]["mean_at_n"] for e in evs])
        for j in (2, 3, 4):
            row[f"hop{j}"] = _mean([h.get(f"hop{j}") for e in evs
                                    for h in e["diagnose"].get("hops", {}).values()])
        rows.append(row)
    return rows

