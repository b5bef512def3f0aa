"""Registries: a user's replay strategy, loss or answer reward is reachable by name from a
config (``replay.kind=``, ``loss=``, ``env_kwargs.answer_metric=``), built-ins go through the
same registry, and an unknown name is a clear error that lists the known ones."""

import pytest
import torch

from agentsearch.algorithms.losses import (
    LossStats,
    grpo_loss,
    loss_names,
    loss_normalizer,
    loss_spec,
    register_loss,
    unregister_loss,
)
from agentsearch.core.config import ConfigError, apply_overrides
from agentsearch.envs.rewards import (
    answer_rewards,
    exact_match,
    register_answer_reward,
    unregister_answer_reward,
)
from agentsearch.replay import (
    HeadroomDriftBuffer,
    ReplayStrategy,
    make_replay,
    register_replay,
    replay_kinds,
    unregister_replay,
)
from agentsearch.trainer.setup import build_replay
from agentsearch.trainer.train_config import TrainConfig

BUILTIN_REPLAY = ["none", "hdr", "naive", "recency", "headroom_only", "drift_only", "per",
                  "fresh_per"]


# ------------------------------------------------------------------------------ replay
class NaiveWithLog:
    """A user strategy: the built-in ``naive`` buffer, logging every select."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.inner = make_replay("naive", **kwargs)
        self.selects = []

    def add(self, groups, step):
        return self.inner.add(groups, step)

    def select(self, score_fn, step):
        self.selects.append(step)
        return self.inner.select(score_fn, step)

    def metrics(self):
        return self.inner.metrics()

    def state_dict(self):
        return self.inner.state_dict()

    def load_state_dict(self, state):
        self.inner.load_state_dict(state)

    def __len__(self):
        return len(self.inner)


@pytest.fixture
def my_kind():
    register_replay("my_kind", NaiveWithLog)
    yield "my_kind"
    unregister_replay("my_kind")


def test_registered_replay_kind_is_reachable_from_config(my_kind):
    from agentsearch.replay.strategies import BUILTIN_KINDS

    # built-ins first
    assert replay_kinds() == list(BUILTIN_KINDS) + ["success_only", "recycle", "my_kind"]
    for overrides in (["replay.kind=my_kind"], ["replay=my_kind", "replay.k_rep=3"]):
        cfg = apply_overrides(TrainConfig, "tiny", overrides + ["seed=5"])
        assert cfg.replay.kind == "my_kind"
        buf = build_replay(cfg)
        assert isinstance(buf, NaiveWithLog) and isinstance(buf, ReplayStrategy)
        assert buf.kwargs["k_rep"] == cfg.replay.k_rep and buf.kwargs["seed"] == 5
        assert buf.kwargs["tau"] == cfg.replay.tau and buf.kwargs["capacity"] == cfg.replay.capacity
        assert buf.select(None, 1).accepted == [] and buf.selects == [1]


def test_builtin_replay_kinds_go_through_the_same_registry():
    from agentsearch.replay import strategies

    assert sorted(strategies._REGISTRY.names()) == sorted(BUILTIN_REPLAY
                                                          + ["success_only", "recycle"])
    assert isinstance(build_replay(apply_overrides(TrainConfig, "tiny", ["replay=recycle"])),
                      strategies.QueryRecycling)
    for kind in BUILTIN_REPLAY + ["success_only"]:
        cfg = apply_overrides(TrainConfig, "tiny", [f"replay={kind}"])
        buf = build_replay(cfg)
        core = buf.buffer if kind == "success_only" else buf  # success_only wraps a naive buffer
        assert isinstance(core, HeadroomDriftBuffer) and core.name == kind
    with pytest.raises(ValueError, match="built-in"):
        register_replay("hdr", NaiveWithLog)
    with pytest.raises(ValueError, match="built-in"):
        unregister_replay("naive")


def test_decorator_registration_and_unknown_kind_lists_the_known_ones():
    @register_replay("nothing_kind")
    def nothing(**kwargs):
        return make_replay("none")

    try:
        assert build_replay(apply_overrides(TrainConfig, "tiny",
                                            ["replay=nothing_kind"])).name == "none"
        with pytest.raises(ValueError, match="already registered"):
            register_replay("nothing_kind", nothing)
        register_replay("nothing_kind", nothing, overwrite=True)
    finally:
        unregister_replay("nothing_kind")
    with pytest.raises(ConfigError, match="not one of the registered replay kinds") as e:
        apply_overrides(TrainConfig, "tiny", ["replay.kind=nothing_kind"])
    for known in BUILTIN_REPLAY:
        assert repr(known) in str(e.value)
    with pytest.raises(ValueError, match=r"unknown replay kind 'nothing_kind'.*'hdr'"):
        make_replay("nothing_kind", capacity=1, k_rep=1)


# ------------------------------------------------------------------------------ losses
CALLS = []


def doubled_grpo(logprobs, old_logprobs, advantages, mask, *, clip_low, clip_high, dual_clip=None,
                 agg="token", normalizer=None):
    """A user loss: twice GRPO's per-token surrogate, always averaged per sequence."""
    CALLS.append({"agg": agg, "normalizer": normalizer, "rows": logprobs.shape[0]})
    s = grpo_loss(logprobs, old_logprobs, advantages, mask, clip_low=clip_low, clip_high=clip_high,
                  agg="sequence", normalizer=normalizer)
    return LossStats(2 * s.loss, s.clip_frac, s.approx_kl, s.ratio_mean)


def _narrow_clips(cfg):
    return [f"my_loss wants clip_low <= 0.5, got {cfg.clip_low}"] if cfg.clip_low > 0.5 else []


@pytest.fixture
def my_loss():
    CALLS.clear()
    register_loss("my_loss", doubled_grpo,
                  aggregation={"token": "sequence", "sequence": "sequence"}, check=_narrow_clips)
    yield "my_loss"
    unregister_loss("my_loss")
    CALLS.clear()


def test_registered_loss_is_validated_by_the_config(my_loss):
    assert "my_loss" in loss_names() and loss_spec("my_loss").aggregation["token"] == "sequence"
    cfg = apply_overrides(TrainConfig, "tiny", ["loss=my_loss"])
    assert cfg.loss == "my_loss"
    with pytest.raises(ConfigError, match="my_loss wants clip_low <= 0.5"):  # the loss's own check
        apply_overrides(TrainConfig, "tiny", ["loss=my_loss", "clip_low=0.9"])
    with pytest.raises(ConfigError, match="not grpo|not my_loss"):  # no dual_clip unless declared
        apply_overrides(TrainConfig, "tiny", ["loss=my_loss", "dual_clip=3"])
    # built-in gspo check kept
    with pytest.raises(ConfigError, match="clip_low=3e-4 clip_high=4e-4"):
        apply_overrides(TrainConfig, "tiny", ["loss=gspo"])
    with pytest.raises(ValueError, match="built-in"):
        register_loss("grpo", doubled_grpo)


def test_unknown_loss_lists_the_known_ones():
    with pytest.raises(ConfigError, match="not one of the registered losses") as e:
        apply_overrides(TrainConfig, "tiny", ["loss=my_loss"])
    assert all(repr(k) in str(e.value) for k in ("grpo", "gspo", "cispo"))
    with pytest.raises(ValueError, match="unknown loss 'my_loss'"):
        loss_spec("my_loss")
    assert "my_loss" not in loss_names() and sorted(loss_names()) == ["cispo", "grpo", "gspo"]
    with pytest.raises(ValueError, match="aggregation must map"):
        register_loss("bad", doubled_grpo, aggregation={"token": "tokens"})


def test_registered_loss_is_used_by_policy_update(my_loss):
    from agentsearch.algorithms.optim import make_optimizer
    from agentsearch.algorithms.update import Row, pad_rows, policy_update
    from agentsearch.models import load_model
    from agentsearch.models.logprobs import token_logprobs

    model = load_model("tiny-s", seed=0)[0]
    cfg = TrainConfig(model="tiny-s", loss="my_loss", lr=1e-3, micro_batch_size=2, agg="token")
    seqs = [([5, 6, 7, 20, 21, 22], [0, 0, 0, 1, 1, 1], 1.0), ([5, 6, 30, 31], [0, 0, 1, 1], -1.0),
            ([5, 6, 7, 8, 40], [0, 0, 0, 0, 1], 0.5)]
    rows = []
    for ids, mask, adv in seqs:
        ids, mask = torch.tensor(ids), torch.tensor(mask, dtype=torch.bool)
        with torch.no_grad():
            lp = token_logprobs(model, ids[None], torch.ones_like(ids)[None],
                                target_mask=mask[None])[0]
        rows.append(Row(ids, mask, torch.where(mask, lp - 0.05, 0.0), adv, False))
    # the registry's normaliser rule: 3 sequences (not 6 tokens) for agg=token
    assert loss_normalizer("my_loss", "token", [r.mask for r in rows]) == 3.0
    b = pad_rows(rows, "cpu")
    lp = token_logprobs(model, b["ids"], b["attn"], target_mask=b["mask"])
    expected = 2 * grpo_loss(lp, b["old"], b["adv"], b["mask"], clip_low=cfg.clip_low,
                             clip_high=cfg.clip_high, agg="sequence").loss.item()
    CALLS.clear()
    out = policy_update(model, *make_optimizer(model, cfg.lr, weight_decay=cfg.weight_decay,
                                               warmup_steps=cfg.warmup_steps), rows, cfg)
    assert out["train/skipped"] == 0.0
    assert [c["rows"] for c in CALLS] == [2, 1]  # two micro-batches, both through the user's loss
    assert all(c["normalizer"] == 3.0 and c["agg"] == "token" for c in CALLS)
    assert out["train/loss"] == pytest.approx(expected, rel=1e-4)


# ------------------------------------------------------------------------------ answer rewards
def answer_length_reward(prediction, golden_answers):
    """A user answer reward: exact match, else a small credit per shared character."""
    if exact_match(prediction, golden_answers):
        return 1.0
    return 0.01 * max(len(set(prediction.lower()) & set(g.lower())) for g in golden_answers)


@pytest.fixture
def my_metric():
    register_answer_reward("my_metric", answer_length_reward)
    yield "my_metric"
    unregister_answer_reward("my_metric")


TASK = {"id": "t", "question": "Who?", "golden_answers": ["Ada Lovelace"]}


def test_registered_answer_reward_is_used_by_search_env(my_metric):
    from agentsearch.envs.search import SearchEnv

    env = SearchEnv(answer_metric="my_metric", max_turns=3)
    env.reset(options={"task": TASK})
    _, reward, term, _, info = env.step("<answer>Lace</answer>")
    expected = answer_length_reward("Lace", TASK["golden_answers"])
    assert 0 < expected < 1
    assert (term and info["reward/answer"] == pytest.approx(expected)
            and reward == pytest.approx(expected))
    assert info["answer_correct"] is False and info["metric/my_metric"] == pytest.approx(expected)
    env.reset(options={"task": TASK})
    _, _, _, _, info = env.step("<answer>ada lovelace</answer>")
    assert info["reward/answer"] == 1.0 and info["answer_correct"] is True
    # also reachable from a training config's env_kwargs
    from agentsearch.trainer.setup import build_envs

    cfg = apply_overrides(TrainConfig, "tiny", ["env_kwargs.answer_metric=my_metric"])
    assert build_envs(cfg, 1)[0].config.answer_metric == "my_metric"


def test_unknown_answer_reward_lists_the_known_ones():
    from agentsearch.envs.search import SearchEnv

    assert answer_rewards() == ["em", "f1"]
    with pytest.raises(ValueError, match=r"answer_metric 'my_metric'.*\['em', 'f1'\]"):
        SearchEnv(answer_metric="my_metric")
    with pytest.raises(ValueError, match="built-in"):
        register_answer_reward("em", answer_length_reward)

    @register_answer_reward("tmp_metric")
    def zero(prediction, golden_answers):
        return 0.0

    try:
        assert answer_rewards() == ["em", "f1", "tmp_metric"]
        assert SearchEnv(answer_metric="tmp_metric").config.answer_metric == "tmp_metric"
    finally:
        unregister_answer_reward("tmp_metric")
