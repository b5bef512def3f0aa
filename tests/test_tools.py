"""Tools: registry, built-ins, the python sandbox's limits, failing tools in an env."""

from __future__ import annotations

import asyncio
import os
import re
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
from agentsearch.envs.tools.sandbox import CalculatorError, evaluate, network_isolation, run_python

TASK = {"id": "t0", "question": "What is 6 times 7?", "golden_answers": ["42"]}


def test_builtins_come_from_the_entry_point_group():
    from importlib.metadata import entry_points

    eps = {ep.name: ep.value for ep in entry_points(group="agentsearch.tools")}
    assert eps == {"search": "agentsearch.envs.tools.retrieval:SearchTool",
                   "calculator": "agentsearch.envs.tools.calculator:CalculatorTool",
                   "python": "agentsearch.envs.tools.python_exec:PythonTool",
                   "crop": "agentsearch.envs.tools.crop:CropTool"}
    assert set(eps) <= set(available_tools())
    for name, cls in [("search", SearchTool), ("calculator", CalculatorTool), ("python", PythonTool)]:
        tool = load_tool(name)
        assert isinstance(tool, cls) and isinstance(tool, Tool) and tool.name == name
        assert tool_schema(tool)["function"]["parameters"]["required"]


def test_load_by_path_and_errors():
    assert isinstance(load_tool("agentsearch.envs.tools:CalculatorTool", timeout_s=1.0), CalculatorTool)
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
                                        ("comb(10, 5)", 252), ("sqrt(16) + pi - pi", 4.0), ("-3 % 5", 2)])
def test_calculator(expr, value):
    assert evaluate(expr) == pytest.approx(value)


@pytest.mark.parametrize("expr", ["__import__('os')", "9**9**9", "factorial(10**6)", "x + 1",
                                  "1/0", "(" * 500, "a" * 2000, "[1, 2]"])
def test_calculator_refuses(expr):
    with pytest.raises(CalculatorError):
        evaluate(expr)
    out = asyncio.run(CalculatorTool()(expression=expr))
    assert out.startswith("Error:")


def test_python_runs_in_a_temp_dir():
    out = asyncio.run(run_python("import os; print(sum(range(10))); print(os.getcwd())"))
    lines = out.splitlines()
    assert lines[0] == "45" and "agentsearch-py-" in lines[1] and not os.path.exists(lines[1])
    assert "exit code 3" in asyncio.run(run_python("import sys; sys.exit(3)"))


def _assert_dead(out: str) -> None:
    pid = int(re.search(r"PID (\d+)", out).group(1))
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_python_infinite_loop_is_killed_within_its_time_limit():
    t0 = time.perf_counter()
    out = asyncio.run(run_python("import os; print('PID', os.getpid(), flush=True)\nwhile True: pass",
                                 time_limit_s=1.0))
    assert time.perf_counter() - t0 < 4.0
    assert "timed out after 1 s and was killed" in out
    _assert_dead(out)


def test_python_10gb_allocation_fails_within_its_memory_limit():
    t0 = time.perf_counter()
    code = "import os; print('PID', os.getpid(), flush=True)\nx = bytearray(10 * 1024**3)\nprint('allocated')"
    out = asyncio.run(run_python(code, memory_mb=512, time_limit_s=10.0))
    assert time.perf_counter() - t0 < 5.0
    assert "MemoryError" in out and "allocated" not in out
    _assert_dead(out)


def test_python_output_is_capped():
    out = asyncio.run(run_python("print('x' * 100000)", max_output_chars=1000))
    assert len(out) < 1100 and "[output truncated]" in out


def test_python_has_no_network():
    # Fails (never skips) without isolation: a sandbox that can reach the network is a bug
    # to see, not a test to hide.
    import socket

    assert network_isolation() != "none", (
        "the python sandbox has no network isolation here (`unshare -rn` / `unshare -n` fail); "
        "its programs can open sockets")
    with socket.socket() as server:  # a port the parent can reach: the child must not
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            pass  # reachable from here
        code = (f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
                "    print('connected')\nexcept OSError as e:\n    print('blocked', e.errno)")
        out = asyncio.run(run_python(code))
    assert out.startswith("blocked"), out


def test_missing_network_isolation_warns_once_per_process(monkeypatch, caplog):
    import agentsearch.envs.tools.sandbox as sandbox

    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)  # no unshare binary
    network_isolation.cache_clear()
    try:
        with caplog.at_level("INFO", logger="agentsearch.sandbox"):
            assert network_isolation() == "none" and network_isolation() == "none"
        warnings = [r for r in caplog.records if r.levelname == "WARNING"]
        assert len(warnings) == 1 and "NO network isolation" in warnings[0].getMessage()
    finally:
        network_isolation.cache_clear()  # the next caller probes the real system again


def test_network_isolation_is_logged_once(caplog):
    network_isolation.cache_clear()
    with caplog.at_level("INFO", logger="agentsearch.sandbox"):
        mode = network_isolation()
        network_isolation()
    assert len(caplog.records) == 1  # one line per process, naming what is in force
    assert mode in caplog.records[0].getMessage() or "NO network isolation" in caplog.records[0].getMessage()


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
    for name, msg in [("boom", "boom failed: RuntimeError: backend down"), ("slow", "slow timed out after 0.2 s")]:
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
            return [[Hit(f"d{i}", f'"T{i}"\n' + "text " * 400, 1.0) for i in range(k)] for _ in queries]

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

    cfg = apply_overrides(TrainConfig, "tiny", ["tool_latency.kind=fixed", "tool_latency.mean_s=0.01"])
    (env,) = build_envs(cfg, 1)
    tool = env.tools["search"]
    assert isinstance(tool, LatencyTool) and tool.tool.topk == 2 == cfg.env_kwargs["topk"]
