"""Metrics sinks: ``metrics.jsonl`` (always), TensorBoard (default), W&B (optional).

Every record carries ``step`` and ``time/train_cumulative`` so quality can be plotted
against wall-clock (``agentsearch pareto``), and ``clock/unix_seconds`` (seconds since the epoch
when it was written: which runs shared the machine, ``analysis.hard_world.pace``; not a phase,
so not under ``time/``). Keys are namespaced (``reward/answer``,
``replay/accept_rate``, ``time/generate``).
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

__all__ = ["MetricsLogger", "read_metrics", "progress_line", "memory_metrics", "CLOCK"]

CLOCK = "clock/unix_seconds"
"""The key of every record's wall-clock stamp (seconds since the epoch)."""


def memory_metrics() -> dict[str, float]:
    """This process's memory (trainer, in-process vLLM engine and index), in GB:
    ``sys/peak_rss_gb`` the peak so far (it only grows: a new peak or a leak look alike) and
    ``sys/rss_gb`` the resident set now (NaN where ``/proc/self/statm`` is missing)."""
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # KB on Linux
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        now = pages * os.sysconf("SC_PAGE_SIZE") / 1e9
    except (OSError, ValueError, IndexError):
        now = float("nan")
    return {"sys/peak_rss_gb": peak, "sys/rss_gb": now}


def _clean(v):
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)  # JSON has no NaN/inf; keep them visible as strings
    return v


class MetricsLogger:
    def __init__(self, run_dir: str | Path, *, tensorboard: bool = True,
                 wandb_project: str | None = None, config: dict | None = None):
        self.path = Path(run_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "a", encoding="utf-8")
        self._tb = None
        self._wandb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(Path(run_dir) / "tb"))
            except ImportError:  # tensorboard is a core dependency; stay robust anyway
                self._tb = None
        if wandb_project:
            import wandb

            self._wandb = wandb.init(project=wandb_project, config=config, dir=str(run_dir))

    def truncate_after(self, step: int) -> None:
        """Drop records of steps after ``step`` (a resumed run re-logs them), and a last line
        cut short by a crash mid-write; the file is replaced atomically."""
        self._f.close()
        keep = [line for line, rec in _records(self.path) if rec.get("step", 0) <= step]
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text("".join(line + "\n" for line in keep), encoding="utf-8")
        os.replace(tmp, self.path)
        self._f = open(self.path, "a", encoding="utf-8")

    def log(self, step: int, metrics: dict) -> None:
        rec = {"step": step, **{k: _clean(v) for k, v in metrics.items()},
               CLOCK: round(time.time(), 1)}
        self._f.write(json.dumps(rec) + "\n")
        self._f.flush()
        if self._tb is not None:
            for k, v in rec.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) \
                        and k not in ("step", CLOCK):
                    self._tb.add_scalar(k, v, step)
        if self._wandb is not None:
            self._wandb.log(rec, step=step)

    def close(self) -> None:
        self._f.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


def _records(path: Path) -> list[tuple[str, dict]]:
    """``(line, record)`` of each line of a ``metrics.jsonl``. A last line that is not JSON was
    cut by a crash (or is being written) and is left out; one earlier is an error."""
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    out = []
    for i, line in enumerate(lines):
        try:
            out.append((line, json.loads(line)))
        except ValueError:
            if i < len(lines) - 1:
                raise ValueError(f"{path}: line {i + 1} is not JSON (and not the last line): "
                                 f"{line[:80]!r}") from None
    return out


def read_metrics(run_dir: str | Path) -> list[dict]:
    """The records of ``RUN_DIR/metrics.jsonl`` (also while it is being written, or after a
    crash: a cut last line is left out)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"no metrics.jsonl in {run_dir}")
    return [rec for _, rec in _records(path)]


def progress_line(m: dict, last_eval: dict) -> str:
    """The training progress line of a step's metrics ``m``: reward, success, replay
    acceptance, step time, and the last eval's dev score."""
    return (f"reward {m.get('reward/total', 0):+.3f}  "
            f"correct {m.get('rollout/answer_correct', 0):.2f}  "
            f"accept {m.get('replay/accept_rate', 0):.2f}  "
            f"replayed {int(m.get('replay/accepted', 0))}  "
            f"step {m.get('time/step', 0):.1f}s  "
            f"eval {last_eval.get('eval/mean_at_n', float('nan')):.3f}")
