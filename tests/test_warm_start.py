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


def test_micro_batched_sft_takes_the_same_step_as_the_whole_batch():
    """Rows one at a time (unpadded: what a real LM on CPU needs) accumulate to the batch's
    token-mean gradient: the same loss and the same AdamW step, to float rounding."""
    from agentsearch.warmstart.search_oracle import oracle_episodes
    from agentsearch.warmstart.sft import sft_train

    cfg = apply_overrides(TrainConfig, "tiny", ["model=tiny-s", "threads=1"])
    model, tok = build_policy(cfg)
    eps = oracle_episodes(build_envs(cfg, 4), tok, count=4, max_turns=3, max_seq_len=512)
    assert len({len(e.token_ids) for e in eps}) > 1  # rows of different lengths: padding
    init = {k: v.clone() for k, v in model.state_dict().items()}
    after, losses = [], []
    for micro in (None, 1, 3):
        model.load_state_dict(init)
        res = sft_train(model, eps, steps=1, lr=1e-2, batch_size=4, micro_batch_size=micro)
        after.append({k: v.clone() for k, v in model.state_dict().items()})
        losses.append(res["sft/loss"])
    for other in after[1:]:
        worst = max((after[0][k] - other[k]).abs().max().item() for k in init)
        assert worst < 1e-4, worst  # Adam divides by the gradient: rounding shows at 1e-6
    assert losses[1] == pytest.approx(losses[0], rel=1e-5)
    assert losses[2] == pytest.approx(losses[0], rel=1e-5)
    assert any(not torch.equal(init[k], after[0][k]) for k in init)
