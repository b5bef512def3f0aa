"""The hard world's analysis (agentsearch.analysis.hard_world) on hand-worked curves: the
pilot rule, the bootstrap interval, costs to target and the time-averaged score."""

from __future__ import annotations

import pytest
from hard_world_helpers import write_run

from agentsearch.analysis.hard_world import (
    REFERENCE_S_PER_STEP,
    active_spans,
    area_under,
    bootstrap_ci,
    calibration_factor,
    costs_to,
    method_table,
    nonnegative_lstsq,
    pace,
    pilot_rule,
    work_model,
)
from agentsearch.analysis.pareto import analyse
from agentsearch.analysis.runs import load_run
from agentsearch.analysis.tool_queue import priced_by_work


def _curve(scores: dict[int, float], seconds_per_step: float = 10.0):
    return [(step * seconds_per_step, q, step) for step, q in sorted(scores.items())]


def test_pilot_rule_hand_worked():
    slow = _curve({0: 0.05, 20: 0.10, 40: 0.14, 60: 0.18, 80: 0.20, 100: 0.22, 150: 0.26,
                   200: 0.30})
    r = pilot_rule(slow, 200)  # first quarter: steps 20, 40 -> best 0.14 < 0.9 * 0.30
    assert r["accepted"] is True and r["best_early"] == 0.14 and r["final"] == 0.30
    fast = _curve({0: 0.05, 20: 0.28, 40: 0.29, 100: 0.30, 200: 0.30})
    assert pilot_rule(fast, 200)["accepted"] is False  # 0.29 >= 0.27
    assert pilot_rule(slow, 100) == pytest.approx({"budget": 100, "final": 0.22, "best_early": 0.10,
                                                   "ratio": 0.10 / 0.22, "accepted": True})
    assert pilot_rule(slow, 300)["accepted"] is None  # the curve stops at 200
    assert pilot_rule(slow, 120)["final"] == 0.22  # no evaluation at 120: the last before it (100)


def test_area_under_is_a_step_function_average():
    pts = [(0.0, 0.1, 0), (10.0, 0.3, 1), (30.0, 0.5, 2)]
    assert area_under(pts, 40.0) == pytest.approx((0.1 * 10 + 0.3 * 20 + 0.5 * 10) / 40)
    assert area_under(pts, 20.0) == pytest.approx((0.1 * 10 + 0.3 * 10) / 20)
    assert area_under([], 10.0) is None and area_under(pts, 0.0) is None


def test_bootstrap_interval_brackets_the_mean_and_collapses_on_one_value():
    assert bootstrap_ci([0.4]) == (0.4, 0.4)
    xs = [0.30, 0.32, 0.35, 0.31, 0.40]
    lo, hi = bootstrap_ci(xs)
    assert lo < sum(xs) / 5 < hi and 0.30 <= lo and hi <= 0.40
    assert bootstrap_ci(xs) == (lo, hi)  # seeded


def test_costs_to_target_and_the_method_table(tmp_path):
    a = write_run(tmp_path, "on_policy_larger-s0", {0: 0.1, 4: 0.2, 8: 0.3}, episodes=96)
    b = write_run(tmp_path, "hdr-s0", {0: 0.1, 4: 0.3, 8: 0.32})
    c = costs_to(load_run(b), 0.3)
    assert c == {"seconds": 20.0, "step": 4, "episodes": 4 * 64.0, "tool_calls": 400.0}
    assert costs_to(load_run(a), 0.9)["seconds"] is None
    result = analyse([a, b], label_by="dir")
    rows = {r["method"]: r for r in method_table(result)}
    assert result["target"]["score"] == 0.3 and result["target"]["baseline_train_seconds"] == 40.0
    assert rows["hdr"]["time_to_target"] == 20.0 and rows["hdr"]["ratio"] == 0.5
    assert rows["on_policy_larger"]["episodes_to_target"] == 8 * 96.0
    assert rows["hdr"]["auc"] == pytest.approx((0.1 * 20 + 0.3 * 20) / 40)
    assert rows["hdr"]["final_k4"] == 0.16 and rows["hdr"]["zero_var"] == 0.5


def test_active_spans_split_at_long_pauses():
    recs = [{"clock/unix_seconds": t}
            for t in (100.0, 160.0, 400.0, 2000.0, 2100.0)] + [{"step": 3}]
    assert active_spans(recs, gap=900.0) == [(100.0, 400.0), (2000.0, 2100.0)]
    assert active_spans([{"step": 1}]) == []


def test_pace_flags_a_run_slower_than_its_method_and_names_who_shared_the_machine(tmp_path):
    evals = {0: 0.1, 4: 0.2, 8: 0.3}
    runs = [write_run(tmp_path, "hdr-s0", evals, sps=8.0, start=1000.0),  # active 1000-1064
            write_run(tmp_path, "hdr-s1", evals, sps=5.0, start=1050.0),  # 1050-1090
            write_run(tmp_path, "hdr-s2", evals, sps=5.5),  # no stamps (written before 2026-12-02)
            write_run(tmp_path, "on_policy_larger-s0", evals, sps=5.0, start=5000.0)]
    rows = {r["run"]: r for r in pace(analyse(runs, label_by="dir"))}
    assert (rows["hdr-s0"]["method_median"] == 5.5
            and rows["hdr-s0"]["ratio"] == pytest.approx(8.0 / 5.5))
    assert (rows["hdr-s0"]["slowed"] and not rows["hdr-s1"]["slowed"]
            and not rows["hdr-s2"]["slowed"])
    assert (rows["hdr-s0"]["shared_with"] == "hdr-s1 (14 s)"
            and rows["hdr-s1"]["shared_with"] == "hdr-s0 (14 s)")
    assert (rows["on_policy_larger-s0"]["shared_with"] == ""
            and not rows["on_policy_larger-s0"]["slowed"])


def test_the_work_model_prices_tokens_and_flags_the_run_its_work_does_not_explain(tmp_path):
    price = {"tokens/generated": 2e-3, "tokens/scored": 1e-3, "tokens/trained": 5e-4, "step": 1.0}
    evals = {0: 0.1, 4: 0.2, 8: 0.3}
    runs = []
    for i, (g, sc, t) in enumerate([(1000, 0, 2000), (1500, 800, 2000), (1200, 4000, 2400),
                                    (900, 1500, 1800), (2000, 2500, 3000), (1100, 300, 2200),
                                    (1700, 6000, 2600), (1300, 1000, 1000)]):
        sps = g * 2e-3 + sc * 1e-3 + t * 5e-4 + 1.0  # compute seconds per step, by the prices above
        env = 0.5 if i == 0 else 0.0  # waiting on tools: measured, not priced
        runs.append(write_run(tmp_path, f"m{i % 2}-s{i}", evals, sps=sps + env, extra={
            "tokens/generated": g, "tokens/scored": sc, "tokens/trained": t, "time/env": env}))
    result = analyse(runs, label_by="dir")
    model = work_model([r for m in result["_methods"] for r in m.usable])
    assert model["price"] == {k: pytest.approx(v, rel=1e-6) for k, v in price.items()}
    rows = {r["run"]: r for r in pace(result)}
    assert rows["m0-s0"]["expected_s_per_step"] == pytest.approx(
        1000 * 2e-3 + 2000 * 5e-4 + 1.0 + 0.5)
    assert all(r["work_ratio"] == pytest.approx(1.0) and not r["slowed"] for r in rows.values())
    # light work taking 1.5x its price: flagged by its work, though under its method's
    # median (heavier seeds)
    slow = write_run(tmp_path, "m1-s9", evals, sps=1.5 * (600 * 2e-3 + 1000 * 5e-4 + 1.0), extra={
        "tokens/generated": 600, "tokens/scored": 0, "tokens/trained": 1000})
    rows = {r["run"]: r for r in pace(analyse(runs + [slow], label_by="dir"))}
    assert (rows["m1-s9"]["slowed"] and rows["m1-s9"]["work_ratio"] > 1.2
            and rows["m1-s9"]["ratio"] < 1.0)
    assert not any(r["slowed"] for name, r in rows.items() if name != "m1-s9")
    assert work_model(result["_runs"][:7]) is None  # fewer than twice as many runs as prices


def test_priced_by_work_takes_the_machines_load_out_of_the_ratios(tmp_path):
    """hdr ran 4x slower a step than on_policy_larger (a loaded machine) on the same work: 1,000
    generated tokens a step at 2 ms plus 1 s a step is 3 s, plus the 0.5 s measured tool wait."""
    work = {"tokens/generated": 1000, "time/env": 0.5}
    runs = [write_run(tmp_path, "on_policy_larger-s0", {0: 0.1, 4: 0.2, 8: 0.3}, sps=5.0,
                      extra=work),
            write_run(tmp_path, "hdr-s0", {0: 0.1, 4: 0.3, 8: 0.32}, sps=20.0, extra=work)]
    result = analyse(runs, label_by="dir", target_method="on_policy_larger", target_score=0.27)
    assert {r["method"]: r["ratio"]
            for r in method_table(result)}["hdr"] == pytest.approx(80.0 / 40.0)
    rows = {r["method"]: r for r in priced_by_work(
        result, {"price": {"tokens/generated": 2e-3, "step": 1.0}})}
    # 3.5 s a step for both: on_policy_larger reaches 0.27 at step 8 (28 s), hdr at step 4 (14 s)
    assert rows["on_policy_larger"]["time_to_target"] == pytest.approx(28.0)
    assert (rows["hdr"]["time_to_target"] == pytest.approx(14.0)
            and rows["hdr"]["ratio"] == pytest.approx(0.5))
    assert (rows["hdr"]["to_reference"] == pytest.approx(0.5)
            and rows["hdr"]["train_seconds"] == pytest.approx(28.0))
    assert rows["hdr"]["same_seed"] == pytest.approx(0.5)
    assert priced_by_work(result, None) == []  # too few runs to price the work: no table
    # a second, harder seed (on_policy_larger reaches 0.27 at step 8 = 28 s and hdr at step 8 too):
    # the mean over seeds is (14 + 28) / 2 = 21 s against 28 s (0.75); the same seeds' mean
    # ratio is (0.5 + 1.0) / 2 = 0.75 too; hdr-s2, with no on_policy_larger seed 2, is left out
    runs += [write_run(tmp_path, "on_policy_larger-s1", {0: 0.1, 4: 0.1, 8: 0.3}, extra=work),
             write_run(tmp_path, "hdr-s1", {0: 0.1, 4: 0.2, 8: 0.3}, extra=work),
             write_run(tmp_path, "hdr-s2", {0: 0.1, 4: 0.3, 8: 0.3}, extra=work)]
    result = analyse(runs, label_by="dir", target_method="on_policy_larger", target_score=0.27)
    rows = {r["method"]: r for r in priced_by_work(
        result, {"price": {"tokens/generated": 2e-3, "step": 1.0}})}
    assert rows["hdr"]["time_to_target"] == pytest.approx((14 + 28 + 14) / 3)
    assert rows["hdr"]["same_seed"] == pytest.approx(0.75)


def test_nonnegative_least_squares_against_hand_worked_numbers_and_its_optimality_conditions():
    import numpy as np

    x, y = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), np.array([2.0, -1.0, 1.0])
    # free least squares: (2, -1); with the second price held at 0 the first is (2 + 1) / 2
    assert nonnegative_lstsq(x, y).tolist() == pytest.approx([1.5, 0.0])
    rng = np.random.default_rng(0)
    # nearly collinear columns
    x = rng.random((12, 4)) + np.outer(rng.random(12), [1.0, 1.0, 1.0, 0.0])
    y = x @ np.array([2.0, 0.5, -0.3, 1.0]) + 0.01 * rng.standard_normal(12)
    p = nonnegative_lstsq(x, y)
    grad = x.T @ (x @ p - y)  # [4]: >= 0 where a price is held at 0, 0 where it is free
    assert np.all(p >= 0) and p[2] == 0.0
    assert np.all(grad[p == 0] >= -1e-9) and np.allclose(grad[p > 0], 0.0, atol=1e-8)


def test_seconds_are_scaled_by_the_last_calibration_before_the_run(tmp_path):
    cals = [{"unix": 900.0, "s_per_step": 2 * REFERENCE_S_PER_STEP},
            {"unix": 4000.0, "s_per_step": REFERENCE_S_PER_STEP},
            {"unix": 6000.0, "s_per_step": 0.5 * REFERENCE_S_PER_STEP}]
    recs = [{"clock/unix_seconds": t} for t in (5000.0, 5100.0)]
    # the one at 4000, not 900 (older) nor 6000 (after)
    assert calibration_factor(recs, cals) == 1.0
    assert (calibration_factor(recs, cals[:1]) == 0.5
            and calibration_factor([{"step": 1}], cals) is None)
    assert calibration_factor(recs, cals[2:]) is None  # only a calibration after the run started
    evals = {0: 0.1, 4: 0.2, 8: 0.3}
    # a machine 2x slower: 10 -> 5 s
    runs = [write_run(tmp_path, "hdr-s0", evals, sps=10.0, start=1000.0),
            write_run(tmp_path, "hdr-s1", evals, sps=5.0, start=5000.0)]
    result = analyse(runs, label_by="dir", time_scale=lambda r: calibration_factor(r.records, cals))
    assert result["time_scale"] == {"hdr-s0": 0.5, "hdr-s1": 1.0}
    # every second scaled, not only the pace
    assert [p[0] for p in result["_runs"][0].points] == [0.0, 20.0, 40.0]
    rows = {r["run"]: r for r in pace(result)}
    assert (rows["hdr-s0"]["factor"] == 0.5 and rows["hdr-s0"]["s_per_step"] == 5.0
            and rows["hdr-s1"]["factor"] == 1.0)
    # slower machine, not a slowed run
    assert rows["hdr-s0"]["ratio"] == 1.0 and not rows["hdr-s0"]["slowed"]


def test_seconds_waiting_on_the_environment_are_not_scaled(tmp_path):
    from agentsearch.analysis.pareto import rescaled

    run = load_run(write_run(tmp_path, "hdr-s0", {0: 0.1, 4: 0.2, 8: 0.3}, sps=5.0,
                        extra={"time/env": 1.0}))
    # step 4: 20 s, of which 4 s waiting on tools (kept) and 16 s of compute (halved): 4 + 8
    assert rescaled(run, 0.5) == [(0.0, 0.1, 0), (12.0, 0.2, 4), (24.0, 0.3, 8)]


def test_a_pinned_calibration_places_a_run_without_stamps():
    cals = [{"unix": 900.0, "s_per_step": 2 * REFERENCE_S_PER_STEP},
            {"unix": 4000.0, "s_per_step": REFERENCE_S_PER_STEP}]
    unstamped = [{"step": 1}]
    assert (calibration_factor(unstamped, cals) is None
            and calibration_factor(unstamped, cals, pinned=900.0) == 0.5)
    stamped = [{"clock/unix_seconds": 5000.0}]
    assert calibration_factor(stamped, cals, pinned=900.0) == 0.5  # the pin wins over the stamps
    with pytest.raises(ValueError, match="no calibration made at unix 123"):
        calibration_factor(unstamped, cals, pinned=123)
