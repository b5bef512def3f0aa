"""Shared-prefix training: rows that begin with the same tokens are forwarded through them once.

An RL step's rows share long prefixes: every row starts with the same system prompt and tool
schema, a group's rows share their question, and rows that made the same search share its
results too. In a causal LM the hidden states, keys and values of a prefix do not depend on
what follows it, so ``tree_backward`` forwards each distinct prefix once, with grad: the rows
become a radix tree of token segments (``build_tree``), and each segment's forward runs on its
ancestors' keys and values (an HF ``DynamicCache``) at its own positions. The row's logprobs
are then the same numbers as a forward of the whole row, and the gradient the same sum.

Memory stays that of one root-to-leaf path: a segment hands its children *detached copies*
of the context (keys and values of every layer, the path's logprobs, its last hidden state)
as leaf tensors; after all children have run their own backward, the segment runs one
backward of its rows' losses plus the children's gradients on those copies (reverse mode,
chained by hand), which passes the context's gradients on to its own parent. Each segment's
graph is built and freed once.

Cost: tokens forwarded = distinct prefixes (trie nodes) instead of the sum of row lengths,
plus one small forward per segment (bench_real_lm's ``update_tree`` part measures it).
``make_tree_score_fn`` scores groups the same way without grad (the rescore and the replay
scan).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from agentsearch.models.logprobs import (
    _body_and_head,
    _head_logprobs,
    make_score_fn,
    scored_rows,
    scoring,
)

__all__ = ["Segment", "build_tree", "tree_tokens", "supports_tree", "tree_backward",
           "make_tree_score_fn"]


@dataclass
class Segment:
    """A run of tokens shared by the rows ``rows`` (indices), at positions ``start``.."""

    start: int                      # position of the first token in every row through it
    ids: list[int]                  # the tokens
    rows: list[int]                 # rows that go through this segment
    ends: list[int] = field(default_factory=list)     # rows that end at its last token
    children: list[Segment] = field(default_factory=list)


def build_tree(seqs: Sequence[Sequence[int]]) -> list[Segment]:
    """The radix tree of ``seqs``: root segments (one per distinct first token), each cut
    where the rows through it part ways or one of them ends. Every row is the concatenation of
    the segments on its path; identical rows end at the same segment."""
    def grow(rows: list[int], start: int) -> Segment:
        seg = Segment(start, [], rows)
        pos = start
        while True:
            ending = [r for r in rows if len(seqs[r]) == pos]
            live = [r for r in rows if len(seqs[r]) > pos]
            if ending or not live or len({seqs[r][pos] for r in live}) > 1:
                break
            seg.ids.append(int(seqs[live[0]][pos]))
            pos += 1
        seg.ends = ending
        by_token: dict[int, list[int]] = {}
        for r in live:
            by_token.setdefault(int(seqs[r][pos]), []).append(r)
        seg.children = [grow(rs, pos) for rs in by_token.values()]
        return seg

    roots: dict[int, list[int]] = {}
    for r, s in enumerate(seqs):
        if len(s):
            roots.setdefault(int(s[0]), []).append(r)
    return [grow(rs, 0) for rs in roots.values()]


def tree_tokens(roots: Sequence[Segment]) -> int:
    """Tokens a tree forward processes (its distinct prefixes)."""
    return sum(len(s.ids) + tree_tokens(s.children) for s in roots)


def supports_tree(model: nn.Module) -> bool:
    """Whether ``tree_backward`` can run ``model``: an HF causal LM split into body and head
    (the same split ``token_logprobs`` uses), text only."""
    return _body_and_head(model, images=False) is not None


def tree_backward(model: nn.Module, ids: Sequence[Tensor], masks: Sequence[Tensor],
                  row_loss: Callable[[int, Tensor], Tensor | None], *,
                  temperature: float = 1.0) -> int:
    """Forward the rows ``ids`` (each [T_i] long) as a prefix tree and backpropagate the sum of
    ``row_loss(i, lp)`` over rows, where ``lp`` [T_i] float32 is row i's token logprobs
    (``token_logprobs``' numbers: 0 at position 0 and wherever ``masks[i]`` [T_i] bool is
    False). ``row_loss`` returns a scalar in the graph of ``lp`` (or None: nothing to add); it
    may raise to abort (gradients already accumulated are then the caller's to clear).
    Gradients accumulate into the model's parameters. Returns the tokens forwarded."""
    parts = _body_and_head(model, images=False)
    if parts is None:
        raise ValueError("tree_backward needs an HF causal LM with get_decoder() and "
                         "get_output_embeddings() and no logit post-processing")
    from transformers import DynamicCache  # a dependency of every model that gets here

    body, head = parts
    device = next(model.parameters()).device
    seqs = [x.tolist() for x in ids]
    roots = build_tree(seqs)

    def visit(seg: Segment, kv: list[tuple[Tensor, Tensor]] | None, lp_in: Tensor | None,
              h_in: Tensor | None) -> None:
        n = len(seg.ids)
        cache = DynamicCache(ddp_cache_data=kv) if kv else DynamicCache()
        out = body(input_ids=torch.tensor([seg.ids], device=device),
                   position_ids=torch.arange(seg.start, seg.start + n, device=device)[None],
                   past_key_values=cache, use_cache=True)
        hidden = out.last_hidden_state[0]                             # [n, H]
        # which of the segment's tokens some row through it scores
        want = torch.zeros(n, dtype=torch.bool)
        for r in seg.rows:
            want |= masks[r][seg.start:seg.start + n].bool().cpu()
        if seg.start == 0:
            want[0] = False  # position 0 is predicted by nothing
        lp = torch.zeros(n, dtype=torch.float32, device=device)
        if bool(want.any()):
            # token j is read from the hidden state before it: the parent's last for j = 0
            before = hidden[:-1] if h_in is None else torch.cat([h_in[None], hidden[:-1]])
            if h_in is None:
                before = torch.cat([hidden[:1], before])  # (position 0: never read)
            w = want.to(device)
            h, y = before[w], torch.tensor(seg.ids, device=device)[w]
            vals = (checkpoint(_head_logprobs, head, h, y, temperature, None,
                               use_reentrant=False) if h.requires_grad
                    else _head_logprobs(head, h, y, temperature, None))
            lp = lp.masked_scatter(w, vals)
        path_lp = lp if lp_in is None else torch.cat([lp_in, lp])     # [start + n]
        outs: list[Tensor] = []
        grads: list[Tensor] = []
        for r in seg.ends:
            loss = row_loss(r, torch.where(masks[r].to(device).bool(), path_lp, 0.0))
            if loss is not None and loss.requires_grad:
                outs.append(loss)
                grads.append(torch.ones_like(loss))
        if seg.children:
            full = [(layer.keys, layer.values) for layer in cache.layers]  # [1, kvh, start+n, d]
            if not torch.is_grad_enabled():  # scoring: the children read the context as is
                for child in seg.children:
                    visit(child, full, path_lp, hidden[-1])
                return
            leaves = [(k.detach().requires_grad_(), v.detach().requires_grad_()) for k, v in full]
            lp_leaf = path_lp.detach().requires_grad_()
            h_leaf = hidden[-1].detach().requires_grad_()
            for child in seg.children:
                visit(child, leaves, lp_leaf, h_leaf)
            pairs = [(t, leaf) for (k, v), (lk, lv) in zip(full, leaves)
                     for t, leaf in ((k, lk), (v, lv))] + [(path_lp, lp_leaf), (hidden[-1], h_leaf)]
            for t, leaf in pairs:
                if leaf.grad is not None and t.requires_grad:
                    outs.append(t)
                    grads.append(leaf.grad)
        if outs:
            torch.autograd.backward(outs, grads)

    for root in roots:
        visit(root, None, None, None)
    return tree_tokens(roots)


def make_tree_score_fn(model: nn.Module, *, temperature: float = 1.0):
    """``make_score_fn``'s ``score_fn(groups) -> [Tensor [n, T]]`` (current-policy logprobs of
    policy tokens, float32 on CPU, 0 elsewhere), with the groups' rows forwarded as one prefix
    tree under ``torch.no_grad()``; groups with images take ``make_score_fn``'s batches."""
    batched = make_score_fn(model, temperature=temperature)

    def score_fn(groups: Sequence[Any]) -> list[Tensor]:
        if any(g.pixel_values is not None for g in groups) or not supports_tree(model):
            return batched(groups)
        outs = [torch.zeros(g.token_ids.shape, dtype=torch.float32) for g in groups]
        rows = scored_rows(groups)
        ids = [groups[gi].token_ids[ri, :length].long() for length, gi, ri in rows]
        masks = [groups[gi].action_mask[ri, :length].bool() for length, gi, ri in rows]

        def keep(i: int, lp: Tensor) -> None:
            length, gi, ri = rows[i]
            outs[gi][ri, :length] = lp.float().cpu()

        with scoring(model):
            tree_backward(model, ids, masks, keep, temperature=temperature)
        return outs

    return score_fn
