"""LoRA weight sync from OpenRLHF's actor to its vLLM engines: the adapter, not a merge.

OpenRLHF 0.11.2 syncs weights by walking ``model.named_parameters()`` and broadcasting each
one to the engines' ``WorkerWrap.update_weight``. Under LoRA (``--ds.lora.rank > 0``) that
fails (OpenRLHF issue #1349: the adapter's names have no target in vLLM's model). Merging
``W + (alpha/r) B A`` and sending it does not fail, but it is wrong in the engines' bf16:
an entry moves only if ``|dW| > ulp(W)/2``, so small updates round away (an emulation with
W ~ N(0, 0.02), r = 16, |B| ~ 1e-4 kept 18% of the update) and vLLM samples an older policy
than the learner scores.

So the engines run vLLM's own LoRA (``enable_lora``): the base weights stay as loaded and
every sync sends only the adapter, which vLLM applies next to the base, as the learner does
(``y = W x + (alpha/r) B (A x)``); nothing is rounded into ``W``. The same design as the
single-node ``rollout/vllm.py``.

- ``adapter_state(model, gather)``: the active adapter's weights (peft's own names and
  config); ZeRO-3 shards are gathered first (``gather``); pure, tested on CPU;
- ``broadcast_lora_adapter``: replaces ``ActorPPOTrainer.broadcast_to_vllm`` under LoRA:
  rank 0 puts the adapter in Ray's object store once, every engine loads it;
- ``LoraRolloutActor``: OpenRLHF's ``RolloutRayActor`` with ``enable_lora``, an
  ``agentsearch_load_adapter`` method (write the adapter to a local folder, register a new
  ``LoRARequest``, drop the old one) and a ``generate`` that passes the current adapter;
- ``create_lora_vllm_engines``: OpenRLHF's ``create_vllm_engines`` building those actors;
- ``LoraSyncPolicyActor``: OpenRLHF's ``PolicyModelActor`` that installs the sync (the
  launcher's entry point swaps both in).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import types
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

from agentsearch.engines.openrlhf.compat import import_openrlhf

import_openrlhf()
import ray  # noqa: E402
from openrlhf.trainer.ray.ppo_actor import PolicyModelActor  # noqa: E402
from openrlhf.trainer.ray.vllm_engine import RolloutRayActor  # noqa: E402

__all__ = ["adapter_state", "write_adapter", "vllm_lora_rank", "broadcast_lora_adapter",
           "LoraRolloutActor", "lora_rollout_actor", "create_lora_vllm_engines",
           "LoraSyncPolicyActor", "LoraSyncPolicyModelActor"]

VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""``max_lora_rank`` values vLLM accepts (``vllm.config.lora.MaxLoRARanks``)."""


def vllm_lora_rank(rank: int) -> int:
    """The smallest ``max_lora_rank`` vLLM accepts that holds an adapter of ``rank``."""
    for r in VLLM_LORA_RANKS:
        if r >= rank:
            return r
    raise ValueError(f"LoRA rank {rank} is above vLLM's largest max_lora_rank "
                     f"{VLLM_LORA_RANKS[-1]}")


def adapter_state(model, gather: Callable[[list], object] | None = None) -> dict:
    """``{"config": ..., "weights": {name: tensor}}``: the peft ``model``'s active adapter as
    ``save_pretrained`` would write it (peft's names and config), on CPU. ``gather(params)``
    is a context manager that materialises sharded parameters (ZeRO-3's
    ``GatheredParameters``); None = already whole."""
    from peft import get_peft_model_state_dict

    name = (model.active_adapter if isinstance(model.active_adapter, str)
            else model.active_adapter[0])
    params = [p for n, p in model.named_parameters() if ".lora_" in n]
    with (gather or (lambda ps: nullcontext()))(params):
        weights = {k: v.detach().to("cpu", copy=True).contiguous()
                   for k, v in get_peft_model_state_dict(model, adapter_name=name).items()}
    config = model.peft_config[name].to_dict()
    def plain(x):  # what json cannot write: sets sorted, anything else as its str
        return sorted(x) if isinstance(x, set) else str(x)

    return {"config": json.loads(json.dumps(config, default=plain)), "weights": weights}


def write_adapter(state: dict, folder: str | Path) -> Path:
    """An ``adapter_state`` as a peft adapter folder (what vLLM's ``LoRARequest`` loads)."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(state["weights"], str(folder / "adapter_model.safetensors"))
    (folder / "adapter_config.json").write_text(json.dumps(state["config"]))
    return folder


def broadcast_lora_adapter(self) -> None:
    """``ActorPPOTrainer.broadcast_to_vllm`` for a LoRA actor (bound to the trainer instance):
    every rank joins the gather (ZeRO-3), rank 0 sends the adapter to every engine."""
    import deepspeed
    import torch.distributed as dist

    model = self.actor.model.module
    zero3 = self.strategy.args.ds.zero_stage == 3
    state = adapter_state(model, lambda ps: deepspeed.zero.GatheredParameters(ps, enabled=zero3))
    if dist.get_rank() == 0:
        ref = ray.put(state)
        ray.get([e.agentsearch_load_adapter.remote(ref) for e in self.vllm_engines])
    dist.barrier()


class LoraRolloutActor(RolloutRayActor.__ray_actor_class__):
    """OpenRLHF's rollout actor serving the policy as base + the last synced LoRA adapter."""

    max_lora_rank = 16
    """Set per run by ``lora_rollout_actor`` (a vLLM ``max_lora_rank``)."""

    async def __init__(self, *args, **kwargs):
        kwargs.update(enable_lora=True, max_loras=1, max_lora_rank=self.max_lora_rank)
        self._lora = None
        self._lora_version = 0
        self._lora_dir = Path(tempfile.mkdtemp(prefix="agentsearch-lora-"))
        await super().__init__(*args, **kwargs)

    async def agentsearch_load_adapter(self, state: dict) -> int:
        """Serve ``state`` (an ``adapter_state``) from now on; returns its version (1, 2, ...).
        A new ``LoRARequest`` id per sync makes vLLM load it; the previous one is dropped."""
        self._lora_version += 1
        from vllm.lora.request import LoRARequest

        folder = write_adapter(state, self._lora_dir / f"adapter-{self._lora_version}")
        old, self._lora = self._lora, LoRARequest(f"policy-{self._lora_version}",
                                                  self._lora_version, str(folder))
        await self.llm.add_lora(self._lora)
        if old is not None:
            await self.llm.remove_lora(old.lora_int_id)
            shutil.rmtree(old.lora_path, ignore_errors=True)
        return self._lora_version

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        """``RolloutRayActor.generate`` with the current adapter (text prompts only)."""
        from copy import deepcopy

        from vllm.inputs import TokensPrompt
        from vllm.utils import random_uuid

        if multi_modal_data:
            raise ValueError("the LoRA rollout actor serves text prompts only")
        last = None
        async for out in self.llm.generate(TokensPrompt(prompt_token_ids=list(prompt_token_ids)),
                                           deepcopy(sampling_params), request_id=random_uuid(),
                                           lora_request=self._lora):
            last = out
        return last


def lora_rollout_actor(rank: int, *, remote: bool = True):
    """A ``LoraRolloutActor`` class for adapters of ``rank`` (a Ray actor class, or the plain
    class with ``remote=False``)."""
    cls = type("LoraRolloutActor", (LoraRolloutActor,), {"max_lora_rank": vllm_lora_rank(rank)})
    return ray.remote(cls) if remote else cls


def create_lora_vllm_engines(rank: int) -> Callable:
    """OpenRLHF's ``create_vllm_engines``, building ``LoraRolloutActor`` engines for ``rank``
    (it reads ``RolloutRayActor`` from its module: swapped for the call)."""
    import openrlhf.trainer.ray.vllm_engine as vllm_engine

    create = vllm_engine.create_vllm_engines

    def create_vllm_engines(*args, **kwargs):
        saved = vllm_engine.RolloutRayActor
        vllm_engine.RolloutRayActor = lora_rollout_actor(rank)
        try:
            return create(*args, **kwargs)
        finally:
            vllm_engine.RolloutRayActor = saved

    return create_vllm_engines


class LoraSyncPolicyActor(PolicyModelActor.__ray_actor_class__):
    """OpenRLHF's policy actor whose weight sync, under LoRA, is ``broadcast_lora_adapter``."""

    def init_model_from_pretrained(self, strategy, pretrain, max_steps=None, vllm_engines=None):
        super().init_model_from_pretrained(strategy, pretrain, max_steps, vllm_engines)
        if strategy.args.ds.lora.rank > 0:
            self.trainer.broadcast_to_vllm = types.MethodType(broadcast_lora_adapter, self.trainer)


LoraSyncPolicyModelActor = ray.remote(num_gpus=1)(LoraSyncPolicyActor)
