"""Where a record comes from: the checkout's revision, whether its tree was clean, the machine.

A figure quoted in the README or under ``docs/results/`` must be recomputable from its record
(``scripts/check_results.py``), and a record is citable only when the code that wrote it is
known: a commit, with nothing changed on top of it. So every suite runner and benchmark that
writes records (``scripts/experiments/*.py``, ``scripts/bench_*.py``) starts with
``require_clean``: on a tree with uncommitted changes (tracked files edited, or untracked
files git does not ignore) it refuses to start, naming them. ``--allow-dirty`` (development
only) lets it run, and its records say ``"citable": false``; ``check_results`` refuses a
figure whose record says so.

The stamp every record carries (``stamp``)::

    {"git": "<full revision or unknown>", "clean": true, "citable": true,
     "machine": "x86_64, 2 cores, <CPU model>, python 3.11.7", "when": "2026-12-05 15:30 UTC"}
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from pathlib import Path

__all__ = [
    "DirtyTree",
    "tree_state",
    "machine_line",
    "stamp",
    "require_clean",
    "stamp_run",
    "run_provenance",
    "ROOT",
    "RUN_FILE",
    "ALLOW_DIRTY_HELP",
    "emit_records",
]

ROOT = Path(__file__).resolve().parents[2]
"""The checkout this package runs from (its code is what a record's revision names)."""
ALLOW_DIRTY_HELP = (
    "development only: run on a tree with uncommitted changes; the records are "
    'marked not citable ("citable": false)'
)


class DirtyTree(SystemExit):
    """A record writer refused to start: the tree has uncommitted changes (the message names
    them)."""


def tree_state(root: str | Path = ROOT) -> dict:
    """``{"git": revision or "unknown", "dirty": [porcelain lines]}`` of the checkout at ``root``;
    outside a git checkout (or without git) the revision is unknown and the tree counts as dirty."""

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30
        )

    try:
        rev, status = git("rev-parse", "HEAD"), git("status", "--porcelain")
    except (OSError, subprocess.SubprocessError) as e:
        return {"git": "unknown", "dirty": [f"git failed: {e}"]}
    if rev.returncode != 0 or status.returncode != 0:
        return {
            "git": "unknown",
            "dirty": [f"not a git checkout: {(rev.stderr or status.stderr).strip()}"],
        }
    return {
        "git": rev.stdout.strip(),
        "dirty": [ln for ln in status.stdout.splitlines() if ln.strip()],
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def machine_line() -> str:
    """One line naming the machine: architecture, cores, CPU model, torch's CPU capability (when
    torch is already imported: seeded runs replay only within one) and Python."""
    torch = sys.modules.get("torch")
    cap = ""
    if torch is not None:
        try:
            cap = f", torch {torch.__version__} {torch.backends.cpu.get_cpu_capability()}"
        except (AttributeError, RuntimeError):
            cap = f", torch {getattr(torch, '__version__', '?')}"
    return (
        f"{platform.machine()}, {os.cpu_count()} cores, {_cpu_model()}{cap}, "
        f"python {platform.python_version()}"
    )


def stamp(root: str | Path = ROOT) -> dict:
    """The provenance a record carries (module doc); ``citable`` only for a clean tree."""
    state = tree_state(root)
    clean = not state["dirty"]
    out = {
        "git": state["git"],
        "clean": clean,
        "citable": clean,
        "machine": machine_line(),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    if not clean:
        out["dirty"] = state["dirty"][:20]
    return out


def require_clean(what: str, allow_dirty: bool = False, root: str | Path = ROOT) -> dict:
    """``stamp`` for a record writer named ``what``; raises ``DirtyTree`` (exit status 1, the
    changed paths in its message) on a dirty tree unless ``allow_dirty``."""
    s = stamp(root)
    if not s["clean"] and not allow_dirty:
        shown = "\n  ".join(s["dirty"][:10]) + ("\n  ..." if len(s["dirty"]) > 10 else "")
        raise DirtyTree(
            f"{what}: refusing to write records from a tree with uncommitted changes "
            f"(commit them first; --allow-dirty for development, records not citable):\n  {shown}"
        )
    return s


RUN_FILE = "provenance.json"
"""In a run folder: ``{"sessions": [stamp, ...]}``, one stamp per start or resume of the run."""


def stamp_run(run_dir: str | Path, root: str | Path = ROOT) -> dict:
    """Append this session's ``stamp`` to ``run_dir/provenance.json`` (``trainer.loop.train``
    calls it as every run starts or resumes: the code a run trains with is the tree's at its
    start, and a suite lasts hours) and return it."""
    import json

    path = Path(run_dir) / RUN_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    sessions = json.loads(path.read_text()).get("sessions", []) if path.exists() else []
    s = stamp(root)
    path.write_text(json.dumps({"sessions": [*sessions, s]}, indent=1) + "\n")
    return s


def run_provenance(run_dir: str | Path) -> dict:
    """What a run folder's ``provenance.json`` says: ``{"git": [revisions], "citable": bool,
    "machines": [...]}``; ``citable`` None when the run has no such file (written before it
    existed: revision not recorded)."""
    import json

    path = Path(run_dir) / RUN_FILE
    if not path.exists():
        return {"git": [], "citable": None, "machines": []}
    sessions = json.loads(path.read_text()).get("sessions", [])
    return {
        "git": list(dict.fromkeys(s.get("git") for s in sessions)),
        "citable": bool(sessions) and all(s.get("citable") for s in sessions),
        "machines": list(dict.fromkeys(s.get("machine") for s in sessions)),
    }


def emit_records(lines: list[dict], out: str | Path | None = None) -> None:
    """A record writer's output: each line as JSON on stdout and, with ``out``, appended to
    that file (its folder made), so a rerun adds lines beside the earlier ones."""
    import json

    text = "".join(json.dumps(x) + "\n" for x in lines)
    sys.stdout.write(text)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        with open(out, "a") as f:
            f.write(text)
