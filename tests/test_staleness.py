"""The decoupled objective's weights and the drift gate for stale fresh groups, by hand."""

from __future__ import annotations

import math

import pytest
import torch

from agentsearch.algorithms.staleness import decoupled_weights, gate_stale_groups, group_staleness
from agentsearch.algorithms.update import pad_rows, rows_of
from agentsearch.replay import ReplayGroup


def _group(lp, mask, adv=(1.0, -1.0)):
    n, t = len(lp), len(lp[0])
    return ReplayGroup(prompt_id="p", token_ids=torch.arange(n * t).view(n, t),
                       action_mask=torch.tensor(mask).bool(), gen_logprobs=torch.tensor(lp),
                       advantages=torch.tensor(adv), rewards=torch.tensor([1.0, 0.0]),
                       answer_correct=torch.tensor([True, False]), born_step=1)


def test_weights_are_prox_over_behav_truncated_and_one_off_mask():
    prox = torch.tensor([[-1.0, -2.0, -0.5]])
    behav = torch.tensor([[-1.5, -1.0, -0.5]])
    mask = torch.tensor([[1, 1, 0]])
    # exp(0.5)=1.6487 -> 1.5; exp(-1)=0.3679; off-mask 1
    w = decoupled_weights(prox, behav, mask, cap=1.5)
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
    kept, weights, m = gate_stale_groups([a, b, c], [a.gen_logprobs.clone(), behav_b, behav_c],
                                         [0, 1, 1], tau=0.0101, cap=2.0)
    assert kept == [a, b] and weights[0] is None
    assert torch.allclose(weights[1], torch.tensor([[math.exp(0.1), math.exp(-0.1)],
                                                    [math.exp(0.1), 1.0]]))
    assert m["async/dropped_by_drift"] == 1 and m["async/stale_groups"] == 2
    assert math.isclose(m["async/drift_fresh_mean"], (0.01 + 0.25) / 2, rel_tol=1e-5)
    assert math.isclose(m["async/staleness_mean"], 2 / 3)
    assert math.isclose(m["async/is_weight_mean"], (2 * math.exp(0.1) + math.exp(-0.1)) / 3,
                        rel_tol=1e-5)
    # the weights reach the update as per-token advantages (A x w), policy tokens only
    rows = rows_of(kept, is_weights=weights)
    mb = pad_rows(rows, "cpu")
    assert mb["adv"].shape == mb["ids"].shape
    # b's response 0, A=1
    assert torch.allclose(mb["adv"][2], torch.tensor([math.exp(0.1), math.exp(-0.1)]))
    assert torch.allclose(mb["adv"][0], torch.tensor([1.0, 1.0]))  # a's response 0: unweighted


# --- fresh groups through the trainer's gate (trainer.rollouts.fresh_groups)

def _turned_episode(task, engine_lps, reward, versions=(0, 1)):
    """Prompt (2 tokens), turn 1 (2 tokens, ``versions[0]``), an observation (1 token), turn 2
    (2 tokens, ``versions[1]``)."""
    from agentsearch.rollout import Episode

    turns = [{"new_tokens": 2, "obs_tokens": 1, "version": versions[0]},
             {"new_tokens": 2, "obs_tokens": 0, "version": versions[1]}]
    return Episode(task_id=task, token_ids=[1, 2, 3, 4, 5, 6, 7], action_mask=[0, 0, 1, 1, 0, 1, 1],
                   gen_logprobs=engine_lps, prompt_len=2, reward=reward, reward_components={},
                   answer_correct=reward > 0, terminated=True, truncated=False, num_turns=2,
                   info={"turns": turns})


ENGINE = [0, 0, -1.0, -2.0, 0, -0.5, -1.5]


def _fresh(drift_kind, stale_gap, current_gap, *, tau=0.01):
    """One stale group (turn 1 sampled by version 0, turn 2 by version 1 = the trainer's); the
    trainer's logprobs differ from the engine's by ``stale_gap`` on turn 1's tokens (drift: the
    weights moved) and by ``current_gap`` on turn 2's (same weights: numerics only)."""
    from types import SimpleNamespace

    from agentsearch.core.config import apply_overrides
    from agentsearch.trainer.rollouts import fresh_groups
    from agentsearch.trainer.train_config import TrainConfig

    cfg = apply_overrides(TrainConfig, "tiny", ["group_size=2", "async.enabled=true",
                                                "async.max_staleness=1", f"replay.tau={tau}",
                                                f"replay.drift_kind={drift_kind}"])
    eps = [_turned_episode("a", ENGINE, 1.0), _turned_episode("a", ENGINE, 0.0)]
    gap = torch.tensor([[0, 0, *stale_gap, 0, current_gap, current_gap]] * 2)

    def score_fn(groups):  # the trainer's forward, as it differs from the engine's logprobs
        return [g.gen_logprobs + gap for g in groups]

    return fresh_groups(cfg, eps, 5, 1, SimpleNamespace(pad_token_id=0), score_fn)


def test_the_stale_gate_measures_drift_on_the_stale_turns_only():
    # turn 1: drift 0.05^2 = 0.0025 <= tau; turn 2's 0.5 gap is the same weights' numerics
    _, used, weights, _, m = _fresh("l2", (0.05, 0.05), 0.5)
    assert len(used) == 1 and m["async/dropped_by_drift"] == 0
    assert math.isclose(m["async/drift_fresh_mean"], 0.0025, rel_tol=1e-4)
    # the decoupled weight corrects the stale turn's tokens; turn 2's were sampled by prox itself
    e = math.exp(0.05)
    assert torch.allclose(weights[0][0], torch.tensor([1, 1, e, e, 1, 1, 1.0]))


@pytest.mark.parametrize("kind,kept", [("l2", False), ("l1", True)])
def test_the_stale_gate_honours_the_drift_kind(kind, kept):
    # gaps +0.2 and -0.2 on the stale turn: l2 = 0.04 > tau, l1 = |mean| = 0 <= tau
    _, used, _, _, m = _fresh(kind, (0.2, -0.2), 0.0)
    assert (len(used) == 1) is kept and m["async/dropped_by_drift"] == (0 if kept else 1)


def test_stored_groups_keep_the_logprobs_of_the_policy_that_sampled_them():
    """A gate-rejected stale group never reaches the buffer; a kept one is stored with the
    engine's (behaviour) logprobs on its stale turn, so replay measures its drift from the
    policy that sampled it; the update takes it with the trainer's (proximal) logprobs."""
    from types import SimpleNamespace

    from agentsearch.core.config import apply_overrides
    from agentsearch.replay import policy_drift
    from agentsearch.trainer.rollouts import fresh_groups
    from agentsearch.trainer.train_config import TrainConfig

    cfg = apply_overrides(TrainConfig, "tiny", ["group_size=2", "async.enabled=true",
                                                "async.max_staleness=1", "replay.tau=0.01"])
    versions = {"now": (1, 1), "far": (0, 1), "near": (0, 1)}
    eps = [_turned_episode(t, ENGINE, r, versions[t]) for t in versions for r in (1.0, 0.0)]
    stale_gap = {"now": 0.0, "far": 0.5, "near": 0.05}  # turn 1: the weights moved by this much
    gap = {t: torch.tensor([[0, 0, d, d, 0, 0.01, 0.01]] * 2) for t, d in stale_gap.items()}

    def trainer(groups):  # the trainer's forward: the engine's logprobs plus each group's gap
        return [g.gen_logprobs + gap[g.prompt_id] for g in groups]

    tok = SimpleNamespace(pad_token_id=0)
    stored, used, weights, _, _ = fresh_groups(cfg, eps, 5, 1, tok, trainer)
    assert [g.prompt_id for g in used] == ["now", "near"] and weights[0] is None
    assert [g.prompt_id for g in stored] == ["now", "near"]  # "far" failed the gate
    engine = torch.tensor([ENGINE] * 2)
    now, near = stored
    assert torch.allclose(now.gen_logprobs, engine + gap["now"])  # sampled by the trainer's weights
    stale = torch.tensor([[0, 0, 1, 1, 0, 0, 0]] * 2).bool()
    assert torch.allclose(near.gen_logprobs, torch.where(stale, engine, engine + gap["near"]))
    assert torch.allclose(used[1].gen_logprobs, engine + gap["near"])  # prox: ratio denominator
    # replay's drift of the stored group under the unchanged policy: its stale turn's, not 0
    prox = [engine + gap[g.prompt_id] for g in stored]
    assert float(policy_drift(prox[0], now.gen_logprobs, now.action_mask)) == 0.0
    assert math.isclose(float(policy_drift(prox[1], near.gen_logprobs, near.action_mask)),
                        4 * 0.05 ** 2 / 8, rel_tol=1e-4)
