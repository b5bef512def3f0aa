"""GroupPool: groups played across steps; each take returns the first groups to complete and
carries the rest (over-sampling), or fewer once the trainer is idle (replay top-up)."""

from __future__ import annotations

import asyncio
import itertools
import time
from contextlib import closing

import pytest
from user_envs import CountingEnv

from agentsearch.envs import MathEnv
from agentsearch.rollout import SamplingParams, ScriptedBackend
from agentsearch.rollout.engines import MicroBatcher
from agentsearch.rollout.pool import GroupPool


class _SlowOn:
    """A tool that takes ``slow`` seconds on question 'q0' and none on the others."""

    name, description, timeout_s = "wait", "waits", 30.0
    parameters = {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}

    def __init__(self, slow: float):
        self.slow, self.env = slow, None

    async def __call__(self, x):
        await asyncio.sleep(self.slow if self.env.task["question"] == "q0" else 0.0)
        return "done"


def _env(slow: float):
    tool = _SlowOn(slow)
    env = MathEnv(tools=(tool,))
    tool.env = env
    return env


def _pool(tok, envs, b: int, oversample: int, n: int = 2):
    turns = {0: "<wait>a</wait>", 1: "<answer>2</answer>"}
    backend = ScriptedBackend(tok, lambda conv: turns[conv.count("<information>done")])
    ids = itertools.count()
    sample = lambda k: [{"id": f"t{i}", "question": f"q{i}", "golden_answers": ["2"]}  # noqa: E731
                        for i in itertools.islice(ids, k)]
    engine = MicroBatcher(backend, max_wait_s=0.01)
    return engine, GroupPool(envs, engine, SamplingParams(seed=0), group_size=n,
                             in_flight=b + oversample, sample=sample, seed=0, max_turns=4)


@pytest.fixture(scope="module")
def tok():
    from agentsearch.models import load_tokenizer

    return load_tokenizer("tiny")


def test_the_first_groups_to_finish_are_taken_and_a_straggler_is_carried(tok):
    engine, pool = _pool(tok, [_env(0.6) for _ in range(8)], b=3, oversample=1)

    async def steps():
        t0 = time.perf_counter()
        first = await pool.take(3)
        took = time.perf_counter() - t0
        await asyncio.sleep(0.8)  # the trainer's update: the straggler finishes meanwhile
        second = await pool.take(3)
        return first, took, second, engine.live

    with closing(engine):
        (eps1, s1), took, (eps2, s2), live = asyncio.run(steps())
    assert took < 0.5  # q0's group (0.6 s tool call) did not hold the step up
    assert sorted(e.task_id for e in eps1) == ["t1", "t1", "t2", "t2", "t3", "t3"]
    m1 = s1.metrics()
    assert ((m1["async/carried_groups"], m1["async/taken_carried"],
             m1["async/fresh_short"]) == (1.0, 0.0, 0.0))
    assert m1["rollout/episodes"] == 6 and m1["rollout/answer_correct"] == 1.0
    # the carried group finished first in the next take; each take's groups stay together
    assert [e.task_id for e in eps2][:2] == ["t0", "t0"] and len(eps2) == 6
    assert all(eps2[i].task_id == eps2[i + 1].task_id for i in range(0, 6, 2))
    m2 = s2.metrics()
    assert m2["async/taken_carried"] == 1.0 and m2["async/carried_groups"] == 1.0
    assert m2["async/len_carried"] > 0 and m2["async/len_uncarried"] > 0
    assert pool.state_dict()["serial"] == 7 and len(pool.state_dict()["tasks"]) == 1
    # the carried group (maybe done, not taken); cancelled with the loop
    assert live <= 2 and engine.live == 0


def test_what_groups_in_play_do_between_takes_is_charged_to_the_next_take(tok):
    engine, pool = _pool(tok, [_env(0.6) for _ in range(8)], b=3, oversample=1)

    async def steps():
        _, s1 = await pool.take(3)
        tokens = s1.tokens_generated
        await asyncio.sleep(0.8)  # the update: the straggler's answer turn is generated now
        _, s2 = await pool.take(3)
        return s1, tokens, s2, (engine.requests, engine.calls, engine.busy_s)

    with closing(engine):
        s1, tokens, s2, (requests, calls, busy) = asyncio.run(steps())
    assert s1.tokens_generated == tokens  # nothing lands in a take already returned
    assert s1.generate_requests + s2.generate_requests == requests
    assert s1.generate_calls + s2.generate_calls == calls
    assert abs(s1.time_generate + s2.time_generate - busy) < 1e-9


def test_a_held_pool_plays_nothing(tok):
    """An eval (on the same event loop) or a checkpoint between two takes holds the pool: the
    groups in play start no turn and no tool call; they go on at the next take."""
    engine, pool = _pool(tok, [_env(0.3) for _ in range(8)], b=3, oversample=1)

    async def steps():
        await pool.take(3)
        with pool.hold():
            before = engine.requests
            await asyncio.sleep(0.6)  # the straggler's tool call ends; its next turn waits
            held = engine.requests - before
        eps, _ = await pool.take(3)
        return held, eps

    with closing(engine):
        held, eps = asyncio.run(steps())
    assert held == 0 and [e.task_id for e in eps][:2] == ["t0", "t0"]


def test_a_group_carried_once_is_waited_for_and_taken_first(tok):
    """Groups that finish first are the short ones: a straggler carried into a take is taken
    by it (waited for), not carried again behind newer, shorter groups."""
    engine, pool = _pool(tok, [_env(1.0) for _ in range(8)], b=2, oversample=2)

    async def steps():
        first, _ = await pool.take(2)  # t1, t2; t3 (done) and t0 (on its slow tool) carried
        t0 = time.perf_counter()
        second, s2 = await pool.take(2)  # t4 and t5 finish at once; t0 had a whole step
        return first, second, time.perf_counter() - t0, s2.metrics()

    with closing(engine):
        first, second, took, m2 = asyncio.run(steps())
    assert sorted({e.task_id for e in first}) == ["t1", "t2"]
    assert sorted({e.task_id for e in second}) == ["t0", "t3"] and took > 0.5
    assert m2["async/taken_carried"] == 2 and m2["async/carry_max"] == 1


def test_an_idle_trainer_takes_what_is_ready_when_told_enough(tok):
    engine, pool = _pool(tok, [_env(0.5) for _ in range(8)], b=4, oversample=0)

    async def step():
        enough = asyncio.get_running_loop().create_future()
        enough.set_result(None)
        return await pool.take(4, enough=enough, min_take=2)

    with closing(engine):
        eps, stats = asyncio.run(step())
    # groups t1..t3 finish at once; t0 waits on its tool: at least 2, at most 3 groups taken
    m = stats.metrics()
    assert 2 <= len(eps) // 2 <= 3 and "t0" not in {e.task_id for e in eps}
    assert (m["async/fresh_short"] == 4 - len(eps) // 2
            and m["async/carried_groups"] == 4 - len(eps) // 2)


def test_a_resumed_pool_restarts_the_tasks_it_had_in_play(tok):
    engine, pool = _pool(tok, [_env(0.0) for _ in range(4)], b=1, oversample=1)
    pool.load_state_dict({"serial": 5,
                          "tasks": [{"id": "x", "question": "qx", "golden_answers": ["2"]}]})
    with closing(engine):
        eps, _ = asyncio.run(pool.take(2))
    assert sorted({e.task_id for e in eps}) == ["t0", "x"] and pool.serial == 7


def test_an_env_that_raises_fails_the_take(tok):
    class Broken(CountingEnv):
        async def astep(self, action):
            if self.task["id"] == "t1":
                raise RuntimeError("env bug")
            return await super().astep(action)

    backend = ScriptedBackend(tok, lambda conv: "<answer>1</answer>")
    ids = itertools.count()
    sample = lambda k: [{"id": f"t{next(ids)}", "question": "q", "golden_answers": ["1"]}  # noqa: E731
                        for _ in range(k)]
    with closing(MicroBatcher(backend)) as engine:
        pool = GroupPool([Broken() for _ in range(6)], engine, SamplingParams(), group_size=2,
                         in_flight=3, sample=sample, seed=0)
        with pytest.raises(RuntimeError, match="env bug"):
            asyncio.run(pool.take(3))


def test_too_few_envs_is_an_error(tok):
    with pytest.raises(ValueError, match="need 8 envs"):
        _pool(tok, [_env(0.0) for _ in range(6)], b=3, oversample=1)
