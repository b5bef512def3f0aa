"""scripts/check_results.py: every quoted figure is recomputed from its kept record, and the check
fails when a record or a quote is tampered with (on a copy of the pages and records)."""

from __future__ import annotations

import gzip
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "check_results.py"


def load():
    spec = importlib.util.spec_from_file_location("check_results", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def copy_tree(tmp_path: Path) -> Path:
    """README.md and docs/ (pages and records), as a checkout the check can read."""
    root = tmp_path / "copy"
    shutil.copytree(ROOT / "docs", root / "docs")
    shutil.copy(ROOT / "README.md", root / "README.md")
    return root


def problems(cr, root: Path, record: str) -> list[str]:
    """``check_figure`` of the registered figures that read ``record`` (a path prefix)."""
    figs = [f for f in cr.FIGURES if any(r.startswith(record) for r in f.records)]
    assert figs, record
    pages = {p: cr._norm((root / p).read_text()) for p in {f.page for f in figs}}
    return [m for f in figs for m in cr.check_figure(f, root, pages)]


@pytest.mark.slow
def test_every_registered_figure_checks_against_its_record():
    res = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    line = json.loads(res.stdout.strip().splitlines()[-1])
    assert line["failed"] == 0 and line["figures"] >= 150 and line["predicted"] >= 20


def test_a_tampered_benchmark_line_fails(tmp_path):
    cr = load()
    root = copy_tree(tmp_path)
    load_jsonl = root / "docs/results/reliability/bench_load.jsonl"
    assert problems(cr, root, "docs/results/reliability/bench_load") == []
    lines = [json.loads(x) for x in load_jsonl.read_text().splitlines()]
    lines[0]["qps"] = 650.0  # the bm25s line; docs/reliability.md quotes 631 q/s
    load_jsonl.write_text("".join(json.dumps(x) + "\n" for x in lines))
    found = problems(cr, root, "docs/results/reliability/bench_load")
    assert len(found) == 1 and "'631'" in found[0] and "the record gives 650.0" in found[0], found


def test_a_tampered_run_record_fails(tmp_path):
    """One evaluation of one archived hard-world run changed: the speed-ups built on it move."""
    cr = load()
    root = copy_tree(tmp_path)
    run = root / "docs/results/hard_world/runs/lat-0/hdr-s0/metrics.jsonl.gz"
    with gzip.open(run, "rt") as f:
        recs = [json.loads(x) for x in f]
    for r in recs:  # hdr-s0 now reaches the target at its first evaluation after step 0
        if "eval/mean_at_n" in r and r["step"] > 0:
            r["eval/mean_at_n"] = max(r["eval/mean_at_n"], 0.3)
    with gzip.open(run, "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in recs)
    found = problems(cr, root, "docs/results/hard_world/runs/lat-0")
    assert any("'1.38'" in m and "the record gives" in m for m in found), found


def test_a_figure_edited_without_its_record_fails(tmp_path):
    cr = load()
    root = copy_tree(tmp_path)
    page = root / "docs" / "reliability.md"
    page.write_text(page.read_text().replace("bm25s 631 q/s", "bm25s 731 q/s"))
    found = problems(cr, root, "docs/results/reliability/bench_load")
    assert found and all("no longer in the page" in m for m in found)
    assert {m.split(": ", 1)[1].split(" in ")[0] for m in found} >= {"'631'", "'385'", "'47.5'"}


def test_a_prediction_must_say_so_and_a_dirty_record_must_be_named(tmp_path):
    cr = load()
    root = copy_tree(tmp_path)
    pages = {p: cr._norm((root / p).read_text()) for p in ("README.md", "docs/results/async.md")}
    pred = next(f for f in cr.FIGURES if f.predicted and f.page == "README.md")
    plain = cr.Figure(pred.page, pred.quote, pred.shown, pred.records, pred.value, predicted=True)
    assert cr.check_figure(plain, root, pages) == []
    reworded = pred.quote.replace("Predicted", "Found")
    pages["README.md"] = pages["README.md"].replace(cr._norm(pred.quote), cr._norm(reworded))
    found = cr.check_figure(cr.Figure(pred.page, reworded, pred.shown, pred.records, pred.value,
                                      predicted=True), root, pages)
    assert len(found) == 1 and "does not say it is predicted" in found[0]
    dirty = next(f for f in cr.FIGURES if not f.citable and f.page == "docs/results/async.md")
    pages["docs/results/async.md"] = pages["docs/results/async.md"].replace("not citable", "fine")
    assert any("not citable" in m for m in cr.check_figure(dirty, root, pages))


def test_the_index_and_the_no_record_notes_are_checked(tmp_path):
    cr = load()
    root = copy_tree(tmp_path)
    assert (root / cr.INDEX).read_text() == cr.index_markdown()  # the committed index is current
    quote, page, _ = cr.NO_RECORD[0]
    text = (root / page).read_text()
    assert "no record" in quote
    (root / page).write_text(text.replace("no record", "a record"))
    assert "no longer in the page" in cr.check_no_record(quote, page, {page: cr._norm(
        (root / page).read_text())})[0]


def test_shown_values_and_their_tolerance():
    cr = load()
    assert cr.shown_value("4,000") == (4000.0, 0.5) and cr.shown_value("0.235") == (0.235, 0.0005)
    assert cr._norm("> a\n>   b  c\n") == "a b c"  # block quotes and reflowed lines compare alike


def test_the_fit_bootstrap_centres_on_the_queue_models_own_prediction():
    """``figures.predicted_interval`` re-prices clocks itself (fast, for the bootstrap): its value
    is ``tool_queue.predict``'s, on the archived new-base runs, for both ratios."""
    from agentsearch.analysis import figures
    from agentsearch.analysis.hard_world import work_model
    from agentsearch.analysis.tool_queue import predict

    suite = ROOT / "docs/results/hard_world/runs-worlds/lat-0"
    runs = figures._runs(str(suite))
    want = {r["method"]: r
            for r in predict(runs, 4, 1.0, price=work_model(runs)["price"])["methods"]}
    for key in ("to_reference", "same_seed"):
        value, lo, hi = figures.predicted_interval(suite, "hdr", 4, 1.0, key)
        assert value == pytest.approx(want["hdr"][key], rel=1e-9) and lo <= value <= hi
