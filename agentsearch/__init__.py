"""agentsearch: train LLM search agents with RL where every rollout counts.

The public API, imported on first use (``import agentsearch`` imports neither torch nor
vllm)::

    import agentsearch

    env = agentsearch.make_env("agentsearch/Search-v0", turn_format="tags")  # an unwrapped TextEnv
    model, tok = agentsearch.load_model("tiny-base")
    cfg = agentsearch.apply_overrides(agentsearch.TrainConfig, "tiny", ["steps=10"])
    agentsearch.train(cfg, "runs/first")

Rollouts: ``from agentsearch.rollout import rollout`` (``agentsearch.rollout`` is the package).

The packages, in layers (each imports only those below it; ``pyproject.toml``'s
import-linter contract checks it): ``cli`` > ``recipes`` > ``engines`` | ``analysis`` >
``trainer`` > ``warmstart`` > ``algorithms`` > ``replay`` > ``rollout`` > ``envs`` >
``retrievers`` > ``models`` > ``data`` > ``core``.
"""

__version__ = "0.1.0"

__all__ = ["make_env", "load_model", "TrainConfig", "apply_overrides", "train",
           "HeadroomDriftBuffer", "ReplayGroup", "__version__"]


def __getattr__(name: str):
    if name == "make_env":
        from agentsearch.envs.registration import make_env

        return make_env
    if name == "load_model":
        from agentsearch.models.text import load_model

        return load_model
    if name == "TrainConfig":
        from agentsearch.trainer.train_config import TrainConfig

        return TrainConfig
    if name == "apply_overrides":
        from agentsearch.core.config import apply_overrides

        return apply_overrides
    if name == "train":
        from agentsearch.trainer.loop import train

        return train
    if name in ("HeadroomDriftBuffer", "ReplayGroup"):
        import agentsearch.replay as replay

        return getattr(replay, name)
    raise AttributeError(f"module 'agentsearch' has no attribute {name!r}")
