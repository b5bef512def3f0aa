"""``agentsearch demo`` / ``make demo``: train the tiny search agent on the synthetic world
(preset ``tiny``: RL from the shipped base ``tiny-base``) and print what happened: dev EM
and behaviour (searches per episode, answers after a single search) per question type
before and after GRPO, wall-clock by phase, replay statistics, a learning-curve PNG, where
the run folder is, and last the path of its report (``agentsearch report``: one HTML page).
``--preset tiny-math`` does the same for math with a calculator (accuracy, calculator calls
per episode and answers without a call, per problem kind)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from agentsearch.core.config import apply_overrides
from agentsearch.trainer.metrics import read_metrics
from agentsearch.trainer.timing import EXCLUDED, PHASES
from agentsearch.trainer.train_config import TrainConfig

__all__ = ["run_demo", "summary"]


def summary(run_dir: str | Path) -> dict:
    """The demo table's numbers, from a run folder's metrics.jsonl."""
    recs = read_metrics(run_dir)
    steps = [r for r in recs if r["step"] > 0]
    evals = [r for r in recs if "eval/mean_at_n" in r]
    first, last = evals[0], evals[-1]
    total = lambda k: sum(r.get(k, 0.0) for r in steps)  # noqa: E731
    step_time = total("time/step")
    types = sorted({k.split("/")[1] for k in first
                    if k.endswith("/mean_at_n") and k.count("/") == 2})
    pair = lambda key: (first.get(key, 0.0), last.get(key, 0.0))  # noqa: E731
    return {
        "steps": len(steps),
        "dev_em_warm_start": first["eval/mean_at_n"], "dev_em_final": last["eval/mean_at_n"],
        "dev_em_by_type": {t: pair(f"eval/{t}/mean_at_n") for t in types},
        "searches_by_type": {t: pair(f"eval/{t}/searches") for t in types},
        "one_search_answer_by_type": {t: pair(f"eval/{t}/one_search_answer") for t in types},
        "no_search_answer_by_type": {t: pair(f"eval/{t}/no_search_answer") for t in types},
        "train_reward_first_last5": (_mean([r.get("reward/total", 0.0) for r in steps[:5]]),
                                     _mean([r.get("reward/total", 0.0) for r in steps[-5:]])),
        "eval_questions": int(first.get("eval/questions", 0)),
        "time_by_phase": {p: total(f"time/{p}") for p in PHASES + EXCLUDED},
        "time_warm_start": recs[0].get("time/sft", 0.0),
        "pretrain_cached": bool(recs[0].get("sft/pretrain_cached", 0.0)),
        "time_train": steps[-1]["time/train_cumulative"] if steps else 0.0,
        "replay_overhead": total("time/replay_scan") / step_time if step_time else 0.0,
        "replay_accept_rate": total("replay/accept_rate") / max(len(steps), 1),
        "replay_groups_replayed": total("replay/accepted"),
        "replay_ingress": total("replay/ingress"),
        "zero_variance_frac": total("groups/zero_variance_frac") / max(len(steps), 1),
    }


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


# the demo table's columns: (title noun, type column, score, calls, behaviour column, its
# summary key)
_SEARCH = ("questions", "question type", "dev EM", "searches / episode",
           "answered after one search", "one_search_answer_by_type")
_MATH = ("problems", "problem kind", "dev accuracy", "calculator calls / episode",
         "answered without a call", "no_search_answer_by_type")


def _print(s: dict, run_dir: Path, wall: float, plot: Path | None, *, title: str,
           math: bool = False) -> None:
    from rich.console import Console
    from rich.table import Table

    noun, *cols, key = _MATH if math else _SEARCH
    b = Table(title=f"what RL changed: {s['eval_questions']} dev {noun}, greedy (before -> after)")
    for col in cols:
        b.add_column(col, justify="right")
    for typ, (x, y) in s["dev_em_by_type"].items():
        sx, sy = s["searches_by_type"][typ]
        ox, oy = s[key][typ]
        b.add_row(typ, f"{x:.3f} -> {y:.3f}", f"{sx:.2f} -> {sy:.2f}", f"{ox:.2f} -> {oy:.2f}")
    b.add_row("all", f"{s['dev_em_warm_start']:.3f} -> {s['dev_em_final']:.3f} "
                     f"({100 * (s['dev_em_final'] - s['dev_em_warm_start']):+.1f} pts)", "", "")
    Console().print(b)
    t = Table(title=title)
    t.add_column("")
    t.add_column("value", justify="right")
    t.add_row("GRPO steps", str(s["steps"]))
    r0, r1 = s["train_reward_first_last5"]
    t.add_row("train reward (sampled), first -> last 5 steps", f"{r0:.3f} -> {r1:.3f}")
    if s["time_warm_start"]:
        t.add_row("warm start s", f"{s['time_warm_start']:.0f}")
    t.add_row("training s (time/train_cumulative)", f"{s['time_train']:.0f}")
    for p, v in s["time_by_phase"].items():
        if v:
            t.add_row(f"  time/{p} s", f"{v:.1f}")
    t.add_row("replay overhead (replay_scan / step)", f"{s['replay_overhead']:.1%}")
    t.add_row("replay accept rate (mean)", f"{s['replay_accept_rate']:.2f}")
    t.add_row("groups replayed / admitted to the buffer",
              f"{s['replay_groups_replayed']:.0f} / {s['replay_ingress']:.0f}")
    t.add_row("zero-variance groups (mean share)", f"{s['zero_variance_frac']:.2f}")
    t.add_row("wall-clock of the demo s", f"{wall:.0f}")
    t.add_row("run folder (samples/ holds decoded episodes)", str(run_dir))
    if plot is not None:
        t.add_row("learning curve (PNG)", str(plot))
    Console().print(t)


def _new_run_dir() -> Path:
    """``runs/demo-YYYYmmdd-HHMMSS`` (``-2``, ``-3``, ... if that second is taken)."""
    base = Path(time.strftime("runs/demo-%Y%m%d-%H%M%S"))
    path, i = base, 1
    while path.exists():
        i += 1
        path = base.with_name(f"{base.name}-{i}")
    return path


def run_demo(out: str | None = None, overrides: list[str] | None = None,
             preset: str = "tiny") -> int:
    """Train ``preset`` (default ``tiny``) into ``out`` (default: a new timestamped
    ``runs/demo-*`` folder, so ``make demo`` can be run again) and print the summary table."""
    import logging

    from agentsearch.trainer.loop import train

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    t0 = time.perf_counter()
    cfg = apply_overrides(TrainConfig, preset, list(overrides or []))
    run_dir = Path(out) if out else _new_run_dir()
    if (run_dir / "metrics.jsonl").exists():
        raise FileExistsError(f"{run_dir} already holds a run; pass --out NEW_DIR (or remove it)")
    print(f"agentsearch demo: preset {preset} -> {run_dir} ({cfg.steps} GRPO steps from "
          f"{cfg.model} with replay={cfg.replay.kind})", flush=True)
    train(cfg, run_dir)
    s = summary(run_dir)
    wall = time.perf_counter() - t0
    (run_dir / "demo_summary.json").write_text(json.dumps({**s, "wall_s": wall}, indent=1))
    from agentsearch.analysis.plots import plot_learning

    math = cfg.env == "agentsearch/Math-v0"
    title = ("agentsearch demo: tiny math agent with a calculator (CPU)" if math
             else "agentsearch demo: tiny search agent, synthetic world (CPU)")
    _print(s, run_dir, wall, plot_learning(run_dir), title=title, math=math)
    from agentsearch.analysis.report import build_report

    print(f"report (one HTML page: curves, phases, replay, episodes): {build_report([run_dir])}")
    return 0
