"""Execution back ends of the built-in math tools: a safe calculator and a Python runner.

``evaluate(expr)`` evaluates arithmetic by walking Python's AST: numbers, ``+ - * / //
% **``, parentheses and a few math functions, with bounds on exponents and sizes, and
no names, attributes or calls beyond those (nothing is ``eval``-ed).

``run_python(code, ...)`` runs a program in a child ``python -I`` process:

- a fresh temporary working directory, removed afterwards;
- ``RLIMIT_AS`` (memory, default 1 GiB: a 10 GB allocation fails at once with
  ``MemoryError``), ``RLIMIT_CPU`` (CPU seconds), ``RLIMIT_FSIZE`` (output bytes);
- a wall-clock limit: the whole process group is killed when it passes;
- no network: the child runs inside ``unshare --net`` (a private network namespace
  with only a down loopback) when the kernel allows it (root, or unprivileged user
  namespaces via ``unshare -rn``). Where it does not, ``network_isolation()`` returns
  ``"none"``: proxy variables are still dropped from the child's environment, but a
  program can open sockets; run such deployments inside a container without network.
  The fallback is never silent: the first check in a process logs a warning (and, when
  isolation works, an info line naming it) on the ``agentsearch.sandbox`` logger.
"""

from __future__ import annotations

import ast
import asyncio
import logging
import math
import operator
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from functools import lru_cache

__all__ = ["evaluate", "CalculatorError", "run_python", "network_isolation"]

log = logging.getLogger("agentsearch.sandbox")


class CalculatorError(ValueError):
    """An expression the calculator refuses (with the reason)."""


_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
        ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCS = {"sqrt": math.sqrt, "log": math.log, "ln": math.log, "log2": math.log2,
          "log10": math.log10, "exp": math.exp, "sin": math.sin, "cos": math.cos,
          "tan": math.tan, "abs": abs, "round": round, "floor": math.floor, "ceil": math.ceil,
          "factorial": math.factorial, "comb": math.comb, "perm": math.perm, "gcd": math.gcd,
          "lcm": math.lcm, "min": min, "max": max}
_CONSTS = {"pi": math.pi, "e": math.e}
_MAX_DIGITS = 2000


def _check_size(x):
    if isinstance(x, int) and x.bit_length() > _MAX_DIGITS * 3.33:
        raise CalculatorError(f"result has more than {_MAX_DIGITS} digits")
    return x


def _eval(node):
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.Name) and node.id in _CONSTS:
        return _CONSTS[node.id]
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
        a, b = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(b) > 1000 and abs(a) > 1:
            raise CalculatorError("exponent too large (limit 1000)")
        return _check_size(_BIN[type(node.op)](a, b))
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in _FUNCS and not node.keywords):
        args = [_eval(a) for a in node.args]
        if node.func.id in ("factorial", "comb", "perm") and any(abs(a) > 1000 for a in args):
            raise CalculatorError(f"{node.func.id} argument too large (limit 1000)")
        return _check_size(_FUNCS[node.func.id](*args))
    raise CalculatorError(f"unsupported syntax: {ast.dump(node)[:60]}")


def evaluate(expr: str) -> int | float:
    """Evaluate an arithmetic expression (``^`` means power, as people write it)."""
    if len(expr) > 1000:
        raise CalculatorError("expression longer than 1000 characters")
    text = expr.strip().replace("^", "**").replace("×", "*").replace("÷", "/")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError) as e:
        raise CalculatorError(f"not an arithmetic expression ({type(e).__name__})") from None
    try:
        return _eval(tree)
    except CalculatorError:
        raise
    except (ArithmeticError, ValueError, TypeError, RecursionError) as e:
        raise CalculatorError(f"{type(e).__name__}: {e}") from None


@lru_cache(maxsize=1)
def network_isolation() -> str:
    """The network isolation ``run_python`` uses in this process.

    ``"unshare -rn"`` or ``"unshare -n"`` (the command prefix that gives the child a private
    network namespace) when that works here, else ``"none"`` (the child can open sockets).
    Probed once per process; the result is logged once: a warning for ``"none"``, an info
    line otherwise.
    """
    mode = _probe_isolation()
    if mode == "none":
        log.warning("python sandbox: NO network isolation (`unshare -rn` / `unshare -n` unavailable "
                    "on %s); programs run by the python tool can open sockets. Run inside a "
                    "container without network, or allow user namespaces.", sys.platform)
    else:
        log.info("python sandbox: network isolation via `%s`", mode)
    return mode


def _probe_isolation() -> str:
    exe = shutil.which("unshare")
    if exe is None or not sys.platform.startswith("linux"):
        return "none"
    for flags in ("-rn", "-n"):  # -r first: works unprivileged where user namespaces are allowed
        try:
            ok = subprocess.run([exe, flags, "true"], capture_output=True, timeout=5).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            return f"unshare {flags}"
    return "none"


def _limits(memory_mb: int, cpu_s: float, output_bytes: int):
    def apply():  # runs in the child between fork and exec
        mem = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        cpu = int(math.ceil(cpu_s)) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_FSIZE, (output_bytes, output_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


async def run_python(code: str, *, time_limit_s: float = 5.0, memory_mb: int = 1024,
                     max_output_chars: int = 4000) -> str:
    """Run ``code`` in a limited child process; returns stdout+stderr (and why it stopped)."""
    workdir = tempfile.mkdtemp(prefix="agentsearch-py-")
    out_path = os.path.join(workdir, "output.txt")
    with open(os.path.join(workdir, "main.py"), "w", encoding="utf-8") as f:
        f.write(code)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": workdir,
           "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "PYTHONHASHSEED": "0",
           "PYTHONIOENCODING": "utf-8"}
    isolation = network_isolation()
    prefix = isolation.split() if isolation != "none" else []
    cmd = [*prefix, sys.executable, "-I", "main.py"]
    proc = None
    killed = None
    t0 = time.perf_counter()
    try:
        with open(out_path, "wb") as out:
            proc = await asyncio.create_subprocess_exec(
                *cmd, cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=_limits(memory_mb, time_limit_s, max(4 * max_output_chars, 65536)))
            try:
                await asyncio.wait_for(proc.wait(), timeout=time_limit_s)
            except TimeoutError:
                killed = f"timed out after {time_limit_s:g} s and was killed"
        with open(out_path, encoding="utf-8", errors="replace") as f:
            text = f.read(max_output_chars + 1)
    finally:
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the program and anything it started
            except (ProcessLookupError, PermissionError):
                pass
            if proc.returncode is None:
                await proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)
    if len(text) > max_output_chars:
        text = text[:max_output_chars] + "\n[output truncated]"
    rc = proc.returncode
    if killed is None and rc is not None and rc < 0:
        sig = signal.Signals(-rc).name
        why = {"SIGXCPU": "CPU time limit", "SIGXFSZ": "output size limit", "SIGKILL": "killed"}
        killed = f"was stopped by {sig} ({why.get(sig, 'signal')})"
    if killed:
        text += f"\nError: the program {killed} (wall {time.perf_counter() - t0:.1f} s)."
    elif rc:
        text += f"\n[exit code {rc}]"
    return text.strip() or "(no output)"
