"""The one SFT loop of the warm start: NLL on scripted episodes, images optional.

The loss covers policy tokens only (``action_mask``), never prompt or environment text, or
every token (``all_tokens``: language-model pretraining on transcripts). Episodes of a
vision env carry their images; ``pixel_fn`` (the VLM tokenizer's ``pixel_values``) encodes
them and ``token_logprobs`` reads them with the tokens.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import torch

from agentsearch.algorithms.losses import sft_loss
from agentsearch.algorithms.optim import make_optimizer
from agentsearch.algorithms.update import Row, pad_rows
from agentsearch.models.logprobs import batch_pixels, token_logprobs
from agentsearch.rollout import Episode

__all__ = ["sft_train"]


def _row(e: Episode, all_tokens: bool, pixel_fn: Callable | None) -> Row:
    mask = torch.ones(len(e.token_ids), dtype=torch.bool) if all_tokens \
        else torch.tensor(e.action_mask, dtype=torch.bool)
    images = e.info.get("images") if pixel_fn is not None else None
    return Row(torch.tensor(e.token_ids), mask, torch.zeros(len(e.token_ids)), 0.0, False,
               pixel_fn(images) if images else None)


def _nll(model, batch, device) -> torch.Tensor:
    mb = pad_rows(batch, device)
    pixels = batch_pixels(model, mb["ids"], [r.pixel_values for r in batch], device)
    lp = token_logprobs(model, mb["ids"], mb["attn"], target_mask=mb["mask"],
                        pixel_values=pixels)
    return sft_loss(lp, mb["mask"])


def sft_train(model, episodes: list[Episode], *, steps: int, lr: float, batch_size: int,
              seed: int = 0, all_tokens: bool = False, pixel_fn: Callable | None = None,
              log: Callable[[int, float], None] | None = None,
              micro_batch_size: int | None = None) -> dict[str, float]:
    """``steps`` AdamW steps (10% warmup, linear decay to 10%) of NLL on random batches of
    ``episodes``: on policy tokens only (the warm start), or on every token (``all_tokens``:
    language-model pretraining). ``pixel_fn(images) -> pixel_values`` encodes the episodes'
    images (``info["images"]``) for a VLM. ``log(step, loss)`` after each step.
    ``micro_batch_size``: rows per forward/backward, the gradient accumulated to the batch's
    token mean (None: the whole batch in one pass)."""
    if not episodes:
        raise RuntimeError("no oracle trajectories to warm start from (retrieval never found "
                           "the answers?); check the retriever or set sft.steps=0")
    device = next(model.parameters()).device
    rows = [_row(e, all_tokens, pixel_fn) for e in episodes]
    opt, sched = make_optimizer(model, lr, warmup_steps=max(steps // 10, 1),
                                decay_steps=max(steps, 1))
    params = [p for group in opt.param_groups for p in group["params"]]
    rng = random.Random(seed)
    model.train()
    loss_v = float("nan")
    for step in range(steps):
        batch = rng.sample(rows, min(batch_size, len(rows)))
        opt.zero_grad(set_to_none=True)
        size = micro_batch_size or len(batch)
        if size >= len(batch):
            loss = _nll(model, batch, device)
            loss.backward()
        else:  # each micro-batch weighted by its share of the batch's target tokens
            total = sum(float(r.mask.sum()) for r in batch)
            loss = torch.zeros(())
            for s in range(0, len(batch), size):
                part = batch[s:s + size]
                share = sum(float(r.mask.sum()) for r in part) / max(total, 1.0)
                piece = _nll(model, part, device) * share
                piece.backward()
                loss = loss + piece.detach()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        loss_v = loss.item()
        if log is not None:
            log(step, loss_v)
    return {"sft/loss": loss_v, "sft/episodes": float(len(episodes)), "sft/steps": float(steps)}
