"""Tools: a small async protocol and a registry fed by entry points and ``module:attr`` paths.

A tool is any object with a ``name``, a ``description``, a JSON schema of its arguments
(``parameters``), a ``timeout_s``, and ``async __call__(**arguments) -> str``. The
environment enforces the timeout, turns exceptions and timeouts into error observations,
and cuts long results. In the tag format a tool ``NAME`` is called as
``<NAME>text</NAME>``, the text going to its first required argument; in the JSON format
the model writes ``{"name": NAME, "arguments": {...}}``.

Built-ins (``search``, ``calculator``, ``python``; ``crop`` for image envs), one module
each in this folder, are registered in the ``agentsearch.tools`` entry-point group
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
from functools import lru_cache
from importlib.metadata import entry_points
from typing import Any, Protocol, runtime_checkable

from agentsearch.core.reliability import InfraError

__all__ = ["Tool", "call_once", "load_tool", "load_tools", "available_tools", "tool_schema",
           "tag_argument", "ENTRY_POINT_GROUP"]

ENTRY_POINT_GROUP = "agentsearch.tools"
# Used only when the package metadata is missing (a source tree on sys.path, not installed).
_BUILTIN_FALLBACK = {"search": "agentsearch.envs.tools.retrieval:SearchTool",
                     "calculator": "agentsearch.envs.tools.calculator:CalculatorTool",
                     "python": "agentsearch.envs.tools.python_exec:PythonTool",
                     "crop": "agentsearch.envs.tools.crop:CropTool"}


@runtime_checkable
class Tool(Protocol):
    """What an environment needs from a tool."""

    name: str
    description: str
    parameters: dict  # JSON schema of the arguments: {"type": "object", "properties", "required"}
    timeout_s: float

    async def __call__(self, **arguments: Any) -> str: ...


async def call_once(tool: Tool, arguments: dict) -> Any:
    """One call of ``tool`` under its ``timeout_s``, plus its ``wait_allowance_s`` if it has
    one (seconds it may wait before its own work starts: a queue, a modelled latency;
    ``LatencyTool``). A timeout is the policy's failure (``TimeoutError``: its code loops, its
    request is too big) unless the tool sets ``timeouts_are_infra = True`` (it waits on a
    service: the search tool), then it is an ``InfraError``, waited out like a dead server
    (``core.reliability``)."""
    limit = tool.timeout_s + getattr(tool, "wait_allowance_s", 0.0)
    try:
        return await asyncio.wait_for(tool(**arguments), timeout=limit)
    except TimeoutError as e:
        if getattr(tool, "timeouts_are_infra", False):
            raise InfraError(f"{tool.name} timed out after {tool.timeout_s:g} s") from e
        raise


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
