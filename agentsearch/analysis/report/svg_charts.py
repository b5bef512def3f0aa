"""Charts as inline SVG strings, drawn from Python: lines with bands, stacked bars, grouped
bars, boxes per step and event lanes. No charting library and no script: hovering a line, a
bar or a box shows its ``<title>`` (the browser's own tooltip).

Every chart is an ``<svg class="chart">`` with a ``viewBox``, so it scales with the page;
coordinates are rounded to 0.1 px, which keeps a report of many runs small.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from html import escape

__all__ = ["Line", "Band", "line_chart", "stacked_bars", "hbars", "grouped_bars", "boxes", "lanes",
           "PALETTE", "nice_ticks", "fmt"]

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
           "#17becf", "#7f7f7f", "#bcbd22")
"""Colours of methods (and of phases), in order."""

W, H = 640, 250
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 12, 38


@dataclass
class Line:
    """One series: ``points`` (x, y); ``title`` is its tooltip."""

    points: Sequence[tuple[float, float]]
    color: str
    title: str = ""
    width: float = 1.5
    dashed: bool = False
    markers: bool = False
    opacity: float = 1.0


@dataclass
class Band:
    """A shaded range: ``points`` (x, low, high)."""

    points: Sequence[tuple[float, float, float]]
    color: str
    title: str = ""


@dataclass
class _Frame:
    x0: float
    x1: float
    y0: float
    y1: float
    w: int = W
    h: int = H
    left: int = LEFT
    parts: list[str] = field(default_factory=list)

    def x(self, v: float) -> float:
        span = (self.x1 - self.x0) or 1
        return round(self.left + (v - self.x0) / span * (self.w - self.left - RIGHT), 1)

    def y(self, v: float) -> float:
        span = (self.y1 - self.y0) or 1
        return round(self.h - BOTTOM - (v - self.y0) / span * (self.h - TOP - BOTTOM), 1)


def fmt(v: float | None, digits: int = 3) -> str:
    """A number for a label: ``-`` for None, a whole number from 100 on, else ``digits``
    significant digits (the page's script formats as this does)."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    # halves round up on the exact binary value, as the page's script rounds (JavaScript)
    d = Decimal(v)
    if abs(v) >= 100 or v == 0:
        return f"{int(d.quantize(Decimal(1), rounding=ROUND_HALF_UP)):,}"
    q = d.quantize(Decimal(1).scaleb(d.adjusted() - digits + 1), rounding=ROUND_HALF_UP)
    return f"{float(q):.{digits}g}"


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick values covering [lo, hi], about ``n`` of them."""
    if not math.isfinite(lo) or not math.isfinite(hi):
        return [0.0]
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    return [round(first + i * step, 10) for i in range(int((hi - first) / step + 1e-9) + 1)]


def _range(values: Sequence[float], *, zero: bool = False,
           pad: float = 0.05) -> tuple[float, float]:
    vs = [v for v in values if v is not None and math.isfinite(v)]
    if not vs:
        return 0.0, 1.0
    lo, hi = min(vs), max(vs)
    if zero:
        lo, hi = min(lo, 0.0), max(hi, 0.0)
    if hi == lo:
        return lo - 0.5, hi + 0.5
    return (lo if zero and lo == 0 else lo - pad * (hi - lo)), hi + pad * (hi - lo)


def _open(frame: _Frame, x_label: str, y_label: str, *, x_ticks: bool = True) -> None:
    p, bottom = frame.parts, frame.h - BOTTOM
    for t in nice_ticks(frame.y0, frame.y1):
        y = frame.y(t)
        p.append(f'<line class="grid" x1="{LEFT}" y1="{y}" x2="{frame.w - RIGHT}" y2="{y}"/>'
                 f'<text class="tick" x="{LEFT - 4}" y="{y + 3}" text-anchor="end">{fmt(t)}</text>')
    if x_ticks:
        ticks = nice_ticks(frame.x0, frame.x1, 6)
        for t in ([t for t in ticks if t == int(t)] if x_label == "step" else ticks):
            x = frame.x(t)
            p.append(f'<line class="axis" x1="{x}" y1="{bottom}" x2="{x}" y2="{bottom + 4}"/>'
                     f'<text class="tick" x="{x}" y="{bottom + 15}" text-anchor="middle">'
                     f'{fmt(t)}</text>')
    p.append(f'<line class="axis" x1="{LEFT}" y1="{bottom}" x2="{frame.w - RIGHT}" y2="{bottom}"/>'
             f'<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{bottom}"/>'
             f'<text class="label" x="{(LEFT + frame.w - RIGHT) / 2}" y="{frame.h - 4}" '
             f'text-anchor="middle">{escape(x_label)}</text>'
             f'<text class="label" x="12" y="{(TOP + bottom) / 2}" text-anchor="middle" '
             f'transform="rotate(-90 12 {(TOP + bottom) / 2})">{escape(y_label)}</text>')


def _close(frame: _Frame, name: str) -> str:
    return (f'<svg class="chart" data-chart="{escape(name)}" viewBox="0 0 {frame.w} {frame.h}" '
            f'role="img" aria-label="{escape(name)}">' + "".join(frame.parts) + "</svg>")


def _title(text: str) -> str:
    return f"<title>{escape(text)}</title>" if text else ""


def line_chart(name: str, lines: Sequence[Line], *, x_label: str, y_label: str,
               bands: Sequence[Band] = (), hlines: Sequence[tuple[float, str]] = (),
               y_range: tuple[float, float] | None = None, zero: bool = False) -> str:
    """Lines (and shaded bands) against a shared x axis; ``hlines``: (y, label) rules."""
    xs = [x for ln in lines for x, _ in ln.points] + [x for b in bands for x, _, _ in b.points]
    ys = ([y for ln in lines for _, y in ln.points] + [v for b in bands for _, lo, hi in b.points
                                                       for v in (lo, hi)] + [y for y, _ in hlines])
    x0, x1 = _range(xs, pad=0.0)
    y0, y1 = y_range or _range(ys, zero=zero)
    frame = _Frame(x0, x1, y0, y1)
    _open(frame, x_label, y_label)
    for b in bands:
        if not b.points:
            continue
        top = " ".join(f"{frame.x(x)},{frame.y(hi)}" for x, _, hi in b.points)
        low = " ".join(f"{frame.x(x)},{frame.y(lo)}" for x, lo, _ in reversed(b.points))
        frame.parts.append(f'<polygon class="band" points="{top} {low}" fill="{b.color}">'
                           f'{_title(b.title)}</polygon>')
    for y, label in hlines:
        yy = frame.y(y)
        frame.parts.append(f'<line class="rule" x1="{LEFT}" y1="{yy}" x2="{frame.w - RIGHT}" '
                           f'y2="{yy}">{_title(label)}</line><text class="tick" '
                           f'x="{frame.w - RIGHT - 2}" y="{yy - 3}" text-anchor="end">'
                           f'{escape(label)}</text>')
    for ln in lines:
        pts = [(frame.x(x), frame.y(y)) for x, y in ln.points if y is not None]
        if not pts:
            continue
        d = "M" + " L".join(f"{x},{y}" for x, y in pts)
        dash = ' stroke-dasharray="5 3"' if ln.dashed else ""
        op = f' stroke-opacity="{ln.opacity}"' if ln.opacity < 1 else ""
        frame.parts.append(f'<path class="series" d="{d}" stroke="{ln.color}" '
                           f'stroke-width="{ln.width}"{dash}{op}>{_title(ln.title)}</path>')
        if ln.markers or len(pts) == 1:
            frame.parts.extend(f'<circle cx="{x}" cy="{y}" r="2.5" fill="{ln.color}">'
                               f'{_title(f"{ln.title}: {fmt(px)}, {fmt(py)}")}</circle>'
                               for (x, y), (px, py) in zip(pts, ln.points))
    return _close(frame, name)


def stacked_bars(name: str, xs: Sequence[float], layers: Sequence[tuple[str, Sequence[float],
                                                                        str]],
                 *, x_label: str, y_label: str, line: tuple[str, Sequence[float]] | None = None
                 ) -> str:
    """One bar per x, its ``layers`` (name, value per x, colour) stacked bottom-up; ``line``
    (name, value per x) drawn over the bars."""
    totals = [sum(v[i] or 0.0 for _, v, _ in layers) for i in range(len(xs))]
    over = [v for v in line[1] if v is not None] if line else []
    frame = _Frame(*_range(list(xs), pad=0.0), *_range(totals + over, zero=True))
    frame.x0 -= 0.5
    frame.x1 += 0.5
    _open(frame, x_label, y_label)
    bar = max((frame.x(1) - frame.x(0)) * 0.8, 0.6)
    for i, x in enumerate(xs):
        base, at = 0.0, f"step {fmt(x)}"
        for layer, values, color in layers:
            v = values[i] or 0.0
            if v <= 0:
                continue
            top, bottom = frame.y(base + v), frame.y(base)
            frame.parts.append(f'<rect x="{round(frame.x(x) - bar / 2, 1)}" y="{top}" '
                               f'width="{round(bar, 1)}" height="{round(bottom - top, 1)}" '
                               f'fill="{color}">{_title(f"{at}, {layer}: {fmt(v)}")}</rect>')
            base += v
    if line:
        pts = [(frame.x(x), frame.y(v)) for x, v in zip(xs, line[1]) if v is not None]
        if pts:
            d = "M" + " L".join(f"{x},{y}" for x, y in pts)
            frame.parts.append(f'<path class="series" d="{d}" stroke="#000" stroke-width="1.2">'
                               f'{_title(line[0])}</path>')
    return _close(frame, name)


def hbars(name: str, rows: Sequence[str], layers: Sequence[tuple[str, Sequence[float], str]],
          *, x_label: str, marks: tuple[str, Sequence[float | None]] | None = None) -> str:
    """One horizontal bar per row (its label on the left), ``layers`` (name, value per row,
    colour) stacked left to right; ``marks`` (name, value per row): a black tick on each bar."""
    bar, left = 18, 250
    totals = [sum(v[i] or 0.0 for _, v, _ in layers) for i in range(len(rows))]
    ticks = [v for v in (marks[1] if marks else []) if v is not None]
    h = TOP + BOTTOM + (bar + 8) * max(len(rows), 1)
    frame = _Frame(*_range(totals + ticks, zero=True), 0, 1, h=h, left=left)
    bottom = h - BOTTOM
    for t in nice_ticks(frame.x0, frame.x1, 6):
        x = frame.x(t)
        frame.parts.append(f'<line class="grid" x1="{x}" y1="{TOP}" x2="{x}" y2="{bottom}"/>'
                           f'<text class="tick" x="{x}" y="{bottom + 15}" text-anchor="middle">'
                           f'{fmt(t)}</text>')
    frame.parts.append(f'<text class="label" x="{(left + W - RIGHT) / 2}" y="{h - 4}" '
                       f'text-anchor="middle">{escape(x_label)}</text>')
    for i, row in enumerate(rows):
        y, base = TOP + 4 + i * (bar + 8), 0.0
        short = row if len(row) <= 40 else row[:38] + "…"
        frame.parts.append(f'<text class="lanelabel" x="{left - 6}" y="{y + 13}" '
                           f'text-anchor="end">{_title(row)}{escape(short)}</text>')
        for layer, values, color in layers:
            v = values[i] or 0.0
            if v > 0:
                x0, x1 = frame.x(base), frame.x(base + v)
                frame.parts.append(f'<rect x="{x0}" y="{y}" width="{round(x1 - x0, 1)}" '
                                   f'height="{bar}" fill="{color}">'
                                   f'{_title(f"{row}, {layer}: {fmt(v)}")}</rect>')
                base += v
        if marks and marks[1][i] is not None:
            x = frame.x(marks[1][i])
            frame.parts.append(f'<line x1="{x}" y1="{y - 3}" x2="{x}" y2="{y + bar + 3}" '
                               f'stroke="#000" stroke-width="2">'
                               f'{_title(f"{row}, {marks[0]}: {fmt(marks[1][i])}")}</line>')
    return _close(frame, name)


def grouped_bars(name: str, categories: Sequence[str],
                 groups: Sequence[tuple[str, Sequence[float | None], str]], *,
                 y_label: str, y_range: tuple[float, float] | None = None) -> str:
    """For each category, one bar per group (name, value per category, colour)."""
    values = [v for _, vs, _ in groups for v in vs if v is not None]
    frame = _Frame(0, max(len(categories), 1), *(y_range or _range(values, zero=True)))
    _open(frame, "", y_label, x_ticks=False)
    slot = (frame.x(1) - frame.x(0))
    bar = slot * 0.8 / max(len(groups), 1)
    for c, cat in enumerate(categories):
        cx = frame.x(c)
        frame.parts.append(f'<text class="tick" x="{round(cx + slot / 2, 1)}" y="{H - BOTTOM + 14}"'
                           f' text-anchor="middle">{escape(cat)}</text>')
        for g, (label, vs, color) in enumerate(groups):
            v = vs[c]
            if v is None:
                continue
            top, bottom = frame.y(max(v, 0.0)), frame.y(min(v, 0.0))
            frame.parts.append(f'<rect x="{round(cx + slot * 0.1 + g * bar, 1)}" y="{top}" '
                               f'width="{round(bar, 1)}" height="{round(bottom - top, 1)}" '
                               f'fill="{color}">{_title(f"{cat}, {label}: {fmt(v)}")}</rect>')
    return _close(frame, name)


def _quantiles(xs: Sequence[float]) -> tuple[float, float, float, float, float]:
    s = sorted(xs)

    def q(f: float) -> float:
        pos = f * (len(s) - 1)
        lo = int(pos)
        return s[lo] + (s[min(lo + 1, len(s) - 1)] - s[lo]) * (pos - lo)

    return s[0], q(0.25), q(0.5), q(0.75), s[-1]


def boxes(name: str, xs: Sequence[float], samples: Sequence[Sequence[float]], color: str, *,
          x_label: str, y_label: str, hlines: Sequence[tuple[float, str]] = ()) -> str:
    """A box per x over its ``samples`` (whiskers: min and max; box: quartiles; tick: median)."""
    flat = [v for s in samples for v in s] + [y for y, _ in hlines]
    frame = _Frame(*_range(list(xs), pad=0.0), *_range(flat, zero=True))
    frame.x0 -= 0.5
    frame.x1 += 0.5
    _open(frame, x_label, y_label)
    width = max((frame.x(1) - frame.x(0)) * 0.6, 1.0)
    for y, label in hlines:
        yy = frame.y(y)
        frame.parts.append(f'<line class="rule" x1="{LEFT}" y1="{yy}" x2="{W - RIGHT}" y2="{yy}">'
                           f'{_title(label)}</line><text class="tick" x="{W - RIGHT - 2}" '
                           f'y="{yy - 3}" text-anchor="end">{escape(label)}</text>')
    for x, s in zip(xs, samples):
        if not s:
            continue
        lo, q1, med, q3, hi = _quantiles(s)
        cx = frame.x(x)
        tip = _title(f"{fmt(x)}: n {len(s)}, min {fmt(lo)}, median {fmt(med)}, max {fmt(hi)}")
        frame.parts.append(
            f'<g>{tip}<line x1="{cx}" y1="{frame.y(hi)}" x2="{cx}" y2="{frame.y(lo)}" '
            f'stroke="{color}"/><rect x="{round(cx - width / 2, 1)}" y="{frame.y(q3)}" '
            f'width="{round(width, 1)}" height="{round(frame.y(q1) - frame.y(q3), 1)}" '
            f'fill="{color}" fill-opacity="0.35" stroke="{color}"/><line '
            f'x1="{round(cx - width / 2, 1)}" y1="{frame.y(med)}" x2="{round(cx + width / 2, 1)}" '
            f'y2="{frame.y(med)}" stroke="#000"/></g>')
    return _close(frame, name)


def lanes(name: str, rows: Sequence[tuple[str, Sequence[tuple[float, float, str]], str]], *,
          x_range: tuple[float, float], x_label: str) -> str:
    """One lane per row (label, (x, value, tooltip) events, colour): a mark at each event's x,
    its opacity growing with the value."""
    lane, left = 22, 190
    h = TOP + BOTTOM + lane * max(len(rows), 1)
    frame = _Frame(x_range[0], x_range[1] if x_range[1] > x_range[0] else x_range[0] + 1, 0,
                   max(len(rows), 1), h=h, left=left)
    frame.parts.append(f'<line class="axis" x1="{left}" y1="{h - BOTTOM}" x2="{W - RIGHT}" '
                       f'y2="{h - BOTTOM}"/>')
    for t in nice_ticks(frame.x0, frame.x1, 6):
        x = frame.x(t)
        frame.parts.append(f'<text class="tick" x="{x}" y="{h - BOTTOM + 15}" '
                           f'text-anchor="middle">{fmt(t)}</text>')
    frame.parts.append(f'<text class="label" x="{(left + W - RIGHT) / 2}" y="{h - 4}" '
                       f'text-anchor="middle">{escape(x_label)}</text>')
    for i, (label, events, color) in enumerate(rows):
        y = TOP + i * lane
        frame.parts.append(f'<line class="grid" x1="4" y1="{y + lane}" x2="{W - RIGHT}" '
                           f'y2="{y + lane}"/><text class="lanelabel" x="4" '
                           f'y="{y + 14}">{escape(label)}</text>')
        top = max((v for _, v, _ in events), default=1.0) or 1.0
        cells: dict[int, list[tuple[float, str]]] = {}  # 3-px cells: one mark for many events
        for x, v, tip in events:
            cells.setdefault(int(frame.x(x) // 3), []).append((v, tip))
        for cell, hits in sorted(cells.items()):
            v, tip = max(hits)
            more = f" (and {len(hits) - 1} more here)" if len(hits) > 1 else ""
            op = round(0.35 + 0.65 * min(v / top, 1.0), 2)
            frame.parts.append(f'<rect x="{cell * 3}" y="{y + 3}" width="3" '
                               f'height="{lane - 6}" fill="{color}" fill-opacity="{op}">'
                               f'{_title(tip + more)}</rect>')
    return _close(frame, name)
