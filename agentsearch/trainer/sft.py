"""Warm start: supervised fine-tuning on a scripted oracle agent's trajectories.

The oracle knows each synthetic-world question's reasoning chain (``gold_doc_ids``): it
searches for the first entity by name, then (two-hop and comparison questions) for the
second, then answers. It plays through the *real* environment and retriever via
``ScriptedBackend``, so its trajectories have exactly the token layout of sampled ones;
the loss covers policy tokens only (``action_mask``), never prompt or environment text.
Trajectories whose observations do not contain the answer the oracle gave (retrieval
missed) are dropped, so the warm start never teaches answering without evidence. With
``strategies`` the oracle is a population that differs only in when it stops searching
(``agentsearch.envs.oracle``): a ``one_search`` agent's answer to a bridge question is wrong,
but it is copied from what it read.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
from pathlib import Path

import torch

from agentsearch.envs.oracle import world_oracle
from agentsearch.rollout import Episode, SamplingParams, ScriptedBackend, rollout
from agentsearch.trainer.logprobs import token_logprobs
from agentsearch.trainer.losses import sft_loss
from agentsearch.trainer.update import Row, pad_rows

__all__ = ["oracle_episodes", "sft_train", "warm_start"]


def _evidence_ok(ep: Episode, tok) -> bool:
    """The episode ended in an answer that appears in what the environment showed the agent."""
    answer = str(ep.info.get("answer") or "").strip()
    if not ep.terminated or not answer:
        return False
    env_ids = [t for t, m in zip(ep.token_ids[ep.prompt_len:], ep.action_mask[ep.prompt_len:]) if not m]
    return answer in tok.decode(env_ids)


def oracle_episodes(envs, tok, *, world_seed: int = 0, world_entities: int | None = None,
                    count: int = 2000, turn_format: str = "tags", think: bool = False,
                    noise: float = 0.0, seed: int = 0, max_turns: int = 4,
                    max_seq_len: int = 1024, strategies: dict[str, float] | None = None,
                    question_types=None) -> list[Episode]:
    """Play the oracle (a population when ``strategies`` is given) on ``count`` shuffled
    train questions (of ``question_types``, None = all) through ``envs``, one batch of
    ``len(envs)`` episodes at a time; keep the evidence-backed trajectories."""
    tasks, policy = world_oracle("train", seed=world_seed, entities=world_entities,
                                 turn_format=turn_format, eos=tok.eos_token or "", think=think,
                                 noise=noise, policy_seed=seed, strategies=strategies)
    if question_types is not None:
        tasks = [t for t in tasks if t.get("type") in set(question_types)]
    random.Random(seed).shuffle(tasks)
    backend = ScriptedBackend(tok, policy)
    params = SamplingParams(max_new_tokens=256, temperature=1.0)
    kept = []
    for s in range(0, min(count, len(tasks)), len(envs)):
        chunk = tasks[s:min(s + len(envs), count)]
        eps, _ = rollout(envs[:len(chunk)], chunk, backend, params, max_turns=max_turns,
                         max_seq_len=max_seq_len, seed=seed + s)
        kept += [e for e in eps if _evidence_ok(e, tok)]
    return kept


def sft_train(model, episodes: list[Episode], *, steps: int, lr: float, batch_size: int,
              seed: int = 0, all_tokens: bool = False, log=None) -> dict[str, float]:
    """``steps`` AdamW steps of NLL on random batches of ``episodes``: on policy tokens only
    (the warm start), or on every token (``all_tokens``: language-model pretraining)."""
    if not episodes:
        raise RuntimeError("no oracle trajectories to warm start from (retrieval never found "
                           "the answers?); check the retriever or set sft.steps=0")
    device = next(model.parameters()).device
    rows = [Row(torch.tensor(e.token_ids),
                torch.ones(len(e.token_ids), dtype=torch.bool) if all_tokens
                else torch.tensor(e.action_mask, dtype=torch.bool),
                torch.zeros(len(e.token_ids)), 0.0, False) for e in episodes]
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0, betas=(0.9, 0.99))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / max(steps // 10, 1)) * max(0.1, 1 - s / max(steps, 1)))
    rng = random.Random(seed)
    model.train()
    loss_v = float("nan")
    for step in range(steps):
        mb = pad_rows(rng.sample(rows, min(batch_size, len(rows))), device)
        lp = token_logprobs(model, mb["ids"], mb["attn"], target_mask=mb["mask"])
        loss = sft_loss(lp, mb["mask"])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        loss_v = loss.item()
        if log is not None:
            log(step, loss_v)
    return {"sft/loss": loss_v, "sft/episodes": float(len(episodes)), "sft/steps": float(steps)}


# bump when pretraining's data or procedure changes, so stale cached bases are not reused
_PRETRAIN_VERSION = 2


def _pretrain_cache_path(cfg) -> Path:
    """``$AGENTSEARCH_CACHE/pretrained/<key>``: the key hashes everything stage 1 depends on
    (model, seed, LoRA, the pretraining and oracle settings, the env's transcript format)."""
    from agentsearch.cache import cache_dir

    s = cfg.sft
    fields = dict(version=_PRETRAIN_VERSION, model=cfg.model, init_from=cfg.init_from, seed=cfg.seed,
                  lora=dataclasses.asdict(cfg.lora), dtype=cfg.dtype, env=cfg.env,
                  env_kwargs=cfg.env_kwargs, max_turns=cfg.max_turns, max_seq_len=cfg.max_seq_len,
                  steps=s.pretrain_steps, world=s.pretrain_world_seed, worlds=s.pretrain_worlds,
                  episodes=s.pretrain_episodes, lr=s.pretrain_lr or s.lr,
                  batch_size=s.pretrain_batch_size or s.batch_size, noise=s.noise, think=s.think,
                  strategies=s.pretrain_strategies or s.strategies)
    key = hashlib.sha1(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return cache_dir() / "pretrained" / f"{cfg.model}-{key}"


def _save_pretrained(model, metrics: dict[str, float], folder: Path) -> None:
    """Write the weights and metrics to a private folder, then publish it (``publish_dir``)."""
    from safetensors.torch import save_file

    from agentsearch.cache import publish_dir

    tmp = folder.with_name(f"{folder.name}.tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    # clone: tied embeddings share storage, which safetensors refuses to write twice
    save_file({k: v.detach().clone().contiguous() for k, v in model.state_dict().items()},
              tmp / "model.safetensors")
    (tmp / "metrics.json").write_text(json.dumps(metrics))
    publish_dir(tmp, folder)


def _progress(stage: str, steps: int, every: int):
    """A ``log(step, loss)`` callback printing one line every ``every`` steps (plain lines,
    so a log file shows progress too)."""
    import time

    t0 = time.perf_counter()

    def log(step: int, loss: float) -> None:
        if every and ((step + 1) % every == 0 or step + 1 == steps):
            el = time.perf_counter() - t0
            eta = el / (step + 1) * (steps - step - 1)
            print(f"[{stage}] step {step + 1}/{steps} loss {loss:.4f} ({el:.0f} s, ~{eta:.0f} s left)",
                  flush=True)
    return log


def warm_start(cfg, model, tok, envs) -> dict[str, float]:
    """The ``sft`` section of a ``TrainConfig``, in two stages.

    1. ``pretrain_steps`` (tiny models start from random weights): causal-LM training on
       *every* token of oracle transcripts from ``pretrain_worlds`` disjoint worlds (seeds
       from ``pretrain_world_seed``: other entities, other facts), standing in for the
       pretraining a real LLM brings: the language of articles and questions, and copying
       names from context. No fact of the training world is seen, so answers still have to
       come from search. The result is cached (``sft.pretrain_cache``) like a downloaded
       base model: a rerun with the same settings loads it instead of pretraining again.
    2. ``steps`` of SFT on the oracle's trajectories in the training world, loss on policy
       tokens only (prompt and environment tokens masked).
    Both stages imitate the oracle population of ``pretrain_strategies`` / ``strategies``.
    Needs the synthetic world (the oracle reads the questions' gold chains).
    """
    from agentsearch.config import ConfigError
    from agentsearch.envs.search import SearchEnv
    from agentsearch.envs.vision import VisionEnv
    from agentsearch.trainer.setup import build_envs

    if isinstance(envs[0], VisionEnv):  # a population that looks or guesses (vision_sft.py)
        from agentsearch.trainer.vision_sft import vision_warm_start

        return vision_warm_start(cfg, model, tok, envs)
    kw = cfg.env_kwargs
    if kw.get("questions") or kw.get("index") or not isinstance(envs[0], SearchEnv):
        raise ConfigError("sft warm start needs the synthetic world's search env "
                          "(its oracle reads the questions' gold chains); set sft.steps=0")
    s = cfg.sft
    common = dict(turn_format=kw.get("turn_format", "tags"), think=s.think, noise=s.noise,
                  seed=cfg.seed, max_turns=cfg.max_turns, max_seq_len=cfg.max_seq_len,
                  question_types=kw.get("question_types"))
    out: dict[str, float] = {}
    if s.pretrain_steps > 0:
        seeds = [s.pretrain_world_seed + i for i in range(s.pretrain_worlds)]
        if kw.get("world_seed", 0) in seeds:
            raise ConfigError("sft.pretrain_world_seed (and the pretrain_worlds after it) must not "
                              "include env_kwargs.world_seed: pretraining must not see the training "
                              "world's facts")
        cached = _pretrain_cache_path(cfg) if s.pretrain_cache else None
        if cached is not None and (cached / "model.safetensors").exists():
            from safetensors.torch import load_file

            model.load_state_dict(load_file(cached / "model.safetensors"))
            out.update(json.loads((cached / "metrics.json").read_text()))
            out["sft/pretrain_cached"] = 1.0
        else:
            eps: list[Episode] = []
            for w in seeds:
                other = dataclasses.replace(cfg, env_kwargs={**kw, "world_seed": w})
                eps += oracle_episodes(build_envs(other, len(envs)), tok, world_seed=w,
                                       world_entities=kw.get("world_entities"), count=s.pretrain_episodes,
                                       **{**common, "strategies": s.pretrain_strategies or s.strategies})
                if s.log_every:
                    print(f"[pretrain] world {w}: {len(eps)} transcripts so far", flush=True)
            steps = s.pretrain_steps
            res = sft_train(model, eps, steps=steps, lr=s.pretrain_lr or s.lr,
                            batch_size=s.pretrain_batch_size or s.batch_size, seed=cfg.seed, all_tokens=True,
                            log=_progress("pretrain", steps, s.log_every))
            out.update({"sft/pretrain_loss": res["sft/loss"], "sft/pretrain_episodes": res["sft/episodes"]})
            if cached is not None:
                _save_pretrained(model, out, cached)
            out["sft/pretrain_cached"] = 0.0
    if s.steps > 0:
        eps = oracle_episodes(envs, tok, world_seed=kw.get("world_seed", 0),
                              world_entities=kw.get("world_entities"), count=s.episodes,
                              **{**common, "strategies": s.strategies})
        out.update(sft_train(model, eps, steps=s.steps, lr=s.lr, batch_size=s.batch_size, seed=cfg.seed,
                             log=_progress("sft", s.steps, s.log_every)))
    return out
