"""``TrainConfig``: every knob of ``agentsearch train``, one documented field each.

Presets live in ``agentsearch/configs/*.yaml``; ``key=value`` overrides go on top
(``agentsearch train --preset tiny --out runs/x steps=50 replay=hdr replay.tau=1e-3``).
``replay=KIND`` is shorthand for ``replay.kind=KIND``. Derived values are checked in
``__post_init__``; the resolved config is written to the run folder as ``config.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from agentsearch.core.config import ConfigError
from agentsearch.trainer.rollout_config import (
    AsyncConfig,
    ReliabilityConfig,
    SamplingConfig,
    ToolLatency,
)
from agentsearch.warmstart.sft_config import SFTConfig

__all__ = ["TrainConfig", "ReplayConfig", "LoraSettings", "SFTConfig", "EvalConfig",
           "ToolLatency", "SamplingConfig", "AsyncConfig", "ReliabilityConfig"]


@dataclass
class ReplayConfig:
    """Which replay strategy fills the batch next to the fresh groups (HDR by default)."""

    kind: str = "hdr"
    """A registered replay kind: ``none`` = on-policy; ``hdr`` = Headroom-Drift Replay;
    ``naive``, ``recency``, ``headroom_only``, ``drift_only`` = the paper's baselines;
    ``success_only``; ``per``, ``fresh_per`` (FreshPER), ``recycle`` (query recycling); or
    your own (``agentsearch.replay.register_replay``)."""
    k_rep: int = 4
    """Replayed groups per step (paper: 64 next to 128 fresh for search)."""
    tau: float = 1e-2
    """Drift gate: a stored group is admissible iff mean((logp_now - logp_gen)^2) <= tau."""
    capacity: int = 64
    """FIFO buffer capacity in groups (paper: 512)."""
    scan_chunk: int = 8
    """Groups scored per teacher-forced forward pass during the scan."""
    headroom_weighting: Literal["sign", "advantage"] = "sign"
    """``sign``: per-token headroom 1-p (A>0) or p (A<0); ``advantage``: weighted by |A|."""
    drift_kind: Literal["l2", "l1"] = "l2"
    """``l2``: mean squared logprob gap (the paper's gate); ``l1``: |mean gap| (cancelling)."""
    success_threshold: float = 0.0
    """Ingress success = answer_correct when the task gives it, else reward > this."""
    per_alpha: float = 0.6
    """``per``/``fresh_per``: a stored group is drawn in proportion to (mean |A|)^per_alpha
    (prioritized replay's alpha; 0 = uniform)."""
    age_tau: float = 8.0
    """``fresh_per``: each priority is discounted by exp(-age / age_tau), age in steps since
    the group was generated (``per`` ignores it: no discount)."""
    recycle_after: int = 4
    """``recycle``: a zero-variance group's task is drawn again this many steps later."""

    def __post_init__(self):
        from agentsearch.replay.strategies import replay_kinds

        if self.kind not in replay_kinds():
            raise ConfigError(f"replay.kind: {self.kind!r} is not one of the registered replay "
                              f"kinds {replay_kinds()} (register your own with "
                              "agentsearch.replay.register_replay)")


@dataclass
class LoraSettings:
    """peft LoRA; ``enabled=false`` trains all weights (the default for tiny models)."""

    enabled: bool = False
    """Train a LoRA adapter instead of all weights."""
    r: int = 16
    """LoRA rank."""
    alpha: int = 32
    """LoRA scaling numerator (scale = alpha / r)."""
    dropout: float = 0.0
    """Dropout on the LoRA input."""
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj",
                                                               "o_proj", "gate_proj", "up_proj",
                                                               "down_proj"])
    """Linear layers that get adapters (names missing from the model are skipped)."""


@dataclass
class EvalConfig:
    every: int = 10
    """Evaluate every N optimizer steps (0 = only before and after training)."""
    split: str = "dev"
    """The env's split to evaluate on (world: train/dev/test)."""
    questions: str | None = None
    """A held-out question file (JSONL/parquet) instead of ``split``, for custom data; required
    when ``env_kwargs.questions`` is set (evals never fall back to the training file)."""
    limit: int = 200
    """Questions per evaluation (0 = all); which ones: ``per_source``."""
    per_source: Literal["equal", "proportional", "first"] = "equal"
    """How ``limit`` picks questions from a file whose rows all have a ``data_source`` and that
    has several (Search-R1's merged test.parquet lists NQ first): ``equal`` = the same number
    from each source (a smaller source gives all it has, the others share the rest),
    ``proportional`` = each source's share of the file, ``first`` = the first N rows. Fixed
    seed: every run evaluates the same questions. Other data (the world) takes the first N."""
    n: int = 1
    """Samples per question: Mean@n and Best@n."""
    temperature: float = 0.0
    """0 = greedy."""
    chunk: int = 0
    """Play the eval's episodes this many at a time, every turn of a chunk before the next
    chunk starts (0 = all at once). With vLLM prefix caching a chunk's later turns find their
    earlier turns' KV still cached; all 300 at once overflow the KV cache and prefill the whole
    conversation again at each turn (``real_lm.md`` measures it)."""
    backend: Literal["train", "vllm"] = "train"
    """The engine evals generate with: ``train`` = the run's own generation backend; ``vllm`` =
    a vLLM engine of its own (``eval.vllm_dtype``), given the weights as trained so far before
    each eval, so that runs which generate differently (HF, a bf16 engine, TRL's trainer in
    scripts/bench_vs_trl.py) are scored by the same engine. ``agentsearch eval`` uses it too."""
    vllm_dtype: Literal["auto", "float32", "bfloat16", "float16"] = "float32"
    """The weights and KV cache of that engine (``eval.backend=vllm``); float32 greedy picks
    the HF policy's own tokens."""
    stop_at: float | None = None
    """Stop the run after the first eval (step 0's included) whose ``eval/mean_at_n`` reaches
    this: a run timed to a target score ends there (checkpointed, final weights saved); None =
    train on to ``steps`` / ``time_budget_s``."""


@dataclass
class TrainConfig:
    """One GRPO (+ replay) run. Fields are grouped as: task, model, rollout, loss, optimiser,
    replay, warm start, evaluation, run folder."""

    # --- task
    env: str = "agentsearch/Search-v0"
    """A registered env id."""
    env_kwargs: dict = field(default_factory=dict)
    """Passed to the env constructor (e.g. turn_format, topk, retriever, world_seed)."""
    # --- model
    model: str = "tiny"
    """``tiny``/``tiny-s``/``small`` (built from a config; ``tiny+worlds``: with the tokenizer
    trained on other worlds than the training one), a shipped base (``data.paths.BASE_DIRS``),
    ``smollm2``, or a path."""
    init_from: str | None = None
    """Load weights from this folder (e.g. a previous run's ``final``) instead of ``model``. A
    saved LoRA adapter (``RUN/warm_start``, ``RUN/adapter``) goes on ``model``: with
    ``lora.enabled`` it is the adapter that trains on (same r, alpha, targets), else merged."""
    lora: LoraSettings = field(default_factory=LoraSettings)
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """``auto`` = bf16 on CUDA when training a LoRA adapter (the adapter itself stays fp32),
    else fp32. Full-weight training in bf16 is refused: AdamW on bf16 weights rounds updates
    smaller than ~1/256 of a weight (lr 1e-6 steps) to zero."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less GPU memory, ~30% more update time)."""
    device: str = "auto"
    """``auto`` (CUDA if available), ``cpu``, ``cuda``, ``cuda:1``, ..."""
    # --- rollout
    steps: int = 50
    """Optimizer steps of GRPO."""
    prompts_per_step: int = 16
    """Fresh groups (prompts) per step."""
    group_size: int = 8
    """Responses per prompt (GRPO's n)."""
    max_turns: int = 4
    """Agent turns per episode (out of turns = truncated). Search-R1's ``max_turns=N`` is N + 1
    here (its N search turns, then a final answer turn); ``env_kwargs.max_turns`` must not
    differ."""
    max_seq_len: int = 1024
    """Token budget of an episode (prompt + turns + observations); longer ones are truncated."""
    generation: SamplingConfig = field(default_factory=SamplingConfig)
    tool_latency: ToolLatency = field(default_factory=ToolLatency)
    async_: AsyncConfig = field(default_factory=AsyncConfig)
    """Streaming rollout (``async.*`` in presets and overrides: ``async`` is a Python keyword)."""
    reliability: ReliabilityConfig = field(default_factory=ReliabilityConfig)
    # --- loss
    loss: str = "grpo"
    """A registered loss: token-level clipped surrogate (``grpo``, GRPO/DAPO), sequence-level
    ratio (``gspo``), clipped IS weight with stop-gradient (``cispo``), or your own
    (``agentsearch.algorithms.losses.register_loss``); see ``algorithms/losses.py``."""
    clip_low: float | None = 0.2
    """Lower clip: ratios below 1 - clip_low are clipped (GSPO uses ~3e-4). ``none``: no lower
    bound, only for a loss that allows it (``cispo``: MiniMax-M1 clips its IS weight from
    above only)."""
    clip_high: float = 0.28
    """> clip_low is DAPO's clip-higher."""
    dual_clip: float | None = None
    """Dual-clip PPO bound c > 1 for negative advantages (None = off; loss=grpo, or a registered
    loss with ``dual_clip=True``)."""
    agg: Literal["token", "sequence"] = "token"
    """Loss aggregation: over all tokens of the batch (DAPO) or mean of sequence means (GRPO);
    GSPO is per sequence either way (``losses.aggregation``)."""
    advantage_scale: Literal["std", "none"] = "std"
    """Divide group-centred rewards by the group std (GRPO) or not (Dr. GRPO)."""
    dynamic_sampling: bool = False
    """Drop zero-variance groups from the update (DAPO); their share is logged either way."""
    regenerate_rounds: int = 0
    """With ``dynamic_sampling``: up to this many extra rollout rounds per step on new prompts,
    each replacing the step's zero-variance groups, until it holds ``prompts_per_step`` groups
    with signal (DAPO's dynamic sampling with regeneration, arXiv 2503.14476; the extra
    generation and tool time count in the step). 0: zero-variance groups are only dropped.
    Lock-step rollout (``async.enabled=false``) only."""
    prompt_skip: int = 0
    """GRESO-style pre-rollout filtering (arXiv 2506.02177): skip a training prompt whose last
    ``prompt_skip`` visits all gave zero-variance groups (0 = off). Skips are logged
    (``sampler/skipped``); a prompt the rule would skip is still tried with probability
    ``prompt_skip_explore``, so one the policy has grown into can come back."""
    prompt_skip_explore: float = 0.1
    """Probability that a prompt ``prompt_skip`` would skip is visited anyway."""
    overlong_buffer: int = 0
    """DAPO soft overlong shaping over the last N tokens of the policy-token budget
    (``max_response_tokens``; 0 = off)."""
    overlong_penalty: float = 1.0
    """Penalty at the policy-token budget for the overlong shaping."""
    max_response_tokens: int | None = None
    """Policy-token budget DAPO's overlong shaping measures (the response's own tokens,
    without prompt and observations); None = max_turns * generation.max_new_tokens."""
    kl_coef: float = 0.0
    """KL to the reference policy: the policy RL starts from, after the warm start (kept in
    ``RUN_DIR/reference.pt``; with LoRA a frozen copy of the adapter). 0 = off."""
    kl_kind: Literal["k1", "k2", "k3"] = "k3"
    """KL estimator (k3: unbiased, non-negative)."""
    # --- optimiser
    lr: float = 1e-4
    """AdamW learning rate of the RL phase."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    adam_betas: list[float] = field(default_factory=lambda: [0.9, 0.99])
    """AdamW (beta1, beta2) of the RL phase (torch's and verl's default: 0.9, 0.999)."""
    warmup_steps: int = 0
    """Linear learning-rate warmup (training steps: the schedule steps once per step)."""
    grad_clip: float = 1.0
    """Global gradient-norm clip."""
    micro_batch_size: int = 16
    """Sequences per forward/backward; gradients accumulate over an optimizer step's rows."""
    shared_prefix: bool = False
    """Forward the update's rows as a prefix tree (``models.prefix_tree``): tokens that rows
    share from their start (the system prompt, a group's question, a search two samples made
    alike) go through the model once, with grad, and the rows' own tokens run on their keys and
    values; the same logprobs and gradient as ``micro_batch_size`` rows at a time, in fewer
    tokens (``train/positions_forwarded``). Text rows of an HF causal LM; images and the
    entropy bonus take the micro-batch path."""
    update_minibatch_size: int | None = None
    """Rows (episodes) per optimizer step: the step's rows are cut in order into mini-batches
    of this size, one optimizer step each; None = one step on all of them. Search-R1 (verl's
    ``ppo_mini_batch_size``) takes 10 steps per 2,560-episode batch. Later mini-batches see a
    ratio away from 1, so the clip matters: the standard reuse of a costly batch."""
    update_epochs: int = 1
    """Passes over the step's rows (verl's ``ppo_epochs``, OpenRLHF's ``max_epochs``)."""
    rescore_groups: int | None = None
    """Fresh groups per step the trainer rescores before the update (``time/logprobs``: one
    teacher-forced forward giving the ratio denominator, the replay state and
    ``rollout/logprob_gap``); None = all. The other groups take their ratio denominator from
    the update's own forward at the pre-update weights, detached (exact for a one-step update:
    the ratio is 1, as in TRL with one iteration), and are stored with those logprobs; the
    rescored ones still measure the sampler's gap for the sync alarm (0 turns it off). Saves a
    forward over every token (36 of 148 s of a SmolLM2 step). Needs update_epochs=1, no
    update_minibatch_size and async off (later mini-batches and stale groups need the
    pre-update logprobs before the update)."""
    entropy_coef: float = 0.0
    """Entropy bonus: the loss subtracts this times the policy-token entropy, aggregated like
    the loss (verl's ``entropy_coeff``: 0.001 in Search-R1's scripts)."""
    # --- replay
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    # --- warm start and evaluation
    sft: SFTConfig = field(default_factory=SFTConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    # --- run folder
    seed: int = 0
    """Seeds model init, task order, sampling and env resets."""
    time_budget_s: float | None = None
    """Training seconds (``time/train_cumulative``: eval and checkpoint excluded) after which
    the run stops: the step that passes it is the last one (evaluated, checkpointed, final
    weights saved); None = run all ``steps``. A resumed run counts the seconds already spent."""
    checkpoint_every: int = 10
    """Save a resumable checkpoint every N steps (and at the end)."""
    tensorboard: bool = True
    """Write TensorBoard events to RUN_DIR/tb."""
    wandb_project: str | None = None
    """Log to this Weights & Biases project too (needs wandb and a login)."""
    threads: int = 0
    """torch intra-op threads (0 = all cores)."""
    keep_freed_memory: bool = True
    """glibc malloc keeps freed memory for reuse (no block mapped on its own, the heap never
    trimmed: ``agentsearch.core.cpu_memory``): on this project's 2-core VM a step's 64 HF
    rollouts of SmolLM2 took 430-505 s with glibc's defaults (page faults) and 287-296 s with
    this. The price: the heap's peak stays resident. False = glibc's defaults."""

    def __post_init__(self):
        problems = []
        if len(self.adam_betas) != 2 or not all(0 <= b < 1 for b in self.adam_betas):
            problems.append(f"adam_betas={self.adam_betas}: two numbers in [0, 1)")
        if self.update_minibatch_size is not None and self.update_minibatch_size < 1:
            problems.append("update_minibatch_size must be >= 1 (or none)")
        if self.update_epochs < 1:
            problems.append("update_epochs must be >= 1")
        if self.entropy_coef < 0:
            problems.append("entropy_coef must be >= 0")
        if self.rescore_groups is not None and (
                self.rescore_groups < 0 or self.update_epochs != 1
                or self.update_minibatch_size is not None or self.async_.enabled):
            problems.append(f"rescore_groups={self.rescore_groups} must be >= 0 and needs "
                            "update_epochs=1, update_minibatch_size=none and async.enabled=false "
                            "(the update's own forward stands in for the rescore only when it is "
                            "the one step at the pre-update weights); or rescore_groups=none")
        if self.steps < 0:
            problems.append(f"steps={self.steps} must be >= 0")
        if self.group_size < 2:
            problems.append(f"group_size={self.group_size}: GRPO needs at least 2 responses per "
                            "prompt")
        if self.prompts_per_step < 1:
            problems.append("prompts_per_step must be >= 1")
        if self.replay.kind == "recycle" and self.async_.enabled:
            problems.append("replay.kind=recycle with async.enabled: the streaming pool draws "
                            "tasks on its own thread; query recycling runs lock-step only")
        if self.replay.kind != "none" and self.replay.k_rep < 0:
            problems.append("replay.k_rep must be >= 0")
        if self.replay.tau < 0:
            problems.append("replay.tau must be >= 0")
        if (self.clip_low is not None and self.clip_low < 0) or self.clip_high < 0:
            problems.append("clip_low/clip_high must be >= 0")
        if self.max_turns < 1:
            problems.append("max_turns must be >= 1")
        if self.micro_batch_size < 1:
            problems.append("micro_batch_size must be >= 1")
        if self.generation.temperature <= 0:
            problems.append(f"generation.temperature={self.generation.temperature} must be > 0: "
                            "training logprobs divide the logits by it (for greedy evaluation set "
                            "eval.temperature=0)")
        if self.time_budget_s is not None and self.time_budget_s <= 0:
            problems.append(f"time_budget_s={self.time_budget_s} must be > 0 (or none)")
        if self.checkpoint_every < 1:
            problems.append(f"checkpoint_every={self.checkpoint_every} must be >= 1 (a checkpoint "
                            "is also saved at the end; for only that one set "
                            "checkpoint_every=steps)")
        from agentsearch.algorithms.losses import loss_names, loss_spec

        if self.loss not in loss_names():
            problems.append(f"loss: {self.loss!r} is not one of the registered losses "
                            f"{loss_names()} (register your own with "
                            "agentsearch.algorithms.losses.register_loss)")
        else:  # the loss's own rules: dual_clip support, clip ranges (losses.LossSpec)
            spec = loss_spec(self.loss)
            if self.dual_clip is not None and not spec.dual_clip:
                problems.append(f"dual_clip={self.dual_clip} is used only by loss=grpo, not "
                                f"{self.loss}: unset it (dual_clip=none)")
            if self.clip_low is None and not spec.unbounded_low:
                problems.append("clip_low=none (no lower clip) is for losses that allow it "
                                f"(cispo), not {self.loss}: give a number (e.g. clip_low=0.2)")
            elif spec.check is not None:
                problems += list(spec.check(self))
        if self.dual_clip is not None and self.dual_clip <= 1:
            problems.append(f"dual_clip={self.dual_clip} must be > 1 (or none)")
        if self.overlong_buffer < 0:
            problems.append(f"overlong_buffer={self.overlong_buffer} must be >= 0 (0 = off)")
        if self.max_response_tokens is not None and self.max_response_tokens < 1:
            problems.append(f"max_response_tokens={self.max_response_tokens} must be >= 1 "
                            "(or none: max_turns * generation.max_new_tokens)")
        elif self.overlong_buffer > self.response_budget:
            problems.append(f"overlong_buffer={self.overlong_buffer} exceeds the policy-token "
                            f"budget {self.response_budget}, so even an empty response would be "
                            "penalised: lower overlong_buffer or raise max_response_tokens")
        if self.regenerate_rounds < 0 or (self.regenerate_rounds and not self.dynamic_sampling):
            problems.append(f"regenerate_rounds={self.regenerate_rounds} needs "
                            "dynamic_sampling=true and must be >= 0 (it regenerates the groups "
                            "dynamic sampling drops)")
        if self.regenerate_rounds and self.async_.enabled:
            problems.append("regenerate_rounds with async.enabled: regeneration runs after a "
                            "lock-step rollout; set async.enabled=false")
        if self.prompt_skip < 0 or not 0.0 <= self.prompt_skip_explore <= 1.0:
            problems.append(f"prompt_skip={self.prompt_skip} must be >= 0 and prompt_skip_explore="
                            f"{self.prompt_skip_explore} in [0, 1]")
        problems += self.async_.problems(self.generation.backend) + self.reliability.problems()
        problems += self.tool_latency.problems()
        if self.async_.max_staleness >= 1 and self.loss == "gspo":
            problems.append("async.max_staleness=1 with loss=gspo: the decoupled objective weights "
                            "tokens, GSPO's ratio is per sequence; use grpo or cispo")
        if self.dtype == "bfloat16" and not self.lora.enabled:
            problems.append("dtype=bfloat16 with full-weight training: AdamW on bf16 weights "
                            "rounds small updates to zero; train a LoRA adapter "
                            "(lora.enabled=true) or dtype=float32")
        if problems:
            raise ConfigError("; ".join(problems))

    @property
    def response_budget(self) -> int:
        """Policy tokens a response may have: ``max_response_tokens`` or, when None,
        ``max_turns * generation.max_new_tokens``."""
        if self.max_response_tokens is not None:
            return self.max_response_tokens
        return self.max_turns * self.generation.max_new_tokens

    def overlong_shaping(self) -> tuple[int, int, float] | None:
        """``(policy-token budget, buffer, penalty)`` for ``episodes_to_groups``; None when off."""
        if self.overlong_buffer <= 0:
            return None
        return self.response_budget, self.overlong_buffer, self.overlong_penalty
