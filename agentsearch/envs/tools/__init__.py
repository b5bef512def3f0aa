"""Tools: the async ``Tool`` protocol and its registry (``protocol``), one module per
built-in tool (``retrieval``: search; ``calculator``; ``python_exec``; ``crop``), the
``sandbox`` they run in, and ``LatencyTool`` for benchmarks. See ``protocol`` for writing
your own."""

from agentsearch.envs.tools.calculator import CalculatorTool
from agentsearch.envs.tools.crop import CropTool
from agentsearch.envs.tools.latency import LatencyTool
from agentsearch.envs.tools.protocol import (
    ENTRY_POINT_GROUP,
    Tool,
    available_tools,
    load_tool,
    load_tools,
    tag_argument,
    tool_schema,
)
from agentsearch.envs.tools.python_exec import PythonTool
from agentsearch.envs.tools.retrieval import SearchTool, default_retriever, preflight

__all__ = ["Tool", "SearchTool", "CalculatorTool", "PythonTool", "CropTool", "LatencyTool",
           "load_tool", "load_tools", "available_tools", "tool_schema", "tag_argument",
           "ENTRY_POINT_GROUP", "default_retriever", "preflight"]
