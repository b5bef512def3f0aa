"""HeadroomDriftBuffer and its baselines: selection semantics, FIFO, stats
(test_replay_ingress_and_state.py: what gets in, and the checkpoint state)."""

from __future__ import annotations

import math

import pytest
import torch
from replay_buffer_helpers import MASK, FakeScorer, N, T, filled, group

from agentsearch.replay import (
    HeadroomDriftBuffer,
    ReplayGroup,
    ReplayStrategy,
    exposure_concentration,
    make_replay,
    replay_kinds,
)


def test_add_sets_reference_headroom_and_fifo_order():
    buf = HeadroomDriftBuffer(capacity=10, k_rep=2, tau=1e-2)
    filled(buf, [0.9, 0.2, 0.6])
    assert [g.prompt_id for g in buf.groups] == [0, 1, 2]
    assert [round(g.cached_headroom, 6) for g in buf.groups] == [0.1, 0.8, 0.4]
    # advantage weighting: |A| = 2 on both rows -> 2 * (1 - 0.2) = 1.6
    buf_a = HeadroomDriftBuffer(capacity=10, k_rep=2, tau=1e-2, headroom_weighting="advantage")
    buf_a.add([ReplayGroup(**{**group(0, 0.2).state_dict(), "advantages": torch.tensor([2.0, -2.0]),
                              "cached_headroom": 0.0})], step=0)
    # rows: A=+2 -> 2 * 0.8 on 2 tokens; A=-2 -> 2 * 0.2 on 3 tokens: (3.2 + 1.2) / 5 = 0.88
    assert buf_a.groups[0].cached_headroom == pytest.approx(0.88, abs=1e-6)


def test_select_orders_by_cached_headroom_descending():
    buf = HeadroomDriftBuffer(capacity=10, k_rep=10, tau=math.inf, scan_chunk=1)
    filled(buf, [0.5, 0.1, 0.9, 0.3, 0.7])  # headroom 0.5, 0.9, 0.1, 0.7, 0.3
    scorer = FakeScorer()
    sel = buf.select(scorer, step=1)
    assert scorer.calls == [[1], [3], [0], [4], [2]]  # one call per chunk of 1
    assert [g.prompt_id for g in sel.accepted] == [1, 3, 0, 4, 2]
    assert sel.scanned == 5


def test_gate_accepts_first_k_rep_feasible_and_stops_after_the_chunk():
    buf = HeadroomDriftBuffer(capacity=20, k_rep=2, tau=1e-2, scan_chunk=3)
    # scan order (headroom desc) is pid 0..7 because p rises with pid
    filled(buf, [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8])
    # drift = shift**2: pids 0, 1, 3 drifted (0.04 > 0.01); 2, 4, 5, 6, 7 fine (0.0025)
    scorer = FakeScorer({0: 0.2, 1: -0.2, 3: 0.2, 2: -0.05, 4: 0.05, 5: 0.05, 6: 0.05, 7: 0.05})
    sel = buf.select(scorer, step=1)
    assert scorer.calls == [[0, 1, 2], [3, 4, 5]]        # stopped after the 2nd chunk
    assert [g.prompt_id for g in sel.accepted] == [2, 4]  # pid 5 passed but the budget was full
    assert sel.scanned == 6
    assert sel.stats["replay/accept_rate"] == pytest.approx(3 / 6)   # 2, 4, 5 passed the gate
    assert sel.stats["replay/scan_depth"] == 6 and sel.stats["replay/score_calls"] == 2
    assert sel.stats["replay/candidates"] == 8 and sel.stats["replay/budget_filled"] == 1.0
    # KL: 0.5 * mean d^2 over accepted tokens = 0.5 * 0.0025
    assert sel.stats["replay/kl"] == pytest.approx(0.5 * 0.0025, rel=1e-4)
    assert sel.stats["replay/drift_rejected"] == pytest.approx(0.04, rel=1e-4)
    assert sel.stats["replay/drift_accepted"] == pytest.approx(0.0025, rel=1e-4)


def test_drift_by_age_of_the_scanned_groups():
    buf = HeadroomDriftBuffer(capacity=20, k_rep=1, tau=1e-2, scan_chunk=8)
    filled(buf, [0.1, 0.2])  # pids 0, 1 born at step 0
    buf.add([group(2, 0.3, step=3), group(3, 0.4, step=3)], 3)  # born at step 3
    scorer = FakeScorer({0: 0.2, 1: 0.15, 2: 0.05, 3: -0.05})  # drift = shift**2
    sel = buf.select(scorer, step=5)  # one chunk scans all four: ages 5, 5, 2, 2
    # 0 and 1 drifted past tau
    assert sel.scanned == 4 and [g.prompt_id for g in sel.accepted] == [2]
    assert sel.stats["replay/drift_age_4_7"] == pytest.approx((0.04 + 0.0225) / 2, rel=1e-4)
    assert sel.stats["replay/drift_age_2_3"] == pytest.approx(0.0025, rel=1e-4)
    assert "replay/drift_age_1" not in sel.stats and "replay/drift_age_16up" not in sel.stats
    naive = make_replay("naive", capacity=20, k_rep=1)
    filled(naive, [0.1, 0.2])
    # scores nothing
    assert not any(k.startswith("replay/drift_age") for k in naive.select(None, step=5).stats)


def test_cache_refresh_for_scanned_groups_only_and_replay_counts():
    buf = HeadroomDriftBuffer(capacity=20, k_rep=1, tau=1e-2, scan_chunk=2)
    gs = filled(buf, [0.1, 0.2, 0.3, 0.4])
    ref = [g.cached_headroom for g in gs]
    scorer = FakeScorer({0: 0.5, 1: math.log(2.0)})  # pid 0 rejected (0.25 > 0.01)
    sel = buf.select(scorer, step=1)
    # pid 1 passes? log 2 = 0.693 -> drift 0.48 > tau: rejected too, so a 2nd chunk is scanned
    assert scorer.calls == [[0, 1], [2, 3]]
    assert [g.prompt_id for g in sel.accepted] == [2]
    # current p: pid 0 -> 0.1 * e^0.5 = 0.16487 -> headroom 0.83513; pid 1 -> 0.4 -> 0.6
    assert gs[0].cached_headroom == pytest.approx(1 - 0.1 * math.exp(0.5), abs=1e-6)
    assert gs[1].cached_headroom == pytest.approx(0.6, abs=1e-6)
    assert (gs[2].cached_headroom == pytest.approx(ref[2])
            and gs[3].cached_headroom == pytest.approx(ref[3]))
    assert [g.replay_count for g in gs] == [0, 0, 1, 0]
    # unscanned groups keep their cache: with k_rep = 1 and all groups passing, only the
    # first chunk is scanned
    buf2 = HeadroomDriftBuffer(capacity=20, k_rep=1, tau=1.0, scan_chunk=2)
    gs2 = filled(buf2, [0.1, 0.2, 0.3, 0.4])
    buf2.select(FakeScorer({0: -0.1, 1: -0.1, 2: -0.1, 3: -0.1}), step=1)
    assert gs2[1].cached_headroom == pytest.approx(1 - 0.2 * math.exp(-0.1), abs=1e-6)
    assert gs2[2].cached_headroom == pytest.approx(0.7, abs=1e-6)  # unscanned: reference value
    for _ in range(3):
        buf2.select(FakeScorer(), step=2)
    assert [g.replay_count for g in gs2] == [4, 0, 0, 0]


def test_k_rep_zero_scans_nothing():
    buf = HeadroomDriftBuffer(capacity=5, k_rep=0, tau=1.0)
    filled(buf, [0.5, 0.5])
    scorer = FakeScorer()
    sel = buf.select(scorer, step=1)
    assert sel.accepted == [] and sel.scanned == 0 and scorer.calls == []


def test_groups_added_this_step_wait_for_the_next_select():
    buf = HeadroomDriftBuffer(capacity=5, k_rep=5, tau=1.0)
    filled(buf, [0.5, 0.6], step=3)
    assert buf.select(FakeScorer(), step=3).scanned == 0
    sel = buf.select(FakeScorer(), step=4)
    assert sel.scanned == 2 and sel.stats["replay/candidates"] == 2


def test_fifo_eviction_at_capacity():
    buf = HeadroomDriftBuffer(capacity=3, k_rep=1, tau=1.0)
    for step in range(5):
        assert buf.add([group(step, step=step)], step) == 1
    assert [g.prompt_id for g in buf.groups] == [2, 3, 4] and len(buf) == 3
    m = buf.metrics()
    assert m["replay/evicted"] == 1.0 and m["replay/buffer_size"] == 3.0
    assert m["replay/ingress_total"] == 5.0
    # one add larger than the capacity keeps its newest groups
    assert buf.add([group(10 + i) for i in range(4)], step=5) == 4
    assert [g.prompt_id for g in buf.groups] == [11, 12, 13]


def test_l1_gate_variant_lets_cancelling_gaps_through():
    class Alternating(FakeScorer):
        def __call__(self, groups):  # d = +0.3 on one token, -0.3 on the next...
            signs = torch.tensor([1.0, -1.0, 1.0, -1.0])
            out = []
            for g in groups:
                d = torch.zeros(N, T)
                d[0, 1:3] = 0.3 * signs[:2]
                d[1, 1:3] = 0.3 * signs[:2]
                out.append(g.gen_logprobs + d)
            return out

    l2 = HeadroomDriftBuffer(capacity=5, k_rep=1, tau=1e-2)
    l1 = HeadroomDriftBuffer(capacity=5, k_rep=1, tau=1e-2, drift_kind="l1")
    for b in (l2, l1):
        b.add([group("g")], 0)
    # policy tokens: +0.3, -0.3 | +0.3, -0.3, 0 -> l2 = 4 * 0.09 / 5 = 0.072; l1 = 0
    assert l2.select(Alternating(), 1).accepted == []
    sel = l1.select(Alternating(), 1)
    assert (len(sel.accepted) == 1
            and sel.stats["replay/drift_accepted"] == pytest.approx(0, abs=1e-7))
    assert sel.stats["replay/kl"] == pytest.approx(0.5 * 0.072, rel=1e-4)  # KL stays l2-based


def test_baselines_share_the_core_and_differ_in_order_and_gate():
    ps = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    drifted = {i: 0.3 for i in range(0, 6, 2)}  # even pids fail the gate (0.09 > 0.01)

    def run(kind, **kw):
        buf = make_replay(kind, capacity=10, k_rep=2, tau=1e-2, scan_chunk=2, **kw)
        filled(buf, ps)
        scorer = FakeScorer(drifted)
        return [g.prompt_id for g in buf.select(scorer, 1).accepted], scorer

    assert isinstance(make_replay("hdr", capacity=1, k_rep=1, tau=0.1), ReplayStrategy)
    assert run("hdr")[0] == [1, 3]                     # headroom order, gate
    picked, scorer = run("headroom_only")
    assert picked == [0, 1] and scorer.calls == [[0, 1]]  # headroom order, no gate, still scored
    picked, scorer = run("recency")
    assert picked == [5, 4] and scorer.calls == []     # newest first, nothing scored
    picked, scorer = run("naive", seed=0)
    assert len(set(picked)) == 2 and scorer.calls == []
    assert run("naive", seed=0)[0] == picked           # seeded
    assert {tuple(run("naive", seed=s)[0]) for s in range(8)} != {tuple(picked)}
    orders = [run("drift_only", seed=s) for s in range(8)]
    for picked, scorer in orders:
        assert len(picked) == 2 and all(p % 2 == 1 for p in picked)  # gate holds
        # first feasible in scan order
        assert picked == [p for p in scorer.scanned if p % 2 == 1][:2]
    scans = [tuple(scorer.scanned) for _, scorer in orders]
    assert any(list(s) != sorted(s) for s in scans) and len(set(scans)) > 1  # random order
    none = make_replay("none")
    assert none.add([group("x")], 0) == 0 and len(none) == 0
    assert none.select(None, 1).accepted == []
    assert sorted(replay_kinds()) == sorted(["none", "naive", "recency", "headroom_only",
                                             "drift_only", "hdr", "success_only", "per",
                                             "fresh_per", "recycle"])


def test_make_replay_errors_name_the_fix():
    with pytest.raises(ValueError, match="tau"):
        make_replay("hdr", capacity=10, k_rep=2)
    with pytest.raises(ValueError, match="unknown replay kind"):
        make_replay("hdrr", capacity=10, k_rep=2, tau=0.1)
    with pytest.raises(ValueError, match="fixes gate"):
        make_replay("naive", capacity=10, k_rep=2, gate=True)
    assert make_replay("naive", capacity=10, k_rep=2).tau == math.inf


def test_score_fn_contract_is_checked():
    buf = HeadroomDriftBuffer(capacity=5, k_rep=1, tau=1.0)
    filled(buf, [0.5])
    with pytest.raises(ValueError, match="returned 0 tensors"):
        buf.select(lambda gs: [], 1)
    with pytest.raises(ValueError, match="shape"):
        buf.select(lambda gs: [torch.zeros(N, T + 1)], 1)
    with pytest.raises(ValueError, match="non-finite"):
        buf.select(lambda gs: [torch.full((N, T), float("nan"))], 1)
    with pytest.raises(ValueError, match="score_fn"):
        buf.select(None, 1)


def test_age_and_exposure_stats():
    buf = HeadroomDriftBuffer(capacity=20, k_rep=1, tau=1.0)
    buf.add([group(i, 0.1 * (i + 1), step=i) for i in range(10)], step=9)
    for step in range(10, 13):
        sel = buf.select(FakeScorer(), step)  # pid 0 has the top headroom every time
    assert [g.prompt_id for g in sel.accepted] == [0]
    assert sel.stats["replay/age_mean"] == 12.0 and sel.stats["replay/age_max"] == 12.0
    # 10 groups, one replayed 3 times: top 10% (1 group) takes all replays
    assert sel.stats["replay/exposure_top10_share"] == 1.0
    assert sel.stats["replay/exposure_mean"] == pytest.approx(0.3)
    assert sel.stats["replay/never_replayed_frac"] == pytest.approx(0.9)
    # hand-worked: counts {0: 5 groups, 1: 3, 5: 1, 10: 1} -> 18 replays over 10 groups;
    # the top ceil(0.1 * 10) = 1 group has 10 -> 10 / 18
    assert exposure_concentration({0: 5, 1: 3, 5: 1, 10: 1}) == pytest.approx(10 / 18)
    # counts {0: 15, 1: 3, 5: 1, 10: 1}: 20 groups -> the top 2 have 10 + 5 of 18 replays
    assert exposure_concentration({0: 15, 1: 3, 5: 1, 10: 1}) == pytest.approx(15 / 18)
    assert exposure_concentration({}) == 0.0


def test_gate_is_inclusive_at_tau():
    # gen logprob -1 everywhere, current -0.5: d = 0.5 exactly, drift = 0.25 exactly
    buf = HeadroomDriftBuffer(capacity=5, k_rep=1, tau=0.25)
    buf.add([group("g", math.exp(-1.0))], 0)
    assert buf.groups[0].gen_logprobs[MASK].unique().tolist() == [-1.0]
    assert len(buf.select(FakeScorer({"g": 0.5}), 1).accepted) == 1
    tight = HeadroomDriftBuffer(capacity=5, k_rep=1, tau=0.2499)
    tight.add([group("g", math.exp(-1.0))], 0)
    assert tight.select(FakeScorer({"g": 0.5}), 1).accepted == []
