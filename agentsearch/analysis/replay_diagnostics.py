"""Replay diagnostics and where each second goes, per method, from run folders' metrics.

From every training record (step >= 1) of the runs of a method, averaged over seeds:

- ``replay/accept_rate`` (share of scanned groups that passed the gate; steps that scanned
  nothing are left out), ``replay/scan_depth`` (groups scanned per step) and
  ``replay/age_mean`` (steps since the replayed groups were generated), per step; the
  lifetime counters ``replay/exposure_top10_share``, ``never_replayed_frac`` and
  ``accept_rate_lifetime`` at the last step;
- replay count per group by decile of its initial headroom: the last
  ``replay/exposure_h0_decile_0..9`` of each run (``agentsearch.replay.stats``), which shows
  whether a strategy spends its replays on high-headroom groups;
- drift by age: ``replay/drift_age_*`` (the gate's drift of the groups scanned, by steps
  since generation; ``agentsearch.replay.stats``), mean over steps and seeds;
- seconds per step by phase (``time/generate``, ``env``, ``reward``, ``logprobs``,
  ``replay_scan``, ``update``, ``sync``, ``other``, ``step``) and the replay scan's share of
  a step. With a ``naive`` method present, ``scan_over_naive`` is the extra selection cost
  over naive replay (which scores nothing) as a share of the method's step time.

On-policy methods (``replay.kind=none``) have no replay diagnostics but appear in the time
table. ``agentsearch pareto --out`` writes ``STEM_replay.png``, ``STEM_replay.csv`` and
``STEM_time.csv``.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from agentsearch.analysis.runs import MethodCurve, Run, cell, write_csv

__all__ = ["replay_diagnostics", "write_diagnostics", "SERIES", "PHASE_KEYS"]

SERIES = ("replay/accept_rate", "replay/scan_depth", "replay/age_mean")
DECILES = tuple(f"replay/exposure_h0_decile_{d}" for d in range(10))
LIFETIME = ("replay/exposure_top10_share", "replay/never_replayed_frac",
            "replay/accept_rate_lifetime")
AGE_PREFIX = "replay/drift_age_"
PHASE_KEYS = ("generate", "env", "reward", "logprobs", "replay_scan", "update", "sync", "other",
              "step")


def _train_records(r: Run) -> list[dict]:
    return [x for x in r.records if isinstance(x.get("step"), int) and x["step"] >= 1
            and isinstance(x.get("time/step"), (int, float))]


def _uses_replay(m: MethodCurve) -> bool:
    kinds = {(r.config.get("replay") or {}).get("kind") for r in m.runs}
    if kinds and kinds <= {"none"}:
        return False
    return any(isinstance(x.get("replay/candidates"), (int, float)) and x["replay/candidates"] > 0
               for r in m.runs for x in r.records)


def _mean(xs: list[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def _series(m: MethodCurve, key: str) -> list[tuple[int, float]]:
    """Mean over seeds per step of ``key`` (accept_rate only where something was scanned)."""
    by_step: dict[int, list[float]] = {}
    for r in m.runs:
        for x in _train_records(r):
            v = x.get(key)
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                continue
            if key == "replay/accept_rate" and not x.get("replay/scan_depth"):
                continue
            by_step.setdefault(x["step"], []).append(float(v))
    return [(s, statistics.fmean(v)) for s, v in sorted(by_step.items())]


def _deciles(m: MethodCurve) -> list[float] | None:
    per_run = []
    for r in m.runs:
        last = next((x for x in reversed(r.records) if DECILES[0] in x), None)
        if last is not None and all(isinstance(last.get(k), (int, float)) for k in DECILES):
            per_run.append([float(last[k]) for k in DECILES])
    return [statistics.fmean(col) for col in zip(*per_run)] if per_run else None


def _youngest_first(keys: set[str], prefix: str) -> list[str]:
    """``PREFIX1``, ``PREFIX2_3``, ..., ``PREFIX16up`` ordered by the range's first age."""
    return sorted(keys, key=lambda k: int(k[len(prefix):].split("_")[0].removesuffix("up")))


def _age_keys(m: MethodCurve) -> list[str]:
    """The ``replay/drift_age_*`` keys in the method's records, youngest range first."""
    return _youngest_first({k for r in m.runs for x in r.records for k in x
                            if k.startswith(AGE_PREFIX)}, AGE_PREFIX)


def _time_row(m: MethodCurve) -> dict:
    recs = [x for r in m.runs for x in _train_records(r)]
    row = {"method": m.label, "steps": len(recs)}
    for k in PHASE_KEYS:
        row[k] = _mean([float(x[f"time/{k}"]) for x in recs
                        if isinstance(x.get(f"time/{k}"), (int, float))])
    row["replay_scan_share"] = (row["replay_scan"] / row["step"]
                                if row["replay_scan"] is not None and row["step"] else None)
    return row


def replay_diagnostics(methods: list[MethodCurve]) -> dict:
    """Series, deciles, a summary row per replay method, the time table, notes and markdown."""
    out: dict = {"series": {}, "deciles": {}, "summary": [], "time": [], "messages": []}
    for m in methods:
        out["time"].append(_time_row(m))
        if not _uses_replay(m):
            continue
        out["series"][m.label] = {k: _series(m, k) for k in SERIES}
        dec = _deciles(m)
        if dec is None:
            out["messages"].append(f"{m.label}: no replay/exposure_h0_decile_* in its metrics "
                                   "(runs from before that metric was logged, or fewer than 10 "
                                   "groups admitted)")
        else:
            out["deciles"][m.label] = dec
        row = {"method": m.label}
        for k in SERIES + ("replay/accepted",):
            row[k.split("/", 1)[1]] = _mean([v for _, v in _series(m, k)])
        for k in LIFETIME:  # lifetime counters: their last value
            row[k.split("/", 1)[1]] = _mean([pts[-1][1] for r in m.runs
                                             if (pts := _series(MethodCurve(m.label, [r]), k))])
        row.update({f"h0_decile_{d}": (dec[d] if dec else None) for d in range(10)})
        for k in _age_keys(m):
            row[k.split("/", 1)[1]] = _mean([v for _, v in _series(m, k)])
        out["summary"].append(row)
    if not out["series"] and methods:
        out["messages"].append("no run replays (all on-policy, or no replay/* metrics): "
                               "no replay diagnostics")
    naive = next((t for t in out["time"] if t["method"] == "naive"), None)
    for t in out["time"]:
        t["scan_over_naive"] = ((t["replay_scan"] - naive["replay_scan"]) / t["step"]
                                if naive and t["replay_scan"] is not None
                                and naive["replay_scan"] is not None and t["step"] else None)
    out["markdown"] = _markdown(out)
    return out


def _markdown(d: dict) -> str:
    lines = ["Seconds per training step by phase (mean over steps and seeds):", "",
             "| method | " + " | ".join(PHASE_KEYS) + " | replay_scan share | scan over naive |",
             "|---|" + "---|" * (len(PHASE_KEYS) + 2)]
    for t in d["time"]:
        lines.append(f"| {t['method']} | " + " | ".join(cell(t[k], ".3f") for k in PHASE_KEYS)
                     + f" | {cell(t['replay_scan_share'], '.3f')}"
                     f" | {cell(t['scan_over_naive'], '.3f')} |")
    if d["summary"]:
        lines += ["", "Replay (mean over steps and seeds; deciles of initial headroom: "
                  "mean replay count, lowest tenth first):", "",
                  "| method | accept rate | scan depth | age | replayed/step | top-10% share "
                  "| deciles 1..10 |",
                  "|---|---|---|---|---|---|---|"]
        for s in d["summary"]:
            dec = (" ".join(cell(s[f"h0_decile_{i}"], ".2f") for i in range(10))
                   if s["h0_decile_0"] is not None else "-")
            lines.append(f"| {s['method']} | {cell(s['accept_rate'], '.3f')} | "
                         f"{cell(s['scan_depth'], '.1f')} | "
                         f"{cell(s['age_mean'], '.2f')} | {cell(s['accepted'], '.2f')} | "
                         f"{cell(s['exposure_top10_share'], '.3f')} | {dec} |")
        ages = _youngest_first({k for s in d["summary"] for k in s if k.startswith("drift_age_")},
                               "drift_age_")
        if ages:
            names = [k[len("drift_age_"):].replace("_", "-").replace("up", "+") for k in ages]
            lines += ["", "Drift of the scanned groups by age in steps (the gate's drift, mean "
                      "over steps and seeds):", "", "| method | " + " | ".join(names) + " |",
                      "|---|" + "---|" * len(ages)]
            lines += [f"| {s['method']} | " + " | ".join(cell(s.get(k), ".2e") for k in ages) + " |"
                      for s in d["summary"]]
    return "\n".join(lines) + "\n"


def write_diagnostics(d: dict, folder: Path, stem: str) -> list[Path]:
    """``STEM_time.csv`` always; ``STEM_replay.csv`` and ``STEM_replay.png`` when a method
    replays."""
    written = [write_csv(folder / f"{stem}_time.csv", d["time"])]
    if not d["series"]:
        return written
    written.append(write_csv(folder / f"{stem}_replay.csv", d["summary"]))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    titles = {"replay/accept_rate": "accept rate (steps that scanned)",
              "replay/scan_depth": "scan depth (groups)",
              "replay/age_mean": "age of replayed groups (steps)"}
    for i, (label, series) in enumerate(d["series"].items()):
        for ax, key in zip(axes.flat, SERIES):
            pts = series[key]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], color=f"C{i % 10}", lw=1.2,
                        label=label)
        dec = d["deciles"].get(label)
        if dec:
            axes.flat[3].plot(range(1, 11), dec, "-o", color=f"C{i % 10}", ms=3, label=label)
    for ax, key in zip(axes.flat, SERIES):
        ax.set_title(titles[key], fontsize=9)
        ax.set_xlabel("step")
    if not d["deciles"]:
        axes.flat[3].text(0.5, 0.5, "no replay/exposure_h0_decile_* in these runs' metrics",
                          ha="center", va="center", fontsize=8, transform=axes.flat[3].transAxes)
    axes.flat[3].set_title("replays per group by initial-headroom decile (last step)", fontsize=9)
    axes.flat[3].set_xlabel("decile of initial headroom (1 = lowest)")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    png = folder / f"{stem}_replay.png"
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return written + [png]
