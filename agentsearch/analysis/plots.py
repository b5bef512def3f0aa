"""Plots of one run: what people would rather look at than read.

``plot_learning(run_dir, out)``: training reward and dev EM (overall and per question
type) against training wall-clock (``time/train_cumulative``), one PNG.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["plot_learning"]


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
