"""Tools: a small async protocol and a registry fed by entry points and ``module:attr`` paths.

A tool is any object with a ``name``, a ``description``, a JSON schema of its arguments
(``parameters``), a ``timeout_s``, and ``async __call__(**arguments) -> str``. The
environment enforces the timeout, turns exceptions and timeouts into error observations,
and cuts long results. In the tag format a tool ``NAME`` is called as
``<NAME>text</NAME>``, the text going to its first required argument; in the JSON format
the model writes ``{"name": NAME, "arguments": {...}}``.

Built-ins (``search``, ``calculator``, ``python``; ``crop`` for image envs, in
``agentsearch.envs.images``) are registered in the ``agentsearch.tools`` entry-point group
in ``pyproject.toml``, exactly as a plug-in is.
A plug-in package registers its own::

    # your package's pyproject.toml
    [project.entry-points."agentsearch.tools"]
    weather = "my_pkg.tools:WeatherTool"

or skips packaging and passes a path: ``tools=["my_module:WeatherTool"]``. A custom tool::

    import asyncio

    import gymnasium

    import agentsearch.envs  # registers the env ids

    class WordCountTool:
        \"\"\"Counts the words of a text (an example plug-in tool).\"\"\"

        name = "word_count"
        description = "Count the words in a text."
        parameters = {"type": "object",
                      "properties": {"text": {"type": "string", "description": "the text"}},
                      "required": ["text"]}
        timeout_s = 5.0

        async def __call__(self, text: str) -> str:
            await asyncio.sleep(0)  # real tools await I/O here
            return str(len(text.split()))

    env = gymnasium.make("agentsearch/Math-v0", tools=["calculator", WordCountTool()])
"""

from __future__ import annotations

import asyncio
import importlib
import math
import random
from functools import lru_cache
from importlib.metadata import entry_points
from typing import Any, Protocol, runtime_checkable

from agentsearch.config import ConfigError
from agentsearch.envs.sandbox import CalculatorError, evaluate, run_python

__all__ = ["Tool", "SearchTool", "CalculatorTool", "PythonTool", "load_tool", "load_tools",
           "available_tools", "tool_schema", "tag_argument", "ENTRY_POINT_GROUP", "LatencyTool",
           "preflight"]

ENTRY_POINT_GROUP = "agentsearch.tools"
# Used only when the package metadata is missing (a source tree on sys.path, not installed).
_BUILTIN_FALLBACK = {"search": "agentsearch.envs.tools:SearchTool",
                     "calculator": "agentsearch.envs.tools:CalculatorTool",
                     "python": "agentsearch.envs.tools:PythonTool",
                     "crop": "agentsearch.envs.images:CropTool"}


@runtime_checkable
class Tool(Protocol):
    """What an environment needs from a tool."""

    name: str
    description: str
    parameters: dict  # JSON schema of the arguments: {"type": "object", "properties", "required"}
    timeout_s: float

    async def __call__(self, **arguments: Any) -> str: ...


def tool_schema(tool: Tool) -> dict:
    """The OpenAI/chat-template function schema of a tool (what ``tools=`` takes)."""
    return {"type": "function", "function": {"name": tool.name, "description": tool.description,
                                             "parameters": tool.parameters}}


def tag_argument(tool: Tool) -> str:
    """The argument a tag-format call ``<NAME>text</NAME>`` fills: the first required one."""
    req = tool.parameters.get("required") or list(tool.parameters.get("properties", {}))
    if not req:
        raise ValueError(f"tool {tool.name!r} has no arguments, so <{tool.name}>…</{tool.name}> "
                         "cannot call it; give its schema a required string argument")
    return req[0]


def available_tools() -> dict[str, str]:
    """Registered tool names -> ``module:attr`` (entry points, plus the built-ins).

    Read once per process (scanning installed packages' metadata takes milliseconds, and
    rollouts build hundreds of envs); ``available_tools.cache_clear()`` re-reads it."""
    return dict(_registry())


@lru_cache(maxsize=1)
def _registry() -> tuple[tuple[str, str], ...]:
    found = {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}
    return tuple({**_BUILTIN_FALLBACK, **found}.items())


available_tools.cache_clear = _registry.cache_clear  # type: ignore[attr-defined]


def _resolve(path: str):
    module, _, attr = path.partition(":")
    if not module or not attr:
        raise ValueError(f"tool path {path!r} must look like 'package.module:attr'")
    try:
        obj = importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"cannot import tool module {module!r} (from {path!r}): {e}") from e
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise AttributeError(f"{module!r} has no attribute {attr!r} (from tool path {path!r})")
        obj = getattr(obj, part)
    return obj


def load_tool(spec: str | Tool, **kwargs: Any) -> Tool:
    """A tool from a registered name, a ``module:attr`` path, or a tool object (returned as is).

    ``attr`` may be a class or factory (called with ``kwargs``) or a ready tool instance.
    """
    if not isinstance(spec, str):
        obj = spec
    else:
        registry = available_tools()
        if spec in registry:
            target = _resolve(registry[spec])
        elif ":" in spec:
            target = _resolve(spec)
        else:
            raise KeyError(f"unknown tool {spec!r}: registered tools are {sorted(registry)}; "
                           "or pass 'package.module:attr', or register an entry point in the "
                           f"{ENTRY_POINT_GROUP!r} group")
        obj = target
        if isinstance(target, type) or (callable(target) and not hasattr(target, "parameters")):
            try:
                obj = target(**kwargs)
            except TypeError as e:
                raise TypeError(f"could not build tool {spec!r} with arguments {sorted(kwargs)}: "
                                f"{e}") from e
    missing = [a for a in ("name", "description", "parameters", "timeout_s") if not hasattr(obj, a)]
    if missing or not callable(obj):
        raise TypeError(f"{spec!r} is not a Tool: it lacks {missing or ['async __call__']} "
                        "(see agentsearch.envs.tools.Tool)")
    return obj


def load_tools(specs, **per_tool_kwargs: dict) -> list[Tool]:
    """Several tools; ``per_tool_kwargs[name]`` are the constructor arguments of tool ``name``."""
    out = []
    for s in specs:
        key = s if isinstance(s, str) else getattr(s, "name", "")
        out.append(load_tool(s, **per_tool_kwargs.get(key, {})))
    names = [t.name for t in out]
    if len(set(names)) != len(names):
        raise ValueError(f"two tools share a name: {names}")
    return out


class SearchTool:
    """Search a corpus: returns the top-``topk`` passages as Search-R1's ``Doc i(Title: t) text``.

    ``retriever``: any ``agentsearch.retrievers.Retriever``. Without one the default is
    built on first use (and shared): a bm25s index of the synthetic world ``world_seed``,
    or the index folder ``index``, behind a ``BatchingRetriever`` so that the searches of
    concurrent episodes go to the index as one batch.
    """

    name = "search"
    description = "Search the encyclopedia. Returns the most relevant passages for a query."
    parameters = {"type": "object",
                  "properties": {"query": {"type": "string", "description": "the search query"}},
                  "required": ["query"]}

    def __init__(self, retriever=None, *, topk: int = 3, index: str | None = None,
                 world_seed: int = 0, world_entities: int | None = None, timeout_s: float = 30.0,
                 max_query_chars: int = 512):
        self._retriever = retriever
        self.topk, self.index, self.world_seed = topk, index, world_seed
        self.world_entities = world_entities
        self.timeout_s = timeout_s
        self.max_query_chars = max_query_chars

    @property
    def retriever(self):
        if self._retriever is None:
            from agentsearch.envs.search import default_retriever

            self._retriever = default_retriever(self.index, self.world_seed, self.world_entities)
        return self._retriever

    async def __call__(self, query: str) -> str:
        from agentsearch.retrievers.base import format_hits

        query = " ".join(str(query).split())[: self.max_query_chars]
        if not query:
            return "Empty query: write the words to search for."
        hits = (await self.retriever.asearch([query], self.topk))[0]
        return format_hits(hits) if hits else "No results."

    async def aclose(self) -> None:
        """Close the retriever's async clients (``RemoteRetriever.aclose``), if it has been
        built and has any; the retriever may be shared, and closing it twice is harmless."""
        aclose = getattr(self._retriever, "aclose", None)
        if aclose is not None:
            await aclose()


class CalculatorTool:
    """Evaluate arithmetic: ``+ - * / // % ^``, parentheses, sqrt, log, exp, comb, … (no eval)."""

    name = "calculator"
    description = ("Evaluate an arithmetic expression, e.g. (17 * 24 - 139) / 7 or sqrt(2) or "
                   "comb(10, 5).")
    parameters = {"type": "object",
                  "properties": {"expression": {"type": "string",
                                                "description": "the expression to evaluate"}},
                  "required": ["expression"]}

    def __init__(self, timeout_s: float = 5.0):
        self.timeout_s = timeout_s

    async def __call__(self, expression: str) -> str:
        try:
            value = evaluate(str(expression))
        except CalculatorError as e:
            return f"Error: {e}"
        if isinstance(value, float):
            return str(int(value)) if value.is_integer() and abs(value) < 1e15 else format(value, ".12g")
        return str(value)


class PythonTool:
    """Run a Python program in a child process (temp dir, memory/CPU/time limits, no network).

    Returns what the program printed (stdout and stderr). Limits: ``time_limit_s`` wall
    seconds, ``memory_mb`` of address space, ``max_output_chars`` of output; see
    ``agentsearch.envs.sandbox.run_python``.
    """

    name = "python"
    description = "Run a Python 3 program and return what it prints. Use print() for results."
    parameters = {"type": "object",
                  "properties": {"code": {"type": "string", "description": "the program"}},
                  "required": ["code"]}

    def __init__(self, time_limit_s: float = 5.0, memory_mb: int = 1024,
                 max_output_chars: int = 4000):
        self.time_limit_s, self.memory_mb = time_limit_s, memory_mb
        self.max_output_chars = max_output_chars
        self.timeout_s = time_limit_s + 5.0  # the env's outer limit; the program has its own

    async def __call__(self, code: str) -> str:
        return await run_python(str(code), time_limit_s=self.time_limit_s,
                                memory_mb=self.memory_mb, max_output_chars=self.max_output_chars)


class LatencyTool:
    """Wrap a tool with extra latency per call, to model a remote search API in benchmarks.

    ``kind="fixed"``: ``mean_s`` every call; ``"lognormal"``: log-normal with mean ``mean_s``
    and shape ``sigma``. The sleep is asyncio, so concurrent episodes overlap it.
    """

    def __init__(self, tool, profile, seed: int = 0):
        self.tool, self.profile = tool, profile
        self.name, self.description = tool.name, tool.description
        self.parameters, self.timeout_s = tool.parameters, tool.timeout_s + 10 * profile.mean_s
        self._rng = random.Random(seed)

    def delay(self) -> float:
        p = self.profile
        if p.kind == "fixed":
            return p.mean_s
        mu = math.log(max(p.mean_s, 1e-9)) - p.sigma ** 2 / 2  # E[X] = mean_s
        return self._rng.lognormvariate(mu, p.sigma)

    async def __call__(self, **kwargs):
        await asyncio.sleep(self.delay())
        return await self.tool(**kwargs)

    async def aclose(self) -> None:
        if hasattr(self.tool, "aclose"):
            await self.tool.aclose()


def preflight(env, loop=None) -> None:
    """Call the env's search tool once before training, so a dead retriever (server down,
    bad index) is a clear error at start, not a run of error observations and zero rewards.
    ``loop``: the run's ``EventLoop`` (else a fresh loop)."""
    tool = getattr(env, "tools", {}).get("search")
    if tool is None:
        return
    inner = getattr(tool, "tool", tool)  # unwrap LatencyTool
    try:
        check = asyncio.wait_for(inner(query="preflight check"), timeout=max(inner.timeout_s, 1.0))
        (asyncio.run if loop is None else loop.run)(check)
    except Exception as e:  # noqa: BLE001 - report whatever the retriever raised
        raise ConfigError(f"search failed at start ({type(e).__name__}: {e}); is the retrieval "
                          "server running / the index folder right? (env_kwargs.index)") from None
