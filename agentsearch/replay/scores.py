"""Headroom and Policy Drift: the two scores of Headroom-Drift Replay (arXiv 2609.03941).

Notation (docs/design.md, "Headroom-Drift Replay"): a group g is one prompt with n responses;
T(g) is the set of policy-generated token positions of all responses (``mask`` True);
response i's advantage A_i is copied to each of its tokens; p = exp(logprob) of the
sampled token under a policy.

- **Headroom** (``weighting="sign"``, the default): per token h = 1 - p if A_i > 0,
  p if A_i < 0, 0 if A_i = 0, i.e. how much probability the update can still move in the
  direction the advantage asks for. Headroom(g) = mean of h over T(g), *pooled* over all
  tokens of all responses (a long response weighs more; this is not a mean of
  per-response means). ``weighting="advantage"``: mean of |A_i| * h.
- **Policy Drift** (``kind="l2"``, the default): with d = logprob - gen_logprob on T(g),
  Drift = mean(d**2) over T(g), no square root. ``kind="l1"``: |mean(d)| (signed, so
  gaps of opposite sign cancel). The gate admits a group iff Drift <= tau.
- **Bound**: for sign weighting, |Headroom(g; pi) - Headroom(g; pi_gen)| <= sqrt(Drift_l2):
  |p - q| <= |log p - log q| for p, q in (0, 1], and mean|d| <= sqrt(mean d**2).

Positions where ``mask`` is False never influence either score, whatever their logprob
(even inf or nan). A group with no policy token (empty mask) scores 0 on both.

Single-group functions take ``[n, T]`` tensors; the ``*_batched`` ones take many groups
padded to ``[G, n, T]`` (pad with mask False; see ``pad_stack``) and return ``[G]``. The
single-group functions are the batched ones with G = 1, so the two cannot disagree.
Computation is in float32 (float64 inputs stay float64).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["headroom", "policy_drift", "headroom_batched", "policy_drift_batched",
           "token_headroom", "pad_stack", "per_priority", "HEADROOM_WEIGHTINGS", "DRIFT_KINDS"]

HEADROOM_WEIGHTINGS = ("sign", "advantage")
DRIFT_KINDS = ("l2", "l1")


def _float(x: Tensor) -> Tensor:
    return x.to(torch.promote_types(x.dtype, torch.float32))


def token_headroom(logprobs: Tensor, advantages: Tensor, weighting: str = "sign") -> Tensor:
    """Per-token headroom h (before masking): [..., T] from logprobs [..., T], advantages [...]."""
    if weighting not in HEADROOM_WEIGHTINGS:
        raise ValueError(f"weighting must be one of {HEADROOM_WEIGHTINGS}, got {weighting!r}")
    p = _float(logprobs).exp()                      # [..., T]
    a = _float(advantages).unsqueeze(-1)            # [..., 1]
    zero = torch.zeros((), dtype=p.dtype, device=p.device)
    h = torch.where(a > 0, 1.0 - p, torch.where(a < 0, p, zero))  # [..., T]
    if weighting == "advantage":
        h = h * a.abs()
    return h


def _masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of x over the True positions of mask, pooled over the last two dims:
    [G, n, T] -> [G]."""
    mask = mask.bool()
    total = torch.where(mask, x, torch.zeros((), dtype=x.dtype, device=x.device)).sum((-2, -1))
    count = mask.sum((-2, -1))                      # [G]
    return total / count.clamp(min=1).to(x.dtype)   # empty mask: 0 / 1 = 0


def headroom_batched(logprobs: Tensor, advantages: Tensor, mask: Tensor,
                     weighting: str = "sign") -> Tensor:
    """Headroom of G groups at once: logprobs [G, n, T], advantages [G, n], mask [G, n, T]
    -> [G]."""
    h = token_headroom(logprobs, advantages, weighting)   # [G, n, T]
    return _masked_mean(h, mask)                          # [G]


def policy_drift_batched(logprobs: Tensor, gen_logprobs: Tensor, mask: Tensor,
                         kind: str = "l2") -> Tensor:
    """Drift of G groups at once: logprobs, gen_logprobs, mask all [G, n, T] -> [G]."""
    if kind not in DRIFT_KINDS:
        raise ValueError(f"kind must be one of {DRIFT_KINDS}, got {kind!r}")
    # [G, n, T]; garbage off-mask is dropped below
    d = _float(logprobs) - _float(gen_logprobs)
    if kind == "l2":
        return _masked_mean(d * d, mask)                  # [G]
    return _masked_mean(d, mask).abs()                    # [G]


def headroom(logprobs: Tensor, advantages: Tensor, mask: Tensor,
             weighting: str = "sign") -> Tensor:
    """Headroom of one group (0-d tensor).

    Args:
        logprobs: [n, T] logprob of each sampled token under the policy being asked about
            (the current policy, or the stored generation logprobs for the reference value).
        advantages: [n] one advantage per response.
        mask: [n, T] True on policy tokens; everything else is ignored.
        weighting: ``"sign"`` (h in [0, 1]) or ``"advantage"`` (h scaled by |A_i|).
    """
    return headroom_batched(logprobs[None], advantages[None], mask[None], weighting)[0]


def policy_drift(logprobs: Tensor, gen_logprobs: Tensor, mask: Tensor, kind: str = "l2") -> Tensor:
    """Policy Drift of one group (0-d tensor): mean squared (``l2``) or |mean| (``l1``) logprob gap.

    Args:
        logprobs: [n, T] current-policy logprobs of the stored tokens.
        gen_logprobs: [n, T] generation-time logprobs of the same tokens.
        mask: [n, T] True on policy tokens; everything else is ignored.
        kind: ``"l2"`` (mean d**2, no square root) or ``"l1"`` (|mean d|).
    """
    return policy_drift_batched(logprobs[None], gen_logprobs[None], mask[None], kind)[0]


def per_priority(abs_advantage: Tensor, age: Tensor, alpha: float, age_tau: float,
                 eps: float = 1e-6) -> Tensor:
    """FreshPER's sampling weight of each stored group (arXiv 2604.16918): the prioritized-
    replay priority (mean |A| over the group's responses, + ``eps``) ** ``alpha``, times the
    freshness exp(-age / ``age_tau``); ``age_tau=inf`` is plain PER. Unnormalized.

    Args:
        abs_advantage: [G] each group's mean |advantage| over its responses.
        age: [G] steps since each group was generated.
    Returns:
        [G] weights, > 0 (a zero would never be drawn; underflow at great age is floored).
    """
    prio = (_float(abs_advantage) + eps) ** alpha                  # [G]
    if age_tau == float("inf"):
        return prio
    return prio * torch.exp(-_float(age) / age_tau).clamp_min(1e-30)   # [G]


def pad_stack(tensors: Sequence[Tensor], value: float | bool = 0) -> Tensor:
    """Stack tensors of shapes [n_g, T_g] (or [n_g]) into [G, max n, max T] (or [G, max n]).

    Pad masks with False so padded rows and columns drop out of every score.
    """
    if not tensors:
        raise ValueError("pad_stack needs at least one tensor")
    dims = tensors[0].dim()
    sizes = [max(t.shape[d] for t in tensors) for d in range(dims)]
    out = tensors[0].new_full((len(tensors), *sizes), value)
    for g, t in enumerate(tensors):
        out[(g, *[slice(0, s) for s in t.shape])] = t
    return out
