"""Group-relative advantages (GRPO) and the group statistics that expose silent failure.

A *group* is one prompt with ``n`` sampled responses. GRPO's advantage of response i is
its reward minus the group mean, divided by the group's standard deviation
(``scale="std"``, Shao et al. 2024) or not divided (``scale="none"``, Dr. GRPO,
Liu et al. 2025, arXiv 2503.20783, which removes the difficulty bias of the std).
A group whose rewards are all equal has zero advantage everywhere and trains on nothing;
``zero_variance_mask`` finds them, so the trainer can drop them (DAPO's dynamic sampling)
and always logs their share.
"""

from __future__ import annotations

from typing import Literal

import torch

__all__ = ["group_advantages", "zero_variance_mask"]


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


def zero_variance_mask(rewards: torch.Tensor, atol: float = 1e-8) -> torch.Tensor:
    """rewards [G, n] -> bool [G]: True where every response got the same reward."""
    return (rewards.max(dim=1).values - rewards.min(dim=1).values).abs() <= atol
