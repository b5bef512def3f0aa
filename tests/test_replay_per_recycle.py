"""The 2026 replay baselines beside HDR: FreshPER (``per``, ``fresh_per``: groups drawn by
(mean |A|)^alpha x exp(-age / tau)) and query recycling (``recycle``: zero-variance groups'
tasks go back into the prompt order), with hand-worked numbers."""

from __future__ import annotations

import math

import pytest
import torch
from replay_buffer_helpers import group

from agentsearch.replay import make_replay
from agentsearch.replay.scores import per_priority
from agentsearch.trainer.setup import TaskSampler


def test_per_priority_hand_worked():
    adv, age = torch.tensor([1.0, 0.25]), torch.tensor([0.0, 8.0])
    # alpha 0.5: (1)^.5 = 1, (.25)^.5 = .5; freshness exp(0) = 1, exp(-8/8) = 0.3679
    got = per_priority(adv, age, alpha=0.5, age_tau=8.0, eps=0.0)
    assert got.tolist() == pytest.approx([1.0, 0.5 * math.exp(-1.0)])
    assert per_priority(adv, age, 0.5, math.inf, eps=0.0).tolist() == pytest.approx([1.0, 0.5])
    assert per_priority(adv, age, 0.0, math.inf).tolist() == pytest.approx([1.0, 1.0])  # uniform
    # a zero-advantage group keeps a small weight (eps), never exactly 0 ...
    assert per_priority(torch.zeros(1), torch.zeros(1), 1.0, math.inf)[0] > 0
    # ... and a very old one is floored, not underflowed to 0
    assert per_priority(torch.ones(1), torch.tensor([1e6]), 1.0, 1.0)[0] > 0


def _first_pick_share(kind: str, groups, step: int, **kw) -> float:
    """How often the first group is the one drawn (k_rep=1), over 400 seeds."""
    hits = 0
    for seed in range(400):
        buf = make_replay(kind, capacity=8, k_rep=1, seed=seed, per_alpha=1.0, **kw)
        for g, born in groups:
            buf.add([g], born)
        hits += buf.select(None, step).accepted[0].prompt_id == groups[0][0].prompt_id
    return hits / 400


def test_per_draws_in_proportion_to_mean_abs_advantage():
    # |A| 1.0 vs 0.25 at alpha 1: P(first) = 1 / 1.25 = 0.8
    groups = [(group("big", adv=(1.0, -1.0)), 0), (group("small", adv=(0.25, -0.25)), 0)]
    assert 0.74 <= _first_pick_share("per", groups, 1) <= 0.86
    # equal priorities, one 8 steps older: fresh_per at tau 8 draws the new one
    # 1 / (1 + e^-1) = 0.731 of the time; plain PER ignores age (0.5)
    aged = [(group("new", adv=(1.0, -1.0), step=8), 8), (group("old", adv=(1.0, -1.0)), 0)]
    assert 0.67 <= _first_pick_share("fresh_per", aged, 9, age_tau=8.0) <= 0.79
    assert 0.43 <= _first_pick_share("per", aged, 9, age_tau=8.0) <= 0.57


def test_per_selects_without_scoring_and_fixes_its_knobs():
    buf = make_replay("per", capacity=8, k_rep=2, age_tau=3.0)
    assert buf.age_tau == math.inf and not buf.scores_groups  # no forward pass, no gate
    for i in range(3):
        buf.add([group(f"g{i}")], 0)
    picked = [g.prompt_id for g in buf.select(None, 1).accepted]
    assert len(picked) == 2 == len(set(picked))  # without replacement
    assert make_replay("fresh_per", capacity=8, k_rep=2, age_tau=3.0).age_tau == 3.0
    with pytest.raises(ValueError, match="age_tau"):
        make_replay("fresh_per", capacity=8, k_rep=2, age_tau=0.0)


def test_recycle_hands_over_zero_variance_tasks_once_and_stores_nothing():
    rec = make_replay("recycle", capacity=64, k_rep=4, tau=0.01, recycle_after=3)
    groups = [group("mixed", rewards=(1.0, 0.0)), group("solved", rewards=(1.0, 1.0)),
              group("failed", rewards=(-0.5, -0.5))]
    assert rec.add(groups, 0) == 0 and len(rec) == 0
    assert rec.select(None, 1).accepted == []
    assert rec.metrics()["replay/recycled"] == 2
    state = rec.state_dict()
    again = make_replay("recycle", recycle_after=3)
    again.load_state_dict(state)
    assert rec.recycled() == ["solved", "failed"] and rec.recycled() == []
    assert again.recycled() == ["solved", "failed"]  # a checkpoint keeps what is pending
    with pytest.raises(ValueError, match="recycle_after"):
        make_replay("recycle", recycle_after=0)


def test_sampler_draws_a_recycled_task_after_the_given_number_of_draws():
    tasks = [{"id": f"t{i}"} for i in range(10)]
    sampler = TaskSampler(tasks, seed=0)
    plain = TaskSampler(tasks, seed=0)
    sampler.sample(1), plain.sample(1)
    sampler.recycle(["t7", "t3"], after=2)
    want = [t["id"] for t in plain.sample(2)] + ["t7", "t3"] + [t["id"] for t in plain.sample(2)]
    assert [t["id"] for t in sampler.sample(6)] == want
    with pytest.raises(KeyError, match="nope"):
        sampler.recycle(["nope"], after=1)


def test_recycle_judges_zero_variance_as_the_trainer_does():
    from agentsearch.algorithms.advantages import SIGNAL_ATOL
    from agentsearch.replay import strategies

    assert strategies.SIGNAL_ATOL == SIGNAL_ATOL
