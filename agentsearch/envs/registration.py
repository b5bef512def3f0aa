"""Gymnasium registration of every agentsearch environment id.

``import agentsearch.envs`` registers them, so ``gymnasium.make("agentsearch/Search-v0",
turn_format="json", topk=5)`` works; keyword arguments are settings of the env's config
(``SearchEnvConfig``, ``MathEnvConfig``, ``VisionEnvConfig``) or its extra arguments (``tasks=``,
``retriever=``). The envs handle ``max_turns`` themselves (no ``TimeLimit`` wrapper), and
are deterministic for a seeded reset and a given action (``nondeterministic=False``).
Bump the version of an id when its reward semantics change.
"""

from __future__ import annotations

import gymnasium

__all__ = ["ENV_IDS", "register_envs", "make_env"]

ENV_IDS = {
    "agentsearch/Search-v0": "agentsearch.envs.search:SearchEnv",
    "agentsearch/Math-v0": "agentsearch.envs.math:MathEnv",
    "agentsearch/Vision-v0": "agentsearch.envs.vision:VisionEnv",
    "agentsearch/KeyChain-v0": "agentsearch.envs.keychain:KeyChainEnv",
    "agentsearch/WikiSearch-v0": "agentsearch.envs.wiki:WikiSearchEnv",
}


def register_envs() -> list[str]:
    """Register every id (idempotent); returns the ids."""
    for env_id, entry_point in ENV_IDS.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point=entry_point, nondeterministic=False,
                               disable_env_checker=False)
    return list(ENV_IDS)


def make_env(env_id: str = "agentsearch/Search-v0", **kwargs):
    """One env instance of ``env_id`` (registered first), unwrapped: the ``TextEnv`` that
    ``agentsearch.rollout.rollout`` plays (``gymnasium.make`` keeps Gymnasium's checking
    wrappers; this is the same env without them). ``kwargs`` as for ``gymnasium.make``."""
    register_envs()
    return gymnasium.make(env_id, disable_env_checker=True, **kwargs).unwrapped
