"""Headroom and Policy Drift: hand-worked numbers, masking, the bound, ReplayGroup storage."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agentsearch.replay import (
    ReplayGroup,
    headroom,
    headroom_batched,
    pad_stack,
    policy_drift,
    policy_drift_batched,
)

# Two responses, T = 3. Column 0 is the prompt (mask 0); response 1 has one policy token
# and then padding. p = probability of the sampled token.
P = torch.tensor([[0.5, 0.8, 0.6],
                  [0.9, 0.5, 0.2]])
MASK = torch.tensor([[0, 1, 1],
                     [0, 1, 0]], dtype=torch.bool)
ADV = torch.tensor([1.0, -0.5])


def test_headroom_sign_hand_worked():
    # A > 0 -> h = 1 - p: 1 - 0.8 = 0.2, 1 - 0.6 = 0.4; A < 0 -> h = p: 0.5.
    # pooled: (0.2 + 0.4 + 0.5) / 3 = 0.366667 (a mean of per-response means would be
    # (0.3 + 0.5) / 2 = 0.4, which is NOT the definition).
    h = headroom(P.log(), ADV, MASK)
    assert h.item() == pytest.approx(1.1 / 3, abs=1e-6)
    assert h.item() != pytest.approx(0.4, abs=1e-3)


def test_headroom_advantage_weighting_hand_worked():
    # |A| * h: 1.0 * 0.2, 1.0 * 0.4, 0.5 * 0.5 = 0.25 -> (0.2 + 0.4 + 0.25) / 3 = 0.283333
    h = headroom(P.log(), ADV, MASK, weighting="advantage")
    assert h.item() == pytest.approx(0.85 / 3, abs=1e-6)


def test_headroom_zero_advantage_counts_in_denominator():
    # A third response with A = 0 and one policy token (p = 0.1): h = 0 there, so the
    # pooled mean becomes (0.2 + 0.4 + 0.5 + 0) / 4 = 0.275.
    p = torch.cat([P, torch.tensor([[0.7, 0.1, 0.3]])])
    mask = torch.cat([MASK, torch.tensor([[False, True, False]])])
    adv = torch.tensor([1.0, -0.5, 0.0])
    assert headroom(p.log(), adv, mask).item() == pytest.approx(0.275, abs=1e-6)


def test_drift_l2_and_l1_hand_worked():
    gen = P.log()
    # d on policy tokens: +0.1, -0.2 (response 0), +0.3 (response 1); off-mask gaps are huge
    cur = gen + torch.tensor([[5.0, 0.1, -0.2],
                              [-7.0, 0.3, 9.0]])
    # l2: (0.01 + 0.04 + 0.09) / 3 = 0.046667, no square root
    assert policy_drift(cur, gen, MASK).item() == pytest.approx(0.14 / 3, abs=1e-6)
    # l1: |(0.1 - 0.2 + 0.3) / 3| = 0.066667
    assert policy_drift(cur, gen, MASK, kind="l1").item() == pytest.approx(0.2 / 3, abs=1e-6)
    # l1 is signed and cancels: d = +0.1, -0.1 -> l1 = 0, l2 = 0.01
    gen2 = torch.full((1, 2), -1.0)
    cur2 = gen2 + torch.tensor([[0.1, -0.1]])
    m2 = torch.ones(1, 2, dtype=torch.bool)
    assert policy_drift(cur2, gen2, m2, kind="l1").item() == pytest.approx(0.0, abs=1e-7)
    assert policy_drift(cur2, gen2, m2).item() == pytest.approx(0.01, abs=1e-7)


def test_empty_mask_scores_zero():
    empty = torch.zeros(2, 3, dtype=torch.bool)
    assert headroom(P.log(), ADV, empty).item() == 0.0
    assert headroom(P.log(), ADV, empty, weighting="advantage").item() == 0.0
    assert policy_drift(P.log(), P.log() - 1, empty).item() == 0.0
    assert policy_drift(P.log(), P.log() - 1, empty, kind="l1").item() == 0.0


def test_bad_variant_names_raise():
    with pytest.raises(ValueError, match="weighting"):
        headroom(P.log(), ADV, MASK, weighting="abs")
    with pytest.raises(ValueError, match="kind"):
        policy_drift(P.log(), P.log(), MASK, kind="kl")


def _random_groups(G: int, n: int, T: int, seed: int):
    """G random groups padded to [G, n, T]: ragged response lengths, prompt columns,
    padding rows."""
    g = torch.Generator().manual_seed(seed)
    gen = -torch.empty(G, n, T).exponential_(1.0, generator=g)               # logprobs <= 0
    prompt = torch.randint(0, T // 2, (G, 1, 1), generator=g)
    length = torch.randint(0, T + 1, (G, n, 1), generator=g)
    col = torch.arange(T)
    mask = (col >= prompt) & (col < length)                                   # [G, n, T]
    mask &= torch.rand(G, n, T, generator=g) > 0.2                            # env tokens inside
    scale = 10 ** torch.empty(G, 1, 1).uniform_(-3, 0.5, generator=g)         # tiny to large drift
    cur = (gen + scale * torch.randn(G, n, T, generator=g)).clamp(max=0.0)
    adv = torch.randn(G, n, generator=g) * (torch.rand(G, n, generator=g) > 0.1)  # some A = 0
    return cur, gen, mask, adv


def test_headroom_bound_on_random_groups():
    cur, gen, mask, adv = _random_groups(G=5000, n=8, T=48, seed=0)
    gap = (headroom_batched(cur, adv, mask) - headroom_batched(gen, adv, mask)).abs()  # [G]
    bound = policy_drift_batched(cur, gen, mask).sqrt()                                 # [G]
    assert bool((gap <= bound + 1e-6).all())
    # the bound is not vacuous on this data: some groups come close to it
    ratio = gap / bound.clamp(min=1e-12)
    assert ratio.max().item() > 0.5
    # with advantage weighting the same argument gives max|A| * sqrt(Drift)
    gap_a = (headroom_batched(cur, adv, mask, "advantage")
             - headroom_batched(gen, adv, mask, "advantage")).abs()
    assert bool((gap_a <= adv.abs().amax(1) * bound + 1e-6).all())


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 6), T=st.integers(1, 12), seed=st.integers(0, 2**31 - 1),
       scale=st.floats(1e-4, 5.0))
def test_headroom_bound_hypothesis(n, T, seed, scale):
    g = torch.Generator().manual_seed(seed)
    gen = -torch.empty(n, T).exponential_(1.0, generator=g)
    cur = (gen + scale * torch.randn(n, T, generator=g)).clamp(max=0.0)
    mask = torch.rand(n, T, generator=g) > 0.3
    adv = torch.randn(n, generator=g).round()          # -1, 0, +1 and friends
    gap = (headroom(cur, adv, mask) - headroom(gen, adv, mask)).abs().item()
    assert gap <= math.sqrt(policy_drift(cur, gen, mask).item()) + 1e-6


def test_off_mask_tokens_never_change_scores():
    cur, gen, mask, adv = _random_groups(G=300, n=4, T=16, seed=1)
    junk = torch.randn(cur.shape) * 50
    junk[0, ~mask[0]] = float("nan")
    junk[1, ~mask[1]] = float("inf")
    junk[2, ~mask[2]] = -float("inf")
    cur2 = torch.where(mask, cur, junk)
    gen2 = torch.where(mask, gen, -junk)
    for w in ("sign", "advantage"):
        assert torch.equal(headroom_batched(cur, adv, mask, w),
                           headroom_batched(cur2, adv, mask, w))
    for k in ("l2", "l1"):
        assert torch.equal(policy_drift_batched(cur, gen, mask, k),
                           policy_drift_batched(cur2, gen2, mask, k))


def test_batched_matches_single_group():
    cur, gen, mask, adv = _random_groups(G=20, n=5, T=10, seed=2)
    hb = headroom_batched(cur, adv, mask, "advantage")
    db = policy_drift_batched(cur, gen, mask, "l1")
    for i in range(20):
        assert (headroom(cur[i], adv[i], mask[i], "advantage").item()
                == pytest.approx(hb[i].item(), abs=1e-7))
        assert (policy_drift(cur[i], gen[i], mask[i], "l1").item()
                == pytest.approx(db[i].item(), abs=1e-7))


def test_pad_stack_pads_ragged_groups():
    a, b = torch.ones(2, 3), torch.full((3, 1), 2.0)
    out = pad_stack([a, b])
    assert out.shape == (2, 3, 3)
    assert out.sum().item() == 6 + 6
    assert pad_stack([a.bool(), b.bool()], False)[1, :, 1:].any().item() is False


def _group(**over):
    kw = dict(prompt_id="q1", token_ids=torch.arange(12).view(2, 6),
              action_mask=torch.tensor([[0, 0, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1]]),
              gen_logprobs=torch.full((2, 6), -0.5, dtype=torch.float64),
              advantages=[1.0, -1.0], rewards=[1.0, 0.0], answer_correct=None, born_step=3)
    kw.update(over)
    return ReplayGroup(**kw)


def test_replay_group_storage_is_compact_and_canonical():
    g = _group()
    assert g.token_ids.dtype == torch.int32 and g.action_mask.dtype == torch.bool
    assert g.gen_logprobs.dtype == torch.float32
    # gen_logprobs are 0 off the mask (convention), kept on it
    assert g.gen_logprobs[0].tolist() == [0.0, 0.0, -0.5, -0.5, 0.0, 0.0]
    assert g.n == 2 and g.num_policy_tokens == 6
    # 12 ids * 4 B + 12 mask * 1 B + 12 * 4 B + 2 * 4 + 2 * 4 = 124 B of tensor data
    assert 124 < g.nbytes() < 124 + 2000
    assert g.successes().tolist() == [True, False]
    with pytest.raises(ValueError, match="action_mask"):
        _group(action_mask=torch.ones(2, 5))
    with pytest.raises(ValueError, match="advantages"):
        _group(advantages=[1.0])


def test_replay_group_from_padded_removes_left_padding():
    # row 0 left-padded by 2, row 1 by 0; attention 0 = padding
    ids = torch.tensor([[0, 0, 5, 6, 7, 8], [5, 6, 9, 9, 9, 0]])
    attn = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0]])
    act = torch.tensor([[0, 0, 0, 0, 1, 1], [0, 0, 1, 1, 1, 0]])
    lp = torch.tensor([[0, 0, 0, 0, -1.0, -2.0], [0, 0, -3.0, -4.0, -5.0, 0]])
    g = ReplayGroup.from_padded(prompt_id=7, token_ids=ids, action_mask=act, gen_logprobs=lp,
                                advantages=torch.tensor([1.0, -1.0]),
                                rewards=torch.tensor([1.0, 0.0]),
                                born_step=2, attention_mask=attn)
    assert g.token_ids.tolist() == [[5, 6, 7, 8, 0], [5, 6, 9, 9, 9]]
    assert g.action_mask.int().tolist() == [[0, 0, 1, 1, 0], [0, 0, 1, 1, 1]]
    assert g.gen_logprobs.tolist() == [[0, 0, -1.0, -2.0, 0], [0, 0, -3.0, -4.0, -5.0]]
    # without attention_mask: trailing columns past every row's last policy token are cut
    g2 = ReplayGroup.from_padded(prompt_id=7, token_ids=ids[1:], action_mask=act[1:],
                                 gen_logprobs=lp[1:], advantages=[1.0], rewards=[1.0], born_step=2)
    assert g2.token_ids.shape == (1, 5)
