"""The queue model of a search service with limited slots (agentsearch.analysis.tool_queue),
on hand-worked numbers."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from agentsearch.analysis.runs import Run
from agentsearch.analysis.tool_queue import (
    makespan,
    measured_against,
    predict,
    queued_points,
    same_seed_ratios,
    step_compute,
    step_wait,
    turn_calls,
)


def test_makespan_serves_first_come_first_served():
    assert makespan([1.0, 2.0, 3.0], 0) == 3.0  # unlimited: the slowest call
    # two slots: 1 and 2 start at 0; 3 takes the slot freed at 1 and ends at 4
    assert makespan([1.0, 2.0, 3.0], 2) == 4.0
    assert makespan([1.0] * 8, 1) == 8.0 and makespan([], 3) == 0.0


def test_step_wait_serves_each_turns_calls_together():
    rng = random.Random(0)  # sigma 0: every call takes exactly the mean
    # 3 turns x 4 calls, 4 slots
    assert step_wait([4, 4, 4], 4, 1.0, rng, sigma=0.0) == pytest.approx(3.0)
    assert step_wait([4, 4, 4], 2, 1.0, rng, sigma=0.0) == pytest.approx(6.0)  # 2 rounds a turn
    # unlimited: a call a turn
    assert step_wait([4, 4, 4], 0, 0.5, rng, sigma=0.0) == pytest.approx(1.5)
    assert step_wait([], 4, 1.0, rng, sigma=0.0) == 0.0


def test_turn_calls_reads_the_logged_turns_and_falls_back_for_old_records():
    # an old record: 12 calls spread over the 3 searching turns of 4
    assert turn_calls({"rollout/tool_calls": 12, "rollout/generate_calls": 4}) == [4, 4, 4]
    assert turn_calls({"rollout/tool_calls_by_turn": [5, 3, 0]}) == [5.0, 3.0, 0.0]


def test_regeneration_rounds_are_modelled_from_their_own_turns():
    """Two lock-step rounds of 3 turns (DAPO regeneration): 4 searching turns of 4 calls and two
    answering turns. On 4 slots at 1 s that is 4 s of waiting; spreading the 16 calls over
    generate_calls - 1 = 5 turns (the old model) said 5 s."""
    rec = {"step": 1, "rollout/tool_calls": 16, "rollout/generate_calls": 6, "time/env": 4.0,
           "rollout/tool_calls_by_turn": [4, 4, 0, 4, 4, 0]}
    run = Run(path=Path("r-s0"), records=[rec], points=[(0.0, 0.1, 0), (10.0, 0.2, 1)], label="r")
    assert queued_points(run, 4, 1.0, random.Random(0), sigma=0.0)[-1][0] == pytest.approx(10.0)


def test_the_lock_step_rollout_logs_its_calls_turn_by_turn():
    from agentsearch.envs import SearchEnv
    from agentsearch.models import load_tokenizer
    from agentsearch.rollout import SamplingParams, ScriptedBackend, rollout
    from agentsearch.warmstart.search_oracle import world_oracle

    tasks, policy = world_oracle(split="dev", turn_format="tags")
    tasks = [t for t in tasks if len(t["gold_doc_ids"]) == 2][:2] + \
        [t for t in tasks if len(t["gold_doc_ids"]) == 1][:2]
    _, stats = rollout(lambda: SearchEnv(split="dev"), tasks,
                       ScriptedBackend(load_tokenizer("tiny"), policy),
                       SamplingParams(max_new_tokens=256), n_per_task=2, seed=0)
    # turn 1: all 8 episodes search; turn 2: the 4 two-hop ones search again, the rest answer
    assert stats.metrics()["rollout/tool_calls_by_turn"] == [8, 4, 0]
    merged = stats.merged(stats)  # a regeneration round: its turns follow the first round's
    assert merged.tool_calls_by_turn == [8, 4, 0, 8, 4, 0] and merged.tool_calls == 24


def _run(name: str, label: str, evals: dict[int, float], seconds_per_step: float, calls: float,
         env: float) -> Run:
    records = [{"step": s, "rollout/tool_calls": calls, "rollout/generate_calls": 3,
                "time/env": env} for s in range(1, max(evals) + 1)]
    points = [(s * seconds_per_step, q, s) for s, q in sorted(evals.items())]
    return Run(path=Path(name), records=records, points=points, label=label)


def test_queued_points_replace_each_steps_measured_wait():
    run = _run("r-s0", "r", {0: 0.1, 2: 0.3}, 10.0, calls=8, env=1.0)
    # 2 searching turns x 4 calls on 2 slots at 1 s (sigma 0): 2 s a turn, 4 s a step against
    # 1 s measured
    pts = queued_points(run, 2, 1.0, random.Random(0), sigma=0.0)
    ref_run = _run("on_policy_larger-s0", "on_policy_larger", {0: 0.1, 1: 0.2, 2: 0.4}, 10.0,
                   calls=16, env=1.0)
    table = predict([run, ref_run], 2, 1.0, sigma=0.0)
    assert pts == [(0.0, 0.1, 0), (20.0 + 2 * 3.0, 0.3, 2)]
    # target 0.9 x 0.4 = 0.36: on_policy_larger reaches it at step 2: 20 s + 2 x (8 - 1) s = 34 s,
    # its training time too; r never does (0.3)
    assert table["target"] == pytest.approx(0.36)
    ref = next(m for m in table["methods"] if m["method"] == "on_policy_larger")
    assert ref["time_to_target"] == pytest.approx(34.0) and ref["ratio"] == pytest.approx(1.0)
    r = next(m for m in table["methods"] if m["method"] == "r")
    assert (r["reached"] == "0/1" and r["time_to_target"] is None
            and r["train_seconds"] == pytest.approx(26.0))
    with pytest.raises(ValueError, match="no on_policy_larger runs"):
        predict([run], 2, 1.0)


def test_priced_points_put_compute_on_the_works_prices():
    """With a price list the clock is work and service only: 2 s a step plus 0.01 s a generated
    token (100 a step: 1 s), plus the queue's wait (4 s a step at 2 slots, as above)."""
    run = _run("r-s0", "r", {0: 0.1, 2: 0.3}, 10.0, calls=8, env=1.0)
    for r in run.records:
        r["tokens/generated"] = 100
    price = {"tokens/generated": 0.01, "step": 2.0}
    assert step_compute(run.records[0], price) == pytest.approx(3.0)
    pts = queued_points(run, 2, 1.0, random.Random(0), sigma=0.0, price=price)
    assert pts == [(0.0, 0.1, 0), (pytest.approx(2 * (3.0 + 4.0)), 0.3, 2)]
    # a free service leaves the priced compute alone: 3 s a step, whatever the measured seconds
    assert queued_points(run, 0, 0.0, random.Random(0), price=price)[-1][0] == pytest.approx(6.0)


def test_a_measured_run_is_read_against_its_twins_prediction():
    """A run under 2 slots x 1 s (10 s a step, 4 s of it waiting, 100 tokens a step) against its
    latency-0 twin (200 tokens a step, 1 s waits, one evaluation further on)."""
    run = _run("hdr-s0", "hdr", {0: 0.1, 2: 0.4}, 10.0, calls=8, env=4.0)
    twin = _run("hdr-s0", "hdr", {0: 0.1, 2: 0.38, 4: 0.5}, 10.0, calls=8, env=1.0)
    for r, tokens in ((run, 100), (twin, 200)):
        for rec in r.records:
            rec["tokens/generated"] = tokens
    price = {"tokens/generated": 0.01, "step": 2.0}
    out = measured_against(run, twin, 2, 1.0, 0.36, price, sigma=0.0)
    assert out["step"] == 2 and out["evals_compared"] == 2
    assert out["max_eval_difference"] == pytest.approx(0.02)
    # the queue model for its own calls: 2 searching turns x 4 calls on 2 slots at 1 s = 4 s
    assert out["wait_measured"] == pytest.approx(4.0) and out["wait_model"] == pytest.approx(4.0)
    assert out["step_to_target"] == 2 and out["measured"] == pytest.approx(20.0)
    # priced: (2 + 1 s of tokens + 4 s measured wait) x 2 steps; predicted from the twin, cut at
    # the run's last evaluation: (2 + 2 s of tokens + 4 s modelled wait) x 2
    assert out["priced"] == pytest.approx(14.0) and out["predicted"] == pytest.approx(16.0)
    # no price: the priced clock is not given, the prediction is the twin's own clock shifted
    plain = measured_against(run, twin, 2, 1.0, 0.36, sigma=0.0)
    assert plain["priced"] is None and plain["predicted"] == pytest.approx(20.0 + 2 * (4.0 - 1.0))
    # a target neither reaches
    assert measured_against(run, twin, 2, 1.0, 0.45, price, sigma=0.0)["measured"] is None


def test_same_seed_ratios_pair_each_run_with_the_references_run_of_its_seed():
    rows = [{"run": "hdr-s0", "method": "hdr", "seed": 0, "measured": 80.0, "priced": 90.0,
             "predicted": None},
            {"run": "hdr-s1", "method": "hdr", "seed": 1, "measured": 50.0, "priced": 50.0,
             "predicted": 50.0},
            {"run": "on_policy_larger-s0", "method": "on_policy_larger", "seed": 0,
             "measured": 100.0, "priced": 100.0, "predicted": 100.0}]
    # hdr-s1: no reference run
    assert same_seed_ratios(rows) == [{"pair": "hdr-s0 / on_policy_larger-s0",
                                       "measured": pytest.approx(0.8),
                                       "priced": pytest.approx(0.9), "predicted": None}]
