"""The page: every section in one HTML file with its styles, scripts and data inline.

The page loads nothing: a Content-Security-Policy forbids every request (no network, no CDN,
not even a favicon), so it opens the same from a laptop, a mail attachment or a CI artifact.
Its one script formats numbers as ``svg_charts.fmt`` does, recomputes the time-to-target table
when the target box changes, and draws the episode browser."""

from __future__ import annotations

import time
from html import escape

from agentsearch.analysis.report.episode_browser import EPISODE_SCRIPT
from agentsearch.analysis.report.report_parts import Section

__all__ = ["render_page", "STYLE", "PAGE_SCRIPT"]

CSP = ("default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
       "img-src data:")

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 0; color: #222; background: #fafafa; }
header { background: #fff; border-bottom: 1px solid #ddd; padding: 10px 24px;
         position: sticky; top: 0; z-index: 2; }
header h1 { font-size: 18px; margin: 0 0 4px; }
nav a { margin-right: 14px; color: #1f5fa8; text-decoration: none; font-size: 13px; }
main { padding: 8px 24px 40px; max-width: 1400px; }
section.report-section { background: #fff; border: 1px solid #e3e3e3; border-radius: 6px;
                         margin: 16px 0; padding: 8px 16px 14px; }
h2 { font-size: 16px; margin: 8px 0; }
figure { display: inline-block; width: 640px; max-width: 100%; margin: 6px 12px 10px 0;
         vertical-align: top; }
figcaption { font-size: 12px; color: #555; }
svg.chart { width: 100%; height: auto; background: #fff; }
svg .grid { stroke: #eee; } svg .axis { stroke: #888; } svg .rule { stroke: #555;
  stroke-dasharray: 3 3; }
svg .tick { font-size: 10px; fill: #555; } svg .label { font-size: 11px; fill: #333; }
svg .lanelabel { font-size: 10.5px; fill: #333; }
svg .series { fill: none; } svg .band { fill-opacity: 0.15; stroke: none; }
table { border-collapse: collapse; margin: 8px 0; font-size: 12.5px; }
th, td { border-bottom: 1px solid #eee; padding: 3px 8px; text-align: left; }
th { background: #f3f3f3; }
.legend span { margin-right: 14px; font-size: 12px; white-space: nowrap; }
.legend i { display: inline-block; width: 12px; height: 12px; margin-right: 4px;
            vertical-align: -2px; border: 1px solid #ccc; }
.note { color: #6a4d00; font-size: 12.5px; }
.ep-controls select { max-width: 520px; }
#ep-head { margin: 8px 0; font-weight: 600; }
.ep-view { font: 12.5px/1.7 ui-monospace, monospace; white-space: pre-wrap;
           word-break: break-word; border: 1px solid #e3e3e3; padding: 6px; }
.turn { margin: 2px 0 6px; }
.turn-label { font: 11px system-ui, sans-serif; color: #777; }
.tok.pol { background: #cfe3ff; } .tok.env { background: #eeeeee; color: #444; }
.tok { border-right: 1px solid #fff; }
input#target-input { width: 8em; }
"""

PAGE_SCRIPT = r"""
function fmt(v) {
  if (v === null || v === undefined || !isFinite(v)) return "-";
  if (Math.abs(v) >= 100) return Math.round(v).toLocaleString("en-US");
  return String(Number(v.toPrecision(3)));
}
(function () {
  const holder = document.getElementById("ttt-data"), box = document.getElementById("target-input");
  if (!holder || !box) return;
  const data = JSON.parse(holder.textContent);
  const mean = a => a.reduce((x, y) => x + y, 0) / a.length;
  function std(a) {
    if (a.length < 2) return null;
    const m = mean(a);
    return Math.sqrt(a.reduce((s, x) => s + (x - m) * (x - m), 0) / (a.length - 1));
  }
  function update() {
    const target = Number(box.value);
    if (!isFinite(target)) return;
    const reach = {}, seeds = {};
    data.methods.forEach(m => { reach[m] = []; seeds[m] = 0; });
    data.runs.forEach(r => {
      seeds[r.method] += 1;
      const hit = r.points.find(p => p[1] >= target - 1e-12);
      if (hit) reach[r.method].push(hit[0]);
    });
    const ref = data.reference && reach[data.reference].length ? mean(reach[data.reference]) : null;
    document.querySelectorAll("table.ttt tbody tr").forEach(tr => {
      const m = tr.dataset.row, ts = reach[m] || [];
      const mu = ts.length ? mean(ts) : null;
      const cells = [m, ts.length + "/" + (seeds[m] || 0), fmt(mu), fmt(std(ts)),
                     fmt(mu !== null && ref ? mu / ref : null)];
      tr.querySelectorAll("td").forEach((td, i) => { td.textContent = cells[i]; });
    });
  }
  box.addEventListener("input", update);
})();
"""


def render_page(sections: list[Section], title: str) -> str:
    """The whole HTML document."""
    nav = "".join(f'<a href="#{s.id}">{escape(s.title.split(",")[0])}</a>' for s in sections)
    body = "".join(f'<section class="report-section" id="{s.id}"><h2>{escape(s.title)}</h2>'
                   f"{s.body}</section>" for s in sections)
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>"
            f"<header><h1>{escape(title)}</h1><nav>{nav}</nav></header><main>"
            f'<p class="stamp">Written {stamp} by <code>agentsearch report</code>. Hover a line, '
            "bar or mark for its values.</p>"
            f"{body}</main><script>{PAGE_SCRIPT}{EPISODE_SCRIPT}</script></body></html>\n")
