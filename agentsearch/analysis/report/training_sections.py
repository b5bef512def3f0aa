"""The report's sections on how training spent its time and what kept it honest: seconds per
step by phase (``time/*``) and what overlapped (``time/overlap``), replay (``replay/*`` and the
scan's per-group drift and headroom, ``replay_scan.jsonl``), the staleness gate of asynchronous
runs (``async/*``), and health alarms (``health/*``) with infrastructure errors on the training
clock. Per-step charts show each method's mean over its seeds."""

from __future__ import annotations

import statistics
from collections import defaultdict

from agentsearch.analysis.report.report_parts import (
    Context,
    Section,
    figure,
    legend,
    method_mean,
    note,
    step_bins,
    table,
)
from agentsearch.analysis.report.report_runs import ReportRun, number
from agentsearch.analysis.report.svg_charts import (
    PALETTE,
    Line,
    boxes,
    grouped_bars,
    hbars,
    lanes,
    line_chart,
    stacked_bars,
)

__all__ = ["time_section", "replay_section", "async_section", "health_section", "PHASE_KEYS"]

PHASE_KEYS = ("generate", "env", "reward", "logprobs", "replay_scan", "update", "sync", "other")
"""``time/<phase>`` keys of a step, in loop order (``trainer.timing``; ``other``: the step's
seconds no phase claimed)."""
EXCLUDED_KEYS = ("eval", "checkpoint", "sft")
HEALTH_KEYS = ("health/zero_reward_steps", "health/all_zero_variance_steps",
               "health/no_signal_steps", "health/tool_error_streak",
               "health/replay_drought_steps", "health/nonfinite_steps",
               "health/logprob_gap_jumps", "health/alarms")
INFRA_KEYS = ("rollout/infra_errors", "rollout/infra_retried", "health/infra_outage_s",
              "eval/invalid")
TIME = "training wall-clock, s (time/train_cumulative)"


def _phase_colors() -> dict[str, str]:
    return {p: PALETTE[i % len(PALETTE)] for i, p in enumerate(PHASE_KEYS)}


def _mean_by_step(runs: list[ReportRun], key: str) -> dict[int, float]:
    return {int(s): v for s, v in method_mean(runs, key)}


def _mean(xs: list[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def time_section(ctx: Context) -> Section:
    colors = _phase_colors()
    labels = list(ctx.by_method)
    per_step = {m: {p: statistics.fmean(v for _, v in s) if (s := method_mean(
        ctx.by_method[m], f"time/{p}")) else 0.0 for p in (*PHASE_KEYS, "step", "overlap")}
        for m in labels}
    parts = [legend([(p, colors[p]) for p in PHASE_KEYS] + [("step wall-clock", "#000")])]
    parts.append(figure(hbars(
        "phases-by-method", labels, [(p, [per_step[m][p] for m in labels], colors[p])
                                     for p in PHASE_KEYS],
        x_label="s per step (mean over steps and seeds)",
        marks=("time/step", [per_step[m]["step"] for m in labels])),
        "mean seconds per step by phase, per method; black tick: the step's wall-clock (the "
        "phases reach past it by what overlapped)"))
    for m in ctx.charted_methods():
        runs = ctx.by_method[m]
        means = {p: _mean_by_step(runs, f"time/{p}") for p in (*PHASE_KEYS, "step")}
        bins = step_bins(sorted(means["step"]))
        if not bins:
            continue

        def over_bin(p: str, means=means, bins=bins) -> list[float | None]:
            return [_mean([means[p][s] for s in b if s in means[p]]) for b in bins]

        wide = len(bins[0]) > 1
        parts.append(figure(stacked_bars(
            f"phases-{m}", [b[0] for b in bins], [(p, over_bin(p), colors[p]) for p in PHASE_KEYS],
            x_label="step", y_label="s", line=("time/step", over_bin("step"))),
            f"{m}: seconds of each step by phase (mean over {len(runs)} run(s)"
            f"{f', and over {len(bins[0])} consecutive steps a bar' if wide else ''}); black: "
            "the step's wall-clock"))
    overlap = [Line(method_mean(ctx.by_method[m], "time/overlap"), ctx.color(m),
                    f"{m}: time/overlap") for m in labels]
    if any(v > 0 for ln in overlap for _, v in ln.points):
        parts.append(figure(line_chart("overlap", overlap, x_label="step",
                                       y_label="s overlapped", zero=True),
                            "time/overlap: seconds by which the phases' sum exceeded the step's "
                            "wall-clock (a streaming rollout's generation beside its tool calls)"))
    else:
        parts.append(note("time/overlap is 0 on every step: no phase ran beside another "
                          "(lock-step rollout)"))
    rows = [[m] + [per_step[m][p] for p in (*PHASE_KEYS, "step", "overlap")] for m in labels]
    parts.append(table(["method", *PHASE_KEYS, "step", "overlap"], rows, cls="phases"))
    excluded = [[r.name] + [sum(v for _, v in r.series(f"time/{k}", first=0)) for k in
                            EXCLUDED_KEYS] for r in ctx.runs]
    parts.append("<p>Timed but not training time (seconds in all):</p>"
                 + table(["run", *EXCLUDED_KEYS], excluded, cls="excluded"))
    return Section("time", "Seconds per step by phase", "".join(parts))


def _age_order(key: str) -> int:
    """``replay/drift_age_4_7`` -> 4, ``_16up`` -> 16: the buckets of ``replay.stats``, in order."""
    return int(key.removeprefix("replay/drift_age_").split("_")[0].removesuffix("up"))


def _uses_replay(r: ReportRun) -> bool:
    kind = (r.run.config.get("replay") or {}).get("kind")
    return kind != "none" and any(number(rec.get("replay/candidates")) for rec in
                                  r.steps.values())


def _tau(runs: list[ReportRun]) -> float | None:
    taus = {number((r.run.config.get("replay") or {}).get("tau")) for r in runs}
    return taus.pop() if len(taus) == 1 else None


def replay_section(ctx: Context) -> Section:
    replaying = {m: [r for r in runs if _uses_replay(r)] for m, runs in ctx.by_method.items()}
    replaying = {m: rs for m, rs in replaying.items() if rs}
    if not replaying:
        return Section("replay", "Replay", note(
            "no run replayed a group (replay.kind=none, or no replay/* metrics yet)"))
    parts = [legend([(m, ctx.color(m)) for m in replaying])]

    def per_method(key: str, name: str, y_label: str, caption: str) -> None:
        lines = [Line(method_mean(rs, key), ctx.color(m), f"{m}: {key}") for m, rs in
                 replaying.items()]
        if any(ln.points for ln in lines):
            parts.append(figure(line_chart(name, lines, x_label="step", y_label=y_label,
                                           zero=True), caption))

    per_method("replay/accept_rate", "accept-rate", "accept rate",
               "replay/accept_rate: share of the scanned groups that passed the drift gate")
    for m, rs in list(replaying.items())[:len(ctx.charted_methods())]:
        scans: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        for r in rs:
            for sc in r.scans:
                for k in ("drift", "headroom"):
                    scans[sc["step"]][k] += [v for v in sc.get(k, []) if v is not None]
        tau = _tau(rs)
        for k in ("drift", "headroom"):
            bins = step_bins(sorted(s for s in scans if scans[s][k]))
            if bins:
                rules = [(tau, f"tau {tau:g}")] if k == "drift" and tau is not None else []
                pooled = [[v for s in b for v in scans[s][k]] for b in bins]
                wide = f", {len(bins[0])} steps a box" if len(bins[0]) > 1 else ""
                parts.append(figure(boxes(f"{k}-{m}", [b[0] for b in bins], pooled,
                                          ctx.color(m), x_label="step", y_label=k,
                                          hlines=rules),
                                    f"{m}: {k} of every scanned group, per step{wide} (box: "
                                    "quartiles, whiskers: min and max; replay_scan.jsonl)"))
            else:
                per_method_lines = [Line(method_mean(rs, f"replay/{k}_{w}"), c,
                                         f"{m}: replay/{k}_{w}")
                                    for w, c in (("accepted", ctx.color(m)), ("rejected", "#999"))]
                rules = [(tau, f"tau {tau:g}")] if k == "drift" and tau is not None else []
                if any(ln.points for ln in per_method_lines):
                    parts.append(figure(line_chart(f"{k}-{m}", per_method_lines, x_label="step",
                                                   y_label=k, zero=True, hlines=rules),
                                        f"{m}: mean {k} of the accepted (colour) and rejected "
                                        "(grey) groups per step (no replay_scan.jsonl)"))
    groups = []
    for m, rs in replaying.items():
        vals = []
        for d in range(10):
            lasts = [s[-1][1] for r in rs if (s := r.series(f"replay/exposure_h0_decile_{d}"))]
            vals.append(statistics.fmean(lasts) if lasts else None)
        groups.append((m, vals, ctx.color(m)))
    if any(v is not None for _, vs, _ in groups for v in vs):
        parts.append(figure(grouped_bars("deciles", [f"d{d}" for d in range(10)], groups,
                                         y_label="replays per group"),
                            "replays per group by decile of its headroom when it entered the "
                            "buffer (d0: lowest), at the last step"))
    per_method("replay/buffer_size", "buffer", "groups", "replay/buffer_size per step")
    per_method("replay/age_mean", "age", "steps", "replay/age_mean: steps since the replayed "
               "groups were generated")
    ages = sorted({k for rs in replaying.values() for r in rs
                   for k in r.keys("replay/drift_age_")}, key=_age_order)
    groups = [(m, [statistics.fmean(v) if (v := [x for _, x in method_mean(rs, k)]) else None
                   for k in ages], ctx.color(m)) for m, rs in replaying.items()]
    if any(v is not None for _, vs, _ in groups for v in vs):
        parts.append(figure(grouped_bars("drift-by-age", [k.removeprefix("replay/drift_age_")
                                                          for k in ages], groups,
                                         y_label="drift"),
                            "mean drift of the scanned groups by age in steps "
                            "(replay/drift_age_*)"))
    return Section("replay", "Replay", "".join(parts))


def async_section(ctx: Context) -> Section:
    runs = {m: [r for r in rs if r.keys("async/")] for m, rs in ctx.by_method.items()}
    runs = {m: rs for m, rs in runs.items() if rs}
    if not runs:
        return Section("async", "Staleness gate (asynchronous runs)", note(
            "no async/* metrics: every run is lock-step (async.enabled=false), so no group was "
            "generated by older weights"))
    parts = []
    for m, rs in list(runs.items())[:len(ctx.charted_methods())]:
        stale, dropped = _mean_by_step(rs, "async/stale_groups"), _mean_by_step(
            rs, "async/dropped_by_drift")
        steps = sorted(stale)
        if steps:
            parts.append(figure(stacked_bars(
                f"gate-{m}", steps, [("admitted", [stale[s] - dropped.get(s, 0.0) for s in steps],
                                      "#2ca02c"),
                                     ("dropped by drift", [dropped.get(s) for s in steps],
                                      "#d62728")], x_label="step", y_label="stale groups"),
                f"{m}: stale fresh groups per step the drift gate admitted (green) and dropped "
                "(red)"))
    tau = _tau([r for rs in runs.values() for r in rs])
    lines = [Line(_gate_drift(rs), ctx.color(m), f"{m}: async/drift_fresh_mean")
             for m, rs in runs.items()]
    parts.append(figure(line_chart("gate-drift", lines, x_label="step", y_label="drift",
                                   hlines=[(tau, f"tau {tau:g}")] if tau is not None else (),
                                   zero=True),
                        "mean drift of the stale fresh groups per step that had any, against the "
                        "gate's tau"))
    keys = sorted({k for rs in runs.values() for r in rs for k in r.keys("async/")})
    rows = [[m, k, statistics.fmean(v) if (v := [x for _, x in method_mean(rs, k)]) else None]
            for m, rs in runs.items() for k in keys]
    parts.append(table(["method", "metric", "mean per step"], rows, cls="async"))
    return Section("async", "Staleness gate (asynchronous runs)", "".join(parts))


def _gate_drift(runs: list[ReportRun]) -> list[tuple[float, float]]:
    """Per step with stale groups, the mean of ``async/drift_fresh_mean`` over ``runs`` (a step
    without any logs 0 there: no drift was measured)."""
    at: dict[int, list[float]] = {}
    for r in runs:
        for step, rec in r.steps.items():
            drift = number(rec.get("async/drift_fresh_mean"))
            if (number(rec.get("async/stale_groups")) or 0) > 0 and drift is not None:
                at.setdefault(step, []).append(drift)
    return [(float(s), statistics.fmean(v)) for s, v in sorted(at.items())]


def health_section(ctx: Context) -> Section:
    t_max = max((t for r in ctx.runs if (t := r.run_seconds()) is not None), default=1.0)
    rows, counts = [], []
    for i, key in enumerate(HEALTH_KEYS + INFRA_KEYS):
        events = []
        for r in ctx.runs:
            for step, rec in r.steps.items():
                v, t = number(rec.get(key)), number(rec.get("time/train_cumulative"))
                if v is not None and v > 0 and t is not None:
                    events.append((t, v, f"{r.name} step {step}, {t:.0f} s: {key} = {v:g}"))
        rows.append((key, events, "#d62728" if key in INFRA_KEYS else PALETTE[i % 4 + 4]))
        counts.append([key, len(events), max((v for _, v, _ in events), default=0.0)])
    parts = [figure(lanes("health", rows, x_range=(0.0, t_max), x_label=TIME),
                    "each mark: a step where the counter was above 0 (darker: larger); red "
                    "lanes: infrastructure errors, which never reach training")]
    if not any(c[1] for c in counts):
        parts.append(note("no alarm and no infrastructure error in any run"))
    parts.append(table(["metric", "steps above 0", "largest"], counts, cls="health"))
    return Section("health", "Health alarms and infrastructure errors", "".join(parts))
