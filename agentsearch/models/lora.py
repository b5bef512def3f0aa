"""LoRA via peft, or full fine-tuning for tiny models.

With LoRA the reference policy for the optional KL term is the base model itself
(``reference_logprobs`` runs it with the adapter disabled), so no second copy is kept.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext

__all__ = ["apply_lora", "adapter_disabled", "count_parameters"]


def apply_lora(model, settings):
    """Wrap ``model`` with a peft LoRA adapter per ``settings`` (a ``LoraSettings``);
    return the model unchanged (all weights trainable) when LoRA is disabled."""
    if not settings.enabled:
        for p in model.parameters():
            p.requires_grad_(True)
        return model
    from peft import LoraConfig, get_peft_model

    present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    targets = [t for t in settings.target_modules if t in present]
    if not targets:
        raise ValueError(f"none of lora.target_modules={settings.target_modules} exist in the model; "
                         f"linear layers here include {sorted(n for n in present if 'proj' in n)[:10]}")
    cfg = LoraConfig(r=settings.r, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                     target_modules=targets, task_type="CAUSAL_LM")
    return get_peft_model(model, cfg)


@contextmanager
def adapter_disabled(model):
    """Run the base model (the KL reference) when ``model`` carries a LoRA adapter."""
    ctx = model.disable_adapter() if hasattr(model, "disable_adapter") else nullcontext()
    with ctx:
        yield model


def count_parameters(model) -> tuple[int, int]:
    """(trainable, total)."""
    total = sum(p.numel() for p in model.parameters())
    return sum(p.numel() for p in model.parameters() if p.requires_grad), total
