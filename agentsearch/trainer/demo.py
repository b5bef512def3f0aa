"""``agentsearch demo`` / ``make demo``: train the tiny search agent on the synthetic world
(preset ``tiny``) and print what happened: dev EM before and after GRPO, wall-clock by
phase, replay statistics, and where the run folder is."""

from __future__ import annotations

import json
import time
from pathlib import Path

from agentsearch.config import apply_overrides
from agentsearch.trainer.config import TrainConfig
from agentsearch.trainer.metrics import read_metrics
from agentsearch.trainer.timing import EXCLUDED, PHASES

__all__ = ["run_demo", "summary"]


def summary(run_dir: str | Path) -> dict:
    """The demo table's numbers, from a run folder's metrics.jsonl."""
    recs = read_metrics(run_dir)
    steps = [r for r in recs if r["step"] > 0]
    evals = [r for r in recs if "eval/mean_at_n" in r]
    first, last = evals[0], evals[-1]
    total = lambda k: sum(r.get(k, 0.0) for r in steps)  # noqa: E731
    step_time = total("time/step")
    types = sorted({k.split("/")[1] for k in first if k.endswith("/mean_at_n") and k.count("/") == 2})
    return {
        "steps": len(steps),
        "dev_em_warm_start": first["eval/mean_at_n"], "dev_em_final": last["eval/mean_at_n"],
        "dev_em_by_type": {t: (first[f"eval/{t}/mean_at_n"], last[f"eval/{t}/mean_at_n"]) for t in types},
        "eval_questions": int(first.get("eval/questions", 0)),
        "time_by_phase": {p: total(f"time/{p}") for p in PHASES + EXCLUDED},
        "time_warm_start": recs[0].get("time/sft", 0.0),
        "pretrain_cached": bool(recs[0].get("sft/pretrain_cached", 0.0)),
        "time_train": steps[-1]["time/train_cumulative"] if steps else 0.0,
        "replay_overhead": total("time/replay_scan") / step_time if step_time else 0.0,
        "replay_accept_rate": sum(r.get("replay/accept_rate", 0.0) for r in steps) / max(len(steps), 1),
        "replay_groups_replayed": total("replay/accepted"),
        "replay_ingress": total("replay/ingress"),
        "zero_variance_frac": sum(r.get("groups/zero_variance_frac", 0.0) for r in steps) / max(len(steps), 1),
    }


def _print(s: dict, run_dir: Path, wall: float) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title="agentsearch demo: tiny search agent, synthetic world (CPU)")
    t.add_column("")
    t.add_column("value", justify="right")
    t.add_row(f"dev EM after warm start ({s['eval_questions']} questions, greedy)", f"{s['dev_em_warm_start']:.3f}")
    t.add_row("dev EM after GRPO + replay", f"{s['dev_em_final']:.3f}")
    for typ, (a, b) in s["dev_em_by_type"].items():
        t.add_row(f"  {typ}", f"{a:.3f} -> {b:.3f}")
    t.add_row("GRPO steps", str(s["steps"]))
    base = "cached base + SFT" if s["pretrain_cached"] else "pretrain + SFT"
    t.add_row(f"warm start ({base}) s", f"{s['time_warm_start']:.0f}")
    t.add_row("training s (time/train_cumulative)", f"{s['time_train']:.0f}")
    for p, v in s["time_by_phase"].items():
        if v:
            t.add_row(f"  time/{p} s", f"{v:.1f}")
    t.add_row("replay overhead (replay_scan / step)", f"{s['replay_overhead']:.1%}")
    t.add_row("replay accept rate (mean)", f"{s['replay_accept_rate']:.2f}")
    t.add_row("groups replayed / admitted to the buffer", f"{s['replay_groups_replayed']:.0f} / {s['replay_ingress']:.0f}")
    t.add_row("zero-variance groups (mean share)", f"{s['zero_variance_frac']:.2f}")
    t.add_row("wall-clock of the demo s", f"{wall:.0f}")
    t.add_row("run folder", str(run_dir))
    Console().print(t)


def _new_run_dir() -> Path:
    """``runs/demo-YYYYmmdd-HHMMSS`` (``-2``, ``-3``, ... if that second is taken)."""
    base = Path(time.strftime("runs/demo-%Y%m%d-%H%M%S"))
    path, i = base, 1
    while path.exists():
        i += 1
        path = base.with_name(f"{base.name}-{i}")
    return path


def run_demo(out: str | None = None, overrides: list[str] | None = None) -> int:
    """Train the ``tiny`` preset into ``out`` (default: a new timestamped ``runs/demo-*``
    folder, so ``make demo`` can be run again) and print the summary table."""
    import logging

    from agentsearch.trainer.loop import train

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    t0 = time.perf_counter()
    cfg = apply_overrides(TrainConfig, "tiny", list(overrides or []))
    run_dir = Path(out) if out else _new_run_dir()
    if (run_dir / "metrics.jsonl").exists():
        raise FileExistsError(f"{run_dir} already holds a run; pass --out NEW_DIR (or remove it)")
    print(f"agentsearch demo: preset tiny -> {run_dir} (warm start, then {cfg.steps} GRPO steps "
          f"with replay={cfg.replay.kind})", flush=True)
    train(cfg, run_dir)
    s = summary(run_dir)
    wall = time.perf_counter() - t0
    (run_dir / "demo_summary.json").write_text(json.dumps({**s, "wall_s": wall}, indent=1))
    _print(s, run_dir, wall)
    return 0
