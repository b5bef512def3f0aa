"""Crash-recovery trials: kill -9 training runs at random instants and at the worst ones, resume
them, and check that each resumed run is the uninterrupted run, exactly.

One reference run trains uninterrupted (``python -m agentsearch train``, a subprocess with one
torch thread). Then each trial starts the same run in a fresh folder and kills it (SIGKILL:
no cleanup, no ``finally``):

- at a crash point (``core.failpoints``): between a checkpoint's files (``checkpoint:model``),
  after its files before its rename (``checkpoint:files``), after the rename before the
  ``latest`` marker (``checkpoint:renamed``), between a step's metrics record and its
  checkpoint (``loop:logged``);
- or at a random instant, drawn uniformly over the reference run's training time (from its
  first metrics record to its end); one trial is killed twice (again while resuming).

It is then resumed (``train --resume``) to the end, and checked against the reference:
``metrics.jsonl`` holds every step exactly once (no gap, no duplicate); every non-timing
metric of every step equals the reference's; at each checkpoint both runs kept, ``replay.pt``
(the replay buffer) is byte-identical and the task sampler's state (from ``trainer.pt``) is
identical; the final weights are byte-identical. ``scripts/bench_faults.py --mode crash``
prints the summary as one JSON line; ``tests/test_crash_trials.py`` runs two trials.
"""

from __future__ import annotations

import json
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from agentsearch.core.failpoints import ENV_VAR
from agentsearch.recipes.runner import subprocess_env
from agentsearch.trainer.checkpoint import latest_checkpoint
from agentsearch.trainer.metrics import read_metrics

__all__ = ["TRIAL_OVERRIDES", "CRASH_POINTS", "Trial", "run_trials", "compare_runs", "is_timing"]

TRIAL_OVERRIDES = ["steps=8", "prompts_per_step=4", "group_size=4", "checkpoint_every=2",
                   "eval.every=4", "eval.limit=16", "threads=1", "tensorboard=false",
                   "replay.capacity=16", "replay.k_rep=2", "replay.scan_chunk=2"]
"""The trial runs: the tiny preset (``tiny-base`` on the synthetic world, HDR), short."""

CRASH_POINTS = ("checkpoint:model@2", "checkpoint:files@1", "checkpoint:renamed@3", "loop:logged@4")
"""Where the first trials die: ``NAME@N`` is the N-th pass (the 2nd checkpoint, step 4, ...)."""


def is_timing(key: str) -> bool:
    """A metric that measures wall-clock or the machine (``sys/``: peak RSS), never equal
    between two runs: not compared."""
    return key.startswith(("time/", "sys/")) or key.endswith(("_seconds", "_s")) \
        or "latency" in key


@dataclass
class Trial:
    """One trial: how it was killed and what the comparison found."""

    index: int
    kill: str  # a crash point, or "random@12.3s" (seconds after start)
    killed_at_step: int = -1  # the last step logged before the kill
    resumed_from: int = -1  # the checkpoint step the resume started from (-1: from scratch)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def exact(self) -> bool:
        return not self.problems


def _train_cmd(run: Path, overrides: list[str], preset: str, resume: bool) -> list[str]:
    base = [sys.executable, "-m", "agentsearch", "train"]
    return base + (["--resume", str(run)] if resume
                   else ["--preset", preset, "--out", str(run), *overrides])


def _logged_steps(run: Path) -> list[int]:
    return [r["step"] for r in read_metrics(run)] if (run / "metrics.jsonl").exists() else []


def _run(run: Path, overrides: list[str], preset: str, *, resume: bool = False,
         crash_at: str | None = None, kill_after_s: float | None = None,
         timeout_s: float = 900) -> tuple[int, float, float | None]:
    """Run training (or its resume) to the end, or SIGKILL it ``kill_after_s`` seconds in;
    ``(returncode, seconds, seconds until metrics.jsonl appeared or None)``."""
    env = subprocess_env(threads=1)
    env.pop(ENV_VAR, None)
    if crash_at:
        env[ENV_VAR] = crash_at
    limit = kill_after_s if kill_after_s is not None else timeout_s
    first = None
    with open(run.parent / f"{run.name}.log", "ab") as log:
        t0 = time.monotonic()
        proc = subprocess.Popen(_train_cmd(run, overrides, preset, resume), env=env, stdout=log,
                                stderr=log)
        while proc.poll() is None:
            if first is None and (run / "metrics.jsonl").exists():
                first = time.monotonic() - t0
            if time.monotonic() - t0 > limit:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                if kill_after_s is None:
                    raise subprocess.TimeoutExpired(proc.args, timeout_s)
            time.sleep(0.05)
    return proc.returncode, time.monotonic() - t0, first


def compare_runs(ref: Path, run: Path, ignore: tuple[str, ...] = ()) -> list[str]:
    """What differs between a resumed run and the reference (empty: the same run); metrics
    whose names start with a prefix in ``ignore`` are not compared (nor timing ones)."""
    problems = []
    steps, want = _logged_steps(run), _logged_steps(ref)
    if steps != want:
        dup = sorted({s for s in steps if steps.count(s) > 1})
        gap = sorted(set(want) - set(steps))
        problems.append(f"logged steps {steps} != {want} (duplicates {dup}, missing {gap})")
    recs = {r["step"]: r for r in read_metrics(run)}
    for r in read_metrics(ref):
        got = recs.get(r["step"], {})
        for k, v in r.items():
            if not is_timing(k) and not (ignore and k.startswith(ignore)) and got.get(k) != v:
                problems.append(f"step {r['step']}: {k} = {got.get(k)!r}, the reference has {v!r}")
                break
    ref_ckpts = {p.name for p in (ref / "checkpoints").glob("step-*")}
    run_ckpts = {p.name for p in (run / "checkpoints").glob("step-*")}
    for name in sorted(ref_ckpts & run_ckpts):
        a, b = ref / "checkpoints" / name, run / "checkpoints" / name
        if (a / "replay.pt").read_bytes() != (b / "replay.pt").read_bytes():
            problems.append(f"{name}/replay.pt differs from the reference's")
        sa = torch.load(a / "trainer.pt", weights_only=False)["state"]["sampler"]
        sb = torch.load(b / "trainer.pt", weights_only=False)["state"]["sampler"]
        if sa != sb:  # plain lists and the numpy bit generator's state (ints)
            problems.append(f"{name}: the task sampler's state differs from the reference's")
    if not ref_ckpts & run_ckpts:
        problems.append(f"no checkpoint step in common: {sorted(ref_ckpts)} vs {sorted(run_ckpts)}")
    fa, fb = ref / "final" / "model.safetensors", run / "final" / "model.safetensors"
    if not fb.exists() or fa.read_bytes() != fb.read_bytes():
        problems.append("the final weights differ from the reference's (or are missing)")
    return problems


def run_trials(out: str | Path, n: int = 10, *, seed: int = 0, preset: str = "tiny",
               overrides: list[str] | None = None, points: tuple[str, ...] = CRASH_POINTS,
               log=print) -> dict:
    """``n`` trials into ``out`` (module notes); returns the summary (also ``out/trials.json``).
    The first ``len(points)`` trials die at ``points``, the rest at random instants (the
    last of those twice, when ``n > len(points) + 1``)."""
    out = Path(out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    overrides = list(TRIAL_OVERRIDES if overrides is None else overrides)
    rng = random.Random(seed)
    t0 = time.monotonic()
    rc, total_s, first_s = _run(out / "reference", overrides, preset)
    if rc != 0:
        raise RuntimeError(f"the reference run failed (exit {rc}); see {out / 'reference'}.log")
    first_s = first_s or 0.0
    log(f"crash trials: reference run {total_s:.1f} s (first record at {first_s:.1f} s)")
    trials = []
    for i in range(n):
        run = out / f"trial-{i:02d}"
        point = points[i] if i < len(points) else None
        kills = 2 if point is None and i == n - 1 and n > len(points) + 1 else 1
        trial = Trial(i, point or "")
        t = time.monotonic()
        for k in range(kills):
            resume = k > 0
            after = None if point else rng.uniform(first_s, total_s) * (0.5 if resume else 1.0)
            if after is not None:
                trial.kill += ("random@" if not resume else ", again@") + f"{after:.1f}s"
            rc, took, _ = _run(run, overrides, preset, resume=resume, crash_at=point,
                               kill_after_s=after)
            # this run outpaced the reference (a loaded machine): a new instant within its own time
            if rc == 0 and after is not None and not resume:
                shutil.rmtree(run, ignore_errors=True)
                after = rng.uniform(min(first_s, took / 2), took * 0.9)
                trial.kill += f" (finished first; again@{after:.1f}s)"
                rc, _, _ = _run(run, overrides, preset, kill_after_s=after)
            if rc != -signal.SIGKILL:
                trial.problems.append(f"kill {k + 1}: the run was not killed (exit {rc})")
        logged = _logged_steps(run)
        trial.killed_at_step = logged[-1] if logged else -1
        ckpt = latest_checkpoint(run)
        rc, _, _ = _run(run, overrides, preset, resume=True)
        if rc != 0:
            trial.problems.append(f"the resume failed (exit {rc}); see {run}.log")
        else:
            trial.problems += compare_runs(out / "reference", run)
        trial.resumed_from = int(ckpt.name.split("-")[1]) if ckpt else -1
        trial.seconds = round(time.monotonic() - t, 1)
        verdict = 'exact' if trial.exact else 'DIFFERS: ' + trial.problems[0]
        log(f"crash trial {i + 1}/{n}: killed {trial.kill} (last logged step "
            f"{trial.killed_at_step}, checkpoint {trial.resumed_from}): {verdict}")
        trials.append(trial)
    summary = {"trials": n, "exact": sum(t.exact for t in trials),
               "kills_at_crash_points": sum(1 for t in trials if not t.kill.startswith("random")),
               "random_kills": sum(1 for t in trials if t.kill.startswith("random")),
               "reference_s": round(total_s, 1), "seconds": round(time.monotonic() - t0, 1),
               "runs": [asdict(t) for t in trials]}
    (out / "trials.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary
