"""``agentsearch report RUN [RUN ...] [--out FILE]``: one self-contained HTML page per run or set
of runs (docs/report.md).

    agentsearch report runs/hdr-s0 runs/hdr-s1 runs/naive-s0 --out report.html

Sections: the runs; eval score and training reward against training wall-clock and step;
quality against wall-clock by method (seeds aggregated, the frontier, time to a target);
seconds per step by phase and what overlapped; replay; the staleness gate of asynchronous runs;
health alarms and infrastructure errors; eval by question type before and after; an episode
browser. It reads runs while they are written and runs of the OpenRLHF engine. Modules:
``report_runs`` (reading), ``svg_charts`` (drawing), ``quality_sections``,
``training_sections``, ``episode_browser`` (the sections), ``report_page`` (the page).
"""

from __future__ import annotations

from pathlib import Path

from agentsearch.analysis.report.episode_browser import episodes_section
from agentsearch.analysis.report.quality_sections import (
    eval_types_section,
    frontier_section,
    quality_section,
    runs_section,
)
from agentsearch.analysis.report.report_page import render_page
from agentsearch.analysis.report.report_parts import make_context
from agentsearch.analysis.report.report_runs import read_runs
from agentsearch.analysis.report.training_sections import (
    async_section,
    health_section,
    replay_section,
    time_section,
)

__all__ = ["build_report", "main", "SECTION_IDS"]

SECTION_IDS = ("runs", "quality", "frontier", "time", "replay", "async", "health", "eval-types",
               "episodes")
"""The page's sections, in order (their HTML ids)."""


def build_report(run_dirs, out: str | Path | None = None, *, metric: str = "eval/mean_at_n",
                 label_by: str = "auto", target: float | None = None) -> Path:
    """Write the report of ``run_dirs`` to ``out`` (default: ``RUN/report.html`` for one run,
    ``report.html`` for several) and return its path. Folders that cannot be read are listed
    in the page with the reason; none raises."""
    dirs = [Path(d) for d in run_dirs]
    if not dirs:
        raise ValueError("agentsearch report needs at least one run folder")
    out = Path(out) if out else (dirs[0] / "report.html" if len(dirs) == 1
                                 else Path("report.html"))
    ctx = make_context(read_runs(dirs, metric=metric, label_by=label_by), metric)
    sections = [runs_section(ctx), quality_section(ctx), frontier_section(ctx, target),
                time_section(ctx), replay_section(ctx), async_section(ctx), health_section(ctx),
                eval_types_section(ctx), episodes_section(ctx)]
    names = ", ".join(d.name for d in dirs[:3]) + (f" and {len(dirs) - 3} more"
                                                   if len(dirs) > 3 else "")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_page(sections, f"agentsearch report: {names}"), encoding="utf-8")
    return out


def main(a) -> int:
    """``agentsearch report``: write the page, print its path (and each run's problems)."""
    missing = [d for d in a.runs if not Path(d).is_dir()]
    if len(missing) == len(a.runs):
        raise FileNotFoundError(f"no run folder among {', '.join(a.runs)}")
    path = build_report(a.runs, a.out, metric=a.metric, label_by=a.label_by, target=a.target)
    for d in missing:
        print(f"{d}: not a folder (listed in the report)")
    print(f"report: {path}")
    return 0
