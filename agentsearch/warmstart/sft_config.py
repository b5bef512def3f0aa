"""``SFTConfig``: the warm start's slice of ``TrainConfig`` (``sft.*`` keys), beside the
SFT loop and the oracle populations that read it."""

from __future__ import annotations

from dataclasses import dataclass, field

from agentsearch.core.config import ConfigError

__all__ = ["SFTConfig"]


@dataclass
class SFTConfig:
    """Warm start: supervised steps on a scripted oracle agent's trajectories (env tokens
    masked)."""

    steps: int = 0
    """SFT steps on the oracle's trajectories (policy tokens only); 0 disables."""
    episodes: int = 2000
    """Oracle trajectories to generate (train split), per world."""
    worlds: int = 0
    """Search: SFT also on this many disjoint worlds (seeds ``pretrain_world_seed``, +1, ...),
    where no memorised fact answers: the policy must copy names from its observations."""
    pretrain_steps: int = 0
    """Causal-LM steps on all tokens of a disjoint world's oracle transcripts, before SFT
    (for randomly initialised tiny models; 0 = off). For ``agentsearch/Vision-v0``: a first
    SFT stage on the population ``pretrain_strategies`` (where perception is learnt). For
    ``agentsearch/Math-v0``: a first SFT stage (policy tokens) on other generator seeds."""
    pretrain_world_seed: int = 1000
    """The first disjoint world for pretraining; must differ from env_kwargs.world_seed (math:
    the first other problem-generator seed; must differ from env_kwargs.task_seed)."""
    pretrain_worlds: int = 1
    """Pretrain on this many disjoint worlds (seeds ``pretrain_world_seed``, +1, ...): diverse
    transcripts teach a tiny model to copy from context instead of memorising them."""
    pretrain_episodes: int = 3000
    """Oracle transcripts to pretrain on, per disjoint world (vision: train-split episodes)."""
    pretrain_lr: float | None = None
    """Pretraining learning rate (None: ``lr``)."""
    pretrain_batch_size: int | None = None
    """Pretraining batch size (None: ``batch_size``)."""
    pretrain_cache: bool = True
    """Cache the pretrained base in ``$AGENTSEARCH_CACHE/pretrained`` (keyed by every setting
    it depends on) and load it on reruns, as a real LLM's base is downloaded once."""
    lr: float = 2e-3
    """SFT learning rate (AdamW, 10% warmup, linear decay to 10%)."""
    batch_size: int = 32
    """Trajectories per SFT step."""
    micro_batch_size: int | None = None
    """Trajectories per forward/backward (gradients accumulate to the step's token mean);
    None: the whole batch at once. 1 for a real LM on CPU: an unpadded row takes PyTorch's
    fused causal attention instead of a padded batch's [B, heads, T, T] matrices (SmolLM2,
    8 rows of 700 tokens: peak 18 GB and 30-48 s at once, 3.7 GB and 27 s one by one)."""
    noise: float = 0.0
    """Share of oracle episodes that take a detour (a wrong first query, then recover)."""
    think: bool = False
    """Oracle turns open with a short ``<think>`` sentence (off: shorter turns for tiny models)."""
    strategies: dict = field(default_factory=lambda: {"thorough": 1.0})
    """Shares of the oracle population in SFT (``agentsearch.warmstart.search_oracle.STRATEGIES``:
    ``thorough``, ``one_search``); they differ only in when they stop searching. Chain
    questions (``env_kwargs.world_questions=chains``): ``thorough``, ``stop1``..``stop3``
    (``warmstart/chain_oracle.py``). For ``agentsearch/Vision-v0``: ``look`` / ``crop`` /
    ``guess`` (``warmstart/vision_oracle.py``). For ``agentsearch/Math-v0``: ``calculator`` /
    ``head`` (``warmstart/math_oracle.py``)."""
    pretrain_strategies: dict | None = None
    """The population's shares in pretraining (None: ``strategies``)."""
    log_every: int | None = None
    """Print a progress line every N warm-start steps (None: every 10% of a stage's steps, and
    at least once a minute; 0: never)."""

    def __post_init__(self):
        from agentsearch.warmstart.chain_oracle import check_chain_strategies
        from agentsearch.warmstart.math_oracle import check_math_strategies
        from agentsearch.warmstart.search_oracle import check_strategies
        from agentsearch.warmstart.vision_oracle import check_vision_strategies

        for name in ("strategies", "pretrain_strategies"):
            value = getattr(self, name)
            if value is None:
                continue
            try:
                shares = dict(value)
            except (TypeError, ValueError) as e:
                raise ConfigError(f"sft.{name}: {e}") from None
            errors = []
            for check in (check_strategies, check_chain_strategies, check_vision_strategies,
                          check_math_strategies):  # one population's shares
                try:
                    check(shares)
                    break
                except ValueError as e:
                    errors.append(str(e))
            else:
                raise ConfigError(f"sft.{name}: {errors[0]} (or chain questions: {errors[1]}; "
                                  f"or math: {errors[3]})")
        if self.pretrain_worlds < 1 or self.worlds < 0:
            raise ConfigError(f"sft.pretrain_worlds={self.pretrain_worlds} must be >= 1 and "
                              f"sft.worlds={self.worlds} >= 0")
