"""Quality-versus-wall-clock Pareto curves from run folders.

Each run's ``metrics.jsonl`` has evaluation records (``eval/...`` keys) stamped with
``time/train_cumulative`` (training seconds, evaluation excluded). A point is
(seconds, quality); a run's curve is its points in time order; the *frontier* across runs
keeps the points that no other point beats on both axes (less time and higher quality).
"""

from __future__ import annotations

import json
from pathlib import Path

from agentsearch.trainer.metrics import read_metrics

__all__ = ["run_curve", "pareto_frontier", "main"]


def run_curve(run_dir: str | Path, metric: str = "eval/mean_at_n") -> list[tuple[float, float, int]]:
    """(train seconds, metric, step) for every record that has ``metric``."""
    pts = []
    for rec in read_metrics(run_dir):
        if metric in rec and isinstance(rec[metric], (int, float)):
            pts.append((float(rec.get("time/train_cumulative", 0.0)), float(rec[metric]), int(rec["step"])))
    return sorted(pts)


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


def main(a) -> int:
    curves = {str(r): run_curve(r, a.metric) for r in a.runs}
    rows = []
    for run, pts in curves.items():
        if not pts:
            print(f"{run}: no '{a.metric}' records")
            continue
        t_end, q_end, step = pts[-1]
        q_best = max(q for _, q, _ in pts)
        rows.append({"run": run, "points": len(pts), "final": q_end, "best": q_best,
                     "train_seconds": t_end, "steps": step})
    all_pts = [(t, q) for pts in curves.values() for t, q, _ in pts]
    front = pareto_frontier(all_pts)
    print(f"{'run':40s} {'final':>8s} {'best':>8s} {'train_s':>9s} {'steps':>6s}")
    for r in rows:
        print(f"{r['run'][-40:]:40s} {r['final']:8.4f} {r['best']:8.4f} {r['train_seconds']:9.1f} {r['steps']:6d}")
    print("frontier:", ", ".join(f"({t:.0f}s, {q:.3f})" for t, q in front))
    if a.out:
        out = Path(a.out)
        summary = {"metric": a.metric, "runs": rows, "frontier": front,
                   "curves": {k: [list(p) for p in v] for k, v in curves.items()}}
        if out.suffix == ".png":
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt

            fig, ax = plt.subplots(figsize=(6, 4))
            for run, pts in curves.items():
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=Path(run).name)
            if front:
                ax.plot([p[0] for p in front], [p[1] for p in front], "k--", lw=1, label="frontier")
            ax.set_xlabel("training wall-clock (s)")
            ax.set_ylabel(a.metric)
            ax.legend(fontsize=8)
            fig.tight_layout()
            fig.savefig(out, dpi=120)
            out.with_suffix(".json").write_text(json.dumps(summary, indent=1))
        else:
            out.write_text(json.dumps(summary, indent=1))
        print(f"wrote {out}")
    return 0
