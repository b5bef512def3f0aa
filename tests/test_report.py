"""``agentsearch report`` without a browser: time to target on hand-worked curves, runs being
written and OpenRLHF runs read, episodes picked within a budget, the size of a report of many
runs, and the command line. The page in a real browser: ``test_report_browser.py``."""

import json
import re

import pytest
import yaml

from agentsearch.analysis.report import SECTION_IDS, build_report
from agentsearch.analysis.report.quality_sections import default_target, time_to_target_rows
from agentsearch.analysis.report.report_parts import make_context
from agentsearch.analysis.report.report_runs import MAX_EPISODE_TOKENS, pick_episodes, read_runs
from agentsearch.analysis.report.synthetic_runs import write_run
from agentsearch.cli import main as cli_main


def _curve_run(folder, kind, seed, points):
    """A run whose evaluations are ``points`` (seconds, score), one step apart."""
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(
        {"seed": seed, "steps": len(points) - 1, "replay": {"kind": kind}}))
    recs = [{"step": i, "eval/mean_at_n": q, "time/train_cumulative": t, "reward/total": q}
            for i, (t, q) in enumerate(points)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return folder


def test_time_to_target_defaults_to_the_best_runs_score_at_half_its_time(tmp_path):
    runs = [_curve_run(tmp_path / "hdr-s0", "hdr", 0, [(0, 0.2), (10, 0.4), (20, 0.6)]),
            _curve_run(tmp_path / "hdr-s1", "hdr", 1, [(0, 0.2), (12, 0.35), (24, 0.5)]),
            _curve_run(tmp_path / "none-s0", "none", 0, [(0, 0.2), (8, 0.45), (16, 0.5)])]
    ctx = make_context(read_runs(runs), "eval/mean_at_n")
    # the best run (last score 0.6) at half its 20 s: its evaluation at 10 s
    target, why = default_target(ctx)
    assert target == 0.4 and why.startswith("hdr-s0's score at half its training time")
    rows, ref = time_to_target_rows(ctx, target)
    assert ref == "on_policy"  # the on-policy method is the reference
    hdr, on_policy = rows
    assert hdr[:2] == ["hdr", "2/2"] and hdr[2] == pytest.approx(17.0)  # (10 + 24) / 2
    assert hdr[3] == pytest.approx(9.8995, abs=1e-4)  # sample std of 10 and 24
    assert hdr[4] == pytest.approx(17.0 / 8.0)
    assert on_policy == ["on_policy", "1/1", 8.0, None, 1.0]
    page = build_report(runs, tmp_path / "r.html").read_text()
    row = re.search(r'<tr data-row="hdr">(.*?)</tr>', page).group(1)
    assert re.findall(r"<td>(.*?)</td>", row) == ["hdr", "2/2", "17", "9.9", "2.13"]
    # a target set by the user: only the run that got there counts
    rows, _ = time_to_target_rows(ctx, 0.55)
    assert [r[1] for r in rows] == ["1/2", "0/1"] and rows[0][2] == 20.0


def test_a_run_being_written_and_an_openrlhf_run_are_read(tmp_path):
    torn = write_run(tmp_path / "torn", steps=30, torn_last_line=True)
    orl = write_run(tmp_path / "orl", kind="naive", steps=30, openrlhf=True)
    by_name = {r.name: r for r in read_runs([torn, orl])}
    running, engine = by_name["torn"], by_name["orl"]
    assert max(running.steps) == 29
    assert running.status.startswith("running or stopped: step 29 of 30")
    assert any("unreadable line" in p for p in running.run.problems)
    assert engine.engine == "openrlhf" and engine.status == "finished: 30 steps"
    # its evaluations are records of their own, merged into the step's record
    assert [s for _, _, s in engine.run.points] == [0, 10, 20, 30]
    assert "time/generate" in engine.steps[10] and "eval/mean_at_n" in engine.steps[10]
    assert engine.reward_key() == "rollout/reward_mean" and len(engine.series(
        "rollout/reward_mean")) == 30
    page = build_report([torn, orl], tmp_path / "r.html").read_text()
    assert "orl (naive): rollout/reward_mean, 5-step mean" in page
    assert all(f'id="{s}"' in page for s in SECTION_IDS)


def test_episodes_are_picked_from_steps_spread_over_the_run_and_long_ones_cut(tmp_path):
    run = write_run(tmp_path / "r", steps=50, tokens_per_episode=MAX_EPISODE_TOKENS + 500)
    (rr,) = read_runs([run])
    eps = pick_episodes(rr, 16)
    assert len(eps) == 16
    steps = sorted({e["step"] for e in eps})
    assert steps[0] == 1 and steps[-1] == 50 and len(steps) == 4
    for e in eps:
        assert len(e["token_ids"]) == len(e["action_mask"]) == len(e["tokens"])
        if e.get("cut"):
            assert len(e["token_ids"]) == MAX_EPISODE_TOKENS
    assert any(e.get("cut") for e in eps)


def test_a_report_of_many_runs_stays_small(tmp_path):
    """The bound of a report of 50 runs of 200 steps (5 MB; ``scripts/bench_report.py``), on 10
    runs of 200 steps: every per-step chart stays bounded whatever the runs."""
    runs = [write_run(tmp_path / f"{k}-s{s}", kind=k, seed=s, steps=200, async_=k == "hdr",
                      alarms=True) for k in ("hdr", "none") for s in range(5)]
    page = build_report(runs, tmp_path / "r.html")
    assert page.stat().st_size <= 5 * 2**20
    assert page.read_text().count('class="chart"') >= 15


def test_the_command_writes_the_page_and_prints_its_path(tmp_path, capsys):
    run = write_run(tmp_path / "run", steps=12)
    assert cli_main(["report", str(run)]) == 0
    assert capsys.readouterr().out.strip() == f"report: {run / 'report.html'}"
    assert (run / "report.html").read_text().startswith("<!doctype html>")
    assert cli_main(["report", str(tmp_path / "nope")]) == 2
