"""Every training-config field on OpenRLHF: mapped to its arguments, or refused, never dropped.

The fields are ``TrainConfig``'s own leaves (``leaf_fields``); what is written here by hand
is only what is specific to the engine, in three tables:

- ``DIRECT``: fields OpenRLHF takes as they are, and the argument that carries each
  (``launch.py`` passes them from this table; ``tests/test_openrlhf_pins.py`` sets each to a
  value that is no default and reads it back from OpenRLHF's parser);
- ``NOTES``: how the launcher maps any other field, or why it is refused or not applicable
  (also after a ``DIRECT`` argument: what else the field does); ``section.*`` covers every
  leaf of a section without an entry of its own;
- ``WITH``: fields that go with another one (refused with it, or applied with it).

``FIELDS`` (generated) says for every leaf what the launch does with it, and ``table()`` is
the table in docs/openrlhf.md (``python scripts/config_reference.py --write``).
``check_fields`` fails for a leaf with no entry, saying where to add it, and
``refusals(cfg)`` lists the settings OpenRLHF would run differently from the local trainer
(an unmapped field set to anything but its default among them), each with the reason;
``launch.preflight`` raises on them.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from functools import reduce

from agentsearch.core.config import config_key
from agentsearch.trainer.train_config import TrainConfig

__all__ = ["DIRECT", "NOTES", "WITH", "FIELDS", "fields", "check_fields", "unmapped", "leaf_fields",
           "refusals", "table", "warmup_ratio", "field_value"]

HERE = "agentsearch/engines/openrlhf/mapping.py"

DIRECT: dict[str, str] = {
    "max_seq_len": "--data.max_len",
    "group_size": "--rollout.n_samples_per_prompt",
    "generation.temperature": "--rollout.temperature",
    "generation.top_p": "--rollout.top_p",
    "generation.max_new_tokens": "--rollout.max_new_tokens",
    "kl_coef": "--algo.kl.init_coef",
    "lr": "--actor.adam.lr",
    "weight_decay": "--actor.adam.weight_decay",
    "adam_betas": "--actor.adam.betas",
    "update_epochs": "--train.max_epochs",
    "grad_clip": "--actor.max_norm",
    "eval.n": "--eval.n_samples_per_prompt",
    "eval.temperature": "--eval.temperature",
    "seed": "--train.seed",
    "checkpoint_every": "--ckpt.save_steps",
}
"""TrainConfig field -> the OpenRLHF argument that takes its value as it is."""

NOTES: dict[str, str] = {
    "env": "in every prompt's label (the executor plays it)",
    "env_kwargs": "in every prompt's label; `index=http://...` is probed before Ray starts",
    "model": "`--actor.model_name_or_path` (built-in names are written to a folder)",
    "init_from": "`--actor.model_name_or_path` (wins over `model`)",
    "lora.enabled": "`--ds.lora.rank` > 0; the adapter is synced to vLLM's LoRA (`lora_sync.py`)",
    "lora.r": "`--ds.lora.rank`", "lora.alpha": "`--ds.lora.alpha`",
    "lora.dropout": "`--ds.lora.dropout`", "lora.target_modules": "`--ds.lora.target_modules`",
    "dtype": "replaced by `param_dtype` (DeepSpeed mixed precision); the launcher prints it",
    "gradient_checkpointing": "`--actor.gradient_checkpointing_enable`",
    "device": "not applicable: Ray places the models (`gpus_per_node`, `vllm_engines`)",
    "steps": "`steps x prompts_per_step` prompts written; the LR schedule spans `steps` "
             "optimizer steps",
    "prompts_per_step": "fresh prompts generated per step, replay on or off",
    "max_turns": "in every prompt's label",
    "max_seq_len": "and the executor's episode budget",
    "generation.backend": "not applicable: OpenRLHF always generates with vLLM",
    "generation.max_new_tokens": "and the per-turn cap in the label",
    "generation.vllm_gpu_memory_utilization": "replaced by `vllm_gpu_memory_utilization`",
    "generation.vllm_kv_cache_gb": "not applicable (CPU vLLM only)",
    "generation.vllm_lora_sync": "not applicable (OpenRLHF syncs LoRA its own way)",
    "generation.vllm_dtype": "not applicable (the local engine; OpenRLHF's vLLM engines load "
                             "the model in its own dtype)",
    "generation.vllm_prefix_caching": "not applicable (the local engine; OpenRLHF sets up its "
                                      "own vLLM engines)",
    "generation.vllm_enforce_eager": "`--vllm.enforce_eager`",
    "tool_latency.kind": "refused unless `none` (simulated latency is a local-trainer feature)",
    "async.enabled": "not applicable: OpenRLHF's agent executor already plays each episode on "
                     "its own against vLLM's async engine",
    "async.max_staleness": "refused unless 0 (OpenRLHF's own `--train.async_enable` is refused "
                           "too)",
    "reliability.outage_budget_s": "in every prompt's label: the executors' envs wait out an "
                                   "infra outage that long, then the rollout fails (OpenRLHF's "
                                   "`--ckpt` checkpoints resume it)",
    "reliability.warn_every_s": "in every prompt's label (the executors' outage warnings)",
    "async.tool_timeout_s": "refused unless none (the executor's tools keep their own timeouts)",
    "async.max_batch": "not applicable (the local HF micro-batcher)",
    "async.max_wait_s": "not applicable (the local HF micro-batcher)",
    "loss": "`grpo` -> `--actor.policy_loss_type ppo`, `gspo` -> `gspo`; other losses refused",
    "clip_low": "`--actor.eps_clip_low_high LOW HIGH`; None (no lower bound) refused",
    "clip_high": "`--actor.eps_clip_low_high LOW HIGH`",
    "dual_clip": "`--actor.dual_clip`",
    "agg": "`token` -> `token-mean`, `sequence` -> `seq-mean-token-mean`",
    "advantage_scale": "`std` -> `group_norm`, `none` -> `dr_grpo` (group estimators, as replay "
                       "needs)",
    "dynamic_sampling": "refused: OpenRLHF's dynamic filtering resamples prompts to refill the "
                        "batch; ours drops zero-signal groups without drawing more",
    "prompt_skip": "refused unless 0: the prompts are OpenRLHF's dataset, sampled by its own "
                   "dataloader",
    "overlong_buffer": "refused unless 0: OpenRLHF measures one generation against "
                       "max_new_tokens, ours an episode's policy tokens against "
                       "`max_response_tokens`",
    "kl_coef": "with `--algo.kl.use_loss` (KL as a loss, never in the rewards, so replayed "
               "groups keep their advantages); with `agg=sequence` refused (OpenRLHF averages "
               "the KL loss per token)",
    "kl_kind": "`--algo.kl.estimator`",
    "update_minibatch_size": "`--train.batch_size` (rows per optimizer step); refused with "
                             "replay on (a replay step's rows include padded slots)",
    "time_budget_s": "refused unless none: the OpenRLHF launch runs `steps` (it has no "
                     "training-time budget)",
    "rescore_groups": "not applicable: OpenRLHF's experience maker scores every sample with the "
                      "actor before the update (the same numbers, one more forward)",
    "entropy_coef": "`--actor.entropy_coef`; with `agg=sequence` refused (OpenRLHF averages it "
                    "per token)",
    "warmup_steps": "`--actor.lr_scheduler constant_with_warmup`, `--actor.lr_warmup_ratio` "
                    "giving exactly `warmup_steps` steps (OpenRLHF's warmup starts at 0, ours at "
                    "lr/warmup: one step apart; with several optimizer steps a step, OpenRLHF "
                    "ramps within the steps)",
    "micro_batch_size": "`--train.micro_batch_size` (per GPU) unless `micro_batch_size` is set",
    "shared_prefix": "not applicable: how agentsearch's own update forwards its rows (the same "
                     "gradient); OpenRLHF's actor forwards every sample whole (packed)",
    "replay.kind": "the trainer's replay strategy (`ppo_trainer.py`); `none` = OpenRLHF's own "
                   "step",
    "replay.k_rep": "`--rollout.batch_size = prompts_per_step + k_rep` slots; empty slots are "
                    "padded; and the replay settings file",
    "replay.*": "the replay settings file (`launch.settings` passes every `replay.` field)",
    "sft.*": "refused when `sft.steps` or `sft.pretrain_steps` > 0: warm-start with "
             "`agentsearch train` and launch with `train.init_from=RUN/final`",
    "eval.every": "the local schedule, run by the trainer (`ppo_trainer.eval_due`): step 0, "
                  "every `eval.every` steps and the last step (0: step 0 and the last); "
                  "OpenRLHF's `--eval.steps` is off",
    "eval.split": "the eval prompt file's split",
    "eval.questions": "the eval prompt file's source",
    "eval.limit": "eval questions unless `eval_questions`",
    "eval.per_source": "how the eval prompt file samples a multi-source file (as the local eval)",
    "eval.chunk": "not applicable (OpenRLHF's agent executor plays each eval episode on its own "
                  "against vLLM's async engine)",
    "eval.backend": "not applicable (OpenRLHF's evals generate on its own vLLM engines)",
    "eval.vllm_dtype": "not applicable (the vLLM engines' dtype is the launch's)",
    "eval.stop_at": "refused unless none: the OpenRLHF launch runs `steps` (it does not end a "
                    "run at a score)",
    "seed": "and the prompt order",
    "checkpoint_every": "(resume is on: `--ckpt.load_enable`)",
    "tensorboard": "`--logger.tensorboard_dir` when true",
    "wandb_project": "`--logger.wandb.project`; needs `--logger.wandb.key` in `extra_args`",
    "threads": "not applicable (the local trainer's CPU threads)",
    "keep_freed_memory": "not applicable (the local trainer's glibc malloc settings)",
}
"""TrainConfig field (or ``section.*``) -> how the launch maps it, or why it is refused."""

WITH: dict[str, str] = {
    "tool_latency.*": "tool_latency.kind",
    "async.is_cap": "async.max_staleness", "async.oversample": "async.max_staleness",
    "async.replay_topup": "async.max_staleness",
    "regenerate_rounds": "dynamic_sampling",
    "prompt_skip_explore": "prompt_skip",
    "overlong_penalty": "overlong_buffer", "max_response_tokens": "overlong_buffer",
}
"""TrainConfig field (or ``section.*``) -> the field it goes with."""

LOSSES = {"grpo": "ppo", "gspo": "gspo"}


def leaf_fields(cls=TrainConfig, prefix: str = "") -> list[str]:
    """Dotted names of every leaf of a config dataclass (nested sections flattened, as in
    ``core.config.reference``), in declaration order. From the types alone: building a
    ``TrainConfig`` would import the replay registry (and torch)."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        key = prefix + config_key(f.name)
        nested = hints.get(f.name)
        out += leaf_fields(nested, key + ".") if dataclasses.is_dataclass(nested) else [key]
    return out


def field_value(cfg, leaf: str):
    """The value of the dotted ``leaf`` in ``cfg`` (``async.x`` is the attribute ``async_``)."""
    def attr(obj, key):
        return getattr(obj, key if hasattr(obj, key) else key + "_")

    return reduce(attr, leaf.split("."), cfg)


def _section(leaf: str) -> str | None:
    return leaf.rsplit(".", 1)[0] + ".*" if "." in leaf else None


def _entry(leaf: str) -> tuple[str, str] | None:
    """(the entry that covers ``leaf``, what it says), the leaf's own entries first."""
    own = [f"`{DIRECT[leaf]}`"] if leaf in DIRECT else []
    own += [NOTES[leaf]] if leaf in NOTES else []
    if own:
        return leaf, " ".join(own)
    for key in (leaf, _section(leaf)):
        if key in WITH and WITH[key] != leaf:
            return key, f"with `{WITH[key]}`"
    if _section(leaf) in NOTES:
        return _section(leaf), NOTES[_section(leaf)]
    return None


def unmapped(cls=TrainConfig) -> list[str]:
    """Leaves of ``cls`` that no entry covers."""
    return [leaf for leaf in leaf_fields(cls) if _entry(leaf) is None]


def check_fields(cls=TrainConfig) -> None:
    """A ``ValueError`` naming the leaves with no entry (and where to add one), and the
    entries that name no leaf."""
    leaves = leaf_fields(cls)
    missing = unmapped(cls)
    sections = {_section(x) for x in leaves}
    stale = sorted(k for k in {*DIRECT, *NOTES, *WITH} if k not in leaves and k not in sections)
    if missing:
        raise ValueError(f"TrainConfig fields the OpenRLHF launch says nothing about: {missing}. "
                         f"Add each to {HERE}: DIRECT (the OpenRLHF argument that takes its value "
                         "as it is; launch.py passes it), NOTES (how the launcher maps it, or why "
                         "it is refused: then refuse it in refusals()) or WITH (the field it goes "
                         "with); then `python scripts/config_reference.py --write`")
    if stale:
        raise ValueError(f"entries in {HERE} that name no TrainConfig field: {stale}")


def fields(cls=TrainConfig) -> dict[str, str]:
    """Every leaf of ``cls`` -> what the launch does with it; a section all of whose leaves one
    ``section.*`` entry covers is one row, ``section.*``."""
    out: dict[str, str] = {}
    covered = {leaf: _entry(leaf) for leaf in leaf_fields(cls)}
    for leaf, entry in covered.items():
        if entry is None:
            continue
        key, text = entry
        sec = _section(leaf)
        whole = key == sec and all(e and e[0] == sec
                                   for x, e in covered.items() if _section(x) == sec)
        out[sec if whole else leaf] = text
    return out


FIELDS: dict[str, str] = fields()
"""TrainConfig field (dotted, or ``section.*``) -> what the OpenRLHF launch does with it."""


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
        out.append("train.clip_low=None (no lower clip): OpenRLHF's eps_clip_low_high needs a "
                   "number")
    if t.dynamic_sampling:
        out.append("train.dynamic_sampling: " + NOTES["dynamic_sampling"].removeprefix("refused: "))
    if t.replay.kind == "success_only":
        out.append("train.replay.kind=success_only: its replayed groups hold fewer than "
                   "group_size rows; OpenRLHF's experience slots hold group_size")
    if t.replay.kind == "recycle":
        out.append("train.replay.kind=recycle: OpenRLHF's prompt dataloader has no way to put "
                   "a prompt back; query recycling runs in the local trainer only")
    if t.prompt_skip:
        out.append("train.prompt_skip > 0: " + NOTES["prompt_skip"].split(": ", 1)[1])
    if t.overlong_buffer > 0:
        out.append("train.overlong_buffer > 0: " + NOTES["overlong_buffer"].split(": ", 1)[1])
    if t.kl_coef > 0 and t.agg == "sequence":
        out.append("train.kl_coef > 0 with train.agg=sequence: OpenRLHF averages the KL loss per "
                   "token")
    if t.entropy_coef > 0 and t.agg == "sequence":
        out.append("train.entropy_coef > 0 with train.agg=sequence: OpenRLHF averages the "
                   "entropy per token")
    if t.update_minibatch_size and t.replay.kind != "none" and t.replay.k_rep > 0:
        out.append("train.update_minibatch_size with replay on: a replay step's rows include "
                   "padded empty slots, so OpenRLHF's mini-batches would not be the local "
                   "trainer's")
    if t.async_.max_staleness > 0:
        out.append("train.async.max_staleness > 0: generation beside the update runs in the local "
                   "trainer only")
    if t.async_.tool_timeout_s is not None:
        out.append("train.async.tool_timeout_s: "
                   + NOTES["async.tool_timeout_s"].removeprefix("refused unless none "))
    if t.time_budget_s is not None:
        out.append("train.time_budget_s: " + NOTES["time_budget_s"].split(": ", 1)[1])
    if t.eval.stop_at is not None:
        out.append("train.eval.stop_at: " + NOTES["eval.stop_at"].split(": ", 1)[1])
    if t.tool_latency.kind != "none":
        out.append("train.tool_latency: simulated tool latency runs in the local trainer only")
    if t.sft.steps > 0 or t.sft.pretrain_steps > 0:
        out.append("train.sft: " + NOTES["sft.*"].split(": ", 1)[1])
    if t.wandb_project and "--logger.wandb.key" not in extra_args:
        out.append("train.wandb_project: OpenRLHF logs to W&B only with --logger.wandb.key "
                   "(extra_args)")
    default = type(t)()
    out += [f"train.{leaf}: the OpenRLHF launch does not map this field yet ({HERE})"
            for leaf in unmapped(type(t)) if field_value(t, leaf) != field_value(default, leaf)]
    return out


def table() -> str:
    """The markdown table of ``FIELDS`` (docs/openrlhf.md)."""
    rows = ["| `train.` field | on OpenRLHF |", "|---|---|"]
    rows += [f"| `{k}` | {v} |" for k, v in FIELDS.items()]
    return "\n".join(rows) + "\n"
