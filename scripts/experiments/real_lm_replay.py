"""Issue 53: does Headroom-Drift Replay save wall-clock where rollouts are expensive? The real LM
of issue 50 (SmolLM2-135M-Instruct + LoRA on WikiSearch-v0, vLLM on this CPU), five methods x
3 seeds from one warm start, 1 h of training time each (docs/results/real_lm_replay.md).

    python scripts/experiments/real_lm_replay.py run --dry-run   # the 15 runs and their commands
    python scripts/experiments/real_lm_replay.py run             # rerun to continue the grid
    python scripts/experiments/real_lm_replay.py keep            # -> docs/results/real_lm_replay/

``run``: replay_suite's ``real_lm`` methods (on-policy, on-policy with 1.5x the fresh groups,
HDR at the paper's search defaults, FreshPER, query recycling; replay_suite.py documents each)
on preset ``smollm2-search`` with the settings below, one run at a time with both cores,
seed-major (a grid cut short has whole seeds), into ``runs/real_lm_replay/<method>-s<seed>``. A
killed run resumes from its last checkpoint (replay buffer included) on the next call on the
same machine; a finished one is skipped. ``runs/`` goes with a session's machine: ``keep`` each
run as it finishes, and ``run`` first restores the kept runs as archived ones (records, no
weights), which it skips and analyses. At the end of each call the suite's analysis (time to
``TARGET`` over on_policy_larger's, per seed, mean and spread; the frontier plot; the replay
diagnostics) is written to ``runs/real_lm_replay/analysis/`` and one JSON line printed.

``keep``: every finished run's config, metrics, provenance and samples, and the analysis, into
``docs/results/real_lm_replay/`` (no weights).

Fixed before the first run (committed in this file): the target, the warm start, the budget.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "runs" / "real_lm_replay"
KEPT = ROOT / "docs" / "results" / "real_lm_replay"

TARGET = 0.92
"""Greedy dev EM on the preset's 300 dev questions, 10 points over the warm start's 0.820 (its
step-0 eval under the preset's bf16 engine). Set before the grid's first run from the one
on-policy run of the preset's recipe on this warm start (docs/results/real_lm/rl-v4-seed0,
the shared-prefix update): 0.913 at step 20 (1,126 s of training), 0.920 at step 40 (1,987
s), 0.933 at step 80 (3,476 s). The first value, 0.89, was set for the v2 recipe's ~105 s
steps; at ~34 s a step the preset passes 0.89 before its second eval, where the time to it
cannot separate the methods. 0.92 falls about halfway through the 1 h budget."""
WARM_START = "docs/results/real_lm/rl-v2-seed0/warm_start"
"""The v2 recipe's seed-0 warm start (24 SFT steps): every run starts from it (RL trains this
adapter on, ``init_from`` under LoRA), so no run pays or varies a warm start."""
SETTINGS = ["time_budget_s=3600", "steps=200", "sft.steps=0", f"init_from={WARM_START}",
            "eval.every=10", "checkpoint_every=5"]
"""1 h of training time each (eval and checkpoints excluded); an eval (300 questions, about
2.5 min here in the preset's chunks of 32) every 10 steps resolves the time to target to about
6 minutes of training (the preset's shared-prefix update: a median step of 33.7 s in
docs/results/real_lm/rl-v4-seed1; every 5 steps, sized for the ~105 s steps before it, would
spend more time on evals than on training)."""


def restore_kept(kept: Path = KEPT, out: Path = OUT) -> list[str]:
    """The kept finished runs back into ``out`` as archived runs (their records, no weights),
    which the suite skips and its analysis reads: ``runs/`` does not outlive a session's
    machine, the kept records do. An unfinished run there is replaced by its kept twin."""
    from agentsearch.recipes.runner import ARCHIVED, run_finished

    done = []
    for src in sorted(p for p in kept.glob("*-s*") if (p / "metrics.jsonl").exists()):
        run_dir = out / src.name
        if run_finished(run_dir):
            continue
        if run_dir.exists():
            shutil.rmtree(run_dir)
        shutil.copytree(src, run_dir)
        (run_dir / ARCHIVED).write_text(json.dumps({"from": str(src)}) + "\n")
        done.append(src.name)
    return done


def engine_setting() -> str:
    """The vLLM engine in the dtype fastest on this CPU (the preset's bf16 is emulated, 4.9x
    slower, on an AVX2-only one): every run of a comparison on one CPU kind (each run's
    provenance names it), so all of them generate with the same engine."""
    from agentsearch.trainer.setup import fastest_cpu_engine_dtype

    return f"generation.vllm_dtype={fastest_cpu_engine_dtype()}"


def run(a) -> int:
    if not a.dry_run and (restored := restore_kept()):
        print(f"[real_lm_replay] restored kept runs: {' '.join(restored)}", flush=True)
    cmd = [sys.executable, str(ROOT / "scripts" / "experiments" / "replay_suite.py"),
           "--preset", "smollm2-search", "--methods", "real_lm", "--seeds", *map(str, a.seeds),
           "--parallel", "1", "--threads-per-run", "2", "--latency", "none",
           "--target-score", str(TARGET), "--out", str(OUT), *SETTINGS, engine_setting(),
           *a.overrides]
    if a.dry_run:
        cmd.append("--dry-run")
    if a.allow_dirty:
        cmd.append("--allow-dirty")
    return subprocess.call(cmd, cwd=ROOT)


def keep(_a) -> int:
    """Finished runs only (``run`` restores what is kept as finished; keep each run as it
    finishes: a session's end takes ``runs/`` with it)."""
    from agentsearch.recipes.runner import ARCHIVED, run_finished

    KEPT.mkdir(parents=True, exist_ok=True)
    for run_dir in sorted(p for p in OUT.glob("*-s*")
                          if run_finished(p) and not (p / ARCHIVED).exists()):
        dest = KEPT / run_dir.name
        dest.mkdir(exist_ok=True)
        for name in ("config.yaml", "metrics.jsonl", "provenance.json"):
            if (run_dir / name).exists():
                shutil.copy2(run_dir / name, dest / name)
        if (run_dir / "samples").exists():
            shutil.copytree(run_dir / "samples", dest / "samples", dirs_exist_ok=True)
    for name in ("suite.json", "summary.json"):
        if (OUT / name).exists():
            shutil.copy2(OUT / name, KEPT / name)
    if (OUT / "analysis").exists():
        shutil.copytree(OUT / "analysis", KEPT / "analysis", dirs_exist_ok=True)
    print(f"[real_lm_replay] kept {KEPT}", flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    r.add_argument("--dry-run", action="store_true")
    r.add_argument("--allow-dirty", action="store_true",
                   help="development only: the records are marked not citable")
    r.add_argument("overrides", nargs="*", help="key=value on top of SETTINGS (development)")
    sub.add_parser("keep")
    a = ap.parse_args()
    return run(a) if a.cmd == "run" else keep(a)


if __name__ == "__main__":
    sys.exit(main())
