"""``policy_update`` on a tiny model built from a config: the loss it reports is the pure loss
of the same rows (each loss with its own normaliser), micro-batches add up to the full-batch
gradient, and a step without signal leaves weights and optimizer state alone."""

import copy
import dataclasses

import pytest
import torch

from agentsearch.algorithms.grouping import (
    drop_zero_signal,
    episodes_have_signal,
    episodes_to_groups,
    rescore,
)
from agentsearch.algorithms.losses import (
    aggregation,
    kl_penalty,
    loss_names,
    loss_normalizer,
    policy_loss,
)
from agentsearch.algorithms.optim import make_optimizer
from agentsearch.algorithms.update import Row, pad_rows, policy_update, rows_of
from agentsearch.models import load_model
from agentsearch.models.logprobs import make_score_fn, token_logprobs
from agentsearch.rollout import Episode
from agentsearch.trainer.train_config import SamplingConfig, TrainConfig

CLIPS = {"grpo": (0.2, 0.28), "gspo": (3e-4, 4e-4), "cispo": (0.2, 0.28)}
# old-logprob perturbation: some GRPO/CISPO tokens clip; GSPO's sequence ratios stay in range
EPS = {"grpo": 0.3, "gspo": 2e-4, "cispo": 0.3}


@pytest.fixture(scope="module")
def base():
    return load_model("tiny-s", seed=0)[0]


@pytest.fixture(scope="module")
def ref_model():
    return load_model("tiny-s", seed=1)[0].eval()


def _cfg(loss="grpo", **kw):
    lo, hi = CLIPS[loss]
    return TrainConfig(model="tiny-s", loss=loss, clip_low=lo, clip_high=hi, lr=1e-3,
                       generation=SamplingConfig(max_new_tokens=4), **kw)


def _episode(task, policy, reward, prompt=(5, 6, 7), obs=(8, 9)):
    """prompt, then the policy turns in ``policy`` separated by observation tokens."""
    ids, mask = list(prompt), [0] * len(prompt)
    for i, turn in enumerate(policy):
        if i:
            ids, mask = ids + list(obs), mask + [0] * len(obs)
        ids, mask = ids + list(turn), mask + [1] * len(turn)
    return Episode(task_id=task, token_ids=ids, action_mask=mask, gen_logprobs=[0.0] * len(ids),
                   prompt_len=len(prompt), reward=reward, reward_components={"answer": reward},
                   answer_correct=None, terminated=True, truncated=False, num_turns=len(policy))


EPISODES = [  # 3 tasks x 2 responses; task b has zero reward variance
    _episode("a", [(20, 21, 22), (23, 24)], 1.0), _episode("a", [(30, 31)], 0.0),
    _episode("b", [(40,)], 0.0), _episode("b", [(41, 42, 43)], 0.0),
    _episode("c", [(50, 51, 52), (53, 54, 55)], 1.0), _episode("c", [(60,)], 0.5),
]


def _rows(model, cfg) -> list[Row]:
    """EPISODES -> groups (with cfg's overlong shaping) -> trainer logprobs -> rows, as the loop
    does; the old logprobs are the trainer's, nudged by a fixed pattern so ratios differ from 1."""
    groups, _ = episodes_to_groups(EPISODES, 2, step=1, pad_id=0,
                                   advantage_scale=cfg.advantage_scale,
                                   overlong=cfg.overlong_shaping())
    rescore(groups, make_score_fn(model, temperature=cfg.generation.temperature))
    for g in groups:
        # [n, T]
        pattern = torch.linspace(-1.0, 1.0, g.gen_logprobs.numel()).view_as(g.gen_logprobs)
        g.gen_logprobs = torch.where(g.action_mask, g.gen_logprobs + EPS[cfg.loss] * pattern, 0.0)
    return rows_of(drop_zero_signal(groups) if cfg.dynamic_sampling else groups)  # as the loop does


def _ref_fn(ref_model, cfg):
    def ref(ids, attn, mask):
        return token_logprobs(ref_model, ids, attn, temperature=cfg.generation.temperature,
                              target_mask=mask)
    return ref


def _full_batch_loss(model, rows, cfg, ref_model=None):
    """The pure loss (+ KL) of all rows as one padded batch, with its default normaliser."""
    b = pad_rows(rows, "cpu")
    lp = token_logprobs(model, b["ids"], b["attn"], temperature=cfg.generation.temperature,
                        target_mask=b["mask"])  # [B, T]
    loss = policy_loss(cfg.loss, lp, b["old"], b["adv"], b["mask"], clip_low=cfg.clip_low,
                       clip_high=cfg.clip_high, dual_clip=cfg.dual_clip, agg=cfg.agg).loss
    if ref_model is not None and cfg.kl_coef > 0:
        with torch.no_grad():
            ref = _ref_fn(ref_model, cfg)(b["ids"], b["attn"], b["mask"])
        loss = loss + cfg.kl_coef * kl_penalty(lp, ref, b["mask"], cfg.kl_kind,
                                               unit=aggregation(cfg.loss, cfg.agg))
    return loss


def _params(model):
    return {k: v.detach().clone() for k, v in model.named_parameters()}


VARIANTS = {"plain": {}, "kl": {"kl_coef": 0.1}, "dynamic_sampling": {"dynamic_sampling": True},
            "overlong": {"overlong_buffer": 4, "max_response_tokens": 6},
            "sequence": {"agg": "sequence"}}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("loss", ["grpo", "gspo", "cispo"])
def test_reported_loss_is_the_pure_loss_and_the_step_moves_weights(base, ref_model, loss, variant):
    cfg = _cfg(loss, micro_batch_size=2, **VARIANTS[variant])
    model = copy.deepcopy(base)
    rows = _rows(model, cfg)
    assert len(rows) == (4 if cfg.dynamic_sampling else 6)
    with torch.no_grad():
        expected = float(_full_batch_loss(model, rows, cfg, ref_model))
    before = _params(model)
    opt, sched = make_optimizer(model, cfg.lr, weight_decay=cfg.weight_decay,
                                warmup_steps=cfg.warmup_steps)
    out = policy_update(model, opt, sched, rows, cfg,
                        ref_logprobs_fn=_ref_fn(ref_model, cfg) if cfg.kl_coef > 0 else None)
    assert out["train/loss"] == pytest.approx(expected, rel=1e-4, abs=1e-6)
    assert out["train/skipped"] == 0.0 and out["train/skipped_no_signal"] == 0.0
    assert out["train/kl_ref"] > 0 if cfg.kl_coef > 0 else out["train/kl_ref"] == 0.0
    assert any(not torch.equal(before[k], v) for k, v in model.named_parameters())


@pytest.mark.parametrize("loss,agg,expected", [
    # on policy (r = 1); rows: A = +1 on 2 tokens, -1 on 3 tokens, +0.5 on 1 token
    ("grpo", "token", -(1 * 2 - 1 * 3 + 0.5 * 1) / 6),   # token sum / 6 tokens
    ("grpo", "sequence", -(1 - 1 + 0.5) / 3),            # sequence means / 3 sequences
    ("gspo", "token", -(1 - 1 + 0.5) / 3),               # GSPO: per sequence whatever agg says
    ("gspo", "sequence", -(1 - 1 + 0.5) / 3),
])
def test_on_policy_loss_hand_worked(base, loss, agg, expected):
    cfg = _cfg(loss, agg=agg, micro_batch_size=1)
    model = copy.deepcopy(base)
    specs = [((5, 6, 20, 21), (0, 0, 1, 1), 1.0), ((5, 30, 31, 32), (0, 1, 1, 1), -1.0),
             ((5, 6, 7, 40), (0, 0, 0, 1), 0.5)]
    rows = [Row(torch.tensor(ids), torch.tensor(m, dtype=torch.bool), torch.zeros(4), a, False)
            for ids, m, a in specs]
    for r in rows:
        b = pad_rows([r], "cpu")
        with torch.no_grad():
            r.old_lp = token_logprobs(model, b["ids"], b["attn"])[0]  # [T]: on policy
    opt, sched = make_optimizer(model, cfg.lr, weight_decay=cfg.weight_decay,
                                warmup_steps=cfg.warmup_steps)
    out = policy_update(model, opt, sched, rows, cfg)
    assert out["train/loss"] == pytest.approx(expected, abs=1e-5)


def test_loss_normalizer_table():
    masks = [torch.tensor([0, 1, 1], dtype=torch.bool),
             torch.tensor([[1, 1, 1], [0, 0, 0]], dtype=torch.bool)]
    # 5 policy tokens; 2 sequences with a policy token (the empty row does not count)
    assert loss_normalizer("grpo", "token", masks) == 5.0
    assert loss_normalizer("cispo", "token", masks) == 5.0
    assert loss_normalizer("gspo", "token", masks) == 2.0
    assert all(loss_normalizer(k, "sequence", masks) == 2.0 for k in loss_names())
    assert loss_normalizer("grpo", "token", [torch.zeros(3, dtype=torch.bool)]) == 1.0
    with pytest.raises(ValueError, match="unknown loss"):
        loss_normalizer("ppo2", "token", masks)


def _sgd_delta(base, rows, cfg, mbs, ref_model=None):
    """Parameter change of one policy_update with SGD(lr=1), no clipping: minus the gradient."""
    model = copy.deepcopy(base)
    cfg = dataclasses.replace(cfg, micro_batch_size=mbs)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    before = _params(model)
    out = policy_update(model, opt, None, rows, cfg,
                        ref_logprobs_fn=_ref_fn(ref_model, cfg) if ref_model is not None else None)
    assert out["train/skipped"] == 0.0
    return {k: before[k] - v.detach() for k, v in model.named_parameters()}, out


@pytest.mark.parametrize("kl", [0.0, 0.1])
@pytest.mark.parametrize("agg", ["token", "sequence"])
@pytest.mark.parametrize("loss", ["grpo", "gspo", "cispo"])
def test_micro_batches_give_the_full_batch_gradient(base, ref_model, loss, agg, kl):
    cfg = _cfg(loss, agg=agg, kl_coef=kl, grad_clip=1e9)
    rows = _rows(base, cfg)
    ref = ref_model if kl > 0 else None
    one, out_one = _sgd_delta(base, rows, cfg, 1, ref)
    full, out_full = _sgd_delta(base, rows, cfg, len(rows), ref)
    # the gradient of the pure full-batch loss, by autograd
    model = copy.deepcopy(base)
    _full_batch_loss(model, rows, cfg, ref).backward()
    grad = {k: p.grad for k, p in model.named_parameters()}
    scale = max(float(g.abs().max()) for g in grad.values())
    assert scale > 0
    for k in grad:
        assert torch.allclose(one[k], full[k], atol=1e-5 * scale, rtol=0), k
        assert torch.allclose(full[k], grad[k], atol=1e-5 * scale, rtol=0), k
    assert out_one["train/loss"] == pytest.approx(out_full["train/loss"], rel=1e-5, abs=1e-6)
    assert out_one["train/grad_norm"] == pytest.approx(out_full["train/grad_norm"], rel=1e-4)


def _state(opt):
    return copy.deepcopy(opt.state_dict())


def _same_state(a, b) -> bool:
    if a["param_groups"] != b["param_groups"] or a["state"].keys() != b["state"].keys():
        return False
    return all(torch.equal(torch.as_tensor(a["state"][i][k]), torch.as_tensor(b["state"][i][k]))
               for i in a["state"] for k in a["state"][i])


@pytest.mark.parametrize("loss", ["grpo", "gspo", "cispo"])
def test_a_step_without_signal_touches_nothing(base, loss):
    cfg = _cfg(loss)
    model = copy.deepcopy(base)
    opt, sched = make_optimizer(model, cfg.lr, weight_decay=cfg.weight_decay,
                                warmup_steps=cfg.warmup_steps)
    rows = _rows(model, cfg)
    first = policy_update(model, opt, sched, rows, cfg)  # a real step: Adam now has momentum
    assert first["train/skipped"] == 0.0 and first["train/skipped_no_signal"] == 0.0
    params, state, lr_step = _params(model), _state(opt), sched.last_epoch
    for r in rows:
        r.adv = 0.0
    out = policy_update(model, opt, sched, rows, cfg)
    assert out["train/skipped"] == 1.0 and out["train/skipped_no_signal"] == 1.0
    assert all(torch.equal(params[k], v) for k, v in model.named_parameters())
    assert _same_state(state, _state(opt)) and sched.last_epoch == lr_step
    assert policy_update(model, opt, sched, [], cfg)["train/skipped_no_signal"] == 1.0


def test_zero_advantages_with_a_kl_term_still_step(base, ref_model):
    # the KL term pulls toward the reference whatever the advantages: that is signal
    cfg = _cfg("grpo", kl_coef=0.1)
    model = copy.deepcopy(base)
    opt, sched = make_optimizer(model, cfg.lr, weight_decay=cfg.weight_decay,
                                warmup_steps=cfg.warmup_steps)
    rows = _rows(model, cfg)
    for r in rows:
        r.adv = 0.0
    before = _params(model)
    out = policy_update(model, opt, sched, rows, cfg, ref_logprobs_fn=_ref_fn(ref_model, cfg))
    assert out["train/skipped_no_signal"] == 0.0 and out["train/kl_ref"] > 0
    assert any(not torch.equal(before[k], v) for k, v in model.named_parameters())


@pytest.mark.parametrize("loss,agg,expected", [
    # k1 per policy token = logp - ref = 3 on row A's one token, 1 on each of row B's three
    ("grpo", "token", (3 + 1 + 1 + 1) / 4),   # token mean, like the token-level loss
    ("grpo", "sequence", (3 / 1 + 3 / 3) / 2),  # mean of sequence means, like the loss
    ("gspo", "token", (3 / 1 + 3 / 3) / 2),     # GSPO is per sequence whatever agg says
])
def test_kl_term_is_aggregated_like_the_loss_hand_worked(base, loss, agg, expected):
    # one row per micro-batch
    cfg = _cfg(loss, agg=agg, kl_coef=0.5, kl_kind="k1", micro_batch_size=1)
    model = copy.deepcopy(base)
    rows = [Row(torch.tensor([5, 6, 20]), torch.tensor([0, 0, 1], dtype=torch.bool), torch.zeros(3),
                0.0, False),
            Row(torch.tensor([5, 30, 31, 32]), torch.tensor([0, 1, 1, 1], dtype=torch.bool),
                torch.zeros(4), 0.0, False)]

    def ref(ids, attn, mask):  # the policy's own logprobs, minus 3 on token 20 and 1 elsewhere
        lp = token_logprobs(model, ids, attn, temperature=cfg.generation.temperature,
                            target_mask=mask)
        return lp - torch.where(ids == 20, 3.0, 1.0)

    opt, sched = make_optimizer(model, cfg.lr)
    out = policy_update(model, opt, sched, rows, cfg, ref_logprobs_fn=ref)
    assert out["train/kl_ref"] == pytest.approx(expected, abs=1e-5)
    # zero advantages: KL only
    assert out["train/loss"] == pytest.approx(cfg.kl_coef * expected, abs=1e-5)


def test_dynamic_sampling_keeps_exactly_the_groups_with_signal():
    groups, _ = episodes_to_groups(EPISODES, 2, step=1, pad_id=0)
    assert [g.prompt_id for g in drop_zero_signal(groups)] == ["a", "c"]  # b: both rewards 0
    groups[0].rewards = torch.tensor([0.0, 0.5])  # the rewards the advantages came from decide
    groups[2].rewards = torch.tensor([1.0, 1.0 + 1e-9])  # a difference within rounding is none
    assert [g.prompt_id for g in drop_zero_signal(groups)] == ["a"]


@pytest.mark.parametrize("rewards", [(0.0, 0.0), (0.0, 1e-9), (0.0, 1e-6), (0.0, 1.0)])
def test_one_has_signal_rule_for_metrics_dynamic_sampling_and_the_sampler(rewards):
    """Whether a group has signal is decided once: the zero-variance share logged, the groups
    dynamic sampling keeps, and what the task sampler and regeneration count agree."""
    eps = [Episode(task_id="a", token_ids=[5, 6, 7], action_mask=[0, 0, 1], prompt_len=2,
                   gen_logprobs=[0, 0, -1.0], reward=r, reward_components={}, answer_correct=None,
                   terminated=True, truncated=False, num_turns=1) for r in rewards]
    groups, m = episodes_to_groups(eps, 2, step=1, pad_id=0)
    signal = rewards[1] - rewards[0] > 1e-8
    assert m["groups/zero_variance_frac"] == (0.0 if signal else 1.0)
    assert len(drop_zero_signal(groups)) == int(signal)
    assert episodes_have_signal(eps) is signal  # the sampler's and regeneration's count


def test_cispo_without_a_lower_clip(base):
    from agentsearch.core.config import ConfigError, apply_overrides

    assert apply_overrides(TrainConfig, "tiny", ["loss=cispo", "clip_low=none"]).clip_low is None
    with pytest.raises(ConfigError, match="clip_low=none .* not grpo"):
        apply_overrides(TrainConfig, "tiny", ["loss=grpo", "clip_low=none"])
    cfg = dataclasses.replace(_cfg("cispo"), clip_low=None)
    model = copy.deepcopy(base)
    rows = _rows(model, cfg)
    for r in rows:  # every ratio near exp(-0.5) = 0.61, below 1 - 0.2
        r.old_lp = r.old_lp + 0.5 * r.mask
    with torch.no_grad():
        unbounded = float(_full_batch_loss(model, rows, cfg))
        clipped = float(_full_batch_loss(model, rows, dataclasses.replace(cfg, clip_low=0.2)))
    assert abs(unbounded - clipped) > 1e-4  # the lower clip matters on these rows
    opt, sched = make_optimizer(model, cfg.lr)
    out = policy_update(model, opt, sched, rows, cfg)
    assert out["train/loss"] == pytest.approx(unbounded, rel=1e-4, abs=1e-6)
