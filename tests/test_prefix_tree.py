"""The shared-prefix update (``models.prefix_tree``): the radix tree by hand, and the same
logprobs, loss and gradient as rows forwarded one at a time."""

import copy
import dataclasses

import pytest
import torch
from test_update import _cfg, _ref_fn, _rows  # noqa: E402 - shared fixtures of the update tests

from agentsearch.algorithms.optim import make_optimizer
from agentsearch.algorithms.update import policy_update, rows_of
from agentsearch.models import load_model
from agentsearch.models.logprobs import token_logprobs
from agentsearch.models.prefix_tree import build_tree, tree_backward, tree_tokens


@pytest.fixture(scope="module")
def base():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield load_model("tiny-s", seed=0)[0].float()
    torch.set_num_threads(threads)


def test_radix_tree_by_hand():
    seqs = [[1, 2, 3], [1, 2, 4, 5], [1, 2, 3], [6], [1, 2]]
    roots = build_tree(seqs)
    assert [(r.start, r.ids, r.rows, r.ends) for r in roots] == [
        (0, [1, 2], [0, 1, 2, 4], [4]), (0, [6], [3], [3])]
    kids = roots[0].children
    assert [(k.start, k.ids, k.rows, k.ends) for k in kids] == [
        (2, [3], [0, 2], [0, 2]), (2, [4, 5], [1], [1])]
    assert tree_tokens(roots) == 2 + 1 + 2 + 1  # of 3 + 4 + 3 + 1 + 2 = 13 row tokens


def _tree_rows():
    """Rows sharing a 12-token prompt; two share a search too; one twice; one a prefix."""
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, 200, (12,), generator=g)
    rows = [torch.cat([prompt, torch.tensor([7, 8, 9, 10]), torch.randint(3, 200, (3 + i,),
                                                                           generator=g)])
            for i in range(2)]
    rows += [torch.cat([prompt, torch.randint(3, 200, (5 + i,), generator=g)]) for i in range(3)]
    rows += [rows[2].clone(), rows[0][:15].clone()]
    masks = []
    for r in rows:
        m = torch.zeros(len(r), dtype=torch.bool)
        m[12:] = True
        m[13] = False  # an environment token among the policy's
        masks.append(m)
    return rows, masks


def test_tree_backward_gives_each_rows_logprobs_and_the_same_gradient(base):
    rows, masks = _tree_rows()
    adv = torch.linspace(-1.0, 1.5, len(rows))
    model = copy.deepcopy(base).train()
    want_lp, loss_a = [], 0.0
    for i, r in enumerate(rows):
        lp = token_logprobs(model, r[None], target_mask=masks[i][None])[0]    # [T]
        want_lp.append(lp.detach())
        loss = -(adv[i] * lp).sum() / 50
        loss.backward()
        loss_a += float(loss.detach())
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    seen, loss_b = {}, 0.0

    def row_loss(i, lp):                                                      # lp [T]
        nonlocal loss_b
        seen[i] = lp.detach()
        loss = -(adv[i] * lp).sum() / 50
        loss_b += float(loss.detach())
        return loss

    forwarded = tree_backward(model, rows, masks, row_loss)
    # prompt, [7 8 9] (row 6 ends), [10], two tails; rows 2 (= 5), 3, 4: distinct prefixes only
    assert forwarded == 12 + 3 + 1 + 3 + 4 + 5 + 6 + 7 < sum(map(len, rows))
    assert sorted(seen) == list(range(len(rows)))
    for i in range(len(rows)):
        assert torch.allclose(seen[i], want_lp[i], atol=1e-5), i
        assert (seen[i][~masks[i]] == 0).all()
    assert loss_b == pytest.approx(loss_a, rel=1e-5)
    for n, p in model.named_parameters():
        assert torch.allclose(p.grad, grads[n], rtol=1e-4, atol=1e-7), n


class _KeepsGradients(torch.optim.SGD):
    """SGD that keeps the gradients it stepped on (``policy_update`` clears them after)."""

    def step(self, closure=None):
        self.grads = [p.grad.clone() for g in self.param_groups for p in g["params"]]
        return super().step(closure)


@pytest.mark.parametrize("loss,kl", [("grpo", 0.0), ("grpo", 0.1), ("gspo", 0.0)])
def test_shared_prefix_update_takes_the_same_step(base, loss, kl):
    cfg = _cfg(loss, kl_coef=kl, micro_batch_size=1)
    rows = _rows(base, cfg)
    ref = _ref_fn(base, cfg) if kl else None
    outs, models = [], []
    for shared in (False, True):
        model = copy.deepcopy(base)
        opt = _KeepsGradients(model.parameters(), lr=cfg.lr)
        outs.append(policy_update(model, opt, None, copy.deepcopy(rows),
                                  dataclasses.replace(cfg, shared_prefix=shared),
                                  ref_logprobs_fn=ref))
        models.append(opt.grads)
    a, b = outs
    for k in ("train/loss", "train/ratio_mean", "train/clip_frac", "train/kl_ref",
              "train/grad_norm", "train/tokens_forwarded"):
        assert b[k] == pytest.approx(a[k], rel=1e-4, abs=1e-6), k  # (a loss near 0: sums cancel)
    # the rows share their 3-token prompt (test_update's EPISODES): fewer positions
    assert b["train/positions_forwarded"] < a["train/positions_forwarded"]
    for (n, _), p, q in zip(base.named_parameters(), *models):
        # the same (clipped) gradient, to float rounding of sums taken in another order
        assert (q - p).abs().max() <= 1e-4 * p.abs().max(), n


def test_own_ratio_rows_keep_the_tree_forwards_logprobs(base):
    """Rows whose ratio denominator is the update's own forward (``rescore_groups``) store
    that forward's logprobs: the tree's equal the micro-batch path's."""
    cfg = _cfg("grpo", micro_batch_size=1)
    from test_update import EPISODES

    from agentsearch.algorithms.grouping import episodes_to_groups

    stored = []
    for shared in (False, True):
        groups, _ = episodes_to_groups(EPISODES, 2, step=1, pad_id=0)
        rows = rows_of(groups, own_ratio=[True] * len(groups))
        model = copy.deepcopy(base)
        opt, sched = make_optimizer(model, cfg.lr)
        policy_update(model, opt, sched, rows, dataclasses.replace(cfg, shared_prefix=shared))
        stored.append([g.gen_logprobs.clone() for g in groups])
    signal = [bool(g.advantages.any()) for g in groups]  # task b's group is never forwarded
    assert signal == [True, False, True]
    for x, y, trained in zip(*stored, signal):
        assert torch.allclose(x, y, atol=1e-5) and bool(x.abs().sum() > 0) == trained


def test_tree_score_fn_scores_like_the_batched_one(base):
    from test_update import EPISODES

    from agentsearch.algorithms.grouping import episodes_to_groups
    from agentsearch.models.logprobs import make_score_fn
    from agentsearch.models.prefix_tree import make_tree_score_fn

    groups, _ = episodes_to_groups(EPISODES, 2, step=1, pad_id=0)
    model = copy.deepcopy(base).train()
    want = make_score_fn(model, temperature=0.7)(groups)
    got = make_tree_score_fn(model, temperature=0.7)(groups)
    assert model.training  # its mode restored
    for w, g, grp in zip(want, got, groups):
        assert w.shape == g.shape == grp.token_ids.shape
        assert torch.allclose(g, w, atol=1e-5) and (g[~grp.action_mask] == 0).all()


@pytest.mark.slow
def test_a_run_with_shared_prefix_takes_the_steps_of_one_without(tmp_path):
    """Two tiny runs from one warm start with mixed outcomes, HDR on (its scan and the rescore
    score through the tree): the same rollouts, losses and replay decisions, in fewer
    forwarded positions."""
    from test_trainer import WARM, _cfg, _records, _register_parity_env

    from agentsearch.trainer.loop import train

    _register_parity_env()
    recs = []
    for shared in ("false", "true"):
        train(_cfg("steps=3", "env=tests/ParitySearch-v0", "replay.kind=hdr", *WARM,
                   f"shared_prefix={shared}"), tmp_path / shared, quiet=True)
        recs.append(_records(tmp_path / shared)[1:])
    assert len(recs[0]) == 3 and any(r.get("train/rows_forwarded") for r in recs[0])
    assert any(r["replay/accepted"] for r in recs[0])
    for a, b in zip(*recs):
        assert b["rollout/tokens_generated"] == a["rollout/tokens_generated"]
        for k in ("train/loss", "train/grad_norm", "replay/accepted", "replay/candidates"):
            assert b.get(k) == pytest.approx(a.get(k), rel=1e-3, abs=1e-6), k
        if a.get("train/rows_forwarded"):
            assert b["train/positions_forwarded"] < a["train/positions_forwarded"]
