"""The one optimizer builder: AdamW with linear warmup and an optional linear decay.

RL (``trainer/loop.py``) warms up for ``warmup_steps`` and then holds the
rate; the warm start's SFT (``warmstart.sft.sft_train``) warms up for 10% of its steps and
decays linearly to ``min_lr_ratio`` of the rate over ``decay_steps``.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["make_optimizer", "lr_factor"]


def lr_factor(step: int, warmup_steps: int = 0, decay_steps: int = 0,
              min_lr_ratio: float = 0.1) -> float:
    """The learning-rate multiplier at optimizer step ``step`` (0-based): ``(step + 1) /
    warmup_steps`` up to 1 during warmup, times ``max(min_lr_ratio, 1 - step / decay_steps)``
    when ``decay_steps > 0``."""
    warm = min(1.0, (step + 1) / warmup_steps) if warmup_steps > 0 else 1.0
    decay = max(min_lr_ratio, 1 - step / decay_steps) if decay_steps > 0 else 1.0
    return warm * decay


def make_optimizer(model: nn.Module, lr: float, *, weight_decay: float = 0.0, warmup_steps: int = 0,
                   decay_steps: int = 0, min_lr_ratio: float = 0.1):
    """``(AdamW, LambdaLR)`` over the trainable parameters of ``model`` (betas 0.9 / 0.99)."""
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, betas=(0.9, 0.99))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_factor(s, warmup_steps, decay_steps, min_lr_ratio))
    return opt, sched
