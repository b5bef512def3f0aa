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
    for bad in (["sft.pretrain_world_seed=0"], ["sft.pretrain_world_seed=-1", "sft.pretrain_worlds=2"]):
        cfg = apply_overrides(TrainConfig, "tiny", PRE + bad)
        model, tok = build_policy(cfg)
        with pytest.raises(ConfigError, match="must not include env_kwargs.world_seed"):
            warm_start(cfg, model, tok, build_envs(cfg, 2), make_envs=build_envs)
