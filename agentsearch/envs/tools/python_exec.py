"""The ``python`` tool: run a program in a sandboxed child process (``sandbox.run_python``)."""

from __future__ import annotations

from agentsearch.envs.tools.sandbox import run_python

__all__ = ["PythonTool"]


class PythonTool:
    """Run a Python program in a sandboxed child process.

    Returns what the program printed (stdout and stderr). Limits: ``time_limit_s`` wall
    seconds, ``memory_mb`` of address space, ``max_output_chars`` of output,
    ``max_processes`` processes and threads, ``disk_mb`` in its temp dir; no network, no
    writes outside its temp dir, nothing it starts outlives it. See
    ``agentsearch.envs.tools.sandbox`` (limits) and ``sandbox_isolation`` (layers). A sandbox
    that cannot start raises ``InfraError``: the env waits and retries, the policy never sees it.
    """

    name = "python"
    description = "Run a Python 3 program and return what it prints. Use print() for results."
    parameters = {"type": "object",
                  "properties": {"code": {"type": "string", "description": "the program"}},
                  "required": ["code"]}

    def __init__(self, time_limit_s: float = 5.0, memory_mb: int = 1024,
                 max_output_chars: int = 4000, max_processes: int = 64, disk_mb: int = 16):
        self.time_limit_s, self.memory_mb = time_limit_s, memory_mb
        self.max_output_chars, self.max_processes = max_output_chars, max_processes
        self.disk_mb = disk_mb
        # the env's outer limit: the sandbox's start (<= sandbox.STARTUP_TIMEOUT_S) + the
        # program's own
        self.timeout_s = time_limit_s + 10.0

    async def __call__(self, code: str) -> str:
        return await run_python(str(code), time_limit_s=self.time_limit_s, memory_mb=self.memory_mb,
                                max_output_chars=self.max_output_chars,
                                max_processes=self.max_processes, disk_mb=self.disk_mb)
