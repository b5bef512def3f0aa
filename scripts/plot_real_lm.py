"""The real-LM page's plot: greedy dev EM (300 questions) against RL training wall-clock, for
every kept run under docs/results/real_lm/rl-*/ (left: all questions, one line per run; right:
the preset's recipe, rl-v4-*, by question type, one line style per run), from their
metrics.jsonl alone.

    python scripts/plot_real_lm.py   # writes docs/results/real_lm/learning.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results" / "real_lm"
TYPES = ("name", "year", "nationality")
PRESET_RUNS = "rl-v4-"  # the smollm2-search preset's recipe: the right panel


def evals(run: Path) -> list[dict]:
    recs = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [r for r in recs if "eval/mean_at_n" in r]


def main(out: Path = RESULTS / "learning.png") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = sorted(p for p in RESULTS.glob("rl-*") if (p / "metrics.jsonl").exists())
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    styles = ["-", "--", ":", "-."]  # one per run of the preset's recipe (right panel)
    for i, run in enumerate(runs):
        ev = evals(run)
        hours = [r.get("time/train_cumulative", 0.0) / 3600 for r in ev]
        ax1.plot(hours, [r["eval/mean_at_n"] for r in ev], marker="o", color=f"C{i}",
                 lw=2.5 if run.name.startswith(PRESET_RUNS) else 1, ms=4,
                 label=f"{run.name} (warm start {ev[0]['eval/mean_at_n']:.3f})")
    for i, run in enumerate(r for r in runs if r.name.startswith(PRESET_RUNS)):
        ev = evals(run)
        hours = [r.get("time/train_cumulative", 0.0) / 3600 for r in ev]
        for j, typ in enumerate(TYPES):
            ax2.plot(hours, [r.get(f"eval/{typ}/mean_at_n", float("nan")) for r in ev],
                     ls=styles[i % len(styles)], marker="o", color=f"C{j + 7}", lw=1.5, ms=3,
                     label=f"{typ} ({run.name})")
    if runs:
        first = evals(runs[0])[0]["eval/mean_at_n"]
        ax1.axhline(first + 0.10, color="0.5", lw=1, ls=":",
                    label=f"+10 pts over {runs[0].name}'s warm start")
    ax1.set_xlabel("RL training wall-clock (h; eval excluded)")
    ax1.set_ylabel("greedy dev EM (300 questions)")
    ax1.legend(fontsize=7, loc="lower right")
    ax2.set_xlabel("RL training wall-clock (h)")
    ax2.set_ylabel("greedy dev EM by type (rl-v4: the preset)")
    ax2.legend(fontsize=7, loc="lower right")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    fig.suptitle("SmolLM2-135M-Instruct + LoRA on WikiSearch-v0, 2-core CPU", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


if __name__ == "__main__":
    print(main(*(Path(a) for a in sys.argv[1:2])))
