"""Teacher-forced token logprobs, shared by the replay scan and the loss.

``token_logprobs`` runs the model body once, then projects hidden states to the vocabulary
a chunk of positions at a time and keeps only the sampled token's logprob
(``logit[token] - logsumexp(logits)``), so full-vocabulary fp32 logits never exist for the
whole batch: the peak is ``chunk_tokens x vocab`` floats. With grad, each chunk is
checkpointed, so the backward pass recomputes one chunk's logits at a time instead of
keeping all of them. Padding positions are never projected at all.

``make_score_fn`` wraps it into the ``score_fn`` that ``HeadroomDriftBuffer.select`` calls
once per scan chunk: it packs the groups' rows into batches of bounded size, scores only
policy tokens, and returns one ``[n, T]`` float32 CPU tensor per group.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from agentsearch.models.processor import is_vlm_model
from agentsearch.models.vlm import check_image_inputs, collate_pixel_values

__all__ = ["token_logprobs", "make_score_fn", "batch_pixels", "DEFAULT_CHUNK_TOKENS"]

DEFAULT_CHUNK_TOKENS = 1024
# configs of these architectures change logits after the head (soft-capping, scaling): such
# models go through their own forward instead of the split body + head path
_LOGIT_POSTPROCESS = ("final_logit_softcapping", "logit_scale", "logits_scaling",
                      "output_multiplier_scale")


def _body_and_head(model: nn.Module, images: bool) -> tuple[nn.Module, nn.Module] | None:
    """(body, lm head) of an HF causal LM or a LLaVA, unwrapping peft; None where the model's
    own forward must run: unknown layouts, logits post-processed after the head, and VLMs other
    than LLaVA when images are scored (their forward computes e.g. multimodal rotary positions)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    cfg = getattr(base, "config", None)
    if cfg is not None and any(getattr(cfg, k, None) not in (None, 1, 1.0)
                               for k in _LOGIT_POSTPROCESS):
        return None
    if getattr(cfg, "model_type", None) == "llava":  # the LlavaModel body encodes the images
        return base.model, base.get_output_embeddings()
    if images:
        return None
    try:
        head = base.get_output_embeddings()
        body = base.get_decoder() if hasattr(base, "get_decoder") else base.model
    except (AttributeError, NotImplementedError):
        return None
    if head is None or body is None or body is base:
        return None
    return body, head


def _gather_logprobs(logits: Tensor, targets: Tensor, temperature: float,
                     suppress: int | None = None, entropy: bool = False) -> Tensor:
    """log softmax(logits / temperature)[target]: [N, V], [N] -> [N] float32; the token
    ``suppress`` (a VLM's image token) is left out of the softmax. With ``entropy``,
    [N, 2]: the logprob and the entropy of the same distribution."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    if suppress is not None:
        logits = logits.index_fill(-1, torch.tensor([suppress], device=logits.device),
                                   float("-inf"))
    norm = logits.logsumexp(-1)                                       # [N]
    lp = logits.gather(-1, targets[:, None]).squeeze(-1) - norm
    if not entropy:
        return lp
    logp = logits - norm[:, None]                                     # [N, V]
    ent = -(logp.exp() * logp).nan_to_num(0.0).sum(-1)                # 0 * -inf (suppressed) -> 0
    return torch.stack([lp, ent], dim=-1)


def _head_logprobs(head: nn.Module, hidden: Tensor, targets: Tensor, temperature: float,
                   suppress: int | None, entropy: bool = False) -> Tensor:
    return _gather_logprobs(head(hidden), targets, temperature, suppress, entropy)


def token_logprobs(model: nn.Module, input_ids: Tensor, attention_mask: Tensor | None = None, *,
                   temperature: float = 1.0, chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
                   target_mask: Tensor | None = None, pixel_values: Tensor | None = None,
                   with_entropy: bool = False,
                   **image_inputs: Any) -> Tensor | tuple[Tensor, Tensor]:
    """Logprob of each token given the tokens (and images) before it: [B, T] ids -> [B, T] float32.
    With ``with_entropy``, ``(logprobs, entropy)``, both [B, T]: ``entropy[b, t]`` is the
    entropy of the distribution that ``out[b, t]`` was read from (0 where ``out`` is 0).

    ``out[b, t] = log p(input_ids[b, t] | input_ids[b, :t], images)`` under ``logits /
    temperature``. ``out[b, t]`` is 0 where it is undefined or not asked for: at t = 0, where
    ``attention_mask[b, t]`` or ``attention_mask[b, t-1]`` is 0 (padding, and the first real
    token of a left-padded row), and where ``target_mask`` (optional [B, T] bool: only
    these positions are projected) is False. Position ids follow the attention mask
    (``cumsum - 1``), as HF generation sets them, so left-padded rows score like unpadded.

    Works with and without grad (the loss calls it with grad), on any HF causal LM with
    ``get_decoder()`` and ``get_output_embeddings()`` (peft-wrapped too); other models,
    and those that post-process logits, fall back to their own forward, whose logits are
    still reduced a chunk at a time.

    A vision-language model (``agentsearch.models.vlm``) takes ``pixel_values`` [N, 3, H, W]:
    all images of the batch in row-major order of their image tokens (None if there are
    none; ``vlm.collate_pixel_values`` builds them from per-row images), and ``image_inputs``
    for its forward (e.g. ``image_grid_thw`` for Qwen2.5-VL). The image token is then not an
    action: it is left out of the softmax and its positions read 0, as ``ImageTokenSuppressor``
    keeps generation from sampling it, so generation-time and teacher-forced logprobs are
    the same quantity.
    """
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be [B, T], got shape {tuple(input_ids.shape)}")
    B, T = input_ids.shape
    input_ids = input_ids.long()
    attn = (torch.ones_like(input_ids) if attention_mask is None
            else attention_mask.to(input_ids.device).long())
    position_ids = (attn.cumsum(-1) - 1).clamp(min=0)                 # [B, T]
    valid = (attn[:, 1:] > 0) & (attn[:, :-1] > 0)  # [B, T-1] target t+1 is scored
    image_id, inputs = None, {}
    if pixel_values is not None or is_vlm_model(model):
        image_id = check_image_inputs(model, input_ids, pixel_values)
        valid = valid & (input_ids[:, 1:] != image_id)
        if pixel_values is not None:
            pixel_values = pixel_values.to(device=input_ids.device,
                                           dtype=next(model.parameters()).dtype)
        inputs = {"pixel_values": pixel_values, **image_inputs}
    if target_mask is not None:
        valid = valid & target_mask[:, 1:].to(valid.device).bool()
    targets = input_ids[:, 1:][valid]                                 # [N]

    parts = _body_and_head(model, images=image_id is not None)
    if parts is None and image_id is not None:
        position_ids = None  # a VLM's own forward computes its positions
    if parts is not None:
        body, head = parts
        out = body(input_ids=input_ids, attention_mask=attn, position_ids=position_ids,
                   use_cache=False, **inputs)
        hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
        hidden = hidden[:, :-1][valid]                                # [N, H]
        pieces = []
        for s in range(0, hidden.shape[0], chunk_tokens):
            h, y = hidden[s:s + chunk_tokens], targets[s:s + chunk_tokens]
            if torch.is_grad_enabled() and h.requires_grad:
                pieces.append(checkpoint(_head_logprobs, head, h, y, temperature, image_id,
                                         with_entropy, use_reentrant=False))
            else:
                pieces.append(_head_logprobs(head, h, y, temperature, image_id, with_entropy))
    else:
        kw = {} if position_ids is None else {"position_ids": position_ids}
        logits = model(input_ids=input_ids, attention_mask=attn, use_cache=False, **kw,
                       **inputs).logits[:, :-1][valid]                # [N, V]
        pieces = [_gather_logprobs(logits[s:s + chunk_tokens], targets[s:s + chunk_tokens],
                                   temperature, image_id, with_entropy)
                  for s in range(0, logits.shape[0], chunk_tokens)]
    # nothing to score: an empty [0] that is still attached to the graph, so backward works
    flat = (torch.cat(pieces) if pieces
            else (hidden if parts is not None else logits).float().sum(-1))
    if with_entropy and not pieces:
        flat = flat[:, None].expand(-1, 2)
    cols = flat.unbind(-1) if with_entropy else (flat,)
    out = []
    for col in cols:                                                  # logprobs (and entropy)
        full = (torch.zeros(B, T - 1, dtype=torch.float32, device=col.device)
                .masked_scatter(valid, col))
        out.append(torch.cat([full.new_zeros(B, 1), full], dim=1))    # [B, T]
    return tuple(out) if with_entropy else out[0]


def batch_pixels(model: nn.Module, ids: Tensor, row_pixels: Sequence[Tensor | None],
                 device: Any = None) -> Tensor | None:
    """The pixels of a batch of rows (each row's own images, in row order, only those whose
    image tokens survive a cut) on ``device``, or None for a text batch."""
    if all(p is None for p in row_pixels):
        return None
    pixels = collate_pixel_values(ids.cpu(), list(row_pixels), model)
    return pixels if device is None else pixels.to(device)


def _effective_lengths(group_mask: Tensor) -> Tensor:
    """Per row, 1 + index of the last policy token (0 if none): [n, T] -> [n]."""
    T = group_mask.shape[1]
    pos = torch.arange(1, T + 1).expand_as(group_mask)
    return (torch.where(group_mask, pos, 0).amax(1) if T
            else torch.zeros(group_mask.shape[0], dtype=torch.long))


def scored_rows(groups: Sequence[Any]) -> list[tuple[int, int, int]]:
    """``(length, group index, row index)`` of every row a score_fn scores: each row cut
    after its last policy token (later tokens cannot change earlier logprobs); rows of
    length <= 1 are left out (position 0 is never scored)."""
    return [(length, gi, ri) for gi, g in enumerate(groups)
            for ri, length in enumerate(_effective_lengths(g.action_mask).tolist())
            if length > 1]


@contextmanager
def scoring(model: nn.Module):
    """Eval mode under ``torch.no_grad()``; the model's previous mode comes back after."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def make_score_fn(model: nn.Module, *, device: Any = None, max_batch_tokens: int = 16384,
                  temperature: float = 1.0, chunk_tokens: int = DEFAULT_CHUNK_TOKENS):
    """A ``score_fn(groups) -> [Tensor [n, T]]`` of current-policy logprobs for replay.

    Rows of all given groups are cut after their last policy token (later tokens cannot
    change earlier logprobs), sorted by length, and packed into right-padded batches of at
    most ``max_batch_tokens`` (rows x longest row; a longer single row gets a batch of its
    own). Each batch runs ``token_logprobs`` under ``torch.no_grad()`` in eval mode (the
    model's previous mode is restored), scoring policy tokens only. The returned tensors
    are float32 on CPU with each group's ``token_ids`` shape; positions that are not
    policy tokens read 0, like the stored ``gen_logprobs``.

    ``temperature`` must be the sampling temperature the ``gen_logprobs`` were computed
    with, or every group will look drifted.
    """
    if device is None:
        device = next(model.parameters()).device

    def score_fn(groups: Sequence[Any]) -> list[Tensor]:
        outs = [torch.zeros(g.token_ids.shape, dtype=torch.float32) for g in groups]
        rows = sorted(scored_rows(groups), key=lambda r: -r[0])
        batches, start = [], 0
        while start < len(rows):
            longest = rows[start][0]
            size = max(1, min(len(rows) - start, max_batch_tokens // longest))
            batches.append(rows[start:start + size])
            start += size
        with scoring(model):
            for batch in batches:
                L = batch[0][0]
                ids = torch.zeros(len(batch), L, dtype=torch.long)
                attn = torch.zeros(len(batch), L, dtype=torch.long)
                tmask = torch.zeros(len(batch), L, dtype=torch.bool)
                for b, (length, gi, ri) in enumerate(batch):
                    ids[b, :length] = groups[gi].token_ids[ri, :length]
                    attn[b, :length] = 1
                    tmask[b, :length] = groups[gi].action_mask[ri, :length]
                pixels = batch_pixels(model, ids,
                                      [groups[gi].pixel_values[ri] if groups[gi].pixel_values
                                       else None for _, gi, ri in batch], device)
                lp = token_logprobs(model, ids.to(device), attn.to(device),
                                    temperature=temperature, chunk_tokens=chunk_tokens,
                                    target_mask=tmask.to(device),
                                    pixel_values=pixels).float().cpu()
                for b, (length, gi, ri) in enumerate(batch):
                    outs[gi][ri, :length] = lp[b, :length]
        return outs

    return score_fn
