"""Losses and advantages against hand-worked numbers, and against OpenRLHF's own PolicyLoss."""

import math

import pytest
import torch

from agentsearch.algorithms.advantages import group_advantages, zero_variance_mask
from agentsearch.algorithms.losses import (
    aggregation,
    cispo_loss,
    grpo_loss,
    gspo_loss,
    kl_penalty,
    loss_normalizer,
    overlong_penalty,
    policy_loss,
    sft_loss,
)

L = math.log


def _t(rows):
    return torch.tensor(rows, dtype=torch.float32)


def test_grpo_clip_higher_positive_advantage():
    # ratios r = [0.5/0.25, 0.25/0.5] = [2, 0.5]; A = +1; clip [0.8, 1.28]
    # token 1: min(2, 1.28) = 1.28 (clipped); token 2: min(0.5, 0.8) = 0.5
    # loss = -(1.28 + 0.5) / 2 = -0.89 ; clip_frac = 1/2 ; approx_kl = mean(old - new) = 0
    lp, old = _t([[L(0.5), L(0.25)]]), _t([[L(0.25), L(0.5)]])
    s = grpo_loss(lp, old, _t([1.0]), torch.ones(1, 2), clip_low=0.2, clip_high=0.28)
    assert s.loss.item() == pytest.approx(-0.89, abs=1e-6)
    assert s.clip_frac.item() == pytest.approx(0.5)
    assert s.approx_kl.item() == pytest.approx(0.0, abs=1e-7)
    assert s.ratio_mean.item() == pytest.approx(1.25)


def test_grpo_negative_advantage_and_dual_clip():
    # A = -1, r = [2, 0.5]: token 1 min(-2, -1.28) = -2; token 2 min(-0.5, -0.8) = -0.8
    lp, old = _t([[L(0.5), L(0.25)]]), _t([[L(0.25), L(0.5)]])
    s = grpo_loss(lp, old, _t([-1.0]), torch.ones(1, 2), clip_low=0.2, clip_high=0.28)
    assert s.loss.item() == pytest.approx((2 + 0.8) / 2, abs=1e-6)
    # r = 4, A = -1: min(-4, -1.28) = -4, dual clip c=3 bounds it at -3 -> loss 3
    s = grpo_loss(_t([[L(0.8)]]), _t([[L(0.2)]]), _t([-1.0]), torch.ones(1, 1), dual_clip=3.0)
    assert s.loss.item() == pytest.approx(3.0, abs=1e-5)


def test_masked_tokens_never_count():
    lp, old = _t([[L(0.5), L(0.9)]]), _t([[L(0.25), L(0.1)]])
    m = torch.tensor([[1.0, 0.0]])
    a = grpo_loss(lp, old, _t([1.0]), m)
    b = grpo_loss(_t([[L(0.5), L(0.01)]]), old, _t([1.0]), m)
    assert a.loss.item() == b.loss.item() == pytest.approx(-1.2, abs=1e-6)  # default clip 0.2


def test_token_vs_sequence_aggregation():
    # seq 1: 1 token, per-token loss -1 ; seq 2: 3 tokens, per-token loss -2 (r = 1)
    lp = torch.zeros(2, 3)
    adv = _t([1.0, 2.0])
    m = torch.tensor([[1.0, 0, 0], [1, 1, 1]])
    tok = grpo_loss(lp, lp, adv, m, agg="token").loss.item()
    seq = grpo_loss(lp, lp, adv, m, agg="sequence").loss.item()
    assert tok == pytest.approx(-(1 + 2 * 3) / 4)  # -1.75
    assert seq == pytest.approx(-(1 + 2) / 2)  # -1.5
    assert grpo_loss(lp, lp, adv, m, normalizer=8.0).loss.item() == pytest.approx(-7 / 8)


def test_gspo_sequence_ratio():
    # log ratios [log 2, log 0.5] average to 0 -> s = 1 -> loss = -A
    lp, old = _t([[L(0.5), L(0.25)]]), _t([[L(0.25), L(0.5)]])
    s = gspo_loss(lp, old, _t([1.5]), torch.ones(1, 2))
    assert s.loss.item() == pytest.approx(-1.5, abs=1e-6)
    # s = exp(mean(log 2, log 2)) = 2 > 1 + 4e-4 -> clipped for A > 0
    s = gspo_loss(_t([[L(0.5), L(0.5)]]), _t([[L(0.25), L(0.25)]]), _t([1.0]), torch.ones(1, 2))
    assert s.loss.item() == pytest.approx(-(1 + 4e-4), abs=1e-6)
    assert s.clip_frac.item() == 1.0


def test_gspo_is_per_sequence_whatever_agg_says_and_refuses_dual_clip():
    # two on-policy sequences (s = 1): A = 1 on 1 token, A = -0.5 on 3 tokens
    lp, adv = torch.zeros(2, 3), _t([1.0, -0.5])
    m = torch.tensor([[1.0, 0, 0], [1, 1, 1]])
    for agg in ("token", "sequence"):
        assert gspo_loss(lp, lp, adv, m, agg=agg).loss.item() == pytest.approx(-(1 - 0.5) / 2)
        assert policy_loss("gspo", lp, lp, adv, m, agg=agg).loss.item() == pytest.approx(-0.25)
    for kind in ("gspo", "cispo"):
        with pytest.raises(ValueError, match="used only by loss=grpo"):
            policy_loss(kind, lp, lp, adv, m, dual_clip=3.0)


def test_sequence_aggregation_skips_empty_rows_and_splits_exactly():
    # rows: A=1 on 1 token, an empty row, A=2 on 2 tokens; per-sequence means -1 and -2
    lp, adv = torch.zeros(3, 2), _t([1.0, 5.0, 2.0])
    m = torch.tensor([[1.0, 0], [0, 0], [1, 1]])
    full = grpo_loss(lp, lp, adv, m, agg="sequence").loss.item()
    assert full == pytest.approx(-(1 + 2) / 2)  # 2 sequences with a policy token
    n = loss_normalizer("grpo", "sequence", [m])
    parts = sum(grpo_loss(lp[i:i + 1], lp[i:i + 1], adv[i:i + 1], m[i:i + 1], agg="sequence",
                          normalizer=n).loss.item() for i in range(3))
    assert parts == pytest.approx(full)
    assert aggregation("gspo", "token") == "sequence" and aggregation("cispo", "token") == "token"


def test_cispo_keeps_gradient_of_clipped_tokens():
    # r = [2, 0.5] -> w = sg(clip(r, max 1.28)) = [1.28, 0.5]; A = 1
    # loss = -(1.28*log 0.5 + 0.5*log 0.25)/2 = 0.790188 ; dloss/dlogp = -w*A/2 = [-0.64, -0.25]
    lp = _t([[L(0.5), L(0.25)]]).requires_grad_()
    s = cispo_loss(lp, _t([[L(0.25), L(0.5)]]), _t([1.0]), torch.ones(1, 2), clip_high=0.28)
    assert s.loss.item() == pytest.approx(-(1.28 * L(0.5) + 0.5 * L(0.25)) / 2, abs=1e-6)
    s.loss.backward()
    assert torch.allclose(lp.grad, _t([[-0.64, -0.25]]), atol=1e-6)
    # the PPO surrogate gives the clipped token no gradient at all
    lp2 = _t([[L(0.5), L(0.25)]]).requires_grad_()
    grpo_loss(lp2, _t([[L(0.25), L(0.5)]]), _t([1.0]), torch.ones(1, 2)).loss.backward()
    assert lp2.grad[0, 0].item() == 0.0


def test_kl_estimators_and_sft():
    lp, ref = _t([[L(0.5)]]), _t([[L(0.25)]])  # d = log 2
    m = torch.ones(1, 1)
    assert kl_penalty(lp, ref, m, "k1").item() == pytest.approx(L(2))
    assert kl_penalty(lp, ref, m, "k2").item() == pytest.approx(0.5 * L(2) ** 2)
    assert kl_penalty(lp, ref, m, "k3").item() == pytest.approx(0.5 - 1 + L(2))  # e^-d - 1 + d
    assert kl_penalty(lp, lp, m).item() == 0.0
    assert sft_loss(_t([[L(0.5), 0.0]]), torch.tensor([[1.0, 0.0]])).item() == pytest.approx(L(2))


def test_overlong_penalty():
    lengths = torch.tensor([10, 90, 95, 100, 120])
    # max 100, buffer 10: 0 up to 90, linear to -1 at 100, -1 beyond
    assert overlong_penalty(lengths, 100, 10).tolist() == pytest.approx([0, 0, -0.5, -1, -1])


def test_group_advantages_hand_worked():
    r = _t([[1.0, 0.0, 0.0, 1.0], [0.5, 0.5, 0.5, 0.5]])
    a = group_advantages(r)
    # group 1: mean 0.5, unbiased std sqrt(1/3) = 0.57735 -> +-0.866025
    assert a[0].tolist() == pytest.approx([0.866025, -0.866025, -0.866025, 0.866025], abs=1e-5)
    assert a[1].tolist() == [0, 0, 0, 0]
    assert group_advantages(r, scale="none")[0].tolist() == [0.5, -0.5, -0.5, 0.5]
    assert zero_variance_mask(r).tolist() == [False, True]


def test_policy_loss_dispatch():
    with pytest.raises(ValueError, match="unknown loss"):
        policy_loss("ppo2", torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1), torch.ones(1, 1))


@pytest.mark.openrlhf
@pytest.mark.parametrize("kind", ["grpo", "gspo"])
def test_matches_openrlhf_policy_loss(kind):
    from agentsearch.engines.openrlhf.compat import import_openrlhf

    import_openrlhf()
    from openrlhf.models.loss import PolicyLoss

    g = torch.Generator().manual_seed(0)
    B, T = 6, 11
    lp = -torch.rand(B, T, generator=g) * 3
    old = lp + 0.3 * torch.randn(B, T, generator=g)
    adv = torch.randn(B, generator=g)
    mask = (torch.rand(B, T, generator=g) > 0.25).float()
    mask[:, 0] = 1
    if kind == "grpo":
        ref = PolicyLoss(clip_eps_low=0.2, clip_eps_high=0.28, policy_loss_type="ppo")
        ours = grpo_loss(lp, old, adv, mask, clip_low=0.2, clip_high=0.28, agg="token")
    else:
        ref = PolicyLoss(clip_eps_low=3e-4, clip_eps_high=4e-4, policy_loss_type="gspo")
        ours = gspo_loss(lp, old, adv, mask, clip_low=3e-4, clip_high=4e-4)
    loss, clip_ratio, ppo_kl, _, _ = ref(lp, old, adv[:, None].expand(B, T), action_mask=mask)
    assert ours.loss.item() == pytest.approx(loss.item(), abs=1e-6)
    assert ours.clip_frac.item() == pytest.approx(clip_ratio.item(), abs=1e-6)
    assert ours.approx_kl.item() == pytest.approx(ppo_kl.item(), abs=1e-6)
