"""Running many training runs from a script: the pieces experiment suites share.

``scripts/bench_learning.py`` and ``scripts/experiments/replay_suite.py`` train presets in
subprocesses (``python -m agentsearch train``), a few at a time with a fixed number of torch
threads each, into run folders that make them resumable:

- a run folder with ``final/`` and ``metrics.jsonl`` is *finished* and skipped (so is one
  restored from a results archive, marked ``archived.json``: the records without the weights);
- one with a ``config.yaml`` but no ``final/`` was interrupted: ``train --resume`` continues
  it from its last checkpoint (or from step 0 when it had none);
- anything else is trained from scratch.

Why subprocesses: each run gets its own torch thread pool (``OMP_NUM_THREADS``), so two runs
on two cores do not oversubscribe them (docs/design.md measured 7x slower generation when
they did), and a crashed run takes nothing else down.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

__all__ = ["subprocess_env", "agentsearch_cli", "agentsearch_eval", "run_finished",
           "train_command", "train_run", "run_parallel", "RunFailed", "ARCHIVED"]

T = TypeVar("T")
R = TypeVar("R")


class RunFailed(RuntimeError):
    """A subprocess ``agentsearch`` command exited non-zero; the message ends with its log tail."""


def subprocess_env(threads: int = 1) -> dict[str, str]:
    """The environment of a child run: ``threads`` torch/BLAS threads, no hub, no warnings."""
    t = str(threads)
    return {**os.environ, "OMP_NUM_THREADS": t, "MKL_NUM_THREADS": t,
            "TOKENIZERS_PARALLELISM": "false", "PYTHONWARNINGS": "ignore", "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1"}


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def agentsearch_cli(*args: str, threads: int = 1, log: Path | None = None) -> str:
    """Run ``agentsearch ARGS`` in a subprocess and return its stdout.

    With a ``log``, the child's stderr and stdout both go to it (appended) as they come, so a
    long run's progress lines (the trainer prints them to stdout) can be followed there;
    without one, stderr is discarded. A non-zero exit raises ``RunFailed`` with the command
    and, when there is a log, its last lines.
    """
    cmd = [sys.executable, "-m", "agentsearch", *args]
    if log is None:
        res = subprocess.run(cmd, env=subprocess_env(threads), stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
        code, out = res.returncode, res.stdout
    else:
        log.parent.mkdir(parents=True, exist_ok=True)
        lines: list[str] = []
        with open(log, "a", encoding="utf-8") as err:
            err.write("$ " + " ".join(cmd[2:]) + "\n")
            err.flush()
            with subprocess.Popen(cmd, env=subprocess_env(threads), stdout=subprocess.PIPE,
                                  stderr=err, text=True, bufsize=1) as child:
                for line in child.stdout:
                    lines.append(line)
                    err.write(line)
                    err.flush()
            code, out = child.returncode, "".join(lines)
    if code != 0:
        tail = f"; last lines of {log}:\n{_tail(log)}" if log is not None else ""
        raise RunFailed(f"agentsearch {' '.join(args)} failed (exit {code}){tail}")
    return out


ARCHIVED = "archived.json"
"""The marker of a run folder restored from a results archive: its records, no weights."""


def agentsearch_eval(*args: str, threads: int = 1, log: Path | None = None) -> dict:
    """``agentsearch eval ARGS`` in a subprocess (``agentsearch_cli``); its JSON result."""
    import json

    text = agentsearch_cli("eval", *args, threads=threads, log=log)
    return json.loads(text[text.index("{"):])


def run_finished(run: Path) -> bool:
    """A run folder whose training ended: ``final/`` (written last) and ``metrics.jsonl``, or
    one restored from a results archive (``ARCHIVED``: its records, without the weights)."""
    return (((run / "final").exists() or (run / ARCHIVED).exists())
            and (run / "metrics.jsonl").exists())


def train_command(run: Path, preset: str, overrides: list[str]) -> list[str]:
    """The ``agentsearch`` arguments that train ``preset`` with ``overrides`` into ``run``."""
    return ["train", "--preset", preset, "--out", str(run), *overrides]


def train_run(run: Path, preset: str, overrides: list[str], *, threads: int = 1,
              log_name: str | None = "train.log", resume_overrides: list[str] = ()) -> bool:
    """Train ``preset`` + ``overrides`` into ``run`` unless it is finished (module doc).

    Returns True if it trained now, False if it was already finished. An interrupted run
    resumes from its own ``config.yaml`` with ``threads`` and ``resume_overrides`` on top
    (settings that changed since, such as a retrieval server's port). The child's stderr
    (its progress and warnings) goes to ``run/log_name`` (None: discarded).
    """
    if run_finished(run):
        return False
    log = run / log_name if log_name else None
    if (run / "config.yaml").exists():
        agentsearch_cli("train", "--resume", str(run), f"threads={threads}", *resume_overrides,
                        threads=threads, log=log)
    else:
        agentsearch_cli(*train_command(run, preset, overrides), threads=threads, log=log)
    return True


def run_parallel(fn: Callable[[T], R], jobs: Iterable[T],
                 parallel: int = 2) -> list[R | BaseException]:
    """``fn(job)`` for every job, ``parallel`` at a time, in job order. A job that raises
    gives its exception in its slot instead of stopping the others."""
    def safe(job: T) -> R | BaseException:
        try:
            return fn(job)
        except Exception as e:  # noqa: BLE001 - reported by the caller, per job
            return e

    with ThreadPoolExecutor(max(1, parallel)) as pool:
        return list(pool.map(safe, jobs))
