"""The report in a real headless browser: Debian's chromium (``/usr/bin/chromium``) driven by
playwright with that executable (never ``playwright install``); ``make install-test`` installs
both. The page loads with no console error and no request, every section renders something,
an episode's coloured spans are its stored action mask, and the target box recomputes the
time-to-target table as the Python side does."""

import json
import os
from pathlib import Path

import pytest

from agentsearch.analysis.report import SECTION_IDS, build_report
from agentsearch.analysis.report.quality_sections import time_to_target_rows
from agentsearch.analysis.report.report_parts import make_context
from agentsearch.analysis.report.report_runs import read_runs
from agentsearch.analysis.report.svg_charts import fmt
from agentsearch.analysis.report.synthetic_runs import write_run

CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("report_runs")
    return [write_run(root / "hdr-s0", kind="hdr", seed=0, steps=40, async_=True, alarms=True),
            write_run(root / "hdr-s1", kind="hdr", seed=1, steps=40, async_=True),
            write_run(root / "none-s0", kind="none", seed=0, steps=40, speed=1.3)]


@pytest.fixture(scope="module")
def page(runs, tmp_path_factory):
    """The report of ``runs`` open in chromium; ``page.problems``: console errors, page errors
    and requests (the page must make none)."""
    sync_api = pytest.importorskip("playwright.sync_api")
    if not CHROMIUM.exists():
        reason = "no /usr/bin/chromium (`make install-test` installs Debian's chromium)"
        if os.environ.get("AGENTSEARCH_REQUIRE_EXTRAS") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    html = build_report(runs, tmp_path_factory.mktemp("report") / "report.html")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        tab = browser.new_page(viewport={"width": 1400, "height": 900})
        problems = []
        tab.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
               if m.type in ("error", "warning") else None)
        tab.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        tab.on("request", lambda r: problems.append(f"request: {r.url}")
               if r.url != html.as_uri() else None)
        tab.goto(html.as_uri())
        tab.problems = problems
        yield tab
        browser.close()


def test_the_page_loads_offline_with_no_console_error_and_every_section_renders(page):
    assert page.problems == []
    for sid in SECTION_IDS:
        section = page.locator(f"#{sid}")
        assert section.is_visible(), sid
        assert len(section.inner_text()) > 80, sid
        assert section.locator("svg.chart, table, .tok").count() > 0, sid
    # every chart drew something and has a size on screen
    charts = page.eval_on_selector_all("svg.chart", """els => els.map(e => [e.dataset.chart,
        e.getBoundingClientRect().width, e.querySelectorAll('path, rect, circle, g').length])""")
    assert len(charts) >= 20
    assert [c for c in charts if c[1] < 100 or c[2] == 0] == []
    assert page.problems == []


def _known_episode(run: Path) -> dict:
    """The lower-advantage replayed row at the run's last step, as stored."""
    eps = [json.loads(x) for x in (run / "episodes.jsonl").read_text().splitlines()]
    last = max(e["step"] for e in eps)
    return min((e for e in eps if e["step"] == last and e["source"] == "replay"),
               key=lambda e: e["advantage"])


def test_an_episodes_coloured_spans_are_its_stored_action_mask(page, runs):
    ep = _known_episode(runs[1])
    page.select_option("#ep-run", label=runs[1].name)
    label = f"step {ep['step']} · replay · reward {fmt(ep['reward'])} · advantage " \
            f"{fmt(ep['advantage'])}"
    page.select_option("#ep-pick", label=label)
    spans = page.eval_on_selector_all(
        "#ep-view .tok", "els => els.map(e => [e.classList.contains('pol') ? '1' : "
                         "(e.classList.contains('env') ? '0' : '?'), e.textContent, e.title])")
    assert "".join(s[0] for s in spans) == ep["action_mask"]
    assert [s[1] for s in spans] == ep["tokens"]
    assert [int(s[2].rsplit(" ", 1)[1]) for s in spans] == ep["token_ids"]
    # the policy's and the environment's tokens look different on screen
    colours = page.eval_on_selector_all("#ep-view .tok.pol, #ep-view .tok.env", """els =>
        [...new Set(els.map(e => e.className + getComputedStyle(e).backgroundColor))]""")
    assert len(colours) == 2 and len({c.split("rgb")[1] for c in colours}) == 2
    head = page.inner_text("#ep-head")
    assert f"drift {fmt(ep['drift'])}" in head and f"headroom {fmt(ep['headroom'])}" in head
    assert page.locator("#ep-view .turn-label").first.inner_text() == "prompt"


def test_the_target_box_recomputes_time_to_target_as_python_does(page, runs):
    ctx = make_context(read_runs(runs), "eval/mean_at_n")
    for target in (0.3, 0.42):
        page.fill("#target-input", str(target))
        shown = page.eval_on_selector_all("table.ttt tbody tr", """rows => rows.map(r =>
            [...r.querySelectorAll('td')].map(td => td.textContent))""")
        rows, _ = time_to_target_rows(ctx, target)
        assert shown == [[r[0], r[1], *(fmt(v) for v in r[2:])] for r in rows]
    assert page.problems == []
