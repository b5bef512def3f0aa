"""Building the shipped bases (``scripts/build_base.py`` calls ``build``).

Each base has a recipe preset (``tiny_base.BASE_RECIPES``: ``tiny-base`` from
``configs/base-tiny.yaml``, ``tiny-chain-base`` from ``configs/base-chains.yaml``
(``tiny-chain-base-worlds`` from ``configs/base-chains-worlds.yaml``),
``tiny-math-base`` from ``configs/base-math.yaml``); ``build``
runs its warm start from the seeded random ``tiny`` model (deterministic on CPU for a given
torch), evaluates it on the recipe's dev questions, and writes the model folder with
``build.json``. ``recipe_changes(recorded, base)`` and ``code_fingerprint(base)`` are what a test
compares with the shipped ``build.json``: when they differ, the shipped base is not what this code
would build.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import os
import time
from pathlib import Path

from agentsearch.data.paths import BASE_DIRS
from agentsearch.models.tiny_base import BASE_RECIPES, tokenizer_fingerprint

__all__ = ["recipe", "recipe_changes", "code_fingerprint", "build"]


def _config(overrides: list[str] | None = None, base: str = "tiny-base"):
    from agentsearch.core.config import apply_overrides
    from agentsearch.trainer.train_config import TrainConfig

    if base not in BASE_RECIPES:
        raise ValueError(f"unknown shipped base {base!r}; choose from {sorted(BASE_RECIPES)}")
    return apply_overrides(TrainConfig, BASE_RECIPES[base], list(overrides or []))


# the TrainConfig fields a base depends on (a new RL-only field must not make the base stale)
BUILD_KEYS = ("env", "env_kwargs", "model", "seed", "dtype", "lora", "max_turns", "max_seq_len",
              "prompts_per_step", "group_size", "threads", "sft", "eval")


def recipe(overrides: list[str] | None = None, base: str = "tiny-base") -> dict:
    """The resolved recipe's ``BUILD_KEYS`` as a plain dict (what ``build.json`` records)."""
    full = json.loads(json.dumps(dataclasses.asdict(_config(overrides, base)), default=str))
    return {k: full[k] for k in BUILD_KEYS}


def _flat(d: dict, prefix: str = "") -> dict:
    """{"sft": {"steps": 3}} -> {"sft.steps": 3}: nested sections as dotted keys."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def recipe_changes(recorded: dict, base: str = "tiny-base") -> list[str]:
    """The dotted keys where the recipe ``recorded`` in a ``build.json`` and today's resolved
    recipe differ: ``[]`` when this code builds what was recorded. A field added after the
    build is no change while it sits at its default (the default reproduces the old
    behaviour, which is what a backward-compatible field means)."""
    from agentsearch.trainer.train_config import TrainConfig

    now, was = _flat(recipe(base=base)), _flat(recorded)
    default = _flat(json.loads(json.dumps(dataclasses.asdict(TrainConfig()), default=str)))
    missing = object()
    # a field new since the build counts at its default
    return sorted(k for k in now.keys() | was.keys()
                  if was.get(k, default.get(k, missing)) != now.get(k, missing))


def code_fingerprint(base: str = "tiny-base") -> str:
    """sha256 of the code that makes the base's training data and trains it: the world
    generator (and, for ``tiny-chain-base``, its chain questions; for ``tiny-math-base`` the
    problem generator and the calculator instead of the world), the oracle population and
    its transcript filter, the SFT loop and its optimizer schedule, and the shipped tokenizer
    its recipe's model names.
    A change to any of them means the shipped base is stale."""
    from agentsearch.algorithms import optim
    from agentsearch.data import chains, world
    from agentsearch.data.paths import tokenizer_dir
    from agentsearch.envs.tasks import math_tasks
    from agentsearch.envs.tools import sandbox
    from agentsearch.warmstart import chain_oracle, math_oracle, search_oracle, sft

    chain_code = (world, chains, search_oracle, chain_oracle, sft, optim)
    modules = {"tiny-base": (world, search_oracle, sft, optim), "tiny-chain-base": chain_code,
               "tiny-chain-base-worlds": chain_code,
               "tiny-math-base": (math_tasks, sandbox, math_oracle, sft, optim)}[base]
    h = hashlib.sha256()
    for module in modules:
        h.update(inspect.getsource(module).encode())
    h.update((tokenizer_dir(_config(base=base).model) / "tokenizer.json").read_bytes())
    return h.hexdigest()


def build(out: str | Path | None = None, overrides: list[str] | None = None,
          base: str = "tiny-base") -> dict:
    """Train the shipped base ``base`` from its recipe (plus ``overrides``, for experiments)
    into ``out`` (default: its folder in the package); returns the build record. Prints one
    progress line per 100 steps."""
    import torch

    from agentsearch.core.cache import publish_dir
    from agentsearch.core.provenance import tree_state
    from agentsearch.data.paths import tokenizer_dir
    from agentsearch.models.text import load_model
    from agentsearch.rollout.hf import HFBackend
    from agentsearch.trainer.checkpoint import save_final
    from agentsearch.trainer.eval import eval_envs, eval_settings, evaluate
    from agentsearch.trainer.setup import build_envs, seed_everything
    from agentsearch.warmstart.stages import warm_start

    cfg = _config(overrides, base)
    out = BASE_DIRS[base] if out is None else out
    seed_everything(cfg.seed)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    t0 = time.perf_counter()
    model, tok = load_model(cfg.model, seed=cfg.seed)
    envs = build_envs(cfg, cfg.prompts_per_step * cfg.group_size, split="train")
    print(f"[build_base] {base}, recipe {BASE_RECIPES[base]}: warm start of {cfg.model}",
          flush=True)
    metrics = warm_start(cfg, model, tok, envs, make_envs=build_envs)
    t_train = time.perf_counter() - t0
    print(f"[build_base] trained in {t_train:.0f} s; evaluating on {cfg.eval.split}", flush=True)
    denv, dtasks = eval_envs(cfg)
    dev = evaluate(HFBackend(model, tok), denv, dtasks, **eval_settings(cfg))
    record = {"recipe": recipe(overrides, base), "preset": BASE_RECIPES[base],
              "overrides": list(overrides or []), "code_sha256": code_fingerprint(base),
              "tokenizer_sha256": tokenizer_fingerprint(tokenizer_dir(cfg.model)),
              "git": tree_state()["git"][:7], "torch": torch.__version__,
              "built": time.strftime("%Y-%m-%d %H:%M"),
              "train_seconds": round(t_train, 1), "warm_start": metrics, "eval": dev}
    out = Path(out)
    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")
    save_final(model, tok, tmp)
    (tmp / "build.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    if out.exists():
        import shutil

        shutil.rmtree(out)
    publish_dir(tmp, out)
    print(f"[build_base] dev EM {dev['eval/mean_at_n']:.3f} on "
          f"{int(dev['eval/questions'])} questions; wrote {out}", flush=True)
    return record
