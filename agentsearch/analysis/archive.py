"""A suite's runs as kept records: a live suite folder (``runs/hard_world/lat-0``) or its archive
in the repository (``docs/results/hard_world/runs/lat-0``, where ``metrics.jsonl`` is gzipped),
read the same way, on the reference machine's clock.

- ``finished_runs(suite)``: the run folders with ``final_evals.json`` (a run in flight has none);
- ``reference_clock(suite)``: ``pareto.analyse``'s ``time_scale`` from the calibrations beside the
  suite (``SUITE/../calibration/*.json``) and each run's pinned one (``machine.json``);
- ``analysed(suite, share)``: ``pareto.analyse`` of the finished runs on that clock, with the
  pre-registered target (``share`` of on_policy_larger's mean final; None: its final itself).

Pure readers: nothing here writes. ``scripts/experiments/hard_world.py`` (report, predict) and
``scripts/check_results.py`` (every hard-world figure recomputed) use them.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

from agentsearch.analysis.hard_world import MACHINE_FILE, calibration_factor
from agentsearch.analysis.pareto import analyse

__all__ = ["finished_runs", "calibrations", "reference_clock", "analysed", "REFERENCE_METHOD"]

REFERENCE_METHOD = "on_policy_larger"


def finished_runs(suite: str | Path) -> tuple[list[Path], list[str]]:
    """The suite's finished runs (``final_evals.json`` present) and the names of the others."""
    suite = Path(suite)
    started = sorted(
        r
        for r in suite.iterdir()
        if (r / "metrics.jsonl").exists() or (r / "metrics.jsonl.gz").exists()
    )
    runs = [r for r in started if (r / "final_evals.json").exists()]
    return runs, [r.name for r in started if r not in runs]


def calibrations(suite: str | Path, folder: str | Path | None = None) -> list[dict]:
    """The machine calibrations beside the suite (``hard_world.py calibrate``; or in ``folder``),
    oldest first."""
    folder = Path(suite).parent / "calibration" if folder is None else Path(folder)
    return [json.loads(c.read_text()) for c in sorted(folder.glob("*.json"))]


def _pinned(run: Path) -> float | None:
    f = run / MACHINE_FILE
    return json.loads(f.read_text())["calibration_unix"] if f.exists() else None


def _factor(cals: list[dict], run) -> float | None:
    return calibration_factor(run.records, cals, _pinned(run.path))


def reference_clock(suite: str | Path, folder: str | Path | None = None):
    """``time_scale`` for ``pareto.analyse``: a run's factor to the reference machine's clock (its
    pinned calibration, else the last before its first record; None: no calibration applies);
    the calibrations beside the suite, or in ``folder``."""
    return partial(_factor, calibrations(suite, folder))


def analysed(suite: str | Path, share: float | None = 0.9, runs: list[Path] | None = None) -> dict:
    """``pareto.analyse`` of the suite's finished runs (or ``runs``) labelled by folder, on the
    reference clock, to ``share`` of on_policy_larger's mean final (None: that final itself, the
    HDR paper's test), ratios to its mean training time."""
    runs = finished_runs(suite)[0] if runs is None else runs
    full = analyse(runs, label_by="dir", time_scale=reference_clock(suite))
    if share is None:
        return full
    base = next((m for m in full["methods"] if m["method"] == REFERENCE_METHOD), None)
    if base is None or base["final_mean"] is None:
        return full
    return analyse(
        runs,
        label_by="dir",
        time_scale=reference_clock(suite),
        target_method=REFERENCE_METHOD,
        target_score=share * base["final_mean"],
    )
