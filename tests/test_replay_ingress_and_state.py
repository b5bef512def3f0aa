"""HeadroomDriftBuffer's ingress (mixed outcomes only, non-finite logprobs refused, the answer
over format rewards, droughts) and its checkpoint state (a round trip selects identically)."""

from __future__ import annotations

import io
import logging
import math

import pytest
import torch
from replay_buffer_helpers import FakeScorer, group

from agentsearch.replay import HeadroomDriftBuffer, ReplayGroup, make_replay


def test_ingress_filter_mixed_outcomes_only():
    buf = HeadroomDriftBuffer(capacity=10, k_rep=1, tau=1.0, success_threshold=0.5)
    offered = [
        group("mixed", rewards=(1.0, 0.0)),
        group("all_win", rewards=(1.0, 0.9)),
        group("all_lose", rewards=(0.0, 0.2)),
        group("at_threshold", rewards=(0.5, 1.0)),           # 0.5 is not > 0.5: mixed
    ]
    assert buf.add(offered, step=0) == 2
    assert [g.prompt_id for g in buf.groups] == ["mixed", "at_threshold"]
    m = buf.metrics()
    assert (m["replay/ingress"], m["replay/ingress_offered"]) == (2.0, 4.0)
    assert (m["replay/ingress_all_success"], m["replay/ingress_all_fail"]) == (1.0, 1.0)


def _with_logprob(g, row, col, value):
    lp = g.gen_logprobs.clone()
    lp[row, col] = value
    g.gen_logprobs = lp
    return g


def test_ingress_refuses_nonfinite_generation_logprobs(caplog):
    buf = HeadroomDriftBuffer(capacity=10, k_rep=4, tau=math.inf)
    offered = [
        group("ok"),
        _with_logprob(group("nan"), 0, 1, math.nan),              # policy token (MASK[0, 1])
        _with_logprob(group("-inf"), 1, 3, -math.inf),            # policy token (MASK[1, 3])
        _with_logprob(group("nan_off_policy"), 0, 0, math.nan),   # prompt token: never used
        _with_logprob(group("nan_all_lose", rewards=(0.0, 0.0)), 1, 2, math.nan),
    ]
    with caplog.at_level(logging.WARNING, logger="agentsearch.replay"):
        assert buf.add(offered, step=0) == 2
    assert [g.prompt_id for g in buf.groups] == ["ok", "nan_off_policy"]
    assert all(math.isfinite(g.cached_headroom) for g in buf.groups)
    m = buf.metrics()
    assert (m["replay/ingress_nonfinite"], m["replay/ingress_nonfinite_total"]) == (3.0, 3.0)
    assert ((m["replay/ingress"], m["replay/ingress_offered"],
             m["replay/ingress_all_fail"]) == (2.0, 5.0, 0.0))
    assert any("nan/inf" in r.getMessage() for r in caplog.records)
    buf.add([group("ok2"), _with_logprob(group("nan2"), 1, 1, math.inf)], step=1)
    m = buf.metrics()
    assert (m["replay/ingress_nonfinite"], m["replay/ingress_nonfinite_total"]) == (1.0, 4.0)
    assert buf.select(FakeScorer(), step=2).stats["replay/ingress_nonfinite_total"] == 4.0
    # the lifetime count survives a checkpoint; a state saved without it loads as 0
    fresh = HeadroomDriftBuffer(capacity=10, k_rep=4, tau=math.inf)
    fresh.load_state_dict(buf.state_dict())
    assert fresh.metrics()["replay/ingress_nonfinite_total"] == 4.0
    old = {k: v for k, v in buf.state_dict().items() if k != "ingress_nonfinite"}
    fresh.load_state_dict(old)
    assert fresh.metrics()["replay/ingress_nonfinite_total"] == 0.0


def test_answer_correct_overrides_format_inflated_rewards():
    buf = HeadroomDriftBuffer(capacity=10, k_rep=1, tau=1.0, success_threshold=0.0)
    # every response earned a 0.2 format reward (> threshold), but only one is correct
    fmt_mixed = group("fmt_mixed", rewards=(0.2, 0.2), correct=(True, False))
    # rewards say mixed/high, answers say all wrong -> no learning signal -> rejected
    all_wrong = group("all_wrong", rewards=(1.0, 0.2), correct=(False, False))
    all_right = group("all_right", rewards=(0.0, 0.0), correct=(True, True))
    assert buf.add([fmt_mixed, all_wrong, all_right], step=0) == 1
    assert [g.prompt_id for g in buf.groups] == ["fmt_mixed"]


def test_ingress_drought_metric_and_warning(caplog):
    buf = HeadroomDriftBuffer(capacity=10, k_rep=1, tau=1.0, drought_steps=3)
    buf.add([group("a")], 0)
    with caplog.at_level(logging.WARNING, logger="agentsearch.replay"):
        for step in range(1, 4):
            buf.add([group("z", rewards=(0.0, 0.0))], step)
            assert buf.metrics()["replay/ingress_drought"] == float(step >= 3)
    assert buf.metrics()["replay/steps_since_ingress"] == 3.0
    assert len([r for r in caplog.records if "drought" in r.getMessage()]) == 1
    buf.add([group("b")], 4)
    assert buf.metrics()["replay/ingress_drought"] == 0.0


def _busy_buffer(kind):
    buf = make_replay(kind, capacity=6, k_rep=2, tau=1e-2, scan_chunk=2, seed=3)
    shifts = {i: (0.3 if i % 3 == 0 else 0.05 * (i % 2)) for i in range(40)}
    pid = 0
    for step in range(5):
        buf.select(FakeScorer(shifts), step)
        buf.add([group(pid + j, 0.05 + 0.09 * ((pid + j) % 10), step=step) for j in range(3)], step)
        pid += 3
    return buf, shifts, pid


@pytest.mark.parametrize("kind", ["hdr", "drift_only", "naive"])
def test_state_dict_round_trip_gives_identical_selections(kind):
    buf, shifts, pid = _busy_buffer(kind)
    bio = io.BytesIO()
    torch.save(buf.state_dict(), bio)
    bio.seek(0)
    fresh = make_replay(kind, capacity=6, k_rep=2, tau=1e-2, scan_chunk=2, seed=99)
    fresh.load_state_dict(torch.load(bio, weights_only=False))

    def snapshot(b):
        return [(g.prompt_id, g.born_step, g.cached_headroom, g.replay_count,
                 g.token_ids.tolist(), g.gen_logprobs.tolist()) for g in b.groups]

    assert snapshot(fresh) == snapshot(buf)
    assert fresh.metrics() == buf.metrics()
    for step in range(5, 9):
        a, b = buf.select(FakeScorer(shifts), step), fresh.select(FakeScorer(shifts), step)
        assert [g.prompt_id for g in a.accepted] == [g.prompt_id for g in b.accepted]
        assert a.scanned == b.scanned and a.stats == b.stats
        new = [group(pid + j, 0.3, step=step) for j in range(2)]
        assert buf.add(new, step) == fresh.add([ReplayGroup.from_state_dict(g.state_dict())
                                                for g in new], step)
        pid += 2
    assert snapshot(fresh) == snapshot(buf)


def test_load_state_dict_rejects_foreign_state():
    with pytest.raises(ValueError, match="format"):
        HeadroomDriftBuffer(capacity=1, k_rep=1, tau=1.0).load_state_dict({"groups": []})
