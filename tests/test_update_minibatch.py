"""Several optimizer steps per rollout (mini-batches, epochs), the entropy bonus and the RL
phase's Adam betas: hand-worked numbers and equalities with the one-step path."""

import copy
import dataclasses
import math

import pytest
import torch
from test_update import EPISODES, _cfg, _rows  # noqa: E402 - shared fixtures of the update tests

from agentsearch.algorithms.losses import entropy_bonus
from agentsearch.algorithms.optim import make_optimizer
from agentsearch.algorithms.update import minibatches, policy_update
from agentsearch.models import load_model
from agentsearch.models.logprobs import token_logprobs


@pytest.fixture(scope="module")
def base():
    return load_model("tiny-s", seed=0)[0]


def test_entropy_bonus_hand_worked():
    ent = torch.tensor([[0.0, 1.0, 3.0], [0.0, 2.0, 0.0]])              # [2, 3]
    mask = torch.tensor([[False, True, True], [False, True, False]])
    assert float(entropy_bonus(ent, mask)) == pytest.approx(6.0 / 3)                 # token mean
    assert float(entropy_bonus(ent, mask, unit="sequence")) == pytest.approx((2.0 + 2.0) / 2)
    # a step's count
    assert float(entropy_bonus(ent, mask, normalizer=6.0)) == pytest.approx(1.0)


def test_token_entropy_is_the_entropy_of_the_scored_distribution(base):
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    lp, ent = token_logprobs(base, ids, temperature=0.7, with_entropy=True)           # [1, 6] each
    assert torch.equal(lp, token_logprobs(base, ids, temperature=0.7))
    with torch.no_grad():
        logp = torch.log_softmax(base(ids).logits[0, :-1].float() / 0.7, -1)         # [5, V]
    want = -(logp.exp() * logp).sum(-1)
    assert ent[0, 0] == 0 and torch.allclose(ent[0, 1:], want, atol=1e-5)


def test_minibatches_cut_in_order():
    rows = list(range(7))
    assert minibatches(rows, None) == [rows] and minibatches(rows, 10) == [rows]
    assert minibatches(rows, 3) == [[0, 1, 2], [3, 4, 5], [6]]


def _step(model, cfg, rows, **kw):
    opt, sched = make_optimizer(model, cfg.lr)
    return policy_update(model, opt, sched, rows, dataclasses.replace(cfg, **kw)), opt, sched


def test_minibatch_steps_equal_one_step_per_minibatch_and_one_schedule_step(base):
    cfg = _cfg()
    rows = _rows(base, cfg)
    assert len(rows) >= 4
    a = copy.deepcopy(base)
    out, _, sched = _step(a, cfg, rows, update_minibatch_size=2)
    with_signal = [mb for mb in minibatches(rows, 2) if any(r.adv != 0 for r in mb)]
    # task b: no signal
    assert len(minibatches(rows, 2)) == math.ceil(len(rows) / 2) > len(with_signal) > 1
    assert out["train/optimizer_steps"] == len(with_signal) and out["train/skipped"] == 0
    assert sched.last_epoch == 1                      # the LR schedule counts training steps
    b = copy.deepcopy(base)                           # the same, by hand: one call per mini-batch
    opt, _ = make_optimizer(b, cfg.lr)
    for mb in minibatches(rows, 2):
        policy_update(b, opt, None, mb, cfg)
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.allclose(p, q, atol=1e-7), n
    two, *_ = _step(copy.deepcopy(base), cfg, rows, update_epochs=2)
    assert two["train/optimizer_steps"] == 2 and two["train/rows"] == len(rows)


def test_entropy_bonus_moves_weights_even_without_advantages(base):
    cfg = _cfg()
    rows = [dataclasses.replace(r, adv=0.0) for r in _rows(base, cfg)]
    m = copy.deepcopy(base)
    out, *_ = _step(m, cfg, rows)
    assert out["train/skipped_no_signal"] == 1.0      # nothing to learn without the bonus
    out, *_ = _step(m, cfg, rows, entropy_coef=0.01)
    assert out["train/skipped"] == 0 and out["train/entropy"] > 0
    assert any(not torch.equal(p, q) for p, q in zip(m.parameters(), base.parameters()))


def test_rl_phase_uses_the_configured_adam_betas(tmp_path, monkeypatch):
    import agentsearch.trainer.loop as loop_module
    from agentsearch.core.config import apply_overrides
    from agentsearch.trainer.train_config import TrainConfig

    seen = []
    real = loop_module.policy_update

    def spy(model, optimizer, *a, **k):
        seen.append(optimizer.param_groups[0]["betas"])
        return real(model, optimizer, *a, **k)

    monkeypatch.setattr(loop_module, "policy_update", spy)
    cfg = apply_overrides(TrainConfig, "tiny", [
        "model=tiny-s", "steps=1", "prompts_per_step=2", "group_size=2", "max_turns=2",
        "max_seq_len=384", "generation.max_new_tokens=8", "eval.limit=2", "eval.every=0",
        "replay.kind=none", "sft.steps=0", "threads=1", "tensorboard=false",
        "adam_betas=[0.8, 0.95]", "update_minibatch_size=2"])
    loop_module.train(cfg, tmp_path / "run", quiet=True)
    assert seen == [(0.8, 0.95)]
    assert len(EPISODES) == 6  # the shared fixture this file builds on


def test_the_updates_own_forward_stands_in_for_the_rescore(base):
    """``rescore_groups``: a group not rescored takes its ratio denominator from the update's
    forward (detached): the same step as with the rescore's logprobs, and the group keeps the
    trainer's logprobs (what the replay buffer stores), not the engine's."""
    from agentsearch.algorithms.grouping import episodes_to_groups, rescore
    from agentsearch.algorithms.update import rows_of
    from agentsearch.models.logprobs import make_score_fn

    cfg = dataclasses.replace(_cfg(), micro_batch_size=2)

    def groups():
        return episodes_to_groups(EPISODES, 2, step=1, pad_id=0)[0]

    rescored = groups()
    rescore(rescored, make_score_fn(base, temperature=cfg.generation.temperature))
    engine = groups()  # engine logprobs: all 0 in EPISODES, far from the trainer's
    for g in engine:
        g.gen_logprobs = torch.where(g.action_mask, torch.full_like(g.gen_logprobs, -0.5), 0.0)
    a, b = copy.deepcopy(base), copy.deepcopy(base)
    out_a, *_ = _step(a, cfg, rows_of(rescored))
    out_b, *_ = _step(b, cfg, rows_of(engine, own_ratio=[True] * len(engine)))
    assert out_b["train/ratio_mean"] == pytest.approx(1.0) and out_b["train/clip_frac"] == 0
    assert out_a["train/loss"] == pytest.approx(out_b["train/loss"], abs=1e-6)
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.allclose(p, q, atol=1e-6), n
    for want, got in zip(rescored, engine):   # task b (no signal: never trained nor stored)
        if bool(want.advantages.any()):       # takes no forward and keeps the engine's
            assert torch.allclose(got.gen_logprobs, want.gen_logprobs, atol=1e-5)
        else:
            assert torch.equal(got.gen_logprobs[got.action_mask], torch.tensor([-0.5] * 4))
    # without it, the engine's logprobs are the denominator: ratios away from 1
    c = copy.deepcopy(base)
    out_c, *_ = _step(c, cfg, rows_of(groups()))
    assert out_c["train/ratio_mean"] != pytest.approx(1.0)


@pytest.mark.parametrize("bad", ["update_epochs=2", "update_minibatch_size=4",
                                 "async.enabled=true", "rescore_groups=-1"])
def test_rescore_groups_is_refused_where_the_update_is_not_one_step(bad):
    from agentsearch.core.config import ConfigError, apply_overrides
    from agentsearch.trainer.train_config import TrainConfig

    over = ["rescore_groups=1", bad] if not bad.startswith("rescore") else [bad]
    with pytest.raises(ConfigError, match="rescore_groups"):
        apply_overrides(TrainConfig, "tiny", over)


def test_zero_advantage_rows_take_no_forward_and_leave_the_step_unchanged(base):
    """Task b's rows (advantage 0) add nothing to the loss: the update skips their forward; the
    step equals the full batch's (test_update's equivalences cover the gradient) and with a KL
    or entropy term, which pulls on every row, they are forwarded again."""
    cfg = dataclasses.replace(_cfg(), micro_batch_size=1)
    rows = _rows(base, cfg)
    zero = [r for r in rows if r.adv == 0.0]
    assert zero and len(zero) < len(rows)
    calls = []

    def count(model):
        return model.get_input_embeddings().register_forward_hook(lambda *a: calls.append(1))

    a = copy.deepcopy(base)
    hook = count(a)
    out_a, *_ = _step(a, cfg, rows)
    hook.remove()
    assert len(calls) == len(rows) - len(zero)
    assert out_a["train/rows"] == len(rows)
    assert out_a["train/rows_forwarded"] == len(rows) - len(zero)
    assert out_a["train/tokens_forwarded"] == sum(int(r.mask.sum()) for r in rows if r.adv != 0)
    b = copy.deepcopy(base)  # the same step on the signal rows only, normalised by all rows
    calls.clear()
    hook = count(b)
    out_b, *_ = _step(b, cfg, rows, entropy_coef=1e-9)
    hook.remove()
    assert len(calls) == len(rows) == out_b["train/rows_forwarded"]
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.allclose(p, q, atol=1e-6), n
