"""Summarise a run folder as one JSON line: mean per-phase seconds per step (the first step,
which warms caches and kernels, is reported apart), replay statistics, evaluations.

    python scripts/run_summary.py runs/demo [--name tiny-hdr]
"""

from __future__ import annotations

import argparse
import json
import statistics

from agentsearch.trainer.metrics import read_metrics
from agentsearch.trainer.timing import EXCLUDED, PHASES


def summarise(run: str, name: str | None = None) -> dict:
    recs = [r for r in read_metrics(run) if r.get("step", 0) > 0]
    evals = [r for r in read_metrics(run) if "eval/mean_at_n" in r]
    later = recs[1:] or recs
    mean = lambda key: round(statistics.fmean(r.get(key, 0.0) for r in later), 4) if later else None  # noqa: E731
    out = {"run": name or run, "steps": len(recs),
           "time_per_step": {k: mean(f"time/{k}") for k in PHASES + EXCLUDED + ("step",)},
           "first_step_s": recs[0]["time/step"] if recs else None,
           "train_seconds": recs[-1]["time/train_cumulative"] if recs else None,
           "replay_overhead": None,
           "tokens_per_step": {k: mean(f"tokens/{k}") for k in ("generated", "scored", "trained")},
           "replay": {k: mean(f"replay/{k}")
                      for k in ("accept_rate", "scan_depth", "accepted", "kl")},
           "reward": mean("reward/total"), "answer_correct": mean("rollout/answer_correct"),
           "eval": [{"step": r["step"], "mean_at_n": r["eval/mean_at_n"],
                     "train_seconds": r.get("time/train_cumulative")} for r in evals]}
    if later and out["time_per_step"]["step"]:
        out["replay_overhead"] = round(out["time_per_step"]["replay_scan"]
                                       / out["time_per_step"]["step"], 4)
    return out


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run")
    p.add_argument("--name", default=None)
    a = p.parse_args()
    print(json.dumps(summarise(a.run, a.name)))
