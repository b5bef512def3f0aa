"""``agentsearch openrlhf launch``: our training config as an OpenRLHF ``train_ppo_ray`` run.

    agentsearch openrlhf launch --preset openrlhf-search-r1 out=runs/orl [key=value ...] [--dry-run]

The config (``OpenRLHFConfig``) is one of our training presets (``train.*``: env, model, LoRA,
loss, replay, rollout sizes) plus how OpenRLHF lays the run out on the cluster. The launcher

1. checks what would fail later, before Ray starts (``preflight``): the OpenRLHF version, the
   extra, the env id, the model, a remote retriever (``/health``, or a Search-R1 ``/retrieve``);
2. writes the prompt files into the run folder: one line per task, ``{"prompt": question,
   "label": task_label(...)}`` (the executor plays the task the label names);
3. builds the command ``python -m agentsearch.engines.openrlhf.entry --agentsearch-config
   RUN/agentsearch.json <train_ppo_ray arguments>``, and parses its arguments with OpenRLHF's
   own parser and post-parse checks (``parse_openrlhf_args``), so a command we print is one
   OpenRLHF accepts;
4. prints it (``--dry-run``) or runs it.

Mapping (every ``train.`` field, ``mapping.FIELDS``; docs/openrlhf.md has the table): one
optimizer step per rollout batch, the local trainer's step: ``prompts_per_step`` fresh
prompts, plus up to ``k_rep`` replayed groups when replay is on (``rollout.batch_size`` =
``prompts_per_step + k_rep`` slots; ``train.batch_size`` = slots x group); ``steps x
prompts_per_step`` prompts are written and the LR schedule spans ``steps``. Settings OpenRLHF
would run differently are refused in ``preflight`` with the reason (``mapping.refusals``).
"""

from __future__ import annotations

import json
import runpy
import shlex
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from agentsearch.core.config import (
    ConfigError,
    dump,
    from_dict,
    load_preset,
    parse_overrides,
    to_dict,
)
from agentsearch.core.config import _merge as merge_dicts
from agentsearch.engines.openrlhf.mapping import DIRECT, LOSSES, field_value, refusals, warmup_ratio
from agentsearch.trainer.train_config import TrainConfig

__all__ = ["OpenRLHFConfig", "load_config", "preflight", "write_prompts", "build_command",
           "parse_openrlhf_args", "launch", "notes", "rollout_batch"]


@dataclass
class OpenRLHFConfig:
    """One OpenRLHF run of an agentsearch training config."""

    train: TrainConfig = field(default_factory=TrainConfig)
    """Our training config (any training preset's keys, under ``train.``)."""
    out: str = "runs/openrlhf"
    """Run folder: prompt files, the settings file, OpenRLHF's checkpoints (``ckpt``), the
    final model (``final``) and TensorBoard logs (``tb``). Must be on storage every node sees."""
    num_nodes: int = 1
    """Nodes for the actor (and reference) model."""
    gpus_per_node: int = 1
    """GPUs per node for the actor."""
    vllm_engines: int = 1
    """vLLM rollout engines."""
    vllm_tensor_parallel: int = 1
    """GPUs per vLLM engine."""
    vllm_gpu_memory_utilization: float = 0.6
    """Share of each GPU vLLM may take (colocated runs share it with the actor)."""
    colocate_all: bool = True
    """Actor, reference and vLLM engines share the GPUs (OpenRLHF's hybrid engine)."""
    zero_stage: int = 2
    """DeepSpeed ZeRO stage (3 shards the weights; the LoRA sync gathers them per layer)."""
    param_dtype: str = "bf16"
    """DeepSpeed parameter dtype (``bf16`` or ``fp16``)."""
    micro_batch_size: int | None = None
    """Sequences per GPU per actor forward/backward in the update; None =
    ``train.micro_batch_size``."""
    rollout_micro_batch_size: int = 8
    """Sequences per forward when making experience (and per replay-scan forward)."""
    eval_questions: int | None = None
    """Questions in the eval prompt file: None = ``train.eval.limit`` (0 there = the whole
    split); 0 = no evaluation."""
    is_correction: Literal["off", "token", "seq"] = "token"
    """OpenRLHF's train/rollout importance-sampling correction
    (``--algo.advantage.is_correction_level``): bf16 vLLM kernels do not reproduce the
    learner's logprobs, so sampled tokens are reweighted by ``pi_learner / pi_vllm``. The local
    HF backend scores with the model that sampled and needs none."""
    is_correction_mode: Literal["clip", "mask"] = "clip"
    """``clip`` clamps the token ratio (TIS), ``mask`` drops out-of-band tokens (IcePop)."""
    extra_args: list = field(default_factory=list)
    """More ``train_ppo_ray`` arguments, passed as they are (e.g. ``["--logger.wandb.key",
    "..."]``)."""


def load_config(preset: str | None, overrides: list[str]) -> OpenRLHFConfig:
    """A launch config: an OpenRLHF preset, or any training preset (it becomes ``train``)."""
    base = load_preset(preset) if preset else {}
    if base and "train" not in base:  # a training preset
        base = {"train": base}
    if isinstance(base.get("train"), str):  # `train: tiny` names a training preset
        base["train"] = load_preset(base["train"])
    data = merge_dicts(base, parse_overrides(overrides))
    train = from_dict(TrainConfig, data.pop("train", {}), prefix="train.")
    return from_dict(OpenRLHFConfig, {**data, "train": train})


def _replaying(cfg: OpenRLHFConfig) -> bool:
    return cfg.train.replay.kind != "none" and cfg.train.replay.k_rep > 0


def rollout_batch(cfg: OpenRLHFConfig) -> int:
    """Group slots per step: ``prompts_per_step`` fresh + ``k_rep`` for replayed groups."""
    return cfg.train.prompts_per_step + (cfg.train.replay.k_rep if _replaying(cfg) else 0)


def preflight(cfg: OpenRLHFConfig) -> None:
    """Everything that can be checked before Ray starts; a ``ConfigError`` says what to fix."""
    from agentsearch.engines.openrlhf.compat import check_version

    check_version()
    t = cfg.train
    import gymnasium

    import agentsearch.envs  # noqa: F401 - registers the ids

    if t.env not in gymnasium.registry:
        known = sorted(k for k in gymnasium.registry if k.startswith("agentsearch/"))
        raise ConfigError(f"train.env={t.env!r} is not a registered env; agentsearch's are {known}")
    from agentsearch.engines.openrlhf.executor import check_env_supported

    try:
        check_env_supported(t.env)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    refused = refusals(t, cfg.extra_args)
    if refused:
        raise ConfigError("OpenRLHF would run these differently from the local trainer:\n  - "
                          + "\n  - ".join(refused))
    index = str(t.env_kwargs.get("index") or "")
    if index.startswith(("http://", "https://")):
        from agentsearch.retrievers.retrieve_protocol import probe_service

        try:  # /health, or (Search-R1's own server has none) one Search-R1 /retrieve request
            probe_service(index, timeout=5.0)
        except Exception as e:  # noqa: BLE001 - any failure means the service is not usable
            raise ConfigError(f"the retriever at {index} does not answer ({e}); start it with "
                              "`agentsearch serve --index ...` (or Search-R1's "
                              "retrieval_server.py) on a host every node can reach") from None


def model_path(cfg: OpenRLHFConfig, run: Path, *, write: bool) -> str:
    """What OpenRLHF loads: a folder (our built-in names are written into ``run/model``),
    or a Hugging Face id as given."""
    t = cfg.train
    source = t.init_from or t.model
    if Path(source).exists():
        return str(Path(source).resolve())
    from agentsearch.data.paths import BASE_DIRS

    if source in BASE_DIRS:  # a shipped base (tiny-base, tiny-chain-base, tiny-math-base)
        return str(BASE_DIRS[source])
    if source == "smollm2":
        from agentsearch.models.text import smollm2_path

        return str(smollm2_path())
    from agentsearch.models.text import split_model_name

    if split_model_name(source):  # built from a config: save it where every node can read it
        folder = run / "model"
        if write:
            from agentsearch.models.text import load_model

            model, tok = load_model(source, seed=t.seed)
            model.save_pretrained(folder)
            tok.save_pretrained(folder)
        return str(folder.resolve())
    return source


def write_prompts(cfg: OpenRLHFConfig, run: Path) -> tuple[Path, Path | None]:
    """The train (``steps x prompts_per_step`` prompts, cycling the split) and eval prompt files."""
    from agentsearch.engines.openrlhf.executor import task_label
    from agentsearch.trainer.setup import TaskSampler, build_envs

    t = cfg.train
    run.mkdir(parents=True, exist_ok=True)

    def rows(tasks):
        return "".join(json.dumps({"prompt": task.get("question", str(task.get("id"))),
                                   "label": task_label(t.env, t.env_kwargs, task,
                                                       max_turns=t.max_turns,
                                                       max_new_tokens=t.generation.max_new_tokens,
                                                       reliability=vars(t.reliability))}) + "\n"
                       for task in tasks)

    tasks = TaskSampler(build_envs(t, 1, split="train")[0].tasks,
                        t.seed).sample(t.steps * t.prompts_per_step)
    train = run / "train.jsonl"
    train.write_text(rows(tasks))
    limit = t.eval.limit if cfg.eval_questions is None else cfg.eval_questions
    if cfg.eval_questions == 0:
        return train, None
    from agentsearch.trainer.eval import sample_per_source

    dev_envs = build_envs(t, 1, split=t.eval.split, questions=t.eval.questions)
    dev = sample_per_source(dev_envs[0].tasks, limit, t.eval.per_source)
    evalf = run / "eval.jsonl"
    evalf.write_text(rows(dev))
    return train, evalf


def optimizer_steps_per_step(cfg: OpenRLHFConfig) -> int:
    """OpenRLHF optimizer steps per training step: the rollout's rows / ``train.batch_size``,
    times the epochs."""
    t = cfg.train
    rows = rollout_batch(cfg) * t.group_size
    return max(1, rows // (t.update_minibatch_size or rows)) * t.update_epochs


def openrlhf_arguments(cfg: OpenRLHFConfig, run: Path, model: str, train: Path,
                       evalf: Path | None) -> list[str]:
    """``train_ppo_ray`` arguments for ``cfg`` (module doc for the mapping)."""
    from agentsearch.engines.openrlhf.engine import AGENT_FUNC_PATH

    t = cfg.train
    batch = rollout_batch(cfg)
    args = {
        "--actor.model_name_or_path": model, "--train.agent_func_path": AGENT_FUNC_PATH,
        "--data.prompt_dataset": str(train), "--data.input_key": "prompt",
        "--data.label_key": "label",
        "--data.max_samples": str(t.steps * t.prompts_per_step),
        "--rollout.batch_size": str(batch),
        "--rollout.micro_batch_size": str(cfg.rollout_micro_batch_size),
        "--train.batch_size": str(t.update_minibatch_size or batch * t.group_size),
        "--train.micro_batch_size": str(cfg.micro_batch_size or t.micro_batch_size),
        "--train.num_episodes": "1",
        "--algo.advantage.estimator": "group_norm" if t.advantage_scale == "std" else "dr_grpo",
        "--algo.advantage.is_correction_level": cfg.is_correction,
        "--algo.advantage.is_correction_mode": cfg.is_correction_mode,
        "--actor.policy_loss_type": LOSSES[t.loss],
        "--actor.loss_agg_mode": "token-mean" if t.agg == "token" else "seq-mean-token-mean",
        "--actor.lr_scheduler": "constant_with_warmup",
        "--actor.lr_warmup_ratio": repr(warmup_ratio(t.warmup_steps, t.steps,
                                                     optimizer_steps_per_step(cfg))),
        "--algo.kl.estimator": t.kl_kind if t.kl_coef > 0 else "k1",
        "--actor.num_nodes": str(cfg.num_nodes),
        "--actor.num_gpus_per_node": str(cfg.gpus_per_node),
        "--ref.num_nodes": str(cfg.num_nodes), "--ref.num_gpus_per_node": str(cfg.gpus_per_node),
        "--vllm.num_engines": str(cfg.vllm_engines),
        "--vllm.tensor_parallel_size": str(cfg.vllm_tensor_parallel),
        "--vllm.gpu_memory_utilization": str(cfg.vllm_gpu_memory_utilization),
        "--ds.zero_stage": str(cfg.zero_stage), "--ds.param_dtype": cfg.param_dtype,
        "--ckpt.path": str(run / "ckpt"), "--ckpt.output_dir": str(run / "final"),
    }
    argv = [x for kv in args.items() for x in kv]
    for name, flag in DIRECT.items():  # fields OpenRLHF takes as they are
        value = field_value(t, name)
        argv += [flag, *(map(str, value) if isinstance(value, (list, tuple)) else [str(value)])]
    argv += ["--actor.eps_clip_low_high", str(t.clip_low), str(t.clip_high), "--ckpt.load_enable"]
    if t.entropy_coef > 0:
        argv += ["--actor.entropy_coef", str(t.entropy_coef)]
    if t.kl_coef > 0:
        # KL as a loss: the rewards (and stored advantages) stay KL-free
        argv.append("--algo.kl.use_loss")
    if t.dual_clip is not None:
        argv += ["--actor.dual_clip", str(t.dual_clip)]
    if t.generation.vllm_enforce_eager:
        argv.append("--vllm.enforce_eager")
    if t.tensorboard:
        argv += ["--logger.tensorboard_dir", str(run / "tb")]
    if t.wandb_project:
        argv += ["--logger.wandb.project", t.wandb_project]
    if t.lora.enabled:
        argv += ["--ds.lora.rank", str(t.lora.r), "--ds.lora.alpha", str(t.lora.alpha),
                 "--ds.lora.dropout", str(t.lora.dropout),
                 "--ds.lora.target_modules", *t.lora.target_modules]
    if t.gradient_checkpointing:
        argv.append("--actor.gradient_checkpointing_enable")
    if cfg.colocate_all:
        argv += ["--train.colocate_all", "--vllm.enable_sleep", "--ds.enable_sleep"]
    if evalf is not None:
        # no --eval.steps: the trainer evaluates on the local schedule (ppo_trainer.eval_due)
        argv += ["--eval.dataset", str(evalf)]
    return argv + [str(a) for a in cfg.extra_args]


def settings(cfg: OpenRLHFConfig) -> dict:
    """What ``entry.py`` needs beyond OpenRLHF's arguments (written to RUN/agentsearch.json)."""
    # every replay field, as the local trainer's build_replay passes them (mapping: replay.*)
    replay = None if not _replaying(cfg) else {**asdict(cfg.train.replay),
                                               "seed": cfg.train.seed}
    return {"replay": replay, "lora_rank": cfg.train.lora.r if cfg.train.lora.enabled else 0,
            "fresh_per_step": cfg.train.prompts_per_step, "eval_every": cfg.train.eval.every,
            "optimizer_steps_per_step": optimizer_steps_per_step(cfg),
            "out": str(Path(cfg.out).resolve()),
            "config": to_dict(cfg)}


def build_command(cfg: OpenRLHFConfig, *, write: bool = True) -> list[str]:
    """The full command (and, with ``write``, the run folder's files it reads)."""
    run = Path(cfg.out)
    run.mkdir(parents=True, exist_ok=True)
    train, evalf = write_prompts(cfg, run)
    (run / "agentsearch.json").write_text(json.dumps(settings(cfg), indent=1, default=str))
    dump(cfg.train, run / "config.yaml")  # what `agentsearch pareto` labels the run by
    argv = openrlhf_arguments(cfg, run, model_path(cfg, run, write=write), train, evalf)
    return [sys.executable, "-m", "agentsearch.engines.openrlhf.entry",
            "--agentsearch-config", str(run / "agentsearch.json"), *argv]


class _Parsed(Exception):
    def __init__(self, args):
        super().__init__("parsed")
        self.parsed = args


@contextmanager
def _stop_before_ray():
    """Run ``train_ppo_ray``'s ``__main__`` up to ``train(args)``'s first real step: Ray is
    reported as initialised (so ``train`` does not start it) and ``get_strategy`` hands the
    parsed, checked arguments back instead of building DeepSpeed."""
    import openrlhf.utils as utils
    import ray

    def capture(args):
        raise _Parsed(args)

    saved = utils.get_strategy, ray.is_initialized
    utils.get_strategy, ray.is_initialized = capture, (lambda: True)
    try:
        yield
    finally:
        utils.get_strategy, ray.is_initialized = saved


def parse_openrlhf_args(argv: list[str]):
    """``train_ppo_ray``'s arguments parsed and checked by OpenRLHF itself (its parser and the
    assertions of its ``__main__``), as the nested namespace its code reads; a ``ConfigError``
    when OpenRLHF refuses them."""
    from agentsearch.engines.openrlhf.compat import import_openrlhf

    import_openrlhf()
    saved = sys.argv
    sys.argv = ["train_ppo_ray", *argv]
    try:
        with _stop_before_ray():
            runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__")
    except _Parsed as p:
        return p.parsed
    except SystemExit as e:
        raise ConfigError(f"OpenRLHF's train_ppo_ray parser refused the arguments (exit {e.code}); "
                          "see its message above") from None
    except Exception as e:  # noqa: BLE001 - its __main__ checks by assert, or fails on what it lacks
        raise ConfigError(f"OpenRLHF refused the settings: {type(e).__name__}: {e}") from None
    finally:
        sys.argv = saved
    raise ConfigError("train_ppo_ray ran to the end without reaching get_strategy")


def notes(cfg: OpenRLHFConfig) -> list[str]:
    """Fields the launch replaces by an OpenRLHF-level setting (printed, never silent)."""
    t, out = cfg.train, []
    if t.dtype not in ("auto", {"bf16": "bfloat16"}.get(cfg.param_dtype, cfg.param_dtype)):
        out.append(f"train.dtype={t.dtype} is replaced by param_dtype={cfg.param_dtype} "
                   "(DeepSpeed mixed precision)")
    if cfg.micro_batch_size and cfg.micro_batch_size != t.micro_batch_size:
        out.append(f"train.micro_batch_size={t.micro_batch_size} is replaced by "
                   f"micro_batch_size={cfg.micro_batch_size}")
    return out


def launch(cfg: OpenRLHFConfig, *, dry_run: bool = False) -> int:
    preflight(cfg)
    for line in notes(cfg):
        print(f"note: {line}", file=sys.stderr)
    cmd = build_command(cfg, write=not dry_run)
    entry = cmd.index("--agentsearch-config")
    parse_openrlhf_args(cmd[entry + 2:])
    print(shlex.join(cmd), flush=True)
    if dry_run:
        return 0
    return subprocess.call(cmd)
