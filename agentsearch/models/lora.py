"""LoRA via peft, or full fine-tuning for tiny models; and the frozen KL reference policy.

The reference of the optional KL term is the policy as it was when RL began, after the warm
start (``frozen_reference``): a frozen deep copy when all weights train; with LoRA a second,
frozen adapter named ``reference`` holding the warm-started adapter's weights (an adapter's
worth of memory instead of a second model, as TRL's ``ref_adapter_name`` does), which
``reference_policy`` activates for the reference forward.
"""

from __future__ import annotations

import copy
from contextlib import contextmanager

import torch

__all__ = ["apply_lora", "frozen_reference", "reference_policy", "count_parameters",
           "REFERENCE_ADAPTER", "save_adapter", "is_adapter", "merge_adapter", "continue_adapter"]

REFERENCE_ADAPTER = "reference"


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
        raise ValueError(f"none of lora.target_modules={settings.target_modules} exist in the "
                         "model; linear layers here include "
                         f"{sorted(n for n in present if 'proj' in n)[:10]}")
    cfg = LoraConfig(r=settings.r, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                     target_modules=targets, task_type="CAUSAL_LM")
    return get_peft_model(model, cfg)


def frozen_reference(model, weights: dict[str, torch.Tensor]):
    """The KL reference: ``model`` with its trainable weights replaced by ``weights`` (the
    ``trainable_state_dict`` of the policy when RL began), frozen. Without LoRA a deep copy;
    with LoRA ``model`` itself, given a frozen ``reference`` adapter (``reference_policy``
    runs it). ``model``'s own weights and trainable set are left as they were."""
    if not hasattr(model, "peft_config"):
        ref = copy.deepcopy(model).eval()
        ref.load_state_dict(weights, strict=False)
        return ref.requires_grad_(False)
    active = model.active_adapter
    if REFERENCE_ADAPTER not in model.peft_config:
        # added frozen; `active` stays
        model.add_adapter(REFERENCE_ADAPTER, model.peft_config[active])
    with torch.no_grad():
        for name, p in model.named_parameters():
            if f".{REFERENCE_ADAPTER}." in name:
                p.copy_(weights[name.replace(f".{REFERENCE_ADAPTER}.", f".{active}.")])
                p.requires_grad_(False)
    return model


@contextmanager
def reference_policy(model):
    """Run ``model`` as the KL reference: its ``reference`` adapter when it has one (in eval
    mode, then the trained adapter is active and trainable again), else ``model`` as it is."""
    if REFERENCE_ADAPTER not in getattr(model, "peft_config", {}):
        yield model
        return
    active, training = model.active_adapter, model.training
    model.set_adapter(REFERENCE_ADAPTER, inference_mode=True)
    model.eval()
    try:
        yield model
    finally:
        # the policy's adapter: active and trainable; the reference frozen
        model.set_adapter(active)
        model.train(training)


def save_adapter(model, out, dtype=torch.float16) -> None:
    """The active LoRA adapter of a peft ``model`` as a peft folder (``adapter_config.json`` +
    ``adapter_model.safetensors``), its weights cast to ``dtype`` (fp16: SmolLM2's r=16 adapter
    on all seven projections is 9.8 MB), written beside ``out`` and renamed into place."""
    import os
    import shutil
    from pathlib import Path

    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    out = Path(out)
    tmp = out.with_name(f".tmp-{out.name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    name = model.active_adapter
    state = get_peft_model_state_dict(model, adapter_name=name)
    save_file({k: v.detach().to(dtype).contiguous() for k, v in state.items()},
              str(tmp / "adapter_model.safetensors"), metadata={"format": "pt"})
    model.peft_config[name].save_pretrained(str(tmp))
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)


def is_adapter(path) -> bool:
    """Whether ``path`` is a saved LoRA adapter folder (``save_adapter``, peft's layout)."""
    from pathlib import Path

    return path is not None and (Path(path) / "adapter_config.json").is_file()


def merge_adapter(model, folder):
    """``model`` (the base) with the adapter saved in ``folder`` merged into its weights."""
    from peft import PeftModel

    return PeftModel.from_pretrained(model, str(folder)).merge_and_unload()


def continue_adapter(model, folder, settings):
    """``model`` (the base) wrapped with the adapter saved in ``folder``, trainable and in fp32
    (peft upcasts a saved fp16 adapter), so training goes on from it and the adapter saved at
    the end holds both (a warm start's and RL's steps). Its rank, alpha and targets must be
    ``settings``' (a ``LoraSettings``): another shape would not be the adapter the config says."""
    import json
    from pathlib import Path

    from peft import PeftModel

    saved = json.loads((Path(folder) / "adapter_config.json").read_text())
    want = {"r": settings.r, "lora_alpha": settings.alpha}
    got = {k: saved.get(k) for k in want}
    present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    targets = set(settings.target_modules) & present
    if got != want or set(saved.get("target_modules") or []) != targets:
        raise ValueError(f"the adapter in {folder} (r={got['r']}, alpha={got['lora_alpha']}, "
                         f"targets {sorted(saved.get('target_modules') or [])}) is not the one "
                         f"lora.* describes (r={settings.r}, alpha={settings.alpha}, targets "
                         f"{sorted(targets)}): set lora.* to match, "
                         "or lora.enabled=false to train its merged weights")
    return PeftModel.from_pretrained(model, str(folder), is_trainable=True)


def count_parameters(model) -> tuple[int, int]:
    """(trainable, total)."""
    total = sum(p.numel() for p in model.parameters())
    return sum(p.numel() for p in model.parameters() if p.requires_grad), total
