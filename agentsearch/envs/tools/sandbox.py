"""Execution back ends of the built-in math tools: a safe calculator and a Python runner.

``evaluate(expr)`` evaluates arithmetic by walking Python's AST: numbers, ``+ - * / //
% **``, parentheses and a few math functions, with bounds on exponents and sizes, and
no names, attributes or calls beyond those (nothing is ``eval``-ed).

``run_python(code, ...)`` runs a program as ``python -I main.py`` in a sandbox:

- limits: a wall clock (``time_limit_s``: everything is killed when it passes),
  ``RLIMIT_AS`` (``memory_mb``, default 1 GiB: a 10 GB allocation fails at once with
  ``MemoryError``), ``RLIMIT_CPU``, ``RLIMIT_FSIZE`` (every file, the captured
  stdout+stderr included, at most ``max(4 * max_output_chars, 64 KiB)`` bytes: a program
  printing gigabytes gets ``EFBIG`` there, Python ignoring ``SIGXFSZ``, and the observation
  says it reached the output size limit), ``max_processes`` (default 64 processes and
  threads), ``disk_mb`` (default 16 MiB and 1024 files in its temp dir);
- isolation layers (``sandbox_isolation``: what each does, how it is probed): no network
  (a private network namespace), no writes outside its fresh temp dir (Landlock), nothing
  it starts outlives it (a pid namespace), a bounded number of processes (a pids cgroup),
  a bounded temp dir (a tmpfs), removed afterwards. Which of them work is probed once per
  process and logged once, a warning for each missing one: never silently weaker
  (``isolation()``; ``network_isolation()`` names the network layer).

A program that breaks a limit is the policy's doing and gets an observation (its output and
why it stopped). A sandbox that cannot start (``unshare`` or a layer's setup fails, the child
cannot be spawned) is infrastructure: ``InfraError`` (``agentsearch.core.reliability``), which
an env waits out instead of showing the policy. ``sandbox_init`` tells the two apart: it
writes ``ready`` to a pipe only once every layer is in force, before the program runs.
"""

from __future__ import annotations

import ast
import asyncio
import json
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

from agentsearch.core.reliability import InfraError
from agentsearch.envs.tools.sandbox_isolation import INIT, Isolation, PidsCgroup, isolation

__all__ = ["evaluate", "CalculatorError", "run_python", "network_isolation", "isolation",
           "Isolation"]

log = logging.getLogger("agentsearch.sandbox")

STARTUP_TIMEOUT_S = 5.0  # for the sandbox to report ready (PythonTool's outer limit leaves room)


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


def network_isolation() -> str:
    """The network layer ``run_python`` uses in this process: ``"network namespace (`unshare
    ...`)"``, or ``"none"`` (its programs can open sockets; warned about once)."""
    return isolation().network


async def run_python(code: str, *, time_limit_s: float = 5.0, memory_mb: int = 1024,
                     max_output_chars: int = 4000, max_processes: int = 64,
                     disk_mb: int = 16) -> str:
    """Run ``code`` in the sandbox (module notes); returns stdout+stderr (and why it stopped).
    Raises ``InfraError`` if the sandbox itself cannot start."""
    iso = isolation()
    file_bytes = max(4 * max_output_chars, 65536)
    root = tempfile.mkdtemp(prefix="agentsearch-py-")
    out_path = os.path.join(root, "output.txt")
    box = _Sandbox(iso, root)
    killed = status = None
    t0 = time.perf_counter()
    try:
        with open(os.path.join(root, "main.py"), "w", encoding="utf-8") as f:
            f.write(code)
        with open(out_path, "wb") as out:
            await box.start(out, limits=(memory_mb, time_limit_s, file_bytes),
                            max_processes=max_processes, disk_mb=disk_mb)
            try:
                await asyncio.wait_for(box.proc.wait(), timeout=time_limit_s)
            except TimeoutError:
                killed = f"timed out after {time_limit_s:g} s and was killed"
                size = os.fstat(out.fileno()).st_size  # what it wrote; not unshare's words on dying
                await box.stop()
            status = await box.status()
            size = os.fstat(out.fileno()).st_size if killed is None else size
        with open(out_path, encoding="utf-8", errors="replace") as f:
            text = f.read(min(max_output_chars + 1, size))
    finally:
        await box.close()
        shutil.rmtree(root, ignore_errors=True)
        if os.path.exists(root):
            log.warning("python sandbox: could not remove its temp dir %s", root)
    if len(text) > max_output_chars:
        text = text[:max_output_chars] + "\n[output truncated]"
    rc = os.waitstatus_to_exitcode(status) if status is not None else box.proc.returncode
    if killed is None and rc is not None and rc < 0:
        sig = signal.Signals(-rc).name
        why = {"SIGXCPU": "CPU time limit", "SIGXFSZ": "output size limit", "SIGKILL": "killed"}
        killed = f"was stopped by {sig} ({why.get(sig, 'signal')})"
    if killed is None and size >= file_bytes:
        killed = f"reached the output size limit ({file_bytes} bytes)"
    if killed:
        text += f"\nError: the program {killed} (wall {time.perf_counter() - t0:.1f} s)."
    elif rc:
        text += f"\n[exit code {rc}]"
    return text.strip() or "(no output)"


class _Sandbox:
    """One run: ``[unshare ...] python -I -S sandbox_init.py CONFIG`` and its report pipe."""

    def __init__(self, iso: Isolation, root: str):
        self.iso, self.root = iso, root
        self.proc = self.cgroup = self.reader = self.transport = None

    async def start(self, out, *, limits: tuple, max_processes: int, disk_mb: int) -> None:
        iso, root = self.iso, self.root
        if iso.cgroup_base:
            try:
                self.cgroup = PidsCgroup(iso.cgroup_base, max_processes)
            except OSError as e:
                raise InfraError(f"python sandbox: cannot make its pids cgroup: {e}") from e
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": root, "TMPDIR": root,
               "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "PYTHONHASHSEED": "0",
               "PYTHONIOENCODING": "utf-8"}
        rfd, wfd = os.pipe()
        cfg = {"fd": wfd, "root": root, "carry": ["main.py"], "landlock": iso.landlock_abi > 0,
               "tmpfs_mb": disk_mb if iso.disk != "none" else 0, "tmpfs_inodes": 1024,
               "host_mnt_ns": _mnt_ns(), "pid_max": iso.pid_max,
               "argv": [sys.executable, "-I", "main.py"]}
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *iso.prefix, sys.executable, "-I", "-S", INIT, json.dumps(cfg), cwd=root, env=env,
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, pass_fds=(wfd,),
                preexec_fn=_child_setup(*limits, self.cgroup))
        except (OSError, subprocess.SubprocessError) as e:
            os.close(rfd)
            raise InfraError("python sandbox: cannot spawn "
                             f"{(iso.prefix or (sys.executable,))[0]}: "
                             f"{type(e).__name__}: {e}") from e
        finally:
            os.close(wfd)
        self.reader = asyncio.StreamReader()
        self.transport, _ = await asyncio.get_running_loop().connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(self.reader), os.fdopen(rfd, "rb", buffering=0))
        try:
            line = await asyncio.wait_for(self.reader.readline(), STARTUP_TIMEOUT_S)
        except TimeoutError:
            line = f"no answer within {STARTUP_TIMEOUT_S:g} s".encode()
        if not line.startswith(b"ready"):
            why = line.decode(errors="replace").strip()
            if not why:  # it exited before setting up: unshare's own message is in the output
                await self.stop()
                with open(os.path.join(root, "output.txt"), encoding="utf-8",
                          errors="replace") as f:
                    why = f"exit status {self.proc.returncode}: {f.read(500).strip()}"
            raise InfraError("the python sandbox did not start "
                             f"({' '.join(iso.prefix) or 'no unshare'}): {why}")

    async def status(self) -> int | None:
        """The program's wait status, as the sandbox's first process reported it (None: killed)."""
        try:
            rest = await asyncio.wait_for(self.reader.read(), 2.0)
        except TimeoutError:
            return None
        for line in rest.decode(errors="replace").splitlines():
            if line.startswith("status "):
                return int(line.split()[1])
        return None

    async def stop(self) -> None:
        """Kill the sandbox and wait until it is gone: its first process (the pid namespace then
        dies with it, before ``unshare`` exits), else the process group."""
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        init = _children(proc.pid) if self.iso.processes != "none" else []
        for pid in init:
            _kill(pid)
        if init:
            try:
                await asyncio.wait_for(proc.wait(), 2.0)
                return
            except TimeoutError:
                pass
        _kill(proc.pid, group=True)
        await proc.wait()

    async def close(self) -> None:
        if self.proc is not None:
            await self.stop()
            if self.iso.processes == "none":
                _kill(self.proc.pid, group=True)  # what the program started, if still in its group
        if self.cgroup is not None:
            await self.cgroup.close()
        if self.transport is not None:
            self.transport.close()


def _mnt_ns() -> int:
    """This process's mount namespace (its inode; 0 if unknown): the sandbox mounts only
    outside it."""
    try:
        return os.stat("/proc/self/ns/mnt").st_ino
    except OSError:
        return 0


def _kill(pid: int, group: bool = False) -> None:
    try:
        (os.killpg if group else os.kill)(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _children(pid: int) -> list[int]:
    """Host pids whose parent is ``pid`` (read from /proc/*/stat)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat[stat.rindex(b")") + 2:].split()[1]) == pid:
                found.append(int(name))
    return found


def _child_setup(memory_mb: int, cpu_s: float, file_bytes: int, cgroup: PidsCgroup | None):
    parent = os.getpid()
    linux = sys.platform.startswith("linux")
    if linux:  # imported here, in the parent: importing after fork can deadlock
        from agentsearch.envs.tools.sandbox_init import die_with_parent

    def apply():  # runs in the child between fork and exec; inherited by all it starts
        mem = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        cpu = int(math.ceil(cpu_s)) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if cgroup is not None:
            cgroup.join()
        if linux:
            die_with_parent()
            if os.getppid() != parent:  # the parent died before that took effect
                os._exit(1)

    return apply
