"""What every section of the report shares: the runs grouped into methods with a colour each,
the per-step mean of a metric over a method's seeds, and small HTML pieces (tables, legends,
notes)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

from agentsearch.analysis.report.report_runs import ReportRun, number
from agentsearch.analysis.report.svg_charts import PALETTE, fmt
from agentsearch.analysis.runs import MethodCurve, group_methods

__all__ = ["Section", "Context", "make_context", "method_mean", "step_bins", "table", "legend",
           "note", "figure", "MAX_METHOD_CHARTS", "MAX_BARS"]

MAX_METHOD_CHARTS = 6
"""Charts drawn one per method (phases per step, drift boxes, gate decisions): at most this
many methods get one; the tables list every method."""
MAX_BARS = 80
"""Bars or boxes of a per-step chart: past this many steps, consecutive steps share one."""


def step_bins(steps: Sequence[int], most: int = MAX_BARS) -> list[list[int]]:
    """``steps`` (sorted) cut into at most ``most`` runs of consecutive entries, equal in count."""
    width = max(1, math.ceil(len(steps) / most))
    return [list(steps[i:i + width]) for i in range(0, len(steps), width)]


@dataclass
class Section:
    """One section of the page: its anchor, heading and HTML body."""

    id: str
    title: str
    body: str


@dataclass
class Context:
    """The runs, their methods (seeds grouped), a colour per method and the notes on them."""

    runs: list[ReportRun]
    metric: str
    methods: list[MethodCurve] = field(default_factory=list)
    by_method: dict[str, list[ReportRun]] = field(default_factory=dict)
    colors: dict[str, str] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)

    def color(self, label: str) -> str:
        return self.colors.get(label, PALETTE[-2])

    def charted_methods(self) -> list[str]:
        return list(self.by_method)[:MAX_METHOD_CHARTS]


def make_context(runs: list[ReportRun], metric: str) -> Context:
    methods, messages = group_methods([r.run for r in runs])
    ctx = Context(runs, metric, methods, messages=messages)
    for r in runs:
        ctx.by_method.setdefault(r.label, []).append(r)
    ctx.colors = {label: PALETTE[i % len(PALETTE)] for i, label in enumerate(ctx.by_method)}
    return ctx


def method_mean(runs: Sequence[ReportRun], key: str, *, x: str = "step",
                first: int = 1) -> list[tuple[float, float]]:
    """Per step, the mean of ``key`` over the ``runs`` that have it; x is the step, or the mean
    ``time/train_cumulative`` of those runs at that step (``x="time"``)."""
    at: dict[int, list[tuple[float | None, float]]] = {}
    for r in runs:
        for step, rec in r.steps.items():
            v = number(rec.get(key))
            if step >= first and v is not None:
                at.setdefault(step, []).append((number(rec.get("time/train_cumulative")), v))
    out = []
    for step in sorted(at):
        vals = at[step]
        if x == "step":
            out.append((float(step), statistics.fmean(v for _, v in vals)))
            continue
        times = [t for t, _ in vals if t is not None]
        if times:
            out.append((statistics.fmean(times), statistics.fmean(v for _, v in vals)))
    return out


def table(header: Sequence[str], rows: Sequence[Sequence], *, cls: str = "",
          row_ids: Sequence[str] | None = None) -> str:
    """An HTML table; cells are escaped, numbers formatted with ``fmt``."""
    def cell(v) -> str:
        if isinstance(v, float):
            return fmt(v)
        return escape("-" if v is None else str(v))

    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = []
    for i, row in enumerate(rows):
        rid = f' data-row="{escape(row_ids[i])}"' if row_ids else ""
        body.append(f"<tr{rid}>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>")
    return (f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}'
            "</tbody></table>")


def legend(items: Sequence[tuple[str, str]]) -> str:
    """Colour keys: (label, colour)."""
    return '<div class="legend">' + "".join(
        f'<span><i style="background:{c}"></i>{escape(label)}</span>' for label, c in items) \
        + "</div>"


def note(text: str) -> str:
    return f'<p class="note">{escape(text)}</p>'


def figure(svg: str, caption: str) -> str:
    """A chart with a one-line caption under it."""
    return f'<figure>{svg}<figcaption>{escape(caption)}</figcaption></figure>'
