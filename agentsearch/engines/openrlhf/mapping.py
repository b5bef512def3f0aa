"""Every training-config field on OpenRLHF: mapped to its arguments, or refused, never dropped.

``FIELDS`` names, for every leaf of ``TrainConfig`` (``tests/test_openrlhf_pins.py`` checks
that none is missing), what the launcher does with it; ``refusals(cfg)`` lists the settings
OpenRLHF would run differently from the local trainer, each with the reason, and
``preflight`` raises on them; ``table()`` is the table in docs/openrlhf.md.
"""

from __future__ import annotations

import dataclasses
import math

from agentsearch.core.config import config_key

__all__ = ["FIELDS", "refusals", "table", "leaf_fields", "warmup_ratio"]

FIELDS: dict[str, str] = {
    "env": "in every prompt's label (the executor plays it)",
    "env_kwargs": "in every prompt's label; `index=http://...` is probed before Ray starts",
    "model": "`--actor.model_name_or_path` (built-in names are written to a folder)",
    "init_from": "`--actor.model_name_or_path` (wins over `model`)",
    "lora.enabled": "`--ds.lora.rank` > 0; the adapter is synced to vLLM's LoRA (`lora_sync.py`)",
    "lora.r": "`--ds.lora.rank`", "lora.alpha": "`--ds.lora.alpha`", "lora.dropout": "`--ds.lora.dropout`",
    "lora.target_modules": "`--ds.lora.target_modules`",
    "dtype": "replaced by `param_dtype` (DeepSpeed mixed precision); the launcher prints it",
    "gradient_checkpointing": "`--actor.gradient_checkpointing_enable`",
    "device": "not applicable: Ray places the models (`gpus_per_node`, `vllm_engines`)",
    "steps": "`steps x prompts_per_step` prompts written; the LR schedule spans `steps` optimizer steps",
    "prompts_per_step": "fresh prompts generated per step, replay on or off",
    "group_size": "`--rollout.n_samples_per_prompt`",
    "max_turns": "in every prompt's label",
    "max_seq_len": "`--data.max_len` and the executor's episode budget",
    "generation.backend": "not applicable: OpenRLHF always generates with vLLM",
    "generation.temperature": "`--rollout.temperature`", "generation.top_p": "`--rollout.top_p`",
    "generation.max_new_tokens": "`--rollout.max_new_tokens` and the per-turn cap in the label",
    "generation.vllm_gpu_memory_utilization": "replaced by `vllm_gpu_memory_utilization`",
    "generation.vllm_kv_cache_gb": "not applicable (CPU vLLM only)",
    "generation.vllm_enforce_eager": "`--vllm.enforce_eager`",
    "tool_latency.kind": "refused unless `none` (simulated latency is a local-trainer feature)",
    "tool_latency.mean_s": "with `tool_latency.kind`", "tool_latency.sigma": "with `tool_latency.kind`",
    "tool_latency.in_eval": "with `tool_latency.kind`", "tool_latency.concurrency": "with `tool_latency.kind`",
    "async.enabled": "not applicable: OpenRLHF's agent executor already plays each episode on its own "
                     "against vLLM's async engine",
    "async.max_staleness": "refused unless 0 (OpenRLHF's own `--train.async_enable` is refused too)",
    "async.is_cap": "with `async.max_staleness`",
    "async.oversample": "with `async.max_staleness`", "async.replay_topup": "with `async.max_staleness`",
    "reliability.outage_budget_s": "in every prompt's label: the executors' envs wait out an infra outage "
                                   "that long, then the rollout fails (OpenRLHF's `--ckpt` checkpoints resume it)",
    "reliability.warn_every_s": "in every prompt's label (the executors' outage warnings)",
    "async.tool_timeout_s": "refused unless none (the executor's tools keep their own timeouts)",
    "async.max_batch": "not applicable (the local HF micro-batcher)",
    "async.max_wait_s": "not applicable (the local HF micro-batcher)",
    "loss": "`grpo` -> `--actor.policy_loss_type ppo`, `gspo` -> `gspo`; other losses refused",
    "clip_low": "`--actor.eps_clip_low_high LOW HIGH`; None (no lower bound) refused",
    "clip_high": "`--actor.eps_clip_low_high LOW HIGH`",
    "dual_clip": "`--actor.dual_clip`",
    "agg": "`token` -> `token-mean`, `sequence` -> `seq-mean-token-mean`",
    "advantage_scale": "`std` -> `group_norm`, `none` -> `dr_grpo` (group estimators, as replay needs)",
    "dynamic_sampling": "refused: OpenRLHF's dynamic filtering resamples prompts to refill the batch; "
                        "ours drops zero-signal groups without drawing more",
    "regenerate_rounds": "with `dynamic_sampling` (refused)",
    "prompt_skip": "refused unless 0: the prompts are OpenRLHF's dataset, sampled by its own dataloader",
    "prompt_skip_explore": "with `prompt_skip`",
    "overlong_buffer": "refused unless 0: OpenRLHF measures one generation against max_new_tokens, ours "
                       "an episode's policy tokens against `max_response_tokens`",
    "overlong_penalty": "with `overlong_buffer`", "max_response_tokens": "with `overlong_buffer`",
    "kl_coef": "`--algo.kl.init_coef` with `--algo.kl.use_loss` (KL as a loss, never in the rewards, "
               "so replayed groups keep their advantages); with `agg=sequence` refused (OpenRLHF "
               "averages the KL loss per token)",
    "kl_kind": "`--algo.kl.estimator`",
    "lr": "`--actor.adam.lr`", "weight_decay": "`--actor.adam.weight_decay`",
    "adam_betas": "`--actor.adam.betas`",
    "update_minibatch_size": "`--train.batch_size` (rows per optimizer step); refused with replay on (a "
                             "replay step's rows include padded slots)",
    "update_epochs": "`--train.max_epochs`",
    "entropy_coef": "`--actor.entropy_coef`; with `agg=sequence` refused (OpenRLHF averages it per token)",
    "warmup_steps": "`--actor.lr_scheduler constant_with_warmup`, `--actor.lr_warmup_ratio` giving "
                    "exactly `warmup_steps` steps (OpenRLHF's warmup starts at 0, ours at lr/warmup: one step "
                    "apart; with several optimizer steps a step, OpenRLHF ramps within the steps)",
    "grad_clip": "`--actor.max_norm`",
    "micro_batch_size": "`--train.micro_batch_size` (per GPU) unless `micro_batch_size` is set",
    "replay.kind": "the trainer's replay strategy (`ppo_trainer.py`); `none` = OpenRLHF's own step",
    "replay.k_rep": "`--rollout.batch_size = prompts_per_step + k_rep` slots; empty slots are padded",
    "replay.tau": "replay settings file", "replay.capacity": "replay settings file",
    "replay.scan_chunk": "replay settings file", "replay.headroom_weighting": "replay settings file",
    "replay.drift_kind": "replay settings file", "replay.success_threshold": "replay settings file",
    "sft.*": "refused when `sft.steps` or `sft.pretrain_steps` > 0: warm-start with `agentsearch train` "
             "and launch with `train.init_from=RUN/final`",
    "eval.every": "the local schedule, run by the trainer (`ppo_trainer.eval_due`): step 0, every "
                  "`eval.every` steps and the last step (0: step 0 and the last); OpenRLHF's "
                  "`--eval.steps` is off",
    "eval.split": "the eval prompt file's split",
    "eval.questions": "the eval prompt file's source", "eval.limit": "eval questions unless `eval_questions`",
    "eval.per_source": "how the eval prompt file samples a multi-source file (as the local eval)",
    "eval.n": "`--eval.n_samples_per_prompt`", "eval.temperature": "`--eval.temperature`",
    "seed": "`--train.seed` and the prompt order",
    "checkpoint_every": "`--ckpt.save_steps` (resume is on: `--ckpt.load_enable`)",
    "tensorboard": "`--logger.tensorboard_dir` when true",
    "wandb_project": "`--logger.wandb.project`; needs `--logger.wandb.key` in `extra_args`",
    "threads": "not applicable (the local trainer's CPU threads)",
}
"""TrainConfig field (dotted) -> what the OpenRLHF launch does with it."""

LOSSES = {"grpo": "ppo", "gspo": "gspo"}


def leaf_fields(cls, prefix: str = "") -> list[str]:
    """Dotted names of every leaf field of a config dataclass."""
    out = []
    for f in dataclasses.fields(cls):
        tp = f.type if isinstance(f.type, type) else None
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            out += leaf_fields(type(default), f"{prefix}{config_key(f.name)}.")
        elif tp is not None and dataclasses.is_dataclass(tp):
            out += leaf_fields(tp, f"{prefix}{config_key(f.name)}.")
        else:
            out.append(prefix + config_key(f.name))
    return out


def warmup_ratio(warmup_steps: int, steps: int, per_step: int = 1) -> float:
    """``--actor.lr_warmup_ratio`` for exactly ``warmup_steps`` training steps of
    ``per_step`` optimizer steps each (OpenRLHF warms up ``ceil(optimizer steps x ratio)``
    optimizer steps; ``warmup/steps`` itself can round up one in floating point)."""
    ratio = max(0.0, (warmup_steps - 0.5 / per_step) / steps) if warmup_steps > 0 else 0.0
    assert math.ceil(steps * per_step * ratio) == warmup_steps * per_step
    return ratio


def refusals(t, extra_args: list[str] = ()) -> list[str]:
    """What OpenRLHF would run differently from the local trainer, with the reasons."""
    out = []
    if t.loss not in LOSSES:
        out.append(f"train.loss={t.loss!r}: OpenRLHF has the ppo-clip (grpo) and gspo losses")
    if t.clip_low is None:
        out.append("train.clip_low=None (no lower clip): OpenRLHF's eps_clip_low_high needs a number")
    if t.dynamic_sampling:
        out.append("train.dynamic_sampling: " + FIELDS["dynamic_sampling"].removeprefix("refused: "))
    if t.replay.kind == "success_only":
        out.append("train.replay.kind=success_only: its replayed groups hold fewer than group_size rows; "
                   "OpenRLHF's experience slots hold group_size")
    if t.prompt_skip:
        out.append("train.prompt_skip > 0: " + FIELDS["prompt_skip"].split(": ", 1)[1])
    if t.overlong_buffer > 0:
        out.append("train.overlong_buffer > 0: " + FIELDS["overlong_buffer"].split(": ", 1)[1])
    if t.kl_coef > 0 and t.agg == "sequence":
        out.append("train.kl_coef > 0 with train.agg=sequence: OpenRLHF averages the KL loss per token")
    if t.entropy_coef > 0 and t.agg == "sequence":
        out.append("train.entropy_coef > 0 with train.agg=sequence: OpenRLHF averages the entropy per token")
    if t.update_minibatch_size and t.replay.kind != "none" and t.replay.k_rep > 0:
        out.append("train.update_minibatch_size with replay on: a replay step's rows include padded empty "
                   "slots, so OpenRLHF's mini-batches would not be the local trainer's")
    if t.async_.max_staleness > 0:
        out.append("train.async.max_staleness > 0: generation beside the update runs in the local trainer only")
    if t.async_.tool_timeout_s is not None:
        out.append("train.async.tool_timeout_s: " + FIELDS["async.tool_timeout_s"].removeprefix("refused unless none "))
    if t.tool_latency.kind != "none":
        out.append("train.tool_latency: simulated tool latency runs in the local trainer only")
    if t.sft.steps > 0 or t.sft.pretrain_steps > 0:
        out.append("train.sft: " + FIELDS["sft.*"].split(": ", 1)[1])
    if t.wandb_project and "--logger.wandb.key" not in extra_args:
        out.append("train.wandb_project: OpenRLHF logs to W&B only with --logger.wandb.key (extra_args)")
    return out


def table() -> str:
    """The markdown table of ``FIELDS`` (docs/openrlhf.md)."""
    rows = ["| `train.` field | on OpenRLHF |", "|---|---|"]
    rows += [f"| `{k}` | {v} |" for k, v in FIELDS.items()]
    return "\n".join(rows) + "\n"
