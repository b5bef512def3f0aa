"""Precision and memory settings: full-weight bf16 training is refused with a way out, and
gradient checkpointing trains the same as without it."""

import pytest
import torch

from agentsearch.core.config import ConfigError, apply_overrides
from agentsearch.trainer.setup import build_policy, resolve_device
from agentsearch.trainer.train_config import TrainConfig

BASE = ["model=tiny-s", "threads=1"]


def test_full_weight_bf16_is_refused_and_lora_bf16_is_not():
    with pytest.raises(ConfigError, match="lora.enabled=true.*dtype=float32"):
        apply_overrides(TrainConfig, "tiny", BASE + ["dtype=bfloat16"])
    cfg = apply_overrides(TrainConfig, "tiny", BASE + ["dtype=bfloat16", "lora.enabled=true"])
    assert resolve_device(cfg)[1] == torch.bfloat16


def test_auto_dtype_keeps_full_weights_in_fp32():
    cfg = apply_overrides(TrainConfig, "tiny", BASE + ["device=cpu"])
    assert resolve_device(cfg)[1] == torch.float32


def test_bf16_rounds_small_adam_steps_to_zero_which_is_why():
    w = torch.tensor([1.0], dtype=torch.bfloat16)
    assert torch.equal(w - 1e-3, w)  # an lr-sized step vanishes in bf16 ...
    assert (torch.tensor([1.0]) - 1e-3).item() != 1.0  # ... and not in fp32


def test_gradient_checkpointing_gives_the_same_gradients():
    grads = []
    for gc in (False, True):
        cfg = apply_overrides(TrainConfig, "tiny",
                              BASE + [f"gradient_checkpointing={str(gc).lower()}"])
        model, _ = build_policy(cfg)
        model.train()
        ids = torch.arange(1, 33).view(2, 16)
        model(input_ids=ids, labels=ids).loss.backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()
                                if p.grad is not None]))
        assert model.is_gradient_checkpointing == gc
    assert torch.allclose(grads[0], grads[1], atol=1e-6)
