"""The ``sft`` section of a ``TrainConfig``: the warm start, in up to two stages.

Search (``agentsearch/Search-v0`` on the synthetic world):

1. ``pretrain_steps`` (tiny models start from random weights): causal-LM training on
   *every* token of oracle transcripts from ``pretrain_worlds`` disjoint worlds (seeds
   from ``pretrain_world_seed``: other entities, other facts), standing in for the
   pretraining a real LLM brings: the language of articles and questions, and copying
   names from context. No fact of the training world is seen, so answers still have to
   come from search. The result is cached (``sft.pretrain_cache``) like a downloaded
   base model: a rerun with the same settings loads it instead of pretraining again.
2. ``steps`` of SFT on the oracle's trajectories in the training world (and, with
   ``worlds``, as many again in each of that many disjoint worlds, where no memorised fact
   answers and names must be copied), loss on policy tokens only (prompt and environment
   tokens masked).

Both imitate the oracle population of ``pretrain_strategies`` / ``strategies``
(``search_oracle``). Math (``agentsearch/Math-v0`` with the calculator): the same two stages
on the ``calculator``/``head`` population of ``math_oracle``, policy tokens only; stage 1
plays ``pretrain_worlds`` other generator seeds (``task_seed`` from ``pretrain_world_seed``:
other problems), stage 2 the training split. Vision (``agentsearch/Vision-v0``): the same two
stages on the ``look``/``crop``/``guess`` population of ``vision_oracle``, with the episodes'
images. Both go through the one loop, ``sft.sft_train``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import random
from collections.abc import Callable
from pathlib import Path

from agentsearch.core.config import ConfigError
from agentsearch.core.progress import Progress
from agentsearch.envs.math import MathEnv
from agentsearch.envs.search import SearchEnv
from agentsearch.envs.vision import VisionEnv
from agentsearch.envs.wiki import WikiSearchEnv
from agentsearch.rollout import Episode
from agentsearch.warmstart.chain_oracle import chain_oracle_episodes
from agentsearch.warmstart.math_oracle import MATH_STRATEGIES, math_oracle_episodes
from agentsearch.warmstart.search_oracle import oracle_episodes
from agentsearch.warmstart.sft import sft_train
from agentsearch.warmstart.vision_oracle import VISION_STRATEGIES, vision_oracle_episodes

__all__ = ["warm_start"]

# bump when pretraining's data or procedure changes, so stale cached bases are not reused
_PRETRAIN_VERSION = 2


def _pretrain_cache_path(cfg) -> Path:
    """``$AGENTSEARCH_CACHE/pretrained/<key>``: the key hashes everything stage 1 depends on
    (model, seed, LoRA, the pretraining and oracle settings, the env's transcript format)."""
    from agentsearch.core.cache import cache_dir

    s = cfg.sft
    fields = dict(version=_PRETRAIN_VERSION, model=cfg.model, init_from=cfg.init_from,
                  seed=cfg.seed, lora=dataclasses.asdict(cfg.lora), dtype=cfg.dtype, env=cfg.env,
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

    from agentsearch.core.cache import publish_dir

    tmp = folder.with_name(f"{folder.name}.tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    # clone: tied embeddings share storage, which safetensors refuses to write twice
    save_file({k: v.detach().clone().contiguous() for k, v in model.state_dict().items()},
              tmp / "model.safetensors")
    (tmp / "metrics.json").write_text(json.dumps(metrics))
    publish_dir(tmp, folder)


def _disjoint_worlds(kw: dict, first: int, count: int, name: str) -> list[int]:
    """World seeds ``first`` .. ``first + count - 1``, refused if the training world is one of
    them."""
    seeds = [first + i for i in range(count)]
    if kw.get("world_seed", 0) in seeds:
        raise ConfigError(f"sft.pretrain_world_seed (and the {name} after it) must not include "
                          "env_kwargs.world_seed: the other worlds must not hold the training "
                          "world's facts")
    return seeds


def _log(stage: str, steps: int, every: int | None) -> Callable[[int, float], None]:
    """A ``log(step, loss)`` callback: one progress line every ``every`` steps (None: every 10%
    and at least once a minute; 0: silent)."""
    bar = Progress(steps, stage, every=every, enabled=every != 0)
    return lambda step, loss: bar.update(step + 1, f"loss {loss:.4f}")


def warm_start(cfg, model, tok, envs,
               make_envs: Callable[[object, int], list] | None = None) -> dict[str, float]:
    """Run ``cfg.sft`` on ``model`` (module doc); returns the ``sft/*`` metrics.

    ``envs`` are the run's training envs; ``make_envs(cfg, count)`` builds envs for another
    config (the search pretraining's disjoint worlds; ``trainer.setup.build_envs``)."""
    if isinstance(envs[0], VisionEnv):
        return _vision(cfg, model, tok, envs[0])
    if isinstance(envs[0], MathEnv):
        return _math(cfg, model, tok, envs)
    kw = cfg.env_kwargs
    if kw.get("questions") or kw.get("index") or not isinstance(envs[0], SearchEnv):
        raise ConfigError("sft warm start needs the synthetic world's search env "
                          "(its oracle reads the questions' gold chains); set sft.steps=0")
    s = cfg.sft
    common = dict(turn_format=kw.get("turn_format", "tags"), think=s.think, noise=s.noise,
                  seed=cfg.seed, max_turns=cfg.max_turns, max_seq_len=cfg.max_seq_len,
                  question_types=kw.get("question_types"))
    # chain questions (the hard world) have their own population: agents that stop too early
    play = (chain_oracle_episodes if kw.get("world_questions", "default") == "chains"
            else oracle_episodes)
    if isinstance(envs[0], WikiSearchEnv):  # real text: searches read off the question
        play = functools.partial(oracle_episodes, world="wiki")
    out: dict[str, float] = {}

    def other_worlds(first: int, count: int, name: str, episodes: int,
                     strategies: dict) -> list[Episode]:
        """The population's transcripts on ``count`` disjoint worlds from seed ``first``."""
        if make_envs is None:
            raise ValueError(f"warm_start with {name} needs make_envs(cfg, count) to build the "
                             "other worlds' envs (trainer.setup.build_envs)")
        eps: list[Episode] = []
        for w in _disjoint_worlds(kw, first, count, name):
            other = dataclasses.replace(cfg, env_kwargs={**kw, "world_seed": w})
            eps += play(make_envs(other, len(envs)), tok, world_seed=w,
                        world_entities=kw.get("world_entities"), count=episodes,
                        **{**common, "strategies": strategies})
            if s.log_every != 0:
                print(f"[{name}] world {w}: {len(eps)} transcripts so far", flush=True)
        return eps

    if s.pretrain_steps > 0:
        _disjoint_worlds(kw, s.pretrain_world_seed, s.pretrain_worlds, "sft.pretrain_worlds")
        cached = _pretrain_cache_path(cfg) if s.pretrain_cache else None
        if cached is not None and (cached / "model.safetensors").exists():
            from safetensors.torch import load_file

            model.load_state_dict(load_file(cached / "model.safetensors"))
            out.update(json.loads((cached / "metrics.json").read_text()))
            out["sft/pretrain_cached"] = 1.0
        else:
            eps = other_worlds(s.pretrain_world_seed, s.pretrain_worlds, "sft.pretrain_worlds",
                               s.pretrain_episodes, s.pretrain_strategies or s.strategies)
            steps = s.pretrain_steps
            res = sft_train(model, eps, steps=steps, lr=s.pretrain_lr or s.lr,
                            batch_size=s.pretrain_batch_size or s.batch_size, seed=cfg.seed,
                            all_tokens=True, log=_log("pretrain", steps, s.log_every))
            out.update({"sft/pretrain_loss": res["sft/loss"],
                        "sft/pretrain_episodes": res["sft/episodes"]})
            if cached is not None:
                _save_pretrained(model, out, cached)
            out["sft/pretrain_cached"] = 0.0
    if s.steps > 0:
        # playing the oracle's transcripts takes a while with a real LM's template
        if s.log_every != 0:
            print(f"[sft] playing {s.episodes} oracle transcripts, then {s.steps} SFT steps",
                  flush=True)
        eps = play(envs, tok, world_seed=kw.get("world_seed", 0),
                   world_entities=kw.get("world_entities"), count=s.episodes,
                   **{**common, "strategies": s.strategies})
        # policy tokens where memorised facts do not answer: copy from the observations
        if s.worlds:
            eps += other_worlds(s.pretrain_world_seed, s.worlds, "sft.worlds", s.episodes,
                                s.strategies)
        out.update(sft_train(model, eps, steps=s.steps, lr=s.lr, batch_size=s.batch_size,
                             micro_batch_size=s.micro_batch_size,
                             seed=cfg.seed, log=_log("sft", s.steps, s.log_every)))
    return out


def _vision(cfg, model, tok, env) -> dict[str, float]:
    """Up to two stages of SFT on scripted episodes of the train split: ``sft.pretrain_steps``
    on ``sft.pretrain_episodes`` episodes of the population ``sft.pretrain_strategies`` (e.g.
    half of them cropping: perception is learnt here), then ``sft.steps`` on ``sft.episodes``
    episodes of ``sft.strategies`` (the mix the RL run starts from). Shares are of
    ``look``/``crop``/``guess``."""
    s = cfg.sft
    out: dict[str, float] = {}
    stages = [("pretrain", s.pretrain_steps, s.pretrain_episodes,
               s.pretrain_strategies or s.strategies, s.pretrain_lr or s.lr,
               s.pretrain_batch_size or s.batch_size, cfg.seed + 1),
              ("sft", s.steps, s.episodes, s.strategies, s.lr, s.batch_size, cfg.seed)]
    for name, steps, n_episodes, shares, lr, batch_size, seed in stages:
        if steps <= 0:
            continue
        tasks = random.Random(seed).sample(env.tasks, min(n_episodes, len(env.tasks)))
        eps = vision_oracle_episodes(lambda: env, tok, tasks, strategies=dict(shares), seed=seed,
                                     max_turns=cfg.max_turns, max_seq_len=cfg.max_seq_len,
                                     turn_format=env.config.turn_format)
        res = sft_train(model, eps, steps=steps, lr=lr, batch_size=batch_size, seed=seed,
                        pixel_fn=tok.pixel_values, log=_log(name, steps, s.log_every))
        prefix = "sft/pretrain_" if name == "pretrain" else "sft/"  # the search warm start's keys
        out.update({prefix + k.split("/", 1)[1]: v for k, v in res.items()})
        for strategy in VISION_STRATEGIES:
            out[f"{prefix}{strategy}_share"] = (sum(e.info["strategy"] == strategy for e in eps)
                                                / max(len(eps), 1))
    return out


def _math(cfg, model, tok, envs) -> dict[str, float]:
    """Up to two stages of SFT (policy tokens) on the ``math_oracle`` population: stage 1 on
    ``sft.pretrain_episodes`` problems from each of ``sft.pretrain_worlds`` other generator
    seeds (``sft.pretrain_strategies``), stage 2 on ``sft.episodes`` train problems of the
    run's ``task_seed`` (``sft.strategies``: the mix the RL run starts from)."""
    s, kw = cfg.sft, cfg.env_kwargs
    task_seed = int(kw.get("task_seed", 0))
    seeds = [s.pretrain_world_seed + i for i in range(s.pretrain_worlds)]
    if task_seed in seeds:
        raise ConfigError("sft.pretrain_world_seed (and the pretrain_worlds after it) must not "
                          "include env_kwargs.task_seed: stage 1 plays other problems than the "
                          "training split")
    stages = [("pretrain", s.pretrain_steps, seeds, s.pretrain_episodes,
               s.pretrain_strategies or s.strategies, s.pretrain_lr or s.lr,
               s.pretrain_batch_size or s.batch_size),
              ("sft", s.steps, [task_seed], s.episodes, s.strategies, s.lr, s.batch_size)]
    out: dict[str, float] = {}
    for name, steps, task_seeds, n_episodes, shares, lr, batch_size in stages:
        if steps <= 0:
            continue
        eps: list[Episode] = []
        for ts in task_seeds:
            eps += math_oracle_episodes(envs, tok, task_seed=ts, count=n_episodes, seed=cfg.seed,
                                        max_turns=cfg.max_turns, max_seq_len=cfg.max_seq_len,
                                        strategies=dict(shares))
        res = sft_train(model, eps, steps=steps, lr=lr, batch_size=batch_size, seed=cfg.seed,
                        log=_log(name, steps, s.log_every))
        prefix = "sft/pretrain_" if name == "pretrain" else "sft/"  # the search warm start's keys
        out.update({prefix + k.split("/", 1)[1]: v for k, v in res.items()})
        for strategy in MATH_STRATEGIES:
            calls = [bool(e.info.get("tool_calls")) == (strategy == "calculator") for e in eps]
            out[f"{prefix}{strategy}_share"] = sum(calls) / max(len(calls), 1)
    return out
