"""Issue 53's grid (scripts/experiments/real_lm_replay.py): its runs, and the kept records that
carry it from one session's machine to the next."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from agentsearch.recipes.runner import run_finished
from agentsearch.trainer.setup import fastest_cpu_engine_dtype

ROOT = Path(__file__).resolve().parents[1]


def test_real_lm_replay_grid_is_five_methods_by_three_seeds_from_one_warm_start():
    """Issue 53's grid (scripts/experiments/real_lm_replay.py): every run's config resolves
    (replay_suite validates each before listing it), seed-major, the shared settings on each."""
    res = subprocess.run([sys.executable, str(ROOT / "scripts/experiments/real_lm_replay.py"),
                          "run", "--dry-run"], capture_output=True, text=True, timeout=300,
                         cwd=ROOT)
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stdout.splitlines() if "agentsearch train" in ln]
    names = [ln.split()[0] for ln in lines]
    assert names == [f"{m}-s{s}" for s in (0, 1, 2)
                     for m in ("on_policy", "on_policy_larger", "hdr", "fresh_per", "recycle")]
    for ln in lines:
        assert ("--preset smollm2-search" in ln and "time_budget_s=3600" in ln
                and "init_from=docs/results/real_lm/rl-v2-seed0/warm_start" in ln
                and "sft.steps=0" in ln and "tool_latency" not in ln
                and f"generation.vllm_dtype={fastest_cpu_engine_dtype()}" in ln)
    assert "prompts_per_step=12" in lines[1] and "replay.kind=fresh_per" in lines[3]
    assert (ROOT / "docs/results/real_lm/rl-v2-seed0/warm_start/adapter_config.json").exists()

def test_real_lm_replay_restores_kept_runs_as_finished_ones(tmp_path):
    """A later session's machine has no ``runs/``: the kept records come back as archived runs
    (skipped by the suite, read by its analysis); a half-run twin gives way, a finished one
    stays."""
    spec = importlib.util.spec_from_file_location(
        "real_lm_replay", ROOT / "scripts/experiments/real_lm_replay.py")
    grid = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(grid)
    kept, out = tmp_path / "kept", tmp_path / "runs"
    for name in ("hdr-s0", "recycle-s0", "on_policy-s1"):
        (kept / name).mkdir(parents=True)
        (kept / name / "metrics.jsonl").write_text(f'{{"run": "{name}"}}\n')
    (out / "recycle-s0" / "checkpoints").mkdir(parents=True)  # cut: replaced by the kept one
    (out / "on_policy-s1" / "final").mkdir(parents=True)  # finished here: stays
    (out / "on_policy-s1" / "metrics.jsonl").write_text("mine\n")
    assert grid.restore_kept(kept, out) == ["hdr-s0", "recycle-s0"]
    assert all(run_finished(out / n) for n in ("hdr-s0", "recycle-s0", "on_policy-s1"))
    assert not (out / "recycle-s0" / "checkpoints").exists()
    assert (out / "on_policy-s1" / "metrics.jsonl").read_text() == "mine\n"
    assert grid.restore_kept(kept, out) == []
