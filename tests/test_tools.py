"""Tools: registry, built-ins, failing tools in an env (the python sandbox: test_sandbox.py)."""

from __future__ import annotations

import asyncio
import textwrap
import time

import pytest

import agentsearch.envs.tools.protocol as tools_module
from agentsearch.envs import MathEnv, SearchEnv
from agentsearch.envs.tools import CalculatorTool, PythonTool, SearchTool
from agentsearch.envs.tools.protocol import (
    Tool,
    available_tools,
    load_tool,
    load_tools,
    tool_schema,
)
from agentsearch.envs.tools.sandbox import CalculatorError, evaluate

TASK = {"id": "t0", "question": "What is 6 times 7?", "golden_answers": ["42"]}


def test_builtins_come_from_the_entry_point_group():
    from importlib.metadata import entry_points

    eps = {ep.name: ep.value for ep in entry_points(group="agentsearch.tools")}
    assert eps == {"search": "agentsearch.envs.tools.retrieval:SearchTool",
                   "calculator": "agentsearch.envs.tools.calculator:CalculatorTool",
                   "python": "agentsearch.envs.tools.python_exec:PythonTool",
                   "crop": "agentsearch.envs.tools.crop:CropTool"}
    assert set(eps) <= set(available_tools())
    for name, cls in [("search", SearchTool), ("calculator", CalculatorTool),
                      ("python", PythonTool)]:
        tool = load_tool(name)
        assert isinstance(tool, cls) and isinstance(tool, Tool) and tool.name == name
        assert tool_schema(tool)["function"]["parameters"]["required"]


def test_load_by_path_and_errors():
    assert isinstance(load_tool("agentsearch.envs.tools:CalculatorTool", timeout_s=1.0),
                      CalculatorTool)
    with pytest.raises(KeyError, match="registered tools are"):
        load_tool("weather")
    with pytest.raises(ImportError, match="cannot import tool module"):
        load_tool("no_such_module:Tool")
    with pytest.raises(AttributeError, match="has no attribute"):
        load_tool("agentsearch.envs.tools:Nope")
    with pytest.raises(TypeError, match="is not a Tool"):
        load_tool("agentsearch.envs.tools:ENTRY_POINT_GROUP")
    with pytest.raises(TypeError, match="could not build tool"):
        load_tool("agentsearch.envs.tools:tool_schema")
    with pytest.raises(ValueError, match="share a name"):
        load_tools(["calculator", CalculatorTool()])


def test_readme_custom_tool_example_runs():
    """The custom-tool example in the tool protocol's docstring works as written."""
    doc = tools_module.__doc__
    start = doc.rfind("\n", 0, doc.index("import asyncio")) + 1
    code = textwrap.dedent(doc[start:])
    assert len(code.strip().splitlines()) < 30
    ns: dict = {}
    exec(compile(code, "example", "exec"), ns)  # noqa: S102 - our own docstring
    env = ns["env"].unwrapped
    env.reset(options={"task": TASK})
    obs, _, _, _, info = env.step("<word_count> one two three </word_count>")
    assert info["tool"] == "word_count" and "<information>3</information>" in obs


@pytest.mark.parametrize("expr,value", [("(17 * 24 - 139) / 7", 38.428571428571), ("2^10", 1024),
                                        ("comb(10, 5)", 252), ("sqrt(16) + pi - pi", 4.0),
                                        ("-3 % 5", 2)])
def test_calculator(expr, value):
    assert evaluate(expr) == pytest.approx(value)


@pytest.mark.parametrize("expr", ["__import__('os')", "9**9**9", "factorial(10**6)", "x + 1",
                                  "1/0", "(" * 500, "a" * 2000, "[1, 2]"])
def test_calculator_refuses(expr):
    with pytest.raises(CalculatorError):
        evaluate(expr)
    out = asyncio.run(CalculatorTool()(expression=expr))
    assert out.startswith("Error:")


class Boom:
    name, description, timeout_s = "boom", "always fails", 1.0
    parameters = {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}

    async def __call__(self, x):
        raise RuntimeError("backend down")


class Slow(Boom):
    name, description, timeout_s = "slow", "never answers in time", 0.2

    async def __call__(self, x):
        await asyncio.sleep(30)


@pytest.mark.parametrize("fmt", ["tags", "json"])
def test_failing_and_hanging_tools_become_error_observations(fmt):
    env = MathEnv(turn_format=fmt, tools=(Boom(), Slow()), tasks=[TASK])
    env.reset(seed=0)
    for name, msg in [("boom", "boom failed: RuntimeError: backend down"),
                      ("slow", "slow timed out after 0.2 s")]:
        action = (f"<{name}>hi</{name}>" if fmt == "tags" else
                  f'<tool_call>{{"name": "{name}", "arguments": {{"x": "hi"}}}}</tool_call>')
        t0 = time.perf_counter()
        obs, reward, term, trunc, info = env.step(action)
        assert time.perf_counter() - t0 < 1.0
        assert msg in obs and info["tool_error"] and msg in info["error"]
        assert not info["malformed"] and reward == 0.0 and not term and not trunc


def test_search_tool_with_an_injected_retriever_and_long_results():
    from agentsearch.retrievers.base import Hit

    class Long:
        async def asearch(self, queries, k=3):
            return [[Hit(f"d{i}", f'"T{i}"\n' + "text " * 400, 1.0)
                     for i in range(k)] for _ in queries]

    env = SearchEnv(retriever=Long(), topk=2, max_obs_chars=300, tasks=[TASK])
    env.reset(seed=0)
    obs, *_ = env.step("<search>q</search>")
    assert obs.startswith('\n\n<information>Doc 1(Title: "T0") text') and "…[truncated]" in obs
    assert len(obs) < 360


def test_latency_profile_wraps_the_envs_own_search_tool():
    """A tool-latency profile must keep the env's search settings (topk, world): rebuilding
    the tool with defaults made the demo's base read 3 passages instead of 2 (dev EM 0)."""
    from agentsearch.core.config import apply_overrides
    from agentsearch.envs.tools import LatencyTool
    from agentsearch.trainer.setup import build_envs
    from agentsearch.trainer.train_config import TrainConfig

    cfg = apply_overrides(TrainConfig, "tiny",
                          ["tool_latency.kind=fixed", "tool_latency.mean_s=0.01"])
    (env,) = build_envs(cfg, 1)
    tool = env.tools["search"]
    assert isinstance(tool, LatencyTool) and tool.tool.topk == 2 == cfg.env_kwargs["topk"]
    # evaluation is outside the training clock: its search calls wait only when asked to
    (dev,) = build_envs(cfg, 1, split="dev")
    assert not isinstance(dev.tools["search"], LatencyTool) and dev.tools["search"].topk == 2
    cfg = apply_overrides(TrainConfig, "tiny",
                          ["tool_latency.kind=fixed", "tool_latency.mean_s=0.01",
                           "tool_latency.in_eval=true"])
    assert isinstance(build_envs(cfg, 1, split="dev")[0].tools["search"], LatencyTool)


def test_tool_service_queues_calls_first_come_first_served():
    """Two slots, 1 s calls arriving together: the third and fourth start when the first two
    end; a call arriving after the queue drained starts at once."""
    from agentsearch.envs.tools.latency import ToolService

    svc = ToolService(2)
    assert [svc.reserve(1.0, now=10.0) for _ in range(4)] == [11.0, 11.0, 12.0, 12.0]
    assert svc.reserve(0.5, now=11.5) == 12.5  # both slots are busy until 12
    assert svc.reserve(0.5, now=20.0) == 20.5
    with pytest.raises(ValueError, match="concurrency must be >= 1"):
        ToolService(0)


def test_a_capacity_limited_search_service_makes_a_burst_wait_for_its_calls():
    """tool_latency.concurrency: every episode's search shares one service; with one slot the
    four 100 ms calls of a turn take ~4 x 100 ms, with two ~2 x 100 ms, unlimited they overlap
    (the lower bounds are exact: a call never ends before its reserved slot frees)."""
    from agentsearch.core.config import ConfigError, apply_overrides
    from agentsearch.envs.tools.latency import ToolService
    from agentsearch.trainer.setup import build_envs
    from agentsearch.trainer.train_config import TrainConfig

    cfg = apply_overrides(TrainConfig, "tiny",
                          ["tool_latency.kind=fixed", "tool_latency.mean_s=0.1",
                           "tool_latency.concurrency=2"])
    envs = build_envs(cfg, 4)
    tools = [env.tools["search"] for env in envs]
    assert (isinstance(tools[0].service, ToolService)
            and all(t.service is tools[0].service for t in tools))
    name = envs[0].reset(seed=0)[1]["question"].split("When was ")[1].rstrip("?")

    async def burst() -> float:
        t0 = time.perf_counter()
        outs = await asyncio.gather(*(t(query=name) for t in tools))
        assert all(o.startswith("Doc 1") for o in outs)  # the real search answered every call
        return time.perf_counter() - t0

    async def load():  # the retriever loads: untimed
        await asyncio.gather(*(t.tool(query=name) for t in tools))

    asyncio.run(load())
    two = asyncio.run(burst())
    single = ToolService(1)
    for t in tools:
        t.service = single
    one = asyncio.run(burst())
    for t in tools:
        t.service = None
    unlimited = asyncio.run(burst())
    assert unlimited < 0.2 <= two < 0.4 <= one < 0.7, (unlimited, two, one)
    with pytest.raises(ConfigError, match="tool_latency.concurrency=-1"):
        apply_overrides(TrainConfig, "tiny", ["tool_latency.concurrency=-1"])


class Echo(Boom):
    name, description, timeout_s = "echo", "answers at once", 5.0

    async def __call__(self, x):
        return x


def test_a_call_that_ends_early_gives_its_slot_back():
    """One slot, 0.3 s calls. The first is cancelled 0.05 s in: the call queued behind it
    starts then (done at ~0.35 s, not 0.6 s). A call timed out mid-service (as ``call_once``
    times out) leaves no reservation: the next call alone takes its own 0.3 s."""
    from agentsearch.envs.tools.latency import LatencyTool, ToolService
    from agentsearch.trainer.rollout_config import ToolLatency

    svc = ToolService(1)
    first, second = (LatencyTool(Echo(), ToolLatency("fixed", 0.3), service=svc) for _ in range(2))

    async def main():
        t0 = time.perf_counter()
        a, b = asyncio.ensure_future(first(x="a")), asyncio.ensure_future(second(x="b"))
        await asyncio.sleep(0.05)
        a.cancel()
        assert await b == "b"
        queued = time.perf_counter() - t0
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(first(x="c"), 0.05)
        t1 = time.perf_counter()
        assert await second(x="d") == "d"
        return queued, time.perf_counter() - t1

    queued, alone = asyncio.run(main())
    assert 0.34 <= queued < 0.5, queued
    assert 0.29 <= alone < 0.4, alone
    assert svc.reserve(0.1) - time.monotonic() <= 0.1  # idle: nothing reserved is left


def test_the_tool_timeout_bounds_the_call_not_its_queue():
    """``async.tool_timeout_s=0.15`` with one 0.1 s slot: four searches at once wait up to
    0.3 s in the queue and are all answered (it bounds each call's own service, not its wait
    for the calls ahead); a tool slower than the limit still times out on time."""
    from agentsearch.core.config import apply_overrides
    from agentsearch.envs.tools.latency import LatencyTool, ToolService
    from agentsearch.trainer.rollout_config import ToolLatency
    from agentsearch.trainer.setup import build_envs
    from agentsearch.trainer.train_config import TrainConfig

    cfg = apply_overrides(TrainConfig, "tiny", [
        "tool_latency.kind=fixed", "tool_latency.mean_s=0.1", "tool_latency.concurrency=1",
        "async.tool_timeout_s=0.15"])
    envs = build_envs(cfg, 4)
    tools = [env.tools["search"] for env in envs]
    name = envs[0].reset(seed=0)[1]["question"].split("When was ")[1].rstrip("?")

    async def load():  # the retriever loads: untimed
        await asyncio.gather(*(t.tool(query=name) for t in tools))

    async def burst():
        return await asyncio.gather(*(tools_module.call_once(t, {"query": name}) for t in tools))

    asyncio.run(load())
    t0 = time.perf_counter()
    outs = asyncio.run(burst())
    assert all(o.startswith("Doc 1") for o in outs) and 0.4 <= time.perf_counter() - t0 < 0.7
    slow = LatencyTool(Slow(), ToolLatency("fixed", 0.01), service=ToolService(1))
    slow.timeout_s = 0.15
    t0 = time.perf_counter()
    with pytest.raises(TimeoutError):
        asyncio.run(tools_module.call_once(slow, {"x": "hi"}))
    assert time.perf_counter() - t0 < 0.5
