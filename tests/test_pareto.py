"""``agentsearch pareto``: frontier, method grouping, time to target (hand-worked), replay
diagnostics, and bad input (a message and partial tables, never a traceback)."""

import csv
import json
from types import SimpleNamespace

import pytest
import yaml

from agentsearch.analysis.pareto import analyse, main, pareto_frontier, run_curve
from agentsearch.analysis.replay_diagnostics import replay_diagnostics, write_diagnostics
from agentsearch.analysis.runs import group_methods, load_runs


def test_frontier_keeps_only_undominated_points():
    pts = [(10, 0.2), (20, 0.1), (30, 0.4), (40, 0.4), (5, 0.05), (25, 0.3)]
    # (20, 0.1) is beaten by (10, 0.2); (40, 0.4) by (30, 0.4)
    assert pareto_frontier(pts) == [(5, 0.05), (10, 0.2), (25, 0.3), (30, 0.4)]


def test_curves_from_run_folders(tmp_path):
    for name, qs in (("a", [0.1, 0.3]), ("b", [0.1, 0.2])):
        run = tmp_path / name
        run.mkdir()
        recs = [{"step": 0, "time/train_cumulative": 0.0, "eval/mean_at_n": qs[0]},
                {"step": 1, "time/train_cumulative": 5.0},
                {"step": 2, "time/train_cumulative": 10.0 if name == "a" else 4.0,
                 "eval/mean_at_n": qs[1]}]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert run_curve(tmp_path / "a") == [(0.0, 0.1, 0), (10.0, 0.3, 2)]
    out = tmp_path / "p.json"
    assert main(SimpleNamespace(runs=[tmp_path / "a", tmp_path / "b"], metric="eval/mean_at_n",
                                out=str(out))) == 0
    summary = json.loads(out.read_text())
    assert [r["final"] for r in summary["runs"]] == [0.3, 0.2]
    assert summary["frontier"] == [[0.0, 0.1], [4.0, 0.2], [10.0, 0.3]]


# ------------------------------------------------------------------ synthetic run folders
def make_run(root, name, evals, *, kind="none", pps=8, loss="grpo", dapo=False, seed=0,
             eval_cfg=None, extra=(), config=True, more_cfg=None):
    """A run folder: one training record per step and an eval record at each (step, t, q)."""
    run = root / name
    run.mkdir(parents=True)
    if config:
        cfg = {"seed": seed, "prompts_per_step": pps, "loss": loss, "dynamic_sampling": dapo,
               "replay": {"kind": kind, "k_rep": 4},
               "eval": eval_cfg or {"split": "dev", "limit": 0, "n": 1},
               "threads": 1 + seed, **(more_cfg or {})}  # threads: a run setting, not a method's
        (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    recs = [{"step": s, "time/train_cumulative": t, "eval/mean_at_n": q} for s, t, q in evals]
    recs += list(extra)
    recs.sort(key=lambda r: r["step"])
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return run


@pytest.fixture
def suite(tmp_path):
    """Three methods x two seeds with hand-picked curves (see test_time_to_target_hand_worked)."""
    runs = [
        make_run(tmp_path, "larger-s0", [(0, 0, .2), (5, 10, .3), (10, 20, .4)], pps=12, seed=0),
        make_run(tmp_path, "larger-s1", [(0, 0, .2), (5, 12, .35), (10, 30, .5)], pps=12, seed=1),
        make_run(tmp_path, "hdr-s0", [(0, 0, .2), (5, 5, .45), (10, 15, .5)], kind="hdr", seed=0),
        make_run(tmp_path, "hdr-s1", [(0, 0, .2), (5, 8, .4), (10, 16, .46)], kind="hdr", seed=1),
        make_run(tmp_path, "onp-s0", [(0, 0, .2), (5, 6, .3), (10, 12, .35)], seed=0),
        make_run(tmp_path, "onp-s1", [(0, 0, .2), (5, 7, .3), (10, 13, .4)], seed=1),
    ]
    return tmp_path, runs


def test_time_to_target_hand_worked(suite):
    root, runs = suite
    res = analyse(runs)
    # target: on_policy_larger's mean final (0.4 + 0.5) / 2 = 0.45; its mean training time
    # (20 + 30) / 2 = 25 s is the denominator of every ratio
    assert res["target"]["method"] == "on_policy_larger"
    assert res["target"]["score"] == pytest.approx(0.45)
    assert res["target"]["baseline_train_seconds"] == pytest.approx(25.0)
    ttt = {row["run"].split("/")[-1]: (row["time_to_target"], row["ratio"])
           for row in res["time_to_target"]}
    assert ttt["larger-s0"] == (None, None)                    # ends at 0.4: never
    assert ttt["larger-s1"] == pytest.approx((30.0, 1.2))      # 0.5 at 30 s
    assert ttt["hdr-s0"] == pytest.approx((5.0, 0.2))          # 0.45 at 5 s (>= counts)
    assert ttt["hdr-s1"] == pytest.approx((16.0, 0.64))        # 0.46 at 16 s
    assert ttt["onp-s0"] == (None, None) and ttt["onp-s1"] == (None, None)
    rows = {m["method"]: m for m in res["methods"]}
    assert set(rows) == {"on_policy_larger", "hdr", "on_policy"}
    assert rows["hdr"]["reached"] == "2/2"
    assert rows["hdr"]["ratio_mean"] == pytest.approx(0.42)
    assert rows["hdr"]["ratio_std"] == pytest.approx(0.3111269837, rel=1e-6)  # stdev(0.2, 0.64)
    assert rows["hdr"]["final_mean"] == pytest.approx(0.48)
    assert rows["on_policy_larger"]["reached"] == "1/2"
    assert rows["on_policy"]["reached"] == "0/2" and rows["on_policy"]["ratio_mean"] is None
    # the speed-up: hdr's mean time to the target (5 + 16) / 2 over on_policy_larger's own (30 s,
    # its one seed that reaches it), not over its training time (that is the ratio, a share)
    assert (rows["hdr"]["speedup"] == pytest.approx(10.5 / 30.0)
            and rows["on_policy_larger"]["speedup"] == 1.0)
    assert rows["on_policy"]["speedup"] is None
    # the mean curve of hdr: times (5+8)/2 at step 5, values (0.45+0.4)/2
    hdr = next(m for m in res["_methods"] if m.label == "hdr")
    assert hdr.steps == [0, 5, 10]
    assert hdr.seconds[1] == pytest.approx((6.5, 2.1213203), rel=1e-6)
    assert hdr.values[1][0] == pytest.approx(0.425)


def test_pareto_writes_png_csv_markdown(suite, capsys):
    root, runs = suite
    out = root / "analysis"
    assert main(SimpleNamespace(runs=runs, metric="eval/mean_at_n", out=str(out), label_by="auto",
                                target_method=None, target_score=None)) == 0
    for f in ("pareto.png", "pareto.json", "pareto.md", "pareto_curves.csv", "pareto_methods.csv",
              "pareto_time_to_target.csv", "pareto_time.csv"):
        assert (out / f).exists(), f
    rows = list(csv.DictReader(open(out / "pareto_time_to_target.csv")))
    assert {r["run"].split("/")[-1]: r["ratio"] for r in rows}["larger-s0"] == "never"
    assert float({r["run"].split("/")[-1]: r["ratio"]
                  for r in rows}["hdr-s1"]) == pytest.approx(0.64)
    md = (out / "pareto.md").read_text()
    assert "| hdr | 2/2 |" in md and "never" in md
    printed = capsys.readouterr().out
    assert "Target: 0.4500" in printed


def test_method_labels_from_configs(tmp_path):
    pts = [(0, 0, .1), (1, 1, .2)]
    runs = [make_run(tmp_path, "a", pts, kind="none", pps=8),
            make_run(tmp_path, "b", pts, kind="none", pps=8, loss="gspo"),
            make_run(tmp_path, "c", pts, kind="hdr", pps=8, dapo=True),
            make_run(tmp_path, "d", pts, kind="hdr", pps=8, loss="cispo"),
            make_run(tmp_path, "e", pts, kind="none", pps=12),
            make_run(tmp_path, "f", pts, kind="naive", pps=8),
            make_run(tmp_path, "g-s3", pts, config=False)]
    assert [r.label for r in load_runs(runs)] == ["on_policy", "gspo_on_policy", "dapo_hdr",
                                                  "cispo_hdr", "on_policy_larger", "naive", "g"]
    # two larger sizes: each gets its own label
    more = make_run(tmp_path, "h", pts, kind="none", pps=16)
    assert [r.label for r in load_runs(runs[:1] + [runs[4], more])] == [
        "on_policy", "on_policy_pps12", "on_policy_pps16"]
    assert [r.label for r in load_runs(runs[:2], label_by="loss,replay.kind")] == [
        "loss=grpo,replay.kind=none", "loss=gspo,replay.kind=none"]
    assert [r.label for r in load_runs([runs[0], runs[6]], label_by="dir")] == ["a", "g"]
    assert load_runs([runs[6]])[0].seed == 3  # from the folder name when there is no config


def test_configs_that_differ_beyond_the_seed_are_different_methods(tmp_path):
    pts = [(0, 0, .1), (1, 5, .3)]
    runs = [make_run(tmp_path, f"hdr-lr{lr}-s{seed}", pts, kind="hdr", seed=seed,
                     more_cfg={"lr": lr}) for lr in (1e-3, 1e-4) for seed in (0, 1)]
    runs.append(make_run(tmp_path, "hdr-tau-s0", pts, kind="hdr", more_cfg={"lr": 1e-4, "replay": {
        "kind": "hdr", "k_rep": 4, "tau": 0.5}}))
    methods, _ = group_methods(load_runs(runs))
    # seeds (and threads) of one configuration average into a method; lr or replay.tau split it
    assert {m.label: len(m.runs) for m in methods} == {"hdr[lr=0.001,replay.tau=None]": 2,
                                                      "hdr[lr=0.0001,replay.tau=None]": 2,
                                                      "hdr[lr=0.0001,replay.tau=0.5]": 1}
    # the same configuration in every run: the plain label
    assert {r.label for r in load_runs(runs[:2])} == {"hdr"}


def test_methods_with_equal_mean_points_all_keep_their_frontier_labels(tmp_path):
    runs = [make_run(tmp_path, "h-s0", [(0, 0, .2), (1, 10, .5)], kind="hdr"),
            make_run(tmp_path, "n-s0", [(0, 0, .2), (1, 10, .5)], kind="naive"),
            make_run(tmp_path, "o-s0", [(0, 0, .2), (1, 12, .4)])]
    res = analyse(runs)
    assert res["method_frontier"] == [[0.0, 0.2, "hdr"], [0.0, 0.2, "naive"],
                                      [0.0, 0.2, "on_policy"], [10.0, 0.5, "hdr"],
                                      [10.0, 0.5, "naive"]]


def test_default_target_without_larger_is_best_on_policy(tmp_path):
    runs = [make_run(tmp_path, "x-s0", [(0, 0, .1), (1, 4, .3)]),
            make_run(tmp_path, "y-s0", [(0, 0, .1), (1, 4, .35)], kind="none", loss="gspo"),
            make_run(tmp_path, "z-s0", [(0, 0, .1), (1, 9, .9)], kind="hdr")]
    res = analyse(runs)
    assert (res["target"]["method"] == "gspo_on_policy"
            and res["target"]["score"] == pytest.approx(0.35))
    res = analyse(runs, target_method="hdr")
    assert res["target"]["score"] == pytest.approx(0.9)


# ------------------------------------------------------------------ bad input
def test_no_eval_rows_is_a_message_and_exit_2(tmp_path, capsys):
    run = tmp_path / "r"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "time/train_cumulative": 1.0}) + "\n")
    empty = tmp_path / "nothing"
    empty.mkdir()
    assert main(SimpleNamespace(runs=[run, empty, tmp_path / "missing"], metric="eval/mean_at_n",
                                out=str(tmp_path / "out"))) == 2
    out = capsys.readouterr().out
    assert "no evaluation rows" in out and "no metrics.jsonl" in out and "not a folder" in out
    assert "nothing to compare" in out
    assert not (tmp_path / "out").exists()


def test_mixed_metrics_give_messages_and_partial_tables(tmp_path, capsys):
    good = make_run(tmp_path, "good-s0", [(0, 0, .2), (2, 4, .3)])
    other = make_run(tmp_path, "other-s0", [],
                     extra=[{"step": 0, "time/train_cumulative": 0, "eval/em": .2}])
    # two seeds of hdr evaluated at different steps; one torn line; one eval row without time
    h0 = make_run(tmp_path, "hdr-s0", [(0, 0, .2), (2, 5, .3), (4, 9, .4)], kind="hdr")
    h1 = make_run(tmp_path, "hdr-s1", [(0, 0, .2), (3, 6, .35), (4, 10, .45)], kind="hdr", seed=1,
                  eval_cfg={"split": "dev", "limit": 20, "n": 1},
                  extra=[{"step": 5, "eval/mean_at_n": 0.9}])
    with open(h1 / "metrics.jsonl", "a") as f:
        f.write('{"step": 6, "time/train')
    code = main(SimpleNamespace(runs=[good, other, h0, h1], metric="eval/mean_at_n",
                                out=str(tmp_path / "a" / "p.png"), label_by="auto",
                                target_method=None,
                                target_score=None))
    out = capsys.readouterr().out
    assert code == 0
    assert "no 'eval/mean_at_n' records; it has eval/em" in out
    assert "evaluated at different steps" in out and "2 step(s) they share" in out
    assert "unreadable line" in out and "without time/train_cumulative" in out
    assert "not comparable" in out
    assert "| hdr | 2/2 |" in out and "| on_policy | 1/2 |" in out
    hdr = next(m for m in group_methods(load_runs([h0, h1]))[0] if m.label == "hdr")
    assert hdr.steps == [0, 4] and hdr.values[1][0] == pytest.approx(0.425)
    assert (tmp_path / "a" / "p_time_to_target.csv").exists()


def test_unreachable_target_and_unknown_target_method(suite, capsys):
    root, runs = suite
    assert main(SimpleNamespace(runs=runs, metric="eval/mean_at_n", out=str(root / "o"),
                                label_by="auto", target_method=None, target_score=0.9)) == 0
    out = capsys.readouterr().out
    assert "no run reaches the target 0.9000" in out
    assert "| hdr | 2/2 | 0.4800" in out and "| 0/2 | never |" in out
    rows = list(csv.DictReader(open(root / "o" / "pareto_time_to_target.csv")))
    assert len(rows) == 6 and {r["time_to_target"] for r in rows} == {"never"}
    code = main(SimpleNamespace(runs=runs, metric="eval/mean_at_n", out=None, label_by="auto",
                                target_method="no_such", target_score=None))
    out = capsys.readouterr().out
    assert code == 2 and "--target-method 'no_such' is not among" in out and "hdr-s0" in out


def test_cli_parses_pareto_options():
    from agentsearch.cli import build_parser

    a = build_parser().parse_args(["pareto", "r1", "r2", "--label-by", "dir", "--target-method",
                                   "hdr", "--target-score", "0.4"])
    assert (a.label_by, a.target_method, a.target_score) == ("dir", "hdr", 0.4)


# ------------------------------------------------------------------ replay diagnostics
def _train_rec(step, **kv):
    base = {"step": step, "time/step": 2.0, "time/generate": 1.0, "time/replay_scan": 0.0}
    return {**base, **kv}


def test_replay_diagnostics_hand_worked(tmp_path):
    dec = {f"replay/exposure_h0_decile_{d}": float(d) for d in range(10)}
    hdr = [_train_rec(1, **{"replay/scan_depth": 0.0, "replay/accept_rate": 0.0,
                            "replay/candidates": 0.0}),
           _train_rec(2, **{"replay/scan_depth": 8.0, "replay/accept_rate": 0.5,
                            "replay/candidates": 8.0, "replay/age_mean": 1.0,
                            "time/replay_scan": 0.5, "time/step": 2.5, "replay/drift_age_1": 0.01,
                            "replay/drift_age_16up": 0.5}),
           _train_rec(3, **{"replay/scan_depth": 16.0, "replay/accept_rate": 0.25,
                            "replay/candidates": 16.0, "replay/age_mean": 2.0,
                            "time/replay_scan": 0.5, "time/step": 2.5, **dec,
                            "replay/drift_age_1": 0.03, "replay/drift_age_2_3": 0.1})]
    naive = [_train_rec(s, **{"replay/scan_depth": 4.0, "replay/accept_rate": 1.0,
                              "replay/candidates": 8.0, "time/replay_scan": 0.1, "time/step": 2.0})
             for s in (1, 2, 3)]
    runs = [make_run(tmp_path, "hdr-s0", [(0, 0, .2)], kind="hdr", extra=hdr),
            make_run(tmp_path, "naive-s0", [(0, 0, .2)], kind="naive", extra=naive),
            make_run(tmp_path, "onp-s0", [(0, 0, .2)], extra=[_train_rec(1)])]
    methods, _ = group_methods(load_runs(runs))
    d = replay_diagnostics(methods)
    s = {row["method"]: row for row in d["summary"]}
    assert set(s) == {"hdr", "naive"}  # on-policy has no replay diagnostics
    assert s["hdr"]["accept_rate"] == pytest.approx(0.375)  # step 1 scanned nothing: left out
    assert s["hdr"]["scan_depth"] == pytest.approx(8.0)     # (0 + 8 + 16) / 3
    assert s["hdr"]["age_mean"] == pytest.approx(1.5)
    assert d["deciles"]["hdr"] == [float(x) for x in range(10)] and "naive" not in d["deciles"]
    assert s["hdr"]["drift_age_1"] == pytest.approx(0.02) and s["hdr"]["drift_age_16up"] == 0.5
    assert "drift_age_1" not in s["naive"]  # naive scores nothing: no drift
    assert ("| method | 1 | 2-3 | 16+ |" in d["markdown"]
            and "| hdr | 2.00e-02 | 1.00e-01 | 5.00e-01 |" in d["markdown"])
    t = {row["method"]: row for row in d["time"]}
    # hdr: scan (0 + 0.5 + 0.5) / 3 = 1/3 s of a (2 + 2.5 + 2.5) / 3 = 7/3 s step
    assert t["hdr"]["replay_scan_share"] == pytest.approx(1 / 7)
    assert t["hdr"]["scan_over_naive"] == pytest.approx((1 / 3 - 0.1) / (7 / 3))
    assert t["on_policy"]["replay_scan"] == 0.0
    assert any("naive: no replay/exposure_h0_decile_" in m for m in d["messages"])
    written = write_diagnostics(d, tmp_path, "x")
    assert [p.name for p in written] == ["x_time.csv", "x_replay.csv", "x_replay.png"]
