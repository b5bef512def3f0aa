"""The side-by-side's records (``bench_vs_trl.py keep`` / ``summary``): a finished run's records
kept in the repository, and per run and per arm the training seconds to the target."""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

from agentsearch.recipes.runner import run_finished


def finished(folder: Path) -> bool:
    """A TRL run that wrote ``DONE`` or an agentsearch run that saved its final weights."""
    return (folder / "DONE").exists() or run_finished(folder)


def keep(out: Path, to: Path, settings: dict, latency: dict) -> dict:
    """Each finished run's records from ``out`` into ``to/<run>``: metrics, provenance,
    agentsearch's resolved config or TRL's last ``trainer_state.json``, and the shared
    ``settings`` it ran under (``latency`` added for a ``-lat-`` run); no weights."""
    kept = []
    for folder in sorted(p for p in out.glob("*-seed*") if finished(p)):
        dest = to / folder.name
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("metrics.jsonl", "provenance.json", "config.yaml"):
            if (folder / name).exists():
                shutil.copy2(folder / name, dest / name)
        states = sorted((folder / "trl").glob("checkpoint-*/trainer_state.json"),
                        key=lambda f: int(f.parent.name.split("-")[1]))
        if states:
            shutil.copy2(states[-1], dest / "trl_trainer_state.json")
        record = {**settings, "latency": latency if "-lat-" in folder.name else None}
        (dest / "settings.json").write_text(json.dumps(record, indent=1) + "\n")
        kept.append(folder.name)
    return {"kept": kept, "to": str(to)}


def time_to_target(rows: list[dict], target: float) -> tuple[float | None, float | None]:
    """(training seconds at the first eval at or above ``target``, or None; the last eval's
    dev EM)."""
    evals = [r for r in rows if "eval/mean_at_n" in r]
    hit = next((r for r in evals if r["eval/mean_at_n"] >= target), None)
    seconds = None if hit is None else float(hit.get("time/train_cumulative", 0.0))
    return seconds, (evals[-1]["eval/mean_at_n"] if evals else None)


PHASES = ("generate", "env", "reward", "logprobs", "update")
"""The per-step phases both systems log (``time/<phase>``; TRL's: ``trl_peer.step_phases``)."""


def median_phases(steps: list[dict]) -> dict[str, float]:
    """Each phase's median seconds over the steps that logged it."""
    return {p: statistics.median(r[f"time/{p}"] for r in steps if f"time/{p}" in r)
            for p in PHASES if any(f"time/{p}" in r for r in steps)}


def summary(out: Path, target: float) -> list[dict]:
    """One line per run in ``out`` (``<arm>[-lat]-seed<k>``) and one per arm's ratio of mean
    time to target over TRL's, for each latency setting."""
    lines = []
    for latency in ("", "-lat"):
        times: dict[str, list] = {}
        for folder in sorted(out.glob(f"*{latency}-seed*")):
            arm = folder.name.split(f"{latency}-seed")[0]
            if latency == "" and arm.endswith("-lat") or not (folder / "metrics.jsonl").exists():
                continue
            rows = [json.loads(x) for x in (folder / "metrics.jsonl").open()]
            t, final = time_to_target(rows, target)
            steps = [r for r in rows if "time/step" in r or "trl/step_time" in r]
            per_step = [r.get("time/step", r.get("trl/step_time")) for r in steps]
            times.setdefault(arm, []).append(t)
            lines.append({"bench": "vs_trl", "run": folder.name, "arm": arm,
                          "latency": bool(latency), "target": target, "seconds_to_target": t,
                          "final_dev_em": final, "training_s": max(
                              (r.get("time/train_cumulative", 0.0) for r in rows), default=0.0),
                          "steps": len(steps), "median_step_s":
                          statistics.median(per_step) if per_step else None,
                          "median_phase_s": median_phases(steps)})
        ref = [t for t in times.get("trl", []) if t is not None]
        for arm, ts in times.items():
            got = [t for t in ts if t is not None]
            if arm != "trl" and got and ref:
                lines.append({"bench": "vs_trl_ratio", "arm": arm, "latency": bool(latency),
                              "target": target, "ratio_to_trl": statistics.mean(got)
                              / statistics.mean(ref), "seeds": len(got), "trl_seeds": len(ref)})
    return lines
