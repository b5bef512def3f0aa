"""Quality versus wall-clock from run folders: curves per method, the frontier, time to target.

Each run's ``metrics.jsonl`` has evaluation records (``eval/...`` keys) stamped with
``time/train_cumulative`` (training seconds, evaluation excluded). A point is (seconds,
quality); a run's curve is its points in time order; runs that differ only in their seed
form a *method* (``agentsearch.analysis.runs``), whose curve is the mean ± std over seeds.
The *frontier* keeps the points that no other point beats on both axes (less time and
higher quality).

**Time to target.** The target is a baseline's final score: the mean over its seeds of the
metric at their last evaluation. The baseline is ``--target-method`` (default
``on_policy_larger`` when present, else the best-scoring on-policy method, else the
best-scoring method), or ``--target-score`` sets the score directly. For every run, the
time to target is the training wall-clock of its first evaluation at or above the target
("never" if none is). A method's *speed-up* (``speedup``) is its mean time to target over the
baseline's mean time to the same target (seeds that reach it): 0.8 reads "got there in 80% of
the time the baseline needed to". A run's ``ratio`` is something else, named in the tables for
what it is: its time to target as a *share of the baseline's training time* (the baseline seeds'
``time/train_cumulative`` at their last evaluation), which is below 1 for the baseline itself.

    agentsearch pareto runs/replay_suite/*-s* --out runs/replay_suite/analysis/pareto.png

writes, next to ``pareto.png`` (curves and time-to-target ratios): ``pareto.json``,
``pareto_curves.csv`` (every run's points), ``pareto_methods.csv`` (mean curves),
``pareto_time_to_target.csv`` (one row per run), ``pareto.md`` (the tables), and the
replay diagnostics ``pareto_replay.png`` / ``pareto_replay.csv`` / ``pareto_time.csv``
(``agentsearch.analysis.replay_diagnostics``). ``--out X.json`` writes the JSON only.
Unusable input (no run with evaluation rows, an unknown ``--target-method``) exits 2 after
printing what it could; it never raises a traceback for a bad run folder.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from agentsearch.analysis.runs import (
    MethodCurve,
    Run,
    cell,
    group_methods,
    load_run,
    load_runs,
    mean_std,
    write_csv,
)

__all__ = ["run_curve", "pareto_frontier", "choose_target", "time_to_target", "analyse", "rescaled",
           "MACHINE_FREE", "main"]

DEFAULT_TARGET = "on_policy_larger"


def run_curve(run_dir: str | Path,
              metric: str = "eval/mean_at_n") -> list[tuple[float, float, int]]:
    """(train seconds, metric, step) for every record that has ``metric``."""
    return sorted(load_run(run_dir, metric).points)


def pareto_frontier(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Points not dominated by any other (lower-or-equal time and higher-or-equal quality,
    strictly better in one). Sorted by time."""
    best = float("-inf")
    front = []
    for t, q in sorted(points, key=lambda p: (p[0], -p[1])):
        if q > best:
            front.append((t, q))
            best = q
    return front


def choose_target(methods: list[MethodCurve],
                  name: str | None = None) -> tuple[MethodCurve | None, str]:
    """The baseline method (module doc) and a sentence saying which and why; None if
    ``name`` is given and absent, or if no method has a final score."""
    scored = [m for m in methods if m.final is not None]
    if name:
        found = next((m for m in scored if m.label == name), None)
        if found is None:
            return None, (f"--target-method {name!r} is not among the methods with evaluations: "
                          f"{', '.join(m.label for m in scored) or 'none'}")
        return found, f"target: {name}'s final score"
    if not scored:
        return None, "no method has an evaluation: no target"
    found = next((m for m in scored if m.label == DEFAULT_TARGET), None)
    if found is not None:
        return found, f"target: {DEFAULT_TARGET}'s final score"
    base = [m for m in scored if m.on_policy]
    pool, kind = ((base, "on-policy baseline") if base
                  else (scored, "method (no on-policy run given)"))
    found = max(pool, key=lambda m: m.final[0])
    return found, f"target: the best-scoring {kind}, {found.label} ({DEFAULT_TARGET} absent)"


def first_reach(points: list[tuple[float, float, int]], target: float) -> float | None:
    """Training seconds of the first point with value >= target (None: never)."""
    return next((t for t, q, _ in points if q >= target - 1e-12), None)


def time_to_target(methods: list[MethodCurve], target: float,
                   baseline_seconds: float | None) -> list[dict]:
    """One row per run: final, training seconds, time to ``target`` and its ratio to
    ``baseline_seconds`` (None where never reached or no baseline time)."""
    rows = []
    for m in methods:
        for r in m.usable:
            t = first_reach(r.points, target)
            ratio = t / baseline_seconds if t is not None and baseline_seconds else None
            rows.append({"method": m.label, "run": str(r.path), "seed": r.seed, "final": r.final,
                         "train_seconds": r.train_seconds, "time_to_target": t, "ratio": ratio})
    return rows


def _method_rows(methods: list[MethodCurve], ttt: list[dict]) -> list[dict]:
    out = []
    for m in methods:
        mine = [r for r in ttt if r["method"] == m.label]
        reached = [r for r in mine if r["time_to_target"] is not None]
        ratios = [r["ratio"] for r in reached if r["ratio"] is not None]
        row = {"method": m.label, "seeds": len(m.usable), "runs": len(m.runs),
               "final_mean": None, "final_std": None, "train_s_mean": None, "train_s_std": None,
               "reached": f"{len(reached)}/{len(mine)}",
               "time_to_target_mean": (mean_std([r["time_to_target"] for r in reached])[0]
                                       if reached else None),
               "ratio_mean": mean_std(ratios)[0] if ratios else None,
               "ratio_std": mean_std(ratios)[1] if ratios else None}
        if m.final is not None:
            row.update(final_mean=m.final[0], final_std=m.final[1],
                       train_s_mean=m.train_seconds[0], train_s_std=m.train_seconds[1])
        out.append(row)
    return out


MACHINE_FREE = ("time/env",)
"""Per-step seconds that a machine-speed factor leaves as measured: waiting on the environment
(tool latency, a remote retriever) takes as long on a faster machine."""


def rescaled(run: Run, factor: float) -> list[tuple[float, float, int]]:
    """The run's points with their training seconds scaled by ``factor``, except the seconds of
    ``MACHINE_FREE`` up to each point's step (a re-logged step counts once: its last record)."""
    steps = {r["step"]: r for r in run.records if isinstance(r.get("step"), int)}
    points = []
    for t, q, step in run.points:
        waited = sum(float(r.get(k) or 0.0) for s, r in steps.items() if 0 < s <= step
                     for k in MACHINE_FREE)
        points.append((waited + factor * (t - waited), q, step))
    return points


def analyse(run_dirs, metric: str = "eval/mean_at_n", label_by: str = "auto",
            target_method: str | None = None, target_score: float | None = None,
            time_scale: Callable[[Run], float | None] | None = None) -> dict:
    """Everything ``agentsearch pareto`` reports, as a dict (``ok`` False for unusable input).
    ``time_scale``: a factor per run (None: 1) applied to its seconds before anything is
    computed from them, e.g. to put runs from machines of different speeds on one clock
    (``rescaled``); the factors are in ``result["time_scale"]`` by run name."""
    runs = load_runs(run_dirs, metric, label_by)
    factors = {r.name: time_scale(r) for r in runs} if time_scale else {}
    for r in runs:
        if factors.get(r.name) is not None:
            r.points = rescaled(r, factors[r.name])
    messages = [f"{r.path}: {p}" for r in runs for p in r.problems]
    methods, notes = group_methods(runs)
    messages += notes
    usable = [r for r in runs if r.points]
    result = {"metric": metric, "ok": bool(usable), "runs": [], "methods": [], "frontier": [],
              "method_frontier": [], "target": None, "time_to_target": [], "messages": messages,
              "curves": {str(r.path): [list(p) for p in r.points] for r in runs},
              "time_scale": factors}
    result["_methods"], result["_runs"] = methods, runs  # for the plots; dropped from the JSON
    if not usable:
        messages.append("none of the runs has usable evaluation rows: nothing to compare")
        return result
    result["runs"] = [{"run": str(r.path), "method": r.label, "seed": r.seed,
                       "points": len(r.points), "final": r.final,
                       "best": max(q for _, q, _ in r.points),
                       "train_seconds": r.train_seconds, "steps": r.points[-1][2]} for r in usable]
    result["frontier"] = [list(p) for p in pareto_frontier([(t, q) for r in usable
                                                            for t, q, _ in r.points])]
    # (seconds, value, method) of every mean point; methods at an equal point all keep their label
    mean_pts = list(dict.fromkeys((s[0], v[0], m.label) for m in methods
                                  for s, v in zip(m.seconds, m.values)))
    front = set(pareto_frontier([(t, q) for t, q, _ in mean_pts]))
    result["method_frontier"] = [[t, q, lab] for t, q, lab in sorted(mean_pts, key=lambda p: p[:2])
                                 if (t, q) in front]
    base, why = choose_target(methods, target_method)
    if base is None:  # an unknown --target-method: say so, keep the other tables, exit 2
        result["ok"] = False
        messages.append(why)
    baseline_s = base.train_seconds[0] if base is not None else None
    score = (target_score if target_score is not None
             else (base.final[0] if base is not None else None))
    if target_score is not None:
        why = f"target: --target-score {target_score:g}" + (
            f"; ratios to {base.label}'s wall-clock" if base is not None else "")
    if score is not None:
        result["target"] = {"method": base.label if base is not None else None, "score": score,
                            "baseline_train_seconds": baseline_s, "reason": why}
        result["time_to_target"] = time_to_target(methods, score, baseline_s)
        if not any(r["time_to_target"] is not None for r in result["time_to_target"]):
            messages.append(f"no run reaches the target {score:.4f}: "
                            "every time to target is 'never'")
    result["methods"] = _method_rows(methods, result["time_to_target"])
    base_row = next((m for m in result["methods"]
                     if base is not None and m["method"] == base.label), None)
    base_ttt = base_row["time_to_target_mean"] if base_row else None
    for m in result["methods"]:  # the one speed-up: time to target over the baseline's time to it
        m["speedup"] = (m["time_to_target_mean"] / base_ttt
                        if base_ttt and m["time_to_target_mean"] else None)
    return result


# ---------------------------------------------------------------- printing and files
def tables_markdown(result: dict) -> str:
    """The methods table, the time-to-target table, the frontier and the notes, as markdown."""
    lines = [f"Metric: `{result['metric']}`.", ""]
    tgt = result["target"]
    if tgt:
        lines += [f"Target: {tgt['score']:.4f} ({tgt['reason']}); baseline training wall-clock "
                  f"{cell(tgt['baseline_train_seconds'], '.1f')} s.", ""]
    if result["methods"]:
        lines += ["| method | seeds | final (mean ± std) | train s (mean ± std) | reached target | "
                  "time to target (s) | speed-up: time to target over the baseline's | "
                  "time to target as a share of the baseline's training time (mean ± std) |",
                  "|---|---|---|---|---|---|---|---|"]
    for m in result["methods"]:
        lines.append(f"| {m['method']} | {m['seeds']}/{m['runs']} | "
                     f"{cell(m['final_mean'])} ± {cell(m['final_std'])} | "
                     f"{cell(m['train_s_mean'], '.1f')} ± {cell(m['train_s_std'], '.1f')} | "
                     f"{m['reached']} | {cell(m['time_to_target_mean'], '.1f', 'never')} | "
                     f"{cell(m.get('speedup'), '.3f', '-')} | "
                     f"{cell(m['ratio_mean'], '.3f', 'never')} ± {cell(m['ratio_std'], '.3f')} |")
    if result["time_to_target"]:
        lines += ["", "| method | run | seed | final | train s | time to target (s) | "
                  "share of the baseline's training time |",
                  "|---|---|---|---|---|---|---|"]
        for r in result["time_to_target"]:
            lines.append(f"| {r['method']} | {Path(r['run']).name} | {r['seed']} | "
                         f"{cell(r['final'])} | {cell(r['train_seconds'], '.1f')} | "
                         f"{cell(r['time_to_target'], '.1f', 'never')} | "
                         f"{cell(r['ratio'], '.3f', 'never')} |")
    if result["method_frontier"]:
        lines += ["", "Frontier (method means): " + ", ".join(
            f"{lab} ({t:.0f} s, {q:.3f})" for t, q, lab in result["method_frontier"])]
    if result["messages"]:
        lines += ["", "Notes:", *[f"- {m}" for m in result["messages"]]]
    return "\n".join(lines) + "\n"


def write_outputs(result: dict, out: Path) -> list[Path]:
    """The files of the module doc; returns their paths."""
    folder, stem = (out.parent, out.stem) if out.suffix else (out, "pareto")
    folder.mkdir(parents=True, exist_ok=True)
    if out.suffix == ".json":
        out.write_text(json.dumps({k: v for k, v in result.items() if not k.startswith("_")},
                                  indent=1))
        return [out]
    from agentsearch.analysis.plots import plot_methods
    from agentsearch.analysis.replay_diagnostics import replay_diagnostics, write_diagnostics

    methods: list[MethodCurve] = result["_methods"]
    runs: list[Run] = result["_runs"]
    diag = replay_diagnostics(methods)
    result["messages"] += diag["messages"]
    result["time_breakdown"], result["replay"] = diag["time"], diag["summary"]
    result["_diagnostics_markdown"] = diag["markdown"]
    public = {k: v for k, v in result.items() if not k.startswith("_")}
    written = [folder / f"{stem}.json", folder / f"{stem}.md", folder / f"{stem}_curves.csv",
               folder / f"{stem}_methods.csv", folder / f"{stem}_time_to_target.csv"]
    written[0].write_text(json.dumps(public, indent=1))
    written[1].write_text(tables_markdown(result) + "\n" + diag["markdown"])
    write_csv(written[2], [{"method": r.label, "run": str(r.path), "seed": r.seed, "step": s,
                             "train_seconds": t, "value": q} for r in runs for t, q, s in r.points],
               ["method", "run", "seed", "step", "train_seconds", "value"])
    write_csv(written[3], [{"method": m.label, "seeds": len(m.usable), "step": st,
                             "train_seconds_mean": s[0], "train_seconds_std": s[1],
                             "value_mean": v[0], "value_std": v[1]}
                            for m in methods for st, s, v in zip(m.steps, m.seconds, m.values)],
               ["method", "seeds", "step", "train_seconds_mean", "train_seconds_std", "value_mean",
                "value_std"])
    never = [{**r, **({"time_to_target": "never", "ratio": "never"}
                      if r["time_to_target"] is None else {})}
             for r in result["time_to_target"]]
    write_csv(written[4], never,
              ["method", "run", "seed", "final", "train_seconds", "time_to_target", "ratio"])
    written.append(plot_methods(result, folder / f"{stem}.png"))
    written += write_diagnostics(diag, folder, stem)
    return written


def main(a) -> int:
    """``agentsearch pareto RUN_DIR... [--metric M] [--out PATH] [--label-by auto|dir|KEYS]
    [--target-method NAME] [--target-score X]``."""
    result = analyse(a.runs, a.metric, getattr(a, "label_by", "auto") or "auto",
                     getattr(a, "target_method", None), getattr(a, "target_score", None))
    print(f"{'run':40s} {'method':18s} {'final':>8s} {'best':>8s} {'train_s':>9s} {'steps':>6s}")
    for r in result["runs"]:
        print(f"{r['run'][-40:]:40s} {r['method'][:18]:18s} {r['final']:8.4f} {r['best']:8.4f} "
              f"{r['train_seconds']:9.1f} {r['steps']:6d}")
    if result["runs"]:
        print("frontier:", ", ".join(f"({t:.0f}s, {q:.3f})" for t, q in result["frontier"]))
    if getattr(a, "out", None) and result["runs"]:
        written = write_outputs(result, Path(a.out))
        print(tables_markdown(result) + "\n" + result.get("_diagnostics_markdown", ""), end="")
        print("wrote " + ", ".join(str(p) for p in written))
    else:
        print(tables_markdown(result), end="")
    return 0 if result["ok"] else 2
