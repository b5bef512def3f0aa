"""A PNG of ``agentsearch report``'s page, taken in the browser the tests use (Debian's
chromium through playwright; ``make install-test`` installs both): the README's
``docs/report.png``.

    python scripts/report_screenshot.py RUN [RUN ...] --out docs/report.png [--height 1700]

It writes the report of the runs beside the PNG (``--html``, default a temporary file), opens it
in headless chromium at 1400 px wide, and keeps the top ``--height`` px of the page, or with
``--section ID`` that section alone (``runs``, ``frontier``, ``episodes``, ...).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from agentsearch.analysis.report import build_report

CHROMIUM = "/usr/bin/chromium"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+")
    p.add_argument("--out", required=True, help="PNG to write")
    p.add_argument("--html", default=None, help="where the report goes (default: a temp file)")
    p.add_argument("--height", type=int, default=1700, help="page pixels kept from the top")
    p.add_argument("--section", default=None, help="a section's id: that section alone")
    p.add_argument("--target", type=float, default=None)
    a = p.parse_args()
    from playwright.sync_api import sync_playwright

    html = Path(a.html) if a.html else Path(tempfile.mkdtemp()) / "report.html"
    build_report(a.runs, html, target=a.target)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": a.height})
        page.goto(html.resolve().as_uri())
        if a.section:
            page.locator(f"#{a.section}").screenshot(path=a.out)
        else:
            page.screenshot(path=a.out, clip={"x": 0, "y": 0, "width": 1400, "height": a.height})
        browser.close()
    print(f"{a.out} (report: {html})")


if __name__ == "__main__":
    main()
