"""Gymnasium-style multi-turn text environments and tools.

- ``TextEnv`` (``core``): the contract. ``reset(seed, options) -> (obs, info)``,
  ``step(action) -> (obs, reward, terminated, truncated, info)``, ``await astep(action)``.
- ``SearchEnv`` (``agentsearch/Search-v0``; ``world_questions="chains"``: k-hop chains),
  ``KeyChainEnv`` (``agentsearch/KeyChain-v0``: follow a chain of keys, K sets the difficulty),
  ``MathEnv`` (``agentsearch/Math-v0``) and ``VisionEnv`` (``agentsearch/Vision-v0``: pictures
  in ``{"text", "images"}`` observations).
- Tools (``tools``): the async ``Tool`` protocol and its registry (entry points of the
  ``agentsearch.tools`` group, or ``module:attr`` paths).
- Rollouts live one layer up, in ``agentsearch.rollout`` (it imports envs, not the
  other way round).

Importing this package registers the env ids with Gymnasium; it does not import torch.
"""

from agentsearch.envs.keychain import KeyChainEnv, KeyChainEnvConfig
from agentsearch.envs.math import MathEnv, MathEnvConfig
from agentsearch.envs.registration import ENV_IDS, make_env, register_envs
from agentsearch.envs.search import SearchEnv, SearchEnvConfig
from agentsearch.envs.text_env import TextEnv, UnicodeText, observation_text
from agentsearch.envs.text_env_config import TextEnvConfig
from agentsearch.envs.tools import (
    CalculatorTool,
    PythonTool,
    SearchTool,
    Tool,
    available_tools,
    load_tool,
    load_tools,
)
from agentsearch.envs.vision import VisionEnv, VisionEnvConfig

register_envs()

__all__ = ["TextEnv", "TextEnvConfig", "UnicodeText", "observation_text", "SearchEnv",
           "SearchEnvConfig", "KeyChainEnv", "KeyChainEnvConfig", "MathEnv", "MathEnvConfig",
           "VisionEnv", "VisionEnvConfig", "Tool", "SearchTool", "CalculatorTool", "PythonTool",
           "load_tool", "load_tools", "available_tools", "ENV_IDS", "register_envs", "make_env"]
