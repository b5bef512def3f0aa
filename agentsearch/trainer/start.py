"""Starting a run: what ``loop.train`` does once before its first step (the run folder, the
optimizer, the resume, the warm start and the KL reference, the counting scorer). Kept out
of ``loop.py`` so the loop reads top to bottom; the order of the calls there is the order
that keeps a resumed run's RNGs and records the same as an unbroken one's."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import torch

from agentsearch.algorithms.optim import make_optimizer
from agentsearch.core.config import dump
from agentsearch.core.cpu_memory import keep_freed_memory
from agentsearch.core.provenance import stamp_run
from agentsearch.core.reliability import outages
from agentsearch.models.logprobs import make_score_fn, token_logprobs
from agentsearch.models.lora import (
    frozen_reference,
    is_adapter,
    reference_policy,
    save_adapter,
)
from agentsearch.models.prefix_tree import make_tree_score_fn
from agentsearch.trainer.checkpoint import (
    latest_checkpoint,
    load_checkpoint,
    load_reference,
    save_reference,
)
from agentsearch.trainer.eval import eval_envs
from agentsearch.trainer.setup import (
    TaskSampler,
    build_backend,
    build_envs,
    eval_engine_config,
    preflight,
    seed_everything,
)
from agentsearch.trainer.train_config import TrainConfig
from agentsearch.warmstart.stages import warm_start

log = logging.getLogger("agentsearch.train")
__all__ = ["open_run", "open_envs", "open_engines", "build_optimizer", "CountingScorer",
           "resume_run", "warm_start_run"]


def open_run(cfg: TrainConfig, run_dir: Path) -> None:
    """The run folder with ``config.yaml`` and a provenance stamp (each start: the revision,
    clean or not, the machine); seeds, threads and the infra-outage budget."""
    run_dir.mkdir(parents=True, exist_ok=True)
    dump(cfg, run_dir / "config.yaml")
    stamp_run(run_dir)
    seed_everything(cfg.seed)
    if cfg.keep_freed_memory:
        keep_freed_memory()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    outages.configure(budget_s=cfg.reliability.outage_budget_s,
                      warn_every_s=cfg.reliability.warn_every_s)


def open_envs(cfg: TrainConfig, events):
    """``(envs, sampler, (eval_envs, eval_tasks))``: one training env per episode of a step
    (oversampled groups included), checked against their tools first (``preflight``), the
    task sampler, and the eval's envs and questions; all closed with the ``events`` loop."""
    n_episodes = (cfg.prompts_per_step + cfg.async_.oversample) * cfg.group_size
    envs = build_envs(cfg, n_episodes, split="train")
    events.own(envs)  # their tools and retriever clients close with the loop
    preflight(envs[0], loop=events)
    sampler = TaskSampler(envs[0].tasks, seed=cfg.seed, skip=cfg.prompt_skip,
                          explore=cfg.prompt_skip_explore)
    evals = eval_envs(cfg)
    events.own(evals[0])
    return envs, sampler, evals


def open_engines(cfg: TrainConfig, model, tok, events):
    """``(backend, scorer)``: the generation backend, and what the evals play on: the same one,
    or (``eval.backend=vllm``) an engine of their own, synced before each eval. A vLLM engine
    shuts down with the ``events`` loop."""
    backend = build_backend(cfg, model, tok)
    events.own(backend)
    if cfg.eval.backend == "train":
        return backend, backend
    scorer = build_backend(eval_engine_config(cfg), model, tok)
    events.own(scorer)
    return backend, scorer


def build_optimizer(cfg: TrainConfig, model):
    """``(optimizer, scheduler)``: make_optimizer's, whose betas are the warm start's, with
    RL's ``cfg.adam_betas`` set."""
    optimizer, scheduler = make_optimizer(model, cfg.lr, weight_decay=cfg.weight_decay,
                                          warmup_steps=cfg.warmup_steps)
    for group in optimizer.param_groups:
        group["betas"] = tuple(cfg.adam_betas)
    return optimizer, scheduler


class CountingScorer:
    """The trainer's ``score_fn(groups) -> [Tensor [n, T]]`` (fresh groups' logprobs and the
    replay scan): the prefix tree under ``shared_prefix``, else packed batches. ``tokens``
    counts the policy tokens scored since the last ``reset()`` (``tokens/scored``)."""

    def __init__(self, cfg: TrainConfig, model):
        make = make_tree_score_fn if cfg.shared_prefix else make_score_fn
        self.score = make(model, temperature=cfg.generation.temperature)
        self.tokens = 0.0

    def __call__(self, groups):
        self.tokens += sum(g.num_policy_tokens for g in groups)
        return self.score(groups)

    def reset(self) -> float:
        tokens, self.tokens = self.tokens, 0.0
        return tokens


def resume_run(run_dir: Path, resume: bool, *, model, optimizer, scheduler, replay, sampler,
               health):
    """``(step, state, rng)``: with ``resume``, from the last checkpoint in ``run_dir`` (weights,
    optimizer, scheduler, replay buffer, sampler and health restored; its RNGs returned to be
    set last, after the engine's start reseeds); else, or with none there, a fresh start's
    ``(0, state, None)``."""
    if not resume or (ckpt := latest_checkpoint(run_dir)) is None:
        return 0, {"train_cumulative": 0.0, "nonfinite_steps": 0}, None
    state = load_checkpoint(ckpt, model=model, optimizer=optimizer, scheduler=scheduler,
                            replay=replay, restore_rng=False)
    step, rng = state.pop("step"), state.pop("rng")  # not saved again: a later resume's own
    sampler.load_state_dict(state["sampler"])
    health.load_state_dict(state.get("health", {}))
    log.info("resuming from checkpoint %s", ckpt.name)
    return step, state, rng


def warm_start_run(cfg: TrainConfig, run_dir: Path, step: int, model, tok, envs):
    """``(sft_metrics, ref_logprobs_fn)``. At step 0: the warm start (``cfg.sft``; its seconds
    as ``time/sft``), the adapter RL starts from saved as ``RUN_DIR/warm_start`` for later
    evals, and the KL reference (the policy RL starts from) saved once, so a resumed run reads
    the same one. ``ref_logprobs_fn(ids, attn, mask)`` is None without a KL term."""
    sft_metrics = {}
    if step == 0 and (cfg.sft.steps > 0 or cfg.sft.pretrain_steps > 0):
        t0 = time.perf_counter()
        sft_metrics = warm_start(cfg, model, tok, envs, make_envs=build_envs)
        sft_metrics["time/sft"] = time.perf_counter() - t0
        log.info("warm start: %s",
                 ", ".join(f"{k.split('/')[-1]} {v:.4g}" for k, v in sft_metrics.items()))
    if step == 0 and hasattr(model, "peft_config") and (sft_metrics or is_adapter(cfg.init_from)):
        save_adapter(model, run_dir / "warm_start")
    if cfg.kl_coef <= 0:
        return sft_metrics, None
    if step == 0:
        save_reference(run_dir, model)
    reference = frozen_reference(model, load_reference(run_dir))

    def ref_logprobs(ids, attn, mask):
        with reference_policy(reference) as ref:
            return token_logprobs(ref, ids, attn, temperature=cfg.generation.temperature,
                                  target_mask=mask)
    return sft_metrics, ref_logprobs

