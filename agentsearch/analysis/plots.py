"""Plots: what people would rather look at than read.

``plot_learning(run_dir, out)``: training reward and dev EM (overall and per question
type) of one run against training wall-clock (``time/train_cumulative``), one PNG.
``plot_methods(result, out)``: ``agentsearch pareto``'s comparison of methods, one PNG.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["plot_learning", "plot_methods"]


def _rolling(values: list[float], k: int = 5) -> list[float]:
    out, acc = [], []
    for v in values:
        acc = (acc + [v])[-k:]
        out.append(sum(acc) / len(acc))
    return out


def plot_learning(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write ``out`` (default ``RUN_DIR/learning.png``) and return its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from agentsearch.trainer.metrics import read_metrics

    recs = read_metrics(run_dir)
    out = Path(out) if out else Path(run_dir) / "learning.png"
    steps = [r for r in recs if r.get("step", 0) > 0 and "reward/total" in r]
    evals = [r for r in recs if "eval/mean_at_n" in r]
    types = sorted({k.split("/")[1] for r in evals for k in r
                    if k.count("/") == 2 and k.endswith("/mean_at_n")})
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    t = [r["time/train_cumulative"] for r in steps]
    ax1.plot(t, [r["reward/total"] for r in steps], color="0.75", lw=1, label="per step")
    ax1.plot(t, _rolling([r["reward/total"] for r in steps]), color="C0", lw=2, label="5-step mean")
    ax1.set_xlabel("training wall-clock (s)")
    ax1.set_ylabel("train reward (sampled)")
    ax1.legend(fontsize=8)
    te = [r.get("time/train_cumulative", 0.0) for r in evals]
    ax2.plot(te, [r["eval/mean_at_n"] for r in evals], "k-o", lw=2, label="all")
    for i, typ in enumerate(types):
        ax2.plot(te, [r.get(f"eval/{typ}/mean_at_n", float("nan")) for r in evals], "--o",
                 color=f"C{i + 1}", lw=1, ms=3, label=typ)
    ax2.set_xlabel("training wall-clock (s)")
    ax2.set_ylabel("dev EM (greedy)")
    ax2.set_ylim(0, 1)
    ax2.legend(fontsize=8)
    fig.suptitle(Path(run_dir).name, fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_methods(result: dict, out: str | Path) -> Path:
    """Left: the metric vs training wall-clock per method (mean over seeds with a ±std band,
    thin lines for single seeds), the frontier of the method means and the target. Right: each
    method's time to target over the baseline's training wall-clock, one dot per seed that
    reached it (the bar is their mean; "never" where no seed did)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods, target = result["_methods"], result["target"]
    out = Path(out)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [3, 2]})
    for i, m in enumerate(methods):
        color = f"C{i % 10}"
        for r in m.usable:
            ax.plot([p[0] for p in r.points], [p[1] for p in r.points], color=color, lw=0.6,
                    alpha=0.3)
        if m.steps:
            t = [s[0] for s in m.seconds]
            mu = [v[0] for v in m.values]
            sd = [v[1] for v in m.values]
            ax.plot(t, mu, "-o", color=color, lw=1.8, ms=3, label=f"{m.label} (n={len(m.usable)})")
            ax.fill_between(t, [a - b for a, b in zip(mu, sd)], [a + b for a, b in zip(mu, sd)],
                            color=color, alpha=0.15, lw=0)
    front = result["method_frontier"]
    if front:
        ax.plot([p[0] for p in front], [p[1] for p in front], "k--", lw=1, label="frontier (means)")
    if target:
        ax.axhline(target["score"], color="0.4", ls=":", lw=1,
                   label=f"target {target['score']:.3f}")
    ax.set_xlabel("training wall-clock (s, time/train_cumulative)")
    ax.set_ylabel(result["metric"])
    ax.legend(fontsize=7, ncol=2)
    rows = result["methods"]
    labels = [r["method"] for r in rows]
    for i, r in enumerate(rows):
        ratios = [x["ratio"] for x in result["time_to_target"]
                  if x["method"] == r["method"] and x["ratio"] is not None]
        if ratios:
            bx.barh(i, r["ratio_mean"], color=f"C{i % 10}", alpha=0.5)
            bx.plot(ratios, [i] * len(ratios), "ko", ms=3)
        bx.text(max(ratios, default=0) + 0.02, i, f"{r['reached']} seeds" if ratios else "never",
                va="center", fontsize=7)
    bx.set_yticks(range(len(labels)), labels, fontsize=7)
    bx.invert_yaxis()
    bx.axvline(1.0, color="0.4", ls=":", lw=1)
    base = (target or {}).get("method") or "baseline"
    bx.set_xlabel(f"time to target / {base}'s training wall-clock")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
