"""token_logprobs and make_score_fn against a plain forward pass on a tiny Qwen2."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from agentsearch.models.logprobs import make_score_fn, token_logprobs
from agentsearch.replay import HeadroomDriftBuffer, ReplayGroup, headroom


@pytest.fixture(scope="module")
def model():
    from agentsearch.models import load_model

    m, _ = load_model("tiny-s", seed=0)
    return m.eval()


def reference(model, ids, attn, temperature=1.0):
    """The obvious way: full logits, log_softmax, gather; 0 where undefined."""
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=attn, position_ids=pos).logits.float()
    lp = (logits / temperature).log_softmax(-1)[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)
    valid = (attn[:, 1:] > 0) & (attn[:, :-1] > 0)
    return torch.cat([torch.zeros(ids.shape[0], 1), torch.where(valid, lp, 0.0)], 1)


def batch(seed=0, B=4, T=17, V=4096):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, V, (B, T), generator=g)
    attn = torch.ones(B, T, dtype=torch.long)
    attn[1, 11:] = 0      # right padding
    attn[2, :5] = 0       # left padding
    attn[3, 3:] = 0
    return ids, attn


@pytest.mark.parametrize("chunk", [1, 5, 4096])
def test_matches_plain_forward_with_padding(model, chunk):
    ids, attn = batch()
    with torch.no_grad():
        ours = token_logprobs(model, ids, attn, chunk_tokens=chunk)
        ref = reference(model, ids, attn)
    assert ours.dtype == torch.float32 and ours.shape == ids.shape
    assert torch.allclose(ours, ref, atol=1e-5)
    assert ours[:, 0].abs().max() == 0
    assert ours[2, :6].abs().max() == 0 and ours[1, 11:].abs().max() == 0  # padding, 1st real token
    assert ours[0, 1:].abs().min() > 0                                        # real tokens scored


def test_temperature_and_target_mask(model):
    ids, attn = batch(seed=1)
    tmask = torch.rand(ids.shape, generator=torch.Generator().manual_seed(0)) > 0.5
    with torch.no_grad():
        ours = token_logprobs(model, ids, attn, temperature=0.7, target_mask=tmask)
        ref = reference(model, ids, attn, temperature=0.7)
    assert torch.allclose(ours, torch.where(tmask, ref, 0.0), atol=1e-5)
    assert not torch.allclose(ref, reference(model, ids, attn), atol=1e-3)


def test_gradients_flow_and_match_plain_backward(model):
    ids, attn = batch(seed=2)
    model.zero_grad()
    token_logprobs(model, ids, attn, chunk_tokens=7).sum().backward()
    ours = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    reference(model, ids, attn).sum().backward()
    ref = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    assert set(ours) == set(ref) and len(ours) > 10
    for n in ref:
        assert torch.allclose(ours[n], ref[n], atol=1e-5, rtol=1e-4), n
    assert ours["model.embed_tokens.weight"].abs().sum() > 0


def test_nothing_to_score_still_backpropagates(model):
    ids = torch.randint(0, 4096, (2, 6))
    attn = torch.zeros_like(ids)
    attn[:, 0] = 1  # one real token per row: no position has a context
    out = token_logprobs(model, ids, attn)
    assert out.shape == (2, 6) and out.abs().sum() == 0 and out.requires_grad
    out.sum().backward()  # a loss over an empty micro-batch must not crash the step
    model.zero_grad()


class Opaque(nn.Module):
    """A model with neither get_decoder nor get_output_embeddings: the fallback path."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, **kw):
        return self.inner(**kw)


def test_unknown_architecture_falls_back_to_forward(model):
    ids, attn = batch(seed=3)
    with torch.no_grad():
        assert torch.allclose(token_logprobs(Opaque(model), ids, attn, chunk_tokens=3),
                              reference(model, ids, attn), atol=1e-5)


def test_peft_lora_model(model):
    import peft  # a base dependency: never skipped

    from agentsearch.models import load_model

    base, _ = load_model("tiny-s", seed=0)
    cfg = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                          init_lora_weights=False)
    lora = peft.get_peft_model(base, cfg)
    ids, attn = batch(seed=4)
    out = token_logprobs(lora, ids, attn)
    assert torch.allclose(out, reference(lora, ids, attn), atol=1e-5)
    assert not torch.allclose(out, reference(model, ids, attn), atol=1e-4)  # LoRA is in the path
    out.sum().backward()
    grads = [p.grad for n, p in lora.named_parameters() if "lora_" in n]
    assert grads and all(g is not None and g.abs().sum() > 0 for g in grads)


def make_group(model, pid, lengths, prompt=4, T=14, seed=0):
    """A group with rows of different lengths, env tokens inside, gen logprobs from `model`."""
    g = torch.Generator().manual_seed(seed)
    n = len(lengths)
    ids = torch.randint(0, 4096, (n, T), generator=g)
    mask = torch.zeros(n, T, dtype=torch.bool)
    for i, L in enumerate(lengths):
        ids[i, :prompt] = ids[0, :prompt]  # shared prompt
        mask[i, prompt:L] = True
        mask[i, prompt + 2: prompt + 4] = False  # an env observation
        ids[i, L:] = 0
    with torch.no_grad():
        lp = token_logprobs(model, ids, torch.ones_like(ids))
    return ReplayGroup(prompt_id=pid, token_ids=ids, action_mask=mask, gen_logprobs=lp,
                       advantages=torch.linspace(-1, 1, n), rewards=(torch.arange(n) % 2).float(),
                       answer_correct=None, born_step=0)


def test_score_fn_shapes_values_batching_and_mode(model):
    groups = [make_group(model, 0, [14, 9, 6]), make_group(model, 1, [10, 12], T=12, seed=1),
              make_group(model, 2, [8, 8, 8, 13], seed=2)]
    model.train()
    big = make_score_fn(model, max_batch_tokens=10_000)(groups)
    small = make_score_fn(model, max_batch_tokens=20, chunk_tokens=3)(groups)  # ~1 row per batch
    assert model.training  # mode restored
    model.eval()
    for g, a, b in zip(groups, big, small, strict=True):
        assert a.shape == g.token_ids.shape and a.dtype == torch.float32 and a.device.type == "cpu"
        assert torch.allclose(a, b, atol=1e-5)
        # the current model is the generator: logprobs equal gen_logprobs on policy tokens
        assert torch.allclose(a[g.action_mask], g.gen_logprobs[g.action_mask], atol=1e-5)
        assert a[~g.action_mask].abs().max() == 0


def test_buffer_with_real_scorer_accepts_until_the_policy_moves():
    from agentsearch.models import load_model

    m, _ = load_model("tiny-s", seed=0)
    m.eval()
    buf = HeadroomDriftBuffer(capacity=8, k_rep=8, tau=1e-6, scan_chunk=2)
    assert buf.add([make_group(m, i, [12, 9, 14], seed=i) for i in range(4)], step=0) == 4
    score = make_score_fn(m)
    reference = [g.cached_headroom for g in buf.groups]
    sel = buf.select(score, step=1)
    assert len(sel.accepted) == 4 and sel.stats["replay/kl"] < 1e-10
    refreshed = [g.cached_headroom for g in buf.groups]
    assert refreshed == pytest.approx(reference, abs=1e-6)  # same policy, same headroom
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.05 * torch.randn_like(p))
    sel = buf.select(score, step=2)
    assert sel.accepted == [] and sel.scanned == 4
    assert sel.stats["replay/drift_rejected"] > 1e-3
    # refreshed though rejected: the cache holds the moved policy's headroom
    for g, old in zip(buf.groups, refreshed, strict=True):
        now = headroom(score([g])[0], g.advantages, g.action_mask).item()
        assert g.cached_headroom == pytest.approx(now, abs=1e-7) and g.cached_headroom != old
