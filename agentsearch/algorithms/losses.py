"""Policy-gradient losses as small pure functions.

Shapes: ``B`` sequences in a micro-batch, ``T`` tokens each. ``mask`` is the action mask
(1 = token sampled by the policy; prompt, environment and padding tokens are 0), so
environment tokens never contribute to a loss. ``old_logprobs`` is the ratio
denominator: the generation-time (behaviour) logprobs; for replayed groups these are the
stored ones, so the importance ratio corrects for the policy having moved since.

Registry: every loss, built-in or not, is a ``LossSpec`` registered by name
(``register_loss``): the function, what it is averaged over under each ``agg``, whether it
takes ``dual_clip`` and an optional config check. ``TrainConfig.loss`` is any registered name;
``policy_loss``, ``loss_normalizer`` and ``policy_update`` look it up. A new loss is one call::

    @register_loss("mine", aggregation={"token": "token", "sequence": "sequence"})
    def my_loss(logprobs, old_logprobs, advantages, mask, *, clip_low, clip_high, dual_clip,
                agg, normalizer=None) -> LossStats: ...

Aggregation: ``aggregation(loss, agg)`` (the registered ``LossSpec.aggregation``) says what
each loss sums and what the sum is divided by (``loss_normalizer``):
- ``"token"``: sum over all masked tokens / number of masked tokens (DAPO's token-level
  loss; OpenRLHF's ``token_level_loss=True``): GRPO and CISPO with ``agg="token"``;
- ``"sequence"``: sum over sequences of each sequence's token mean / number of sequences
  with at least one masked token (the original GRPO): ``agg="sequence"``, and GSPO always
  (its ratio, clip and advantage are per sequence whatever ``agg`` says).
``normalizer`` overrides that denominator: ``loss_normalizer`` over the *whole step's* masks
when a step is split into micro-batches, so the micro-batch losses (and gradients) sum to the
full-batch ones. The KL term (``kl_penalty``) is aggregated the same way as the loss it is
added to: a token mean under ``"token"``, a mean of sequence means under ``"sequence"``.

References: GRPO (Shao et al. 2024, arXiv 2402.03300); DAPO clip-higher, dynamic sampling
and overlong shaping (Yu et al. 2025, arXiv 2503.14476); GSPO (Zheng et al. 2025,
arXiv 2507.18071); CISPO (MiniMax-M1, arXiv 2506.13585); k3 KL estimator (Schulman 2020).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import torch

from agentsearch.core.registry import Registry

__all__ = ["LossStats", "policy_loss", "grpo_loss", "gspo_loss", "cispo_loss", "kl_penalty",
           "entropy_bonus", "overlong_penalty", "sft_loss", "masked_mean", "aggregation",
           "loss_normalizer", "LossSpec", "register_loss", "unregister_loss", "loss_spec",
           "loss_names"]

Unit = Literal["token", "sequence"]
AGGS = ("token", "sequence")


@dataclass(frozen=True)
class LossSpec:
    """A registered loss: ``fn(logprobs, old_logprobs, advantages, mask, *, clip_low, clip_high,
    dual_clip, agg, normalizer) -> LossStats`` and its normaliser rule."""

    fn: Callable[..., LossStats]
    """Advantage-weighted: a row whose advantage is 0 adds 0 to the loss and its gradient (the
    update skips those rows' forward when no KL or entropy term is on)."""
    aggregation: Mapping[str, Unit]
    """agg -> unit: ``"token"`` divides the summed per-token loss by the policy-token count,
    ``"sequence"`` divides the sum of per-sequence token means by the sequence count."""
    dual_clip: bool = False
    """Whether the loss uses ``dual_clip`` (``TrainConfig`` refuses it otherwise)."""
    check: Callable[[Any], list[str]] | None = None
    """``check(train_config) -> problems`` (e.g. clip ranges); run by ``TrainConfig``."""
    unbounded_low: bool = False
    """Whether the loss takes ``clip_low=None``: no lower clip (CISPO; ``TrainConfig``
    refuses None for the others)."""


_LOSSES: Registry[LossSpec] = Registry("loss", "agentsearch.algorithms.losses.register_loss")


def register_loss(name: str, fn: Callable[..., LossStats] | None = None, *,
                  aggregation: Mapping[str, Unit] | None = None, dual_clip: bool = False,
                  check: Callable[[Any], list[str]] | None = None, unbounded_low: bool = False,
                  overwrite: bool = False, _builtin: bool = False):
    """Register a loss under ``name`` (then ``loss=name`` in a config uses it); returns ``fn``.

    A call (``register_loss("mine", fn, aggregation=...)``) or a decorator
    (``@register_loss("mine")``). ``aggregation`` maps each ``agg`` ("token", "sequence") to
    the unit the loss is averaged over (default: the unit ``agg`` names); ``fn`` must divide
    its sum by ``normalizer`` when one is given (``update.policy_update`` passes the whole
    step's count, so micro-batches add up). ``unbounded_low``: the loss accepts
    ``clip_low=None`` (no lower clip). Built-in names are reserved; a taken name needs
    ``overwrite=True``. ``unregister_loss(name)`` removes it.
    """
    agg_map = dict(aggregation) if aggregation is not None else {a: a for a in AGGS}
    if set(agg_map) != set(AGGS) or not set(agg_map.values()) <= set(AGGS):
        raise ValueError(f"register_loss({name!r}): aggregation must map each of {list(AGGS)} to "
                         f"one of {list(AGGS)}, got {agg_map}")

    return _LOSSES.register(name, fn, overwrite=overwrite, builtin=_builtin,
                            wrap=lambda f: LossSpec(f, agg_map, dual_clip=dual_clip, check=check,
                                                    unbounded_low=unbounded_low))


def unregister_loss(name: str) -> None:
    """Remove a registered (non-built-in) loss."""
    _LOSSES.remove(name)


def loss_names() -> list[str]:
    """Every registered loss name: the built-ins, then the user's."""
    return _LOSSES.names()


def loss_spec(kind: str) -> LossSpec:
    """The registered loss ``kind``; an unknown name is a ValueError listing the known ones."""
    return _LOSSES.get(kind)


class LossStats(NamedTuple):
    loss: torch.Tensor        # scalar, differentiable
    clip_frac: torch.Tensor   # share of masked tokens whose ratio was clipped
    approx_kl: torch.Tensor   # mean(old - new logprob) over masked tokens
    ratio_mean: torch.Tensor  # mean importance ratio over masked tokens


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``x`` where ``mask`` is set; 0 (not NaN) where nothing is set."""
    mask = mask.to(x.dtype)
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp(min=1)
    return (x * mask).sum(dim) / mask.sum(dim).clamp(min=1)


def aggregation(kind: str, agg: str) -> Unit:
    """The unit ``kind``'s loss is averaged over under ``agg`` (``LossSpec.aggregation``)."""
    table = loss_spec(kind).aggregation
    if agg not in table:
        raise ValueError(f"agg={agg!r}: use 'token' or 'sequence'")
    return table[agg]


def _count(mask: torch.Tensor, unit: Unit) -> torch.Tensor:
    """Masked tokens (``token``) or sequences with a masked token (``sequence``):
    [..., T] -> scalar."""
    m = mask.to(torch.float32)
    return m.sum() if unit == "token" else (m.sum(-1) > 0).to(torch.float32).sum()


def loss_normalizer(kind: str, agg: str, masks) -> float:
    """What ``kind``'s summed loss is divided by over a whole step (>= 1).

    ``masks``: the step's action masks, each [T] (one row) or [B, T]. Pass the result as
    ``normalizer`` to every micro-batch's loss, so the micro-batch losses add up to the loss
    of the full batch.
    """
    unit = aggregation(kind, agg)
    return max(sum(float(_count(m, unit)) for m in masks), 1.0)


def _aggregate(per_token: torch.Tensor, mask: torch.Tensor, unit: Unit, normalizer: float | None):
    """Sum of ``per_token`` [B, T] in ``unit``s, divided by ``normalizer`` (default: the unit
    count)."""
    denom = normalizer if normalizer is not None else _count(mask, unit).clamp(min=1)
    mask = mask.to(per_token.dtype)
    if unit == "token":
        return (per_token * mask).sum() / denom
    seq = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)  # [B]; 0 for empty rows
    return seq.sum() / denom


def _stats(loss, ratio, clipped, logprobs, old_logprobs, mask) -> LossStats:
    with torch.no_grad():
        return LossStats(loss, masked_mean(clipped.float(), mask),
                         masked_mean(old_logprobs - logprobs, mask), masked_mean(ratio, mask))


def grpo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
              mask: torch.Tensor, *, clip_low: float = 0.2, clip_high: float = 0.2,
              dual_clip: float | None = None, agg: str = "token",
              normalizer: float | None = None) -> LossStats:
    """Token-level clipped surrogate (PPO/GRPO); ``clip_high > clip_low`` is DAPO's clip-higher.

    logprobs, old_logprobs, mask: [B, T]; advantages: [B] (one per response) or [B, T].
    per token: -min(r·A, clip(r, 1-clip_low, 1+clip_high)·A), r = exp(logp - old_logp);
    with ``dual_clip`` c > 1, negative-advantage tokens are bounded below by c·A.
    """
    adv = advantages[:, None] if advantages.dim() == 1 else advantages  # [B, 1] or [B, T]
    log_ratio = (logprobs - old_logprobs).clamp(-20.0, 20.0)  # [B, T]
    ratio = log_ratio.exp()
    surr1 = ratio * adv
    surr2 = ratio.clamp(1 - clip_low, 1 + clip_high) * adv
    obj = torch.min(surr1, surr2)  # [B, T]
    if dual_clip is not None:
        if dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
        obj = torch.where(adv < 0, torch.max(obj, dual_clip * adv), obj)
    loss = _aggregate(-obj, mask, aggregation("grpo", agg), normalizer)
    return _stats(loss, ratio, surr2 < surr1, logprobs, old_logprobs, mask)


def gspo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
              mask: torch.Tensor, *, clip_low: float = 3e-4, clip_high: float = 4e-4,
              dual_clip: None = None, agg: str = "sequence",
              normalizer: float | None = None) -> LossStats:
    """GSPO: one importance ratio per sequence, s = exp(mean_t (logp - old_logp)), clipped
    at sequence level and aggregated per sequence whatever ``agg`` says (the paper's clip
    range is ~3e-4/4e-4). ``dual_clip`` is not part of GSPO and must be None.

    logprobs, old_logprobs, mask: [B, T]; advantages: [B].
    """
    _no_dual_clip("gspo", dual_clip)
    adv = advantages if advantages.dim() == 1 else advantages[:, 0]  # [B]
    m = mask.to(logprobs.dtype)
    seq_log_ratio = ((logprobs - old_logprobs) * m).sum(-1) / m.sum(-1).clamp(min=1)  # [B]
    s = seq_log_ratio.clamp(-20.0, 20.0).exp()[:, None] * m  # [B, T], same value per token
    surr1 = s * adv[:, None]
    surr2 = s.clamp(1 - clip_low, 1 + clip_high) * adv[:, None]
    loss = _aggregate(-torch.min(surr1, surr2), mask, aggregation("gspo", agg), normalizer)
    return _stats(loss, s, surr2 < surr1, logprobs, old_logprobs, mask)


def cispo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
               mask: torch.Tensor, *, clip_low: float | None = None, clip_high: float = 0.28,
               dual_clip: None = None, agg: str = "token",
               normalizer: float | None = None) -> LossStats:
    """CISPO: clip the importance weight, not the update; every token keeps a gradient.

    per token: -sg(clip(r, 1-clip_low, 1+clip_high)) · A · logp  (``clip_low=None``: no lower
    bound, as in MiniMax-M1). ``dual_clip`` bounds a PPO surrogate CISPO does not have: None.
    logprobs, old_logprobs, mask: [B, T]; advantages: [B] or [B, T].
    """
    _no_dual_clip("cispo", dual_clip)
    adv = advantages[:, None] if advantages.dim() == 1 else advantages
    ratio = (logprobs - old_logprobs).clamp(-20.0, 20.0).exp()  # [B, T]
    lo = 0.0 if clip_low is None else 1 - clip_low
    w = ratio.clamp(lo, 1 + clip_high).detach()
    loss = _aggregate(-w * adv * logprobs, mask, aggregation("cispo", agg), normalizer)
    return _stats(loss, ratio, (ratio > 1 + clip_high) | (ratio < lo), logprobs, old_logprobs, mask)


def _no_dual_clip(kind: str, dual_clip) -> None:
    if dual_clip is not None:
        raise ValueError(f"dual_clip={dual_clip} is used only by loss=grpo, not {kind}: unset it")


def _gspo_check(cfg) -> list[str]:
    if max(cfg.clip_low, cfg.clip_high) > 0.01:
        return [f"loss=gspo with clip_low={cfg.clip_low}, clip_high={cfg.clip_high}: GSPO "
                "clips the sequence-level ratio, whose range is ~3e-4 (a clip above 0.01 "
                "clips almost nothing); set clip_low=3e-4 clip_high=4e-4"]
    return []


register_loss("grpo", grpo_loss, dual_clip=True, _builtin=True)
register_loss("gspo", gspo_loss, aggregation={"token": "sequence", "sequence": "sequence"},
              check=_gspo_check, _builtin=True)  # sequence-level by definition
# clip_low=None: MiniMax-M1's form
register_loss("cispo", cispo_loss, unbounded_low=True, _builtin=True)


def policy_loss(kind: str, *args, **kwargs) -> LossStats:
    """Dispatch by registered name; see ``grpo_loss``, ``gspo_loss``, ``cispo_loss``."""
    return loss_spec(kind).fn(*args, **kwargs)


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor,
               kind: Literal["k1", "k2", "k3"] = "k3", *, unit: Unit = "token",
               normalizer: float | None = None) -> torch.Tensor:
    """KL(pi || ref) estimate over masked tokens. [B, T] -> scalar.

    Per token: k1 = logp - ref; k2 = (logp - ref)^2 / 2; k3 = exp(ref - logp) - (ref - logp) - 1
    (unbiased, always >= 0; the GRPO paper's choice). Aggregated like a loss in ``unit``
    (pass ``aggregation(loss, agg)``, the policy loss's unit): the token mean (``"token"``)
    or the mean of sequence means (``"sequence"``); ``normalizer`` replaces the count divided
    by (the whole step's, for micro-batches: ``loss_normalizer``).
    """
    d = logprobs - ref_logprobs  # [B, T]
    if kind == "k1":
        per = d
    elif kind == "k2":
        per = 0.5 * d.pow(2)
    elif kind == "k3":
        per = torch.expm1(-d.clamp(-20, 20)) + d
    else:
        raise ValueError(f"kl kind {kind!r}: use k1, k2 or k3")
    return _aggregate(per, mask, unit, normalizer)


def entropy_bonus(entropy: torch.Tensor, mask: torch.Tensor, *, unit: Unit = "token",
                  normalizer: float | None = None) -> torch.Tensor:
    """The policy's entropy over masked tokens, aggregated like the loss: [B, T] -> scalar.
    The loss subtracts ``entropy_coef`` times it (verl's ``entropy_coeff``, OpenRLHF's
    ``entropy_coef``): a bonus for keeping the distribution spread."""
    return _aggregate(entropy, mask, unit, normalizer)


def overlong_penalty(lengths: torch.Tensor, max_len: int, buffer: int,
                     factor: float = 1.0) -> torch.Tensor:
    """DAPO's soft overlong punishment, added to the reward. lengths: [B] -> [B] (<= 0).

    0 up to ``max_len - buffer``, then falls linearly to ``-factor`` at ``max_len`` and stays.
    """
    if buffer <= 0:
        return torch.where(lengths > max_len, -factor, 0.0).to(torch.float32)
    over = (lengths.to(torch.float32) - (max_len - buffer)).clamp(min=0)
    return -(over / buffer).clamp(max=1.0) * factor


def sft_loss(logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Negative log-likelihood of the masked tokens (the warm start trains policy turns only)."""
    return -masked_mean(logprobs, mask)
