"""The update on a step's groups (fresh + replayed): one optimizer step, or several.

By default the step's rows make one optimizer step. ``update_minibatch_size`` cuts them, in
order, into mini-batches of that many rows, one optimizer step each, and
``update_epochs`` repeats the passes (PPO's reuse of a costly batch; Search-R1/verl's
``ppo_mini_batch_size`` and ``ppo_epochs``); the LR schedule steps once per call either way.
Within an optimizer step, rows are sorted by length (less padding) and cut into
micro-batches of ``micro_batch_size`` rows, or, with ``shared_prefix``, forwarded as one
prefix tree (``models.prefix_tree``: shared leading tokens once, the same gradient). Each
micro-batch's loss is normalised by the *whole step's* token (or sequence) count
(``losses.loss_normalizer``: which one depends on the loss and ``agg``), and so is the KL
term, aggregated in the loss's own unit (a token mean, or a mean of sequence means), so
accumulating the micro-batch gradients gives exactly the gradient of the full-batch loss; an
entropy bonus (``entropy_coef``) is aggregated the same way. A non-finite loss or gradient
skips the optimizer step (weights unchanged), and the skip is logged and
counted. A step without signal (every row's advantage is 0 and no KL term) is skipped
before any forward pass: Adam's momentum would otherwise move the weights on nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from agentsearch.algorithms.losses import (
    aggregation,
    entropy_bonus,
    kl_penalty,
    loss_normalizer,
    loss_spec,
)
from agentsearch.models.logprobs import batch_pixels, token_logprobs
from agentsearch.models.prefix_tree import supports_tree, tree_backward
from agentsearch.replay import ReplayGroup

__all__ = ["Row", "rows_of", "pad_rows", "policy_update", "minibatches"]


@dataclass
class Row:
    ids: torch.Tensor       # [T] long
    mask: torch.Tensor      # [T] bool
    old_lp: torch.Tensor    # [T] float32 (ratio denominator)
    adv: float
    replayed: bool
    pixel_values: torch.Tensor | None = None  # [k, 3, H, W]: the row's images (VLM), or None
    # [T] decoupled importance weight (a stale fresh group), or None
    is_w: torch.Tensor | None = None
    # the ratio denominator is this update's own forward, detached (a group not rescored:
    # ``TrainConfig.rescore_groups``); ``old_lp`` is a view of the group's ``gen_logprobs``
    # and receives it, so the group is stored with the trainer's logprobs
    own_ratio: bool = False


def rows_of(groups: Sequence[ReplayGroup], replayed: bool = False,
            is_weights: Sequence[torch.Tensor | None] | None = None,
            own_ratio: Sequence[bool] | None = None) -> list[Row]:
    """Each response of each group as a row, cut after its last policy token. ``is_weights``
    (per group, [n, T] or None; ``algorithms.staleness``) scale the rows' advantages per token;
    ``own_ratio`` (per group) marks groups whose ratio denominator is the update's forward."""
    rows = []
    for gi, g in enumerate(groups):
        w = is_weights[gi] if is_weights is not None else None
        # (a group whose advantages are all 0 is never trained nor stored: no forward owed)
        own = bool(own_ratio[gi]) and bool(g.advantages.any()) if own_ratio is not None else False
        for i in range(g.n):
            m = g.action_mask[i]
            last = int(m.nonzero().max()) + 1 if m.any() else 0
            if last == 0:
                continue  # nothing the policy generated: nothing to train on
            rows.append(Row(g.token_ids[i, :last].long(), m[:last], g.gen_logprobs[i, :last],
                            float(g.advantages[i]), replayed,
                            g.pixel_values[i] if g.pixel_values is not None else None,
                            w[i, :last] if w is not None else None, own))
    return rows


def pad_rows(rows: Sequence[Row], device) -> dict[str, torch.Tensor]:
    """Right-padded tensors of a micro-batch: ids/attn/mask/old [B, T], adv [B] (or [B, T]
    when a row carries importance weights)."""
    B, T = len(rows), max(len(r.ids) for r in rows)
    ids = torch.zeros(B, T, dtype=torch.long)
    attn = torch.zeros(B, T, dtype=torch.long)
    mask = torch.zeros(B, T, dtype=torch.bool)
    old = torch.zeros(B, T, dtype=torch.float32)
    for b, r in enumerate(rows):
        n = len(r.ids)
        ids[b, :n], attn[b, :n], mask[b, :n], old[b, :n] = r.ids, 1, r.mask, r.old_lp
    adv = torch.tensor([r.adv for r in rows], dtype=torch.float32)
    own = torch.tensor([r.own_ratio for r in rows], dtype=torch.bool)  # [B]
    out = dict(ids=ids, attn=attn, mask=mask, old=old, adv=adv, own=own)
    # per-token advantages: adv x importance weight [B, T]
    if any(r.is_w is not None for r in rows):
        isw = torch.ones(B, T, dtype=torch.float32)
        for b, r in enumerate(rows):
            if r.is_w is not None:
                isw[b, :len(r.ids)] = r.is_w
        out["adv"] = adv[:, None] * isw
    return {k: v.to(device) for k, v in out.items()}


def carries_gradient(rows: Sequence[Row], kl_on: bool) -> bool:
    """Whether a step on ``rows`` has a gradient: a nonzero advantage on a row with policy
    tokens, or a KL or entropy term (``kl_on``: they pull whatever the advantages). Not a
    group's signal (``advantages.has_signal``): rows mix fresh and replayed groups and carry
    per-token weights and terms that pull regardless."""
    return kl_on or any(r.adv != 0.0 and bool(r.mask.any()) for r in rows)


def minibatches(rows: Sequence[Row], size: int | None) -> list[list[Row]]:
    """``rows`` in order, cut into mini-batches of ``size`` (None or >= len: one)."""
    rows = list(rows)
    if not size or size >= len(rows):
        return [rows]
    return [rows[i:i + size] for i in range(0, len(rows), size)]


def policy_update(model, optimizer, scheduler, rows: Sequence[Row], cfg, *,
                  ref_logprobs_fn: Callable | None = None) -> dict[str, float]:
    """The update on ``rows``: ``update_epochs`` passes of ``update_minibatch_size``-row
    mini-batches, one optimizer step each (by default one step on all rows).

    ``cfg`` is a ``TrainConfig`` (loss: any name registered with ``losses.register_loss``;
    clips, aggregation, micro_batch_size, kl, entropy, grad_clip, the mini-batching).
    ``ref_logprobs_fn(ids, attn, mask) -> [B, T]`` gives reference logprobs for the KL term.
    Returns ``train/*`` metrics (means over the optimizer steps; ``train/grad_norm`` the
    last; ``train/optimizer_steps``); ``train/skipped`` is 1 when no optimizer step was
    taken, and ``train/skipped_no_signal`` is 1 when that was for lack of signal (no rows,
    or every advantage 0 without a KL term): then neither the optimizer nor the scheduler
    steps.
    """
    kl_on = cfg.kl_coef > 0 and ref_logprobs_fn is not None
    # terms with a gradient whatever the advantages
    pull = kl_on or float(getattr(cfg, "entropy_coef", 0.0)) > 0
    if not rows:
        return {"train/skipped": 1.0, "train/empty_batch": 1.0, "train/skipped_no_signal": 1.0}
    if not carries_gradient(rows, pull):
        return {"train/skipped": 1.0, "train/skipped_no_signal": 1.0, "train/nonfinite": 0.0,
                "train/rows": float(len(rows))}
    steps = [_optimizer_step(model, optimizer, mb, cfg, kl_on, ref_logprobs_fn)
             for _ in range(max(1, int(getattr(cfg, "update_epochs", 1))))
             for mb in minibatches(rows, getattr(cfg, "update_minibatch_size", None))
             if carries_gradient(mb, pull)]
    taken = [s for s in steps if not s["train/skipped"]]
    if not taken:  # every step non-finite: weights unchanged
        return {**steps[-1], "train/rows": float(len(rows)), "train/optimizer_steps": 0.0}
    if scheduler is not None:
        scheduler.step()
    out = {k: sum(s[k] for s in taken) / len(taken) for k in taken[0] if k.startswith("train/")}
    out.update({"train/skipped": 0.0, "train/nonfinite": float(len(taken) < len(steps)),
                "train/skipped_no_signal": 0.0, "train/grad_norm": taken[-1]["train/grad_norm"],
                "train/optimizer_steps": float(len(taken)), "train/rows": float(len(rows)),
                "train/tokens": float(sum(int(r.mask.sum()) for r in rows)),
                "train/replayed_rows": float(sum(r.replayed for r in rows)),
                # what the update's forwards and backwards actually processed (zero-advantage
                # rows take none): summed over its optimizer steps
                **{k: sum(s[k] for s in taken) for k in
                   ("train/rows_forwarded", "train/tokens_forwarded", "train/positions_forwarded")},
                "train/lr": optimizer.param_groups[0]["lr"]})
    return out


def _optimizer_step(model, optimizer, rows: Sequence[Row], cfg, kl_on: bool,
                    ref_logprobs_fn: Callable | None) -> dict[str, float]:
    """Accumulate the loss of ``rows`` over micro-batches (or one prefix tree:
    ``cfg.shared_prefix``) and take one optimizer step (the scheduler is the caller's)."""
    device = next(model.parameters()).device
    model.train()
    optimizer.zero_grad(set_to_none=True)
    entropy_coef = float(getattr(cfg, "entropy_coef", 0.0))
    normalizer = loss_normalizer(cfg.loss, cfg.agg, [r.mask for r in rows])
    if not kl_on and entropy_coef <= 0:
        # a zero-advantage row adds 0 to a policy-gradient loss and its gradient (the
        # registered losses are advantage-weighted): no forward for it, unless it is its
        # group's ratio denominator. The normaliser above still counts it: the same step.
        rows = [r for r in rows if r.adv != 0.0 or r.own_ratio]
    rows = sorted(rows, key=lambda r: len(r.ids))
    acc = _Accumulator(cfg, kl_on, normalizer, float(sum(int(r.mask.sum()) for r in rows)))
    tree = (getattr(cfg, "shared_prefix", False) and entropy_coef <= 0 and supports_tree(model)
            and all(r.pixel_values is None for r in rows))
    forwarded = float(sum(len(r.ids) for r in rows))
    if tree:
        mbs = [pad_rows([r], device) for r in rows]
        # before any policy forward: the reference may be the same model, another adapter
        refs = [_ref(ref_logprobs_fn, mb) if kl_on else None for mb in mbs]

        def row_loss(i: int, lp: torch.Tensor) -> torch.Tensor:
            loss = acc.add([rows[i]], mbs[i], lp[None], None, refs[i])  # lp [T] -> [1, T]
            if loss is None:
                raise _NonFinite
            return loss

        try:
            forwarded = float(tree_backward(model, [r.ids for r in rows],
                                            [r.mask for r in rows], row_loss,
                                            temperature=cfg.generation.temperature))
        except _NonFinite:
            acc.finite = False
    else:
        for s in range(0, len(rows), cfg.micro_batch_size):
            mb_rows = rows[s:s + cfg.micro_batch_size]
            mb = pad_rows(mb_rows, device)
            pixels = batch_pixels(model, mb["ids"], [r.pixel_values for r in mb_rows], device)
            ref = _ref(ref_logprobs_fn, mb) if kl_on else None  # before the policy's forward
            lp = token_logprobs(model, mb["ids"], mb["attn"],
                                temperature=cfg.generation.temperature, target_mask=mb["mask"],
                                pixel_values=pixels,
                                with_entropy=entropy_coef > 0)  # [B, T] (and entropy [B, T])
            lp, ent = lp if entropy_coef > 0 else (lp, None)
            loss = acc.add(mb_rows, mb, lp, ent, ref)
            if loss is None:
                break
            loss.backward()
    params = [p for p in model.parameters() if p.requires_grad]
    finite = acc.finite
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)) if finite else math.nan
    if not finite or not math.isfinite(grad_norm):
        optimizer.zero_grad(set_to_none=True)
        return {"train/skipped": 1.0, "train/nonfinite": 1.0, "train/grad_norm": grad_norm,
                "train/rows": float(len(rows)), "train/skipped_no_signal": 0.0}
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    sums = acc.sums
    if entropy_coef <= 0:
        del sums["entropy"]
    return {**{f"train/{k}": v for k, v in sums.items()}, "train/skipped": 0.0,
            "train/grad_norm": grad_norm, "train/rows_forwarded": float(len(rows)),
            "train/tokens_forwarded": acc.n_tokens, "train/positions_forwarded": forwarded}


class _NonFinite(Exception):
    """A row's loss was not finite: the prefix tree's pass stops there."""


def _ref(ref_logprobs_fn: Callable, mb: dict[str, torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        return ref_logprobs_fn(mb["ids"], mb["attn"], mb["mask"])  # [B, T]


class _Accumulator:
    """One optimizer step's loss terms, micro-batch by micro-batch: each micro-batch's loss
    (policy loss, KL, entropy bonus) normalised by the whole step's count, and the step's
    statistics (sums; the ratio statistics weighted by each micro-batch's share of tokens)."""

    def __init__(self, cfg, kl_on: bool, normalizer, n_tokens: float):
        self.cfg, self.kl_on, self.normalizer, self.n_tokens = cfg, kl_on, normalizer, n_tokens
        self.spec = loss_spec(cfg.loss)  # the registered loss: its function and normaliser rule
        self.unit = aggregation(cfg.loss, cfg.agg)  # KL and entropy aggregate like the loss
        self.entropy_coef = float(getattr(cfg, "entropy_coef", 0.0))
        self.sums = {"loss": 0.0, "clip_frac": 0.0, "approx_kl": 0.0, "ratio_mean": 0.0,
                     "kl_ref": 0.0, "entropy": 0.0}
        self.finite = True

    def add(self, mb_rows: Sequence[Row], mb: dict[str, torch.Tensor], lp: torch.Tensor,
            ent: torch.Tensor | None, ref: torch.Tensor | None) -> torch.Tensor | None:
        """The loss of a micro-batch from its logprobs ``lp`` [B, T] (entropy ``ent`` and
        reference ``ref`` [B, T] where those terms are on); None (and ``finite`` False) if
        it is not finite."""
        cfg, normalizer = self.cfg, self.normalizer
        old = _own_ratio(mb_rows, lp, mb["old"], mb["own"])  # [B, T]
        stats = self.spec.fn(lp, old, mb["adv"], mb["mask"], clip_low=cfg.clip_low,
                             clip_high=cfg.clip_high, dual_clip=cfg.dual_clip, agg=cfg.agg,
                             normalizer=normalizer)
        loss = stats.loss
        weight = float(mb["mask"].sum()) / max(self.n_tokens, 1.0)  # its share of tokens
        if self.kl_on:  # normalised by the whole step's count, like the loss: micro-batches add up
            kl = kl_penalty(lp, ref, mb["mask"], cfg.kl_kind, unit=self.unit,
                            normalizer=normalizer)
            loss = loss + cfg.kl_coef * kl
            self.sums["kl_ref"] += float(kl.detach())
        if ent is not None:
            bonus = entropy_bonus(ent, mb["mask"], unit=self.unit, normalizer=normalizer)
            loss = loss - self.entropy_coef * bonus
            self.sums["entropy"] += float(bonus.detach())
        if not torch.isfinite(loss):
            self.finite = False
            return None
        self.sums["loss"] += loss.item()
        for k in ("clip_frac", "approx_kl", "ratio_mean"):
            self.sums[k] += float(getattr(stats, k)) * weight
        return loss


def _own_ratio(rows: Sequence[Row], lp: torch.Tensor, old: torch.Tensor,
               own: torch.Tensor) -> torch.Tensor:
    """The ratio denominator [B, T]: ``old`` (the rescore's), or for ``own`` rows this forward's
    logprobs ``lp`` [B, T] detached, which those rows' groups also keep (``Row.own_ratio``)."""
    if not bool(own.any()):
        return old
    fresh = lp.detach().to(old.dtype)
    for b, r in enumerate(rows):
        if r.own_ratio:
            n = len(r.ids)
            r.old_lp.copy_(torch.where(r.mask, fresh[b, :n].cpu(), torch.zeros(())))
    return torch.where(own[:, None], fresh, old)
