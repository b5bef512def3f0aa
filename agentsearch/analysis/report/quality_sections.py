"""The report's sections on what was learned: the runs, eval score and training reward against
wall-clock and step, quality against wall-clock by method with time to a target, and eval by
question type before and after.

Time to target is ``agentsearch pareto``'s: a run's training seconds
(``time/train_cumulative``) at its first evaluation at or above the target; a method's is the
mean over the seeds that reach it, and its speed-up is that over the reference method's
(``pareto.choose_target``: ``on_policy_larger``, else the best on-policy method, else the best).
The default target is the best run's score at half its training time; the page's box sets
another (the table is recomputed in the page).
"""

from __future__ import annotations

import json
import math
import statistics
from html import escape

from agentsearch.analysis.pareto import choose_target, first_reach, pareto_frontier
from agentsearch.analysis.report.report_parts import (
    Context,
    Section,
    figure,
    legend,
    note,
    table,
)
from agentsearch.analysis.report.report_runs import ReportRun, number
from agentsearch.analysis.report.svg_charts import Band, Line, fmt, grouped_bars, line_chart

__all__ = ["runs_section", "quality_section", "frontier_section", "eval_types_section",
           "default_target", "time_to_target_rows"]

TIME = "training wall-clock, s (time/train_cumulative)"


def runs_section(ctx: Context) -> Section:
    rows = []
    for r in ctx.runs:
        prov = r.provenance[-1] if r.provenance else {}
        rev = (prov.get("git") or "")[:7] + ("" if prov.get("clean", True) else " (dirty)")
        rows.append([r.name, r.label, r.run.seed, r.engine, r.status,
                     r.run.final, r.run.train_seconds, rev or None,
                     "; ".join(r.run.problems) or None])
    body = table(["run", "method", "seed", "engine", "status", f"last {ctx.metric}",
                  "training s", "revision", "notes"], rows, cls="runs")
    machines = {s.get("machine") for r in ctx.runs for s in r.provenance[-1:]} - {None}
    if machines:
        body += note("machine: " + " | ".join(sorted(machines)))
    return Section("runs", f"Runs ({len(ctx.runs)})", body)


def _rolling(points: list[tuple[float, float]], k: int = 5) -> list[tuple[float, float]]:
    out, acc = [], []
    for x, y in points:
        acc = (acc + [y])[-k:]
        out.append((x, sum(acc) / len(acc)))
    return out


def quality_section(ctx: Context) -> Section:
    few = len(ctx.runs) <= 3
    parts = [legend([(m, ctx.color(m)) for m in ctx.by_method])]
    for x, x_label in (("time", TIME), ("step", "step")):
        lines = []
        for r in ctx.runs:
            pts = [(t if x == "time" else float(s), q) for t, q, s in r.run.points]
            lines.append(Line(pts, ctx.color(r.label), f"{r.name} ({r.label})", markers=True))
        chart = line_chart(f"eval-{x}", lines, x_label=x_label, y_label=ctx.metric)
        parts.append(figure(chart, f"{ctx.metric} at each evaluation, one line per run, "
                                   f"against {x_label}"))
    for x, x_label in (("time", TIME), ("step", "step")):
        lines = []
        for r in ctx.runs:
            key = r.reward_key()
            if key is None:
                continue
            pts = r.series(key, x=x)
            if few:
                lines.append(Line(pts, ctx.color(r.label), f"{r.name}: {key} per step", width=0.8,
                                  opacity=0.35))
            lines.append(Line(_rolling(pts), ctx.color(r.label),
                              f"{r.name} ({r.label}): {key}, 5-step mean", width=1.2,
                              opacity=1.0 if few else 0.7))
        caption = ("training reward (reward/total; OpenRLHF runs: rollout/reward_mean), mean of "
                   f"the last 5 steps{' (faint: each step)' if few else ''}, against {x_label}")
        parts.append(figure(line_chart(f"reward-{x}", lines, x_label=x_label,
                                       y_label="training reward"), caption)
                     if lines else note("no training reward logged yet"))
    return Section("quality", "Eval score and training reward", "".join(parts))


def default_target(ctx: Context) -> tuple[float | None, str]:
    """The best run's (highest last evaluation) score at half its training time: its last
    evaluation at or before that time."""
    usable = [r for r in ctx.runs if r.run.points]
    if not usable:
        return None, "no run has an evaluation"
    best = max(usable, key=lambda r: r.run.final)
    half = best.run.train_seconds / 2
    before = [q for t, q, _ in best.run.points if t <= half + 1e-9]
    score = before[-1] if before else best.run.points[0][1]
    # 4 decimals, rounded down: the box shows the target the table used, and the run reaches it
    return (math.floor(score * 1e4) / 1e4,
            f"{best.name}'s score at half its training time ({fmt(half)} s)")


def time_to_target_rows(ctx: Context, target: float) -> tuple[list[list], str | None]:
    """Per method: seeds that reached ``target``, mean and std of their time to it, and that
    mean over the reference method's; and the reference's label."""
    base, _ = choose_target(ctx.methods)
    reach = {m.label: [t for r in m.usable if (t := first_reach(r.points, target)) is not None]
             for m in ctx.methods}
    ref = base.label if base is not None else None
    ref_mean = statistics.fmean(reach[ref]) if ref and reach.get(ref) else None
    rows = []
    for m in ctx.methods:
        ts = reach[m.label]
        mean = statistics.fmean(ts) if ts else None
        std = statistics.stdev(ts) if len(ts) > 1 else None
        rows.append([m.label, f"{len(ts)}/{len(m.usable)}", mean, std,
                     mean / ref_mean if mean is not None and ref_mean else None])
    return rows, ref


def frontier_section(ctx: Context, target: float | None = None) -> Section:
    parts = [legend([(m, ctx.color(m)) for m in ctx.by_method])]
    lines, bands, means = [], [], []
    for m in ctx.methods:
        pts = [(s[0], v[0]) for s, v in zip(m.seconds, m.values)]
        means += pts
        lines.append(Line(pts, ctx.color(m.label), f"{m.label}: mean of {len(m.usable)} seed(s)",
                          width=2, markers=True))
        if len(m.usable) > 1:
            bands.append(Band([(s[0], v[0] - v[1], v[0] + v[1]) for s, v in zip(m.seconds,
                                                                                m.values)],
                              ctx.color(m.label), f"{m.label}: mean ± std over seeds"))
    front = pareto_frontier(means)
    if front:
        stairs = [p for a, b in zip(front, front[1:]) for p in (a, (b[0], a[1]))] + [front[-1]]
        lines.append(Line(stairs, "#888", "frontier: no other method mean is faster and better",
                          width=1, dashed=True))
    why = "set with --target"
    if target is None:
        target, why = default_target(ctx)
        why = "default: " + why
    hlines = [(target, f"target {fmt(target)}")] if target is not None else []
    parts.append(figure(line_chart("frontier", lines, x_label=TIME, y_label=ctx.metric,
                                   bands=bands, hlines=hlines),
                        "each method's mean over seeds (band: ± one std) against mean training "
                        "wall-clock; dashed: the frontier of the method means"))
    if target is None:
        parts.append(note("no evaluation yet: no time to target"))
        return Section("frontier", "Quality against wall-clock by method", "".join(parts))
    rows, ref = time_to_target_rows(ctx, target)
    data = {"runs": [{"method": r.label, "points": [[t, q] for t, q, _ in r.run.points]}
                     for r in ctx.runs if r.run.points],
            "methods": [m.label for m in ctx.methods], "reference": ref}
    parts.append(
        f'<p>Target <input id="target-input" type="number" step="any" value="{target!r}"> '
        f'({escape(why)}). Time to target: training seconds at the first evaluation '
        f'at or above it; speed-up: over {escape(ref or "-")}\'s time to it.</p>'
        + table(["method", "seeds reached", "time to target, s (mean)", "std",
                 f"speed-up: over {ref or '-'}"], rows, cls="ttt",
                row_ids=[str(r[0]) for r in rows])
        + f'<script type="application/json" id="ttt-data">{_json(data)}</script>')
    notes = list(ctx.messages)
    firsts = [r.run.points[0][1] for r in ctx.runs if r.run.points]
    if firsts and target <= min(firsts):
        notes.append(f"every run starts at or above the target {fmt(target)}: set a higher one")
    if any(r[0] == ref and r[2] is None for r in rows):  # its mean time to target
        notes.append(f"the reference, {ref}, does not reach the target: no speed-up")
    machines = {s.get("machine") for r in ctx.runs for s in r.provenance} - {None}
    if len(machines) > 1:
        notes.append(f"the runs come from {len(machines)} machines: their wall-clocks are not "
                     "like for like")
    if len({r.engine for r in ctx.runs}) > 1:
        notes.append("local and OpenRLHF runs are mixed: their phases are timed differently")
    if any(not s.get("clean", True) for r in ctx.runs for s in r.provenance):
        notes.append("some runs were made on a tree with uncommitted changes")
    parts += [note(n) for n in notes]
    return Section("frontier", "Quality against wall-clock by method, time to target",
                   "".join(parts))


def _json(data) -> str:
    """JSON safe inside a ``<script>`` element."""
    return json.dumps(data, separators=(",", ":")).replace("</", "<\\/")


def _types(runs: list[ReportRun], metric: str) -> list[str]:
    leaf = metric.rsplit("/", 1)[-1]
    return sorted({k.split("/")[1] for r in runs for rec in r.steps.values() for k in rec
                   if k.startswith("eval/") and k.count("/") == 2 and k.endswith("/" + leaf)})


def eval_types_section(ctx: Context) -> Section:
    leaf = ctx.metric.rsplit("/", 1)[-1]
    types = _types(ctx.runs, ctx.metric)
    cats = types + ["all"]
    rows, groups = [], []
    for label, runs in ctx.by_method.items():
        before, after = [], []
        for t in cats:
            key = ctx.metric if t == "all" else f"eval/{t}/{leaf}"
            firsts, lasts = [], []
            for r in runs:
                vals = [v for rec in r.steps.values() if (v := number(rec.get(key))) is not None]
                if vals:
                    firsts.append(vals[0])
                    lasts.append(vals[-1])
            before.append(statistics.fmean(firsts) if firsts else None)
            after.append(statistics.fmean(lasts) if lasts else None)
            rows.append([label, t, before[-1], after[-1],
                         after[-1] - before[-1] if firsts else None])
        groups.append((f"{label}: before", before, ctx.color(label) + "66"))
        groups.append((f"{label}: after", after, ctx.color(label)))
    body = "" if types else note(f"no per-type scores (eval/<type>/{leaf}) logged; 'all' only")
    chart = grouped_bars("eval-types", cats, groups[:12], y_label=ctx.metric)
    body += figure(chart, "per question type, first evaluation (light) and last (dark), mean "
                          "over each method's seeds")
    body += table(["method", "type", "before", "after", "change"], rows, cls="types")
    return Section("eval-types", "Eval by question type, before and after", body)
