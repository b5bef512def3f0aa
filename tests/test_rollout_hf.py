"""A tiny HF model drives real rollouts: exact tokens, exact masks, exact logprobs."""

from __future__ import annotations

import pytest
import torch

from agentsearch.data import read_jsonl
from agentsearch.envs import SearchEnv
from agentsearch.models import load_model
from agentsearch.rollout import HFBackend, SamplingParams, rollout


@pytest.fixture(scope="module")
def tiny():
    # one torch thread: the model is tiny, and a second thread on this shared 2-core machine
    # only contends with other processes (docs/design.md, "Dependency facts": 50-100x slowdowns)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    model, tok = load_model("tiny-s", seed=0)
    yield model.float().eval(), tok
    torch.set_num_threads(threads)


def teacher_forced(model, ids: list[int], temperature: float = 1.0) -> torch.Tensor:
    x = torch.tensor([ids])
    with torch.no_grad():
        logits = model(x).logits.float()[0, :-1] / temperature
    return torch.log_softmax(logits, -1).gather(1, x[0, 1:, None])[:, 0]  # [T-1]: logp of ids[1:]


class Recording:
    """Wraps a backend and keeps every prompt batch and generation it produced."""

    def __init__(self, backend):
        self.backend, self.tokenizer, self.calls = backend, backend.tokenizer, []

    def generate(self, prompts, params):
        out = self.backend.generate(prompts, params)
        self.calls.append((len(prompts), out))
        return out


def test_hf_logprobs_match_teacher_forcing(tiny):
    model, tok = tiny
    prompts = [tok("Question: who?", add_special_tokens=False)["input_ids"],
               tok("<|im_start|>user\nA much longer prompt about Ky Stethith<|im_end|>\n",
                   add_special_tokens=False)["input_ids"], [5]]
    backend = HFBackend(model, tok)
    for params in [SamplingParams(max_new_tokens=24, temperature=0.7, top_k=40, top_p=0.9, seed=1),
                   SamplingParams(max_new_tokens=24, temperature=1.0, seed=2),
                   SamplingParams(max_new_tokens=12, temperature=0.0)]:
        gens = backend.generate(prompts, params)
        for p, g in zip(prompts, gens):
            assert (len(g.token_ids) == len(g.logprobs) > 0
                    and g.finish_reason in ("eos", "length", "stop"))
            ref = teacher_forced(model, p + g.token_ids, params.temperature or 1.0)[len(p) - 1:]
            assert torch.allclose(torch.tensor(g.logprobs), ref, atol=1e-4), (g.logprobs, ref)
            assert tok.pad_token_id not in g.token_ids or tok.pad_token_id == tok.eos_token_id


def test_hf_stop_strings_cut_each_sequence(tiny):
    model, tok = tiny
    backend = HFBackend(model, tok)
    prompts = [tok("alpha", add_special_tokens=False)["input_ids"],
               tok("beta", add_special_tokens=False)["input_ids"]]
    free = backend.generate(prompts, SamplingParams(max_new_tokens=20, temperature=0.0))
    text = tok.decode(free[0].token_ids[4:7])  # a stop string from inside the first greedy output
    stop = text.strip() or text
    stopped = backend.generate(prompts, SamplingParams(max_new_tokens=20, temperature=0.0,
                                                       stop=(stop,)))
    g = stopped[0]
    assert g.finish_reason == "stop" and stop in tok.decode(g.token_ids)
    assert stop not in tok.decode(g.token_ids[:-1])  # ends with the token that completes it
    assert (g.token_ids == free[0].token_ids[:len(g.token_ids)]
            and g.logprobs == pytest.approx(free[0].logprobs[:len(g.token_ids)], abs=1e-5))
    if stop not in tok.decode(free[1].token_ids):
        assert (stopped[1].token_ids == free[1].token_ids
                and stopped[1].finish_reason == free[1].finish_reason)
    # a stop string that starts in the prompt does not count (transformers' own would stop here)
    gen_text = tok.decode(free[0].token_ids)
    cross = "alpha"[-3:] + gen_text[:2]
    assert cross not in gen_text
    crossed = backend.generate(prompts[:1],
                               SamplingParams(max_new_tokens=20, temperature=0.0, stop=(cross,)))
    assert crossed[0].token_ids == free[0].token_ids and crossed[0].finish_reason == "length"


def test_hf_cut_after_eos(tiny):
    model, tok = tiny
    backend = HFBackend(model, tok)
    ids = tok("ab", add_special_tokens=False)["input_ids"] + [tok.eos_token_id, 7, 8]
    g = backend._cut(ids, [-1.0] * len(ids), SamplingParams())
    assert (g.finish_reason == "eos" and g.token_ids == ids[:-2]
            and len(g.logprobs) == len(g.token_ids))
    text_ids = tok("x </search> y", add_special_tokens=False)["input_ids"]
    g = backend._cut(text_ids, [0.0] * len(text_ids), SamplingParams(stop=("</search>",)))
    assert g.finish_reason == "stop" and tok.decode(g.token_ids).rstrip().endswith("</search>")


def test_tiny_model_rollout_is_token_exact(tiny, small_world_path):
    """Mask-1 tokens are exactly the sampled ids; mask-0 tokens decode to prompt + env text."""
    model, tok = tiny
    tasks = list(read_jsonl(small_world_path / "dev.jsonl"))[:6]
    backend = Recording(HFBackend(model, tok))
    env_texts: dict[int, list[str]] = {}

    def factory():
        env = SearchEnv(split="dev", world_seed=7, world_entities=300, max_turns=3)
        real_reset, real_astep = env.reset, env.astep

        def reset(**kw):
            obs, info = real_reset(**kw)
            env_texts[id(env)] = [obs]
            return obs, info

        async def astep(action):
            out = await real_astep(action)
            env_texts[id(env)].append(out[0])
            return out

        env.reset, env.astep, env.key = reset, astep, id(env)
        return env

    envs = [factory() for _ in range(12)]
    params = SamplingParams(max_new_tokens=40, temperature=1.0, seed=0)
    episodes, stats = rollout(envs, tasks, backend, params, n_per_task=2, max_seq_len=900)
    # one generate call per turn, carrying every active episode
    assert ([n for n, _ in backend.calls][0] == 12
            and len(backend.calls) == max(e.num_turns for e in episodes))
    sampled = [[] for _ in episodes]  # per episode: the Generations it got, in order
    active = list(range(12))
    for n, gens in backend.calls:
        assert n == len(active)
        for i, g in zip(active, gens):
            sampled[i].append(g)
        active = [i for i in active if episodes[i].num_turns > len(sampled[i])]
    for ep, env, gens in zip(episodes, envs, sampled):
        runs = []
        for t, m, lp in zip(ep.token_ids, ep.action_mask, ep.gen_logprobs):
            if runs and runs[-1][0] == m:
                runs[-1][1].append(t)
                runs[-1][2].append(lp)
            else:
                runs.append((m, [t], [lp]))
        pol = [r for r in runs if r[0] == 1]
        assert len(pol) == ep.num_turns == len(gens)
        for (_, ids, lps), g in zip(pol, gens):
            n = len(ids)
            assert ids == g.token_ids[:n] and lps == pytest.approx(g.logprobs[:n])
        envr = [tok.decode(ids, skip_special_tokens=False) for m, ids, _ in runs if m == 0]
        assert envr == [t for t in env_texts[env.key] if t][:len(envr)]
        assert (envr[0] == env_texts[env.key][0]
                and all(lp == 0.0 for m, _, lps in runs if m == 0 for lp in lps))
        ref = teacher_forced(model, ep.token_ids)
        mask = torch.tensor(ep.action_mask[1:], dtype=torch.bool)
        assert torch.allclose(torch.tensor(ep.gen_logprobs[1:])[mask], ref[mask], atol=1e-4)
    assert stats.tokens_generated == sum(sum(e.action_mask) for e in episodes)
