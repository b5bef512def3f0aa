"""The decoupled objective's weights and the drift gate for stale fresh groups, by hand."""

from __future__ import annotations

import math

import torch

from agentsearch.algorithms.staleness import decoupled_weights, gate_stale_groups, group_staleness
from agentsearch.algorithms.update import pad_rows, rows_of
from agentsearch.replay import ReplayGroup


def _group(lp, mask, adv=(1.0, -1.0)):
    n, t = len(lp), len(lp[0])
    return ReplayGroup(prompt_id="p", token_ids=torch.arange(n * t).view(n, t), action_mask=torch.tensor(mask).bool(),
                       gen_logprobs=torch.tensor(lp), advantages=torch.tensor(adv), rewards=torch.tensor([1.0, 0.0]),
                       answer_correct=torch.tensor([True, False]), born_step=1)


def test_weights_are_prox_over_behav_truncated_and_one_off_mask():
    prox = torch.tensor([[-1.0, -2.0, -0.5]])
    behav = torch.tensor([[-1.5, -1.0, -0.5]])
    mask = torch.tensor([[1, 1, 0]])
    w = decoupled_weights(prox, behav, mask, cap=1.5)  # exp(0.5)=1.6487 -> 1.5; exp(-1)=0.3679; off-mask 1
    assert torch.allclose(w, torch.tensor([[1.5, math.exp(-1.0), 1.0]]))


def test_staleness_is_the_oldest_turn_behind_the_current_version():
    assert group_staleness([[3, 4], [4]], current=4) == 1
    assert group_staleness([[None, None]], current=7) == 0
    assert group_staleness([[5]], current=5) == 0


def test_gate_keeps_fresh_and_low_drift_groups_and_drops_the_rest():
    mask = [[1, 1], [1, 0]]
    a = _group([[-1.0, -1.0], [-2.0, 0.0]], mask)   # current: kept, no weights
    b = _group([[-1.0, -1.0], [-2.0, 0.0]], mask)   # stale, drift (0.1^2*3)/3 = 0.01 <= tau
    c = _group([[-1.0, -1.0], [-2.0, 0.0]], mask)   # stale, drift 0.25 > tau: dropped
    behav_b = torch.tensor([[-1.1, -0.9], [-2.1, 0.0]])
    behav_c = torch.tensor([[-1.5, -0.5], [-2.5, 0.0]])
    kept, weights, m = gate_stale_groups([a, b, c], [a.gen_logprobs.clone(), behav_b, behav_c], [0, 1, 1],
                                         tau=0.0101, cap=2.0)
    assert kept == [a, b] and weights[0] is None
    assert torch.allclose(weights[1], torch.tensor([[math.exp(0.1), math.exp(-0.1)], [math.exp(0.1), 1.0]]))
    assert m["async/dropped_by_drift"] == 1 and m["async/stale_groups"] == 2
    assert math.isclose(m["async/drift_fresh_mean"], (0.01 + 0.25) / 2, rel_tol=1e-5)
    assert math.isclose(m["async/staleness_mean"], 2 / 3)
    assert math.isclose(m["async/is_weight_mean"], (2 * math.exp(0.1) + math.exp(-0.1)) / 3, rel_tol=1e-5)
    # the weights reach the update as per-token advantages (A x w), policy tokens only
    rows = rows_of(kept, is_weights=weights)
    mb = pad_rows(rows, "cpu")
    assert mb["adv"].shape == mb["ids"].shape
    assert torch.allclose(mb["adv"][2], torch.tensor([math.exp(0.1), math.exp(-0.1)]))  # b's response 0, A=1
    assert torch.allclose(mb["adv"][0], torch.tensor([1.0, 1.0]))  # a's response 0: unweighted
