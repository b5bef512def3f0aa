"""The ``python`` tool: run a program in a sandboxed child process (``sandbox.run_python``)."""

from __future__ import annotations

from agentsearch.envs.tools.sandbox import run_python

__all__ = ["PythonTool"]


class PythonTool:
    """Run a Python program in a child process (temp dir, memory/CPU/time limits, no network).

    Returns what the program printed (stdout and stderr). Limits: ``time_limit_s`` wall
    seconds, ``memory_mb`` of address space, ``max_output_chars`` of output; see
    ``agentsearch.envs.tools.sandbox.run_python``.
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
