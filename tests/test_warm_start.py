"""The warm start's pretraining stage: cached like a downloaded base, keyed by its settings."""

import pytest
import torch

from agentsearch.core.config import ConfigError, apply_overrides
from agentsearch.trainer.setup import build_envs, build_policy
from agentsearch.trainer.train_config import TrainConfig
from agentsearch.warmstart.stages import warm_start

PRE = ["model=tiny-s", "max_turns=3", "max_seq_len=512", "threads=1", "sft.steps=0",
       "sft.pretrain_steps=3", "sft.pretrain_episodes=16", "sft.batch_size=4"]


def _warm(*extra):
    cfg = apply_overrides(TrainConfig, "tiny", PRE + list(extra))
    model, tok = build_policy(cfg)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    metrics = warm_start(cfg, model, tok, build_envs(cfg, 8), make_envs=build_envs)
    return model, before, metrics


@pytest.mark.slow
def test_pretrained_base_is_cached_and_reloaded(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTSEARCH_CACHE", str(tmp_path))
    first, init, m1 = _warm()
    assert m1["sft/pretrain_cached"] == 0.0 and m1["sft/pretrain_episodes"] > 0
    assert any(not torch.equal(init[k], v) for k, v in first.state_dict().items())  # it trained
    assert len(list((tmp_path / "pretrained").iterdir())) == 1  # and no temporary folder is left
    again, _, m2 = _warm()
    assert m2["sft/pretrain_cached"] == 1.0 and m2["sft/pretrain_loss"] == m1["sft/pretrain_loss"]
    for k, v in first.state_dict().items():
        assert torch.equal(again.state_dict()[k], v), k
    # another setting is another base; pretrain_cache=false neither reads nor writes the cache
    assert _warm("sft.pretrain_steps=2")[2]["sft/pretrain_cached"] == 0.0
    assert _warm("sft.pretrain_cache=false")[2]["sft/pretrain_cached"] == 0.0
    assert len(list((tmp_path / "pretrained").iterdir())) == 2


def test_pretraining_on_the_training_world_is_refused():
    for bad in (["sft.pretrain_world_seed=0"],
                ["sft.pretrain_world_seed=-1", "sft.pretrain_worlds=2"]):
        cfg = apply_overrides(TrainConfig, "tiny", PRE + bad)
        model, tok = build_policy(cfg)
        with pytest.raises(ConfigError, match="must not include env_kwargs.world_seed"):
            warm_start(cfg, model, tok, build_envs(cfg, 2), make_envs=build_envs)


def test_sft_across_worlds_plays_each_world(monkeypatch):
    """``sft.worlds``: stage 2 imitates the population on the training world and on each disjoint
    world, as many episodes each, and refuses a range that holds the training world."""
    import agentsearch.warmstart.stages as stages

    played, real = [], stages.oracle_episodes

    def spy(envs, tok, *, world_seed, count, **kw):  # the real population, each call recorded
        eps = real(envs, tok, world_seed=world_seed, count=count, **kw)
        played.append((world_seed, count, {ep.info["question"] for ep in eps}))
        return eps

    monkeypatch.setattr(stages, "oracle_episodes", spy)
    cfg = apply_overrides(TrainConfig, "tiny",
                          PRE + ["sft.pretrain_steps=0", "sft.steps=1", "sft.episodes=4",
                                 "sft.worlds=2", "sft.pretrain_world_seed=7"])
    model, tok = build_policy(cfg)
    m = warm_start(cfg, model, tok, build_envs(cfg, 2), make_envs=build_envs)
    assert [(w, n) for w, n, _ in played] == [(0, 4), (7, 4), (8, 4)]
    assert m["sft/episodes"] == sum(len(q) for *_, q in played) > 8  # all three worlds' transcripts
    assert not played[0][2] & played[1][2]  # other worlds, other questions
    bad = apply_overrides(TrainConfig, "tiny",
                          PRE + ["sft.pretrain_steps=0", "sft.steps=1", "sft.worlds=2",
                                 "sft.pretrain_world_seed=-1"])
    with pytest.raises(ConfigError, match="sft.worlds after it"):
        warm_start(bad, model, tok, build_envs(bad, 2), make_envs=build_envs)
    with pytest.raises(ConfigError, match="sft.worlds=-1"):
        apply_overrides(TrainConfig, "tiny", ["sft.worlds=-1"])
