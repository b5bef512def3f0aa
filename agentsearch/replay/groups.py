"""``ReplayGroup``: one prompt with its n responses, as stored in a replay buffer.

A group is what GRPO computes an advantage over: one prompt, n sampled responses. The
buffer keeps exactly what the update needs to replay it later without regenerating:

- ``token_ids [n, T]``: the full sequences (prompt, policy turns, environment turns), as
  the policy sampled them. Rows are **left-aligned**: every column up to a row's last
  policy token is a real token; only trailing columns may be padding. (Responses of one
  group share their prompt, so no left padding is ever needed; ``from_padded`` removes it
  if the rollout batch had some.)
- ``action_mask [n, T]``: True on policy-generated tokens only; prompt, environment
  observations and padding are False.
- ``gen_logprobs [n, T]``: ``gen_logprobs[i, t] = log pi_gen(token_ids[i, t] |
  token_ids[i, :t])`` under the policy that sampled the token; 0 where the mask is False.
- ``advantages [n]``, ``rewards [n]``, ``answer_correct [n]`` (or None when the task has
  no verifiable answer), ``born_step`` (the training step that generated the group).

Those fields are immutable once stored. Two fields change while the group sits in the
buffer: ``cached_headroom`` (the headroom from the last time the group was scored; it
starts at the reference headroom under ``gen_logprobs``) and ``replay_count``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

__all__ = ["ReplayGroup"]

_GROUP_FIELDS = ("prompt_id", "token_ids", "action_mask", "gen_logprobs", "advantages",
                 "rewards", "answer_correct", "born_step", "cached_headroom", "replay_count",
                 "pixel_values")
_OPTIONAL_FIELDS = {"pixel_values": None}  # absent from states saved before it existed


@dataclass(eq=False, kw_only=True)
class ReplayGroup:
    """One prompt's n responses with everything needed to replay them (see module doc).

    Storage is compact and on CPU: int32 ids, bool masks, float32 logprobs. Logprobs stay
    float32 on purpose: the drift gate compares mean squared logprob gaps against tau
    around 1e-3, i.e. per-token gaps of ~0.03 on logprobs of magnitude 1-10; bf16 keeps 8
    bits of mantissa (steps of 0.03 at |logprob| = 8), so rounding alone would move
    a group across the gate. ``__post_init__`` converts whatever it is given.
    """

    prompt_id: Any
    token_ids: Tensor      # [n, T] int32
    action_mask: Tensor    # [n, T] bool, True = policy token
    gen_logprobs: Tensor   # [n, T] float32, 0 where action_mask is False
    advantages: Tensor     # [n] float32
    rewards: Tensor        # [n] float32
    answer_correct: Tensor | None  # [n] bool, or None
    born_step: int
    cached_headroom: float = field(default=float("nan"))
    replay_count: int = 0
    pixel_values: list | None = None
    """Multimodal groups: per response, the ``[k_i, 3, H, W]`` pixels of its images (None for
    a response without), what a VLM re-encodes when the group is rescored or scanned."""

    def __post_init__(self) -> None:
        ids = torch.as_tensor(self.token_ids)
        if ids.dim() != 2:
            raise ValueError(f"token_ids must be [n, T], got shape {tuple(ids.shape)}")
        n, T = ids.shape
        self.token_ids = ids.detach().to("cpu", torch.int32).contiguous()
        self.action_mask = _check(self.action_mask, (n, T), "action_mask").to(torch.bool)
        mask = self.action_mask
        lp = _check(self.gen_logprobs, (n, T), "gen_logprobs").to(torch.float32)
        self.gen_logprobs = torch.where(mask, lp, torch.zeros((), dtype=torch.float32))
        self.advantages = _check(self.advantages, (n,), "advantages").to(torch.float32)
        self.rewards = _check(self.rewards, (n,), "rewards").to(torch.float32)
        if self.answer_correct is not None:
            self.answer_correct = _check(self.answer_correct, (n,), "answer_correct").to(torch.bool)
        if self.pixel_values is not None:
            if len(self.pixel_values) != n:
                raise ValueError(f"pixel_values must hold one entry per response ({n}), "
                                 f"got {len(self.pixel_values)}")
            self.pixel_values = [
                None if p is None else torch.as_tensor(p).detach().to("cpu", torch.float32)
                for p in self.pixel_values]
        self.born_step = int(self.born_step)
        self.cached_headroom = float(self.cached_headroom)
        self.replay_count = int(self.replay_count)

    @property
    def n(self) -> int:
        """Number of responses."""
        return self.token_ids.shape[0]

    @property
    def num_policy_tokens(self) -> int:
        """|T(g)|: policy tokens over all responses (what both scores average over)."""
        return int(self.action_mask.sum())

    def successes(self, threshold: float = 0.0) -> Tensor:
        """Per-response success [n] bool: ``answer_correct`` when given, else reward > threshold.

        ``answer_correct`` wins so that format rewards (a small positive reward for a
        well-formed but wrong answer) neither make every response look successful nor
        hide that all failed.
        """
        if self.answer_correct is not None:
            return self.answer_correct.clone()
        return self.rewards > threshold

    def nbytes(self) -> int:
        """Approximate memory held by this group (tensor storage plus object overhead)."""
        tensors = [self.token_ids, self.action_mask, self.gen_logprobs, self.advantages,
                   self.rewards] \
            + ([self.answer_correct] if self.answer_correct is not None else []) \
            + [p for p in (self.pixel_values or []) if p is not None]
        # ~200 B per tensor object, ~500 B for the dataclass and its Python fields
        return sum(t.numel() * t.element_size() + 200 for t in tensors) + 500 + \
            sys.getsizeof(self.prompt_id)

    def state_dict(self) -> dict[str, Any]:
        """Every field (tensors shared, not copied); ``from_state_dict`` inverts it exactly."""
        return {name: getattr(self, name) for name in _GROUP_FIELDS}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> ReplayGroup:
        missing = [k for k in _GROUP_FIELDS if k not in state and k not in _OPTIONAL_FIELDS]
        if missing:
            raise KeyError(f"ReplayGroup state is missing {missing}; was it saved by a "
                           f"different agentsearch version? It has {sorted(state)}")
        return cls(**{k: state.get(k, _OPTIONAL_FIELDS.get(k)) for k in _GROUP_FIELDS})

    @classmethod
    def from_padded(cls, *, prompt_id: Any, token_ids: Tensor, action_mask: Tensor,
                    gen_logprobs: Tensor, advantages: Tensor, rewards: Tensor,
                    born_step: int, answer_correct: Tensor | None = None,
                    attention_mask: Tensor | None = None) -> ReplayGroup:
        """Build a group from rows of a padded rollout batch (any of [n, T] on any device).

        With ``attention_mask`` [n, T] (1 = real token), each row keeps only its real
        tokens, moved to the left, and T shrinks to the longest row. Use it for
        left-padded generation batches. Without it, the rows are taken as they are (they
        must already be left-aligned) and columns past every row's last policy token are
        cut.
        """
        ids = torch.as_tensor(token_ids).detach().cpu()
        mask = torch.as_tensor(action_mask).detach().cpu().bool()
        lp = torch.as_tensor(gen_logprobs).detach().cpu().float()
        if attention_mask is not None:
            keep = torch.as_tensor(attention_mask).detach().cpu().bool()  # [n, T]
            if (mask & ~keep).any():
                raise ValueError("action_mask marks tokens that attention_mask says are padding")
            lengths = keep.sum(1)  # [n]
            T = int(lengths.max()) if len(lengths) else 0
            new = [torch.zeros(ids.shape[0], T, dtype=d) for d in (ids.dtype, torch.bool, lp.dtype)]
            for i in range(ids.shape[0]):
                k = int(lengths[i])
                new[0][i, :k], new[1][i, :k], new[2][i, :k] = \
                    ids[i][keep[i]], mask[i][keep[i]], lp[i][keep[i]]
            ids, mask, lp = new
        else:
            any_policy = mask.any(0).nonzero()
            T = int(any_policy.max()) + 1 if len(any_policy) else 0
            ids, mask, lp = ids[:, :T], mask[:, :T], lp[:, :T]
        return cls(prompt_id=prompt_id, token_ids=ids, action_mask=mask, gen_logprobs=lp,
                   advantages=advantages, rewards=rewards, answer_correct=answer_correct,
                   born_step=born_step)


def _check(x: Any, shape: tuple[int, ...], name: str) -> Tensor:
    t = torch.as_tensor(x).detach().cpu()
    if tuple(t.shape) != shape:
        raise ValueError(f"{name} must have shape {list(shape)} to match token_ids, "
                         f"got {list(t.shape)}")
    return t
