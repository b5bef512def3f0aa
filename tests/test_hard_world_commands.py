"""The hard world's commands (scripts/experiments/hard_world.py) end to end on tiny suites: a
held suite starts no run, calibrate measures the reference workload, report and predict write the
tables, archive and restore carry finished runs."""

from __future__ import annotations

import csv
import json

import pytest
from hard_world_helpers import write_run

from agentsearch.analysis.hard_world import MACHINE_FILE, REFERENCE_S_PER_STEP


def test_a_held_suite_starts_no_run(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    suite = tmp_path / "lat-0"
    suite.mkdir()
    (suite / "HOLD").touch()  # what a session does before it ends
    script = Path(__file__).resolve().parent.parent / "scripts" / "experiments" / "hard_world.py"
    res = subprocess.run([sys.executable, str(script), "compare", "--out", str(tmp_path), "--steps",
                          "2", "--lr", "1e-3", "--latency", "none", "--to",
                          str(tmp_path / "archive"), "--allow-dirty"], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    line = json.loads(res.stdout.strip().splitlines()[-1])
    assert (line["runs"] == 9 * 3 + 3 * 2 and len(line["held"]) == line["runs"]
            and line["failed"] == [])
    assert ("hdr-s4" in line["held"]
            and sorted(p.name for p in suite.iterdir()) == ["HOLD", "suite.json"])
    res = subprocess.run([sys.executable, str(script), "compare", "--out", str(tmp_path), "--steps",
                          "2", "--lr", "1e-3", "--latency", "none", "--to",
                          str(tmp_path / "archive"), "--allow-dirty", "--methods", "sweep", "--key",
                          ""], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    # the sweep joins the suite
    assert json.loads(res.stdout.strip().splitlines()[-1])["runs"] == 5 * 3
    listed = json.loads((suite / "suite.json").read_text())
    # hdr's runs are shared
    assert len(listed["commands"]) == 2 and len(listed["runs"]) == 9 * 3 + 3 * 2 + 4 * 3
    assert "replay.tau=1e-1" in listed["runs"]["hdr_tau1e-1-s2"]


def test_calibrate_measures_the_reference_workload(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "scripts" / "experiments" / "hard_world.py"
    res = subprocess.run([sys.executable, str(script), "calibrate", "--out", str(tmp_path),
                          "--steps", "1", "--allow-dirty"], capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    line = json.loads(res.stdout.strip().splitlines()[-1])
    saved = list((tmp_path / "calibration").glob("*.json"))
    # run folders removed
    assert [p.name for p in (tmp_path / "calibration").iterdir()] == [saved[0].name]
    assert (json.loads(saved[0].read_text()) == line and line["steps"] == 1
            and line["s_per_step"] > 0)
    assert line["tokens_per_step"] > 0 and line["s_per_step"] >= line["phases"]["update"] > 0
    import torch

    # seeded runs replay within one
    assert line["cpu_capability"] == torch.backends.cpu.get_cpu_capability()


def test_the_report_command_writes_the_tables_for_a_suite(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    suite = tmp_path / "lat-0.2"
    suite.mkdir()
    # logged, no replay
    write_run(suite, "on_policy_larger-s0", {0: 0.1, 4: 0.2, 8: 0.3},
         extra={"replay/accept_rate": 0.0, "replay/scan_depth": 0})
    write_run(suite, "hdr-s0", {0: 0.1, 4: 0.3, 8: 0.32}, start=1000.0,
         extra={"replay/accept_rate": 0.4, "replay/scan_depth": 10, "replay/accepted": 4,
                "replay/age_mean": 3.0})
    final = {"dev_n8": {"pass_at_1": 0.3, "pass_at_4": 0.5, "pass_at_8": 0.6},
             "diagnose": {"table": {"natural": {"all": 0.4}},
                          "hops": {"chain3": {"hop2": 0.9, "hop3": 0.7},
                                   "chain4": {"hop2": 0.7, "hop3": 0.9, "hop4": 0.5}}},
             "unseen_world": {"mean_at_n": 0.02}}
    # no stamps, but known to be from that machine
    pinned = write_run(suite, "naive-s0", {0: 0.1, 4: 0.2, 8: 0.25})
    (pinned / MACHINE_FILE).write_text('{"calibration_unix": 500}')
    # finished: their final models evaluated
    for name in ("hdr-s0", "on_policy_larger-s0", "naive-s0"):
        (suite / name / "final_evals.json").write_text(json.dumps(final))
    write_run(suite, "hdr-s1", {0: 0.1, 4: 0.0})  # still training (no final evals): left out
    # this machine ran the reference at half the reference's speed
    (tmp_path / "calibration").mkdir()
    (tmp_path / "calibration" / "500.json").write_text(
        json.dumps({"unix": 500, "s_per_step": 2 * REFERENCE_S_PER_STEP}))
    script = Path(__file__).resolve().parent.parent / "scripts" / "experiments" / "hard_world.py"
    res = subprocess.run([sys.executable, str(script), "report", str(suite)], capture_output=True,
                         text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    line = json.loads(res.stdout.strip().splitlines()[-1])
    # 90% of on_policy_larger's final
    assert line["ok"] and line["target"]["score"] == pytest.approx(0.27)
    assert line["unfinished"] == ["hdr-s1"] and "left out, not finished: hdr-s1" in res.stderr
    # predict: the same runs under a free service (0 s a call) give the report's ratios
    res = subprocess.run([sys.executable, str(script), "predict", str(suite), "--mean", "0"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    pred = {m["method"]: m for m in json.loads(res.stdout.strip().splitlines()[-1])["methods"]}
    assert (pred["hdr"]["ratio"] == pytest.approx(0.25)
            and pred["on_policy_larger"]["to_reference"] == 1.0)
    # --measured: a suite's runs (finished or not) against their twins', here the same runs
    res = subprocess.run([sys.executable, str(script), "predict", str(suite), "--mean", "0",
                          "--measured", str(suite)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    rows = [json.loads(x) for x in res.stdout.strip().splitlines()[1:]]
    # hdr-s1: no twin
    assert sorted(r["run"] for r in rows if "run" in r) == ["hdr-s0", "naive-s0",
                                                            "on_policy_larger-s0"]
    assert all(r["max_eval_difference"] == 0 and r["priced"] is None for r in rows if "run" in r)
    pair = next(r for r in rows if r.get("pair") == "hdr-s0 / on_policy_larger-s0")
    assert pair["measured"] == pytest.approx(0.25) and pair["predicted"] == pytest.approx(0.25)
    assert (suite / "analysis" / "measured.jsonl").read_text().count("\n") == len(rows)
    # three runs are too few to fit prices: a clear refusal
    res = subprocess.run([sys.executable, str(script), "predict", str(suite), "--mean", "0",
                          "--priced-by", str(suite)], capture_output=True, text=True)
    assert res.returncode != 0 and "too few finished runs" in res.stderr
    hdr = line["methods"]["hdr"]
    # hdr reaches 0.3 at step 4 (on_policy_larger at 8) on a machine 2x slower than the
    # reference: 4/8 x 0.5
    assert (hdr["ratio_to_90pct"] == 0.25 and hdr["ratio_to_100pct"] == 0.25
            and hdr["reached"] == "1/1")
    # 0.3 at step 8 is its first >= 0.27
    assert line["methods"]["on_policy_larger"]["ratio_to_90pct"] == 1.0
    table = (suite / "analysis" / "hard_world.md").read_text()
    assert "| hdr | 1 | 0.320 ± 0.000 | [0.320, 0.320] |" in table
    assert ((suite / "analysis" / "pareto.png").exists()
            and (suite / "analysis" / "hard_world.csv").exists())
    # 5 s a step scaled to the reference; three runs are too few for the work model ("-")
    assert "| hdr-s0 | 2.50 | 0.500 | - | - | 2.50 | 1.00 |  | - |" in table
    # no stamps: not scaled
    assert "| on_policy_larger-s0 | 5.00 | - | - | - | 5.00 | 1.00 |  | - |" in table
    # no stamps, pinned: scaled
    assert "| naive-s0 | 2.50 | 0.500 | - | - | 2.50 | 1.00 |  | - |" in table
    assert (suite / "analysis" / "pace.csv").exists()
    # the final models: hop 2 and 3 pooled over k = 3 and 4 ((0.9 + 0.7) / 2 each)
    assert "| hdr | 1 | 0.300 | 0.500 | 0.600 | 0.400 | 0.020 | 0.800 | 0.800 | 0.500 |" in table
    replay = table.split("Replay:")[1].split("Final models")[0]  # only the runs that replay
    assert [x for x in replay.splitlines() if x.startswith("| ") and "---" not in x][1:] == [
        "| hdr | 1 | 0.400 | 10.00 | 4.00 | 3.0 | 0.320 | 0.25 |"]
    # the same, run by run (a sweep's seeds)
    with open(suite / "analysis" / "replay_runs.csv") as f:
        assert [(r["run"], r["seed"], r["accept"], r["scanned"], r["step_to_target"])
                for r in csv.DictReader(f)] == [("hdr-s0", "0", "0.4", "10.0", "4")]


def test_archive_and_restore_carry_finished_runs_without_weights(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    from agentsearch.recipes.runner import run_finished

    suite = tmp_path / "runs" / "lat-0"
    suite.mkdir(parents=True)
    run = write_run(suite, "hdr-s0", {0: 0.1, 4: 0.3})
    (run / "config.yaml").write_text("seed: 0\n")
    (run / "final").mkdir()
    (run / "final_evals.json").write_text('{"dev_n8": {}}')
    (run / MACHINE_FILE).write_text('{"calibration_unix": 1000, "why": "no stamps"}')
    (run / "provenance.json").write_text('{"sessions": [{"git": "abc", "citable": true}]}')
    write_run(suite, "on_policy-s0", {0: 0.1, 4: 0.2})  # unfinished: not archived
    (tmp_path / "runs" / "calibration").mkdir()  # the machine's calibration goes along
    (tmp_path / "runs" / "calibration" / "1000.json").write_text(
        '{"unix": 1000, "s_per_step": 6.0}')
    script = Path(__file__).resolve().parent.parent / "scripts" / "experiments" / "hard_world.py"
    store = tmp_path / "archive"
    res = subprocess.run([sys.executable, str(script), "archive", str(suite), "--to", str(store)],
                         capture_output=True, text=True)
    assert (res.returncode == 0
            and json.loads(res.stdout)["runs"] == ["lat-0/hdr-s0"]), res.stderr[-1500:]
    back = tmp_path / "next_session"
    res = subprocess.run([sys.executable, str(script), "restore", "--source", str(store), "--out",
                          str(back)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-1500:]
    again = back / "lat-0" / "hdr-s0"
    assert run_finished(again) and not (again / "final").exists()
    assert (again / "metrics.jsonl").read_bytes() == (run / "metrics.jsonl").read_bytes()
    assert (json.loads((back / "calibration" / "1000.json").read_text())
            == {"unix": 1000, "s_per_step": 6.0})
    # the pin goes along
    assert json.loads((again / MACHINE_FILE).read_text())["calibration_unix"] == 1000
    # and the revision
    assert json.loads((again / "provenance.json").read_text())["sessions"][0]["git"] == "abc"
