"""Group-relative advantages (GRPO) and the group statistics that expose silent failure.

A *group* is one prompt with ``n`` sampled responses. GRPO's advantage of response i is
its reward minus the group mean, divided by the group's standard deviation
(``scale="std"``, Shao et al. 2024) or not divided (``scale="none"``, Dr. GRPO,
Liu et al. 2025, arXiv 2503.20783, which removes the difficulty bias of the std).
A group whose rewards are all equal has zero advantage everywhere and trains on nothing.
``has_signal`` is the one rule for that, used everywhere a group's signal is asked about:
the zero-variance share logged (``zero_variance_mask``), the groups DAPO's dynamic sampling
keeps (``grouping.drop_zero_signal``), the groups regeneration counts and the task sampler
records (``grouping.episodes_have_signal``). Rewards that differ by no more than
``SIGNAL_ATOL`` are equal: their advantages would be rounding noise, scaled up by the std.
"""

from __future__ import annotations

from typing import Literal

import torch

__all__ = ["group_advantages", "has_signal", "zero_variance_mask", "SIGNAL_ATOL"]

SIGNAL_ATOL = 1e-8


def group_advantages(rewards: torch.Tensor, scale: Literal["std", "none"] = "std",
                     eps: float = 1e-6) -> torch.Tensor:
    """rewards [G, n] -> advantages [G, n].

    std is the unbiased sample standard deviation (torch's default, as verl and OpenRLHF use).
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [groups, n], got shape {tuple(rewards.shape)}")
    r = rewards.to(torch.float32)
    centred = r - r.mean(dim=1, keepdim=True)  # [G, n]
    if scale == "none":
        return centred
    if scale != "std":
        raise ValueError(f"scale={scale!r}: use 'std' or 'none'")
    if r.shape[1] < 2:
        return torch.zeros_like(r)
    return centred / (r.std(dim=1, keepdim=True) + eps)


def has_signal(rewards: torch.Tensor) -> torch.Tensor:
    """rewards [..., n] -> bool [...]: True where the group's responses got different rewards
    (by more than ``SIGNAL_ATOL``), so GRPO gives them a nonzero advantage."""
    r = rewards.to(torch.float32)
    return (r.max(dim=-1).values - r.min(dim=-1).values) > SIGNAL_ATOL


def zero_variance_mask(rewards: torch.Tensor) -> torch.Tensor:
    """rewards [G, n] -> bool [G]: True where every response got the same reward (no signal)."""
    return ~has_signal(rewards)
