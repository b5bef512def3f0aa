"""Archive and restore of a suite's finished runs (``hard_world.py archive`` / ``restore``): a
grid larger than one session goes on in the next from the repository. Only the records travel
(``config.yaml``, ``metrics.jsonl`` gzipped, ``final_evals.json``, ``machine.json``,
``provenance.json``: the revision and machine of each start), no weights, and the machine
calibrations beside them."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

from agentsearch.analysis.hard_world import MACHINE_FILE
from agentsearch.core.provenance import RUN_FILE
from agentsearch.recipes.runner import ARCHIVED, run_finished

__all__ = ["archive", "restore", "archive_run", "copy_calibrations"]


def archive_run(run: Path, to: Path) -> Path:
    """A finished, final-evaluated run's records into ``to/<suite>/<run>`` (no weights)."""
    dest = to / run.parent.name / run.name
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(run / "config.yaml", dest / "config.yaml")
    shutil.copy(run / "final_evals.json", dest / "final_evals.json")
    for name in (MACHINE_FILE, RUN_FILE):
        if (run / name).exists():
            shutil.copy(run / name, dest / name)
    with (open(run / "metrics.jsonl", "rb") as src,
          gzip.GzipFile(dest / "metrics.jsonl.gz", "wb", mtime=0) as out):
        shutil.copyfileobj(src, out)
    return dest


def copy_calibrations(src: Path, dest: Path) -> int:
    """The machine calibrations (``calibrate``) of ``src`` into ``dest``; how many were new."""
    new = [c for c in sorted(src.glob("*.json")) if not (dest / c.name).exists()]
    for c in new:
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy(c, dest / c.name)
    return len(new)


def archive(a) -> int:
    done = []
    for suite in map(Path, a.suites):
        copy_calibrations(suite.parent / "calibration", Path(a.to) / "calibration")
        for run in sorted(r for r in suite.iterdir() if r.is_dir()):
            if ((run / "final").exists() and run_finished(run)
                    and (run / "final_evals.json").exists()):
                archive_run(run, Path(a.to))
                done.append(f"{suite.name}/{run.name}")
    print(json.dumps({"archived": len(done), "to": str(a.to), "runs": done}))
    return 0


def restore(a) -> int:
    done = []
    for src in sorted(p for p in Path(a.source).glob("*/*") if (p / "metrics.jsonl.gz").exists()):
        run = Path(a.out) / src.parent.name / src.name
        if run_finished(run):
            continue
        if run.exists():
            shutil.rmtree(run)  # an unfinished rerun of an archived run: the archive wins
        run.mkdir(parents=True)
        shutil.copy(src / "config.yaml", run / "config.yaml")
        shutil.copy(src / "final_evals.json", run / "final_evals.json")
        for name in (MACHINE_FILE, RUN_FILE):
            if (src / name).exists():
                shutil.copy(src / name, run / name)
        with (gzip.open(src / "metrics.jsonl.gz", "rb") as f,
              open(run / "metrics.jsonl", "wb") as out):
            shutil.copyfileobj(f, out)
        (run / ARCHIVED).write_text(json.dumps({"from": str(src)}) + "\n")
        done.append(str(run))
    copy_calibrations(Path(a.source) / "calibration", Path(a.out) / "calibration")
    print(json.dumps({"restored": len(done), "runs": done}))
    return 0
