"""Run folders as the report reads them: finished, still running, or made by the OpenRLHF engine.

A run folder holds ``metrics.jsonl`` (one record per training step, ``step`` 0 the evaluation
before training; the OpenRLHF engine writes its evaluations as records of their own, so records
of one step are merged, later keys winning), ``config.yaml`` (methods are labelled from it:
``agentsearch.analysis.runs``), ``provenance.json`` (the revision and the machine of each
start), and from the local trainer ``episodes.jsonl`` and ``replay_scan.jsonl``
(``agentsearch.trainer.episode_log``). A run being written is read as far as it goes: a last
line cut short is left out, and the run's status says how far it got.

Episodes are many (four a step): ``pick_episodes`` keeps a bounded number per run, from steps
spread over the run, reading only the lines of those steps.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from agentsearch.analysis.runs import Run, load_runs
from agentsearch.trainer.episode_log import EPISODES_FILE, SCAN_FILE

__all__ = ["ReportRun", "read_runs", "pick_episodes", "REWARD_KEYS", "MAX_EPISODE_TOKENS"]

REWARD_KEYS = ("reward/total", "rollout/reward_mean")
"""The training reward: the local trainer's key, then the OpenRLHF engine's."""
MAX_EPISODE_TOKENS = 2048
"""Tokens of one episode shown; past them the browser says how many were left out."""
_STEP = re.compile(r'^\{"step": (\d+)')


@dataclass
class ReportRun:
    """One run: ``run`` (curve, label, seed, config, records) plus what the report adds."""

    run: Run
    steps: dict[int, dict] = field(default_factory=dict)  # step -> its merged record
    engine: str = "local"
    status: str = ""
    provenance: list[dict] = field(default_factory=list)
    scans: list[dict] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.run.name

    @property
    def label(self) -> str:
        return self.run.label

    def series(self, key: str, *, x: str = "step", first: int = 1) -> list[tuple[float, float]]:
        """(step or ``time/train_cumulative``, value) of each step >= ``first`` that has ``key``."""
        out = []
        for step, rec in self.steps.items():
            v = number(rec.get(key))
            if step < first or v is None:
                continue
            at = float(step) if x == "step" else number(rec.get("time/train_cumulative"))
            if at is not None:
                out.append((at, v))
        return out

    def reward_key(self) -> str | None:
        return next((k for k in REWARD_KEYS
                     if any(k in r for r in self.steps.values())), None)

    def keys(self, prefix: str) -> list[str]:
        """Every numeric key starting with ``prefix``, sorted."""
        return sorted({k for r in self.steps.values() for k, v in r.items()
                       if k.startswith(prefix) and number(v) is not None})

    def run_seconds(self) -> float | None:
        """Training seconds at the last record that has them."""
        return max((t for r in self.steps.values()
                    if (t := number(r.get("time/train_cumulative"))) is not None), default=None)


def number(v) -> float | None:
    """``v`` as a finite float, or None (a bool, a string, NaN)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def _merge(records: list[dict]) -> dict[int, dict]:
    steps: dict[int, dict] = {}
    for rec in records:
        step = rec.get("step")
        if isinstance(step, int):
            steps.setdefault(step, {}).update(rec)
    return dict(sorted(steps.items()))


def _jsonl(path: Path) -> list[dict]:
    """The records of a JSONL file; lines that are not JSON objects (one being written) skipped."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def _status(rr: ReportRun) -> str:
    path, cfg = rr.run.path, rr.run.config
    last = max(rr.steps, default=None)
    planned = cfg.get("steps") if isinstance(cfg.get("steps"), int) else None
    of = f" of {planned}" if planned else ""
    if last is None:
        return "no step logged yet"
    if (path / "final").is_dir() or (planned and last >= planned):
        return f"finished: {last} steps"
    stamp = number(rr.steps[last].get("clock/unix_seconds"))
    ago = f", last record {time.time() - stamp:.0f} s ago" if stamp else ""
    return f"running or stopped: step {last}{of}{ago}"


def read_runs(run_dirs, *, metric: str = "eval/mean_at_n",
              label_by: str = "auto") -> list[ReportRun]:
    """Every folder in ``run_dirs`` as a ``ReportRun`` (labels over all of them)."""
    out = []
    for run in load_runs(run_dirs, metric, label_by):
        rr = ReportRun(run, steps=_merge(run.records))
        rr.engine = "openrlhf" if (run.path / "agentsearch.json").exists() else "local"
        prov = _jsonl_or_json(run.path / "provenance.json")
        rr.provenance = prov.get("sessions", []) if isinstance(prov, dict) else []
        rr.scans = _jsonl(run.path / SCAN_FILE)
        rr.status = _status(rr)
        out.append(rr)
    return out


def _jsonl_or_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def pick_episodes(rr: ReportRun, budget: int) -> list[dict]:
    """Up to ``budget`` episodes of ``rr`` from steps spread over the run (first and last
    included); only those steps' lines are parsed. Each gets ``run`` and, past
    ``MAX_EPISODE_TOKENS``, is cut with ``cut`` = the tokens left out."""
    path = rr.run.path / EPISODES_FILE
    if budget <= 0 or not path.exists():
        return []
    by_step: dict[int, list[str]] = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        m = _STEP.match(line)
        if m:
            by_step.setdefault(int(m.group(1)), []).append(line)
    steps = sorted(by_step)
    per_step = max(len(v) for v in by_step.values()) if by_step else 1
    n = max(1, min(len(steps), budget // per_step))
    chosen = sorted({steps[round(i * (len(steps) - 1) / max(n - 1, 1))] for i in range(n)})
    out = []
    for step in chosen:
        for line in by_step[step]:
            try:
                ep = json.loads(line)
            except ValueError:  # the line being written
                continue
            if not isinstance(ep, dict) or len(ep.get("action_mask", "")) != len(
                    ep.get("token_ids", [])):
                continue
            total = len(ep["token_ids"])
            if total > MAX_EPISODE_TOKENS:
                ep["cut"] = total - MAX_EPISODE_TOKENS
                for k in ("token_ids", "tokens", "action_mask"):
                    ep[k] = ep[k][:MAX_EPISODE_TOKENS]
            ep["run"] = rr.name
            out.append(ep)
    return out[:budget]
