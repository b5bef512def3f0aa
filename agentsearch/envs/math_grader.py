"""Math answer equivalence in a child process, so that no answer can hang the caller.

math-verify (and the sympy fallback) can run for minutes on an adversarial answer: for the
power tower ``9^{9^{9^{9}}}`` sympy computes an integer with billions of digits inside one C
call that holds the GIL, so no other thread, signal handler or event loop of the process
runs until it ends (an engine's rollout loop freezes with it). math-verify's own timeout
(``signal.alarm``) exists on the main thread only and cannot interrupt that call either.

So the comparison runs in one long-lived child process, ``MathGrader``: the caller waits at
most ``timeout_s`` for its answer; on timeout the child is killed (a new one starts right
away, in the background) and the call says so. A child that cannot start, or dies, is an
infrastructure failure (``InfraError``: the env waits and asks again), never a verdict. The
child is this file run as a script (it imports no agentsearch module, only math-verify or
sympy, and starts, warmed up by two comparisons, in about two seconds) and speaks JSON lines:
``{"pred": str, "golds": [str]}`` in, ``{"equal": bool}`` out.
``agentsearch.envs.rewards.math_grade`` asks it only when the cheap text and number checks
cannot decide.
"""

from __future__ import annotations

import json
import logging
import os
import re
import select
import subprocess
import sys
import tempfile
import threading
import time

__all__ = ["MathGrader", "slow_equal"]

log = logging.getLogger(__name__)

START_TIMEOUT_S = 120.0
"""How long a new child may take to import its checker (a loaded machine is slow)."""


# ---------------------------------------------------------------- the comparison (child side)
def _mv():
    """math-verify's (parse, verify), or None when it is not installed."""
    try:
        from math_verify import parse, verify
    except ImportError:
        return None
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    return parse, verify


def _as_latex(s: str) -> str:
    s = s.strip()
    s = re.sub(r"\bC\((\d+),\s*(\d+)\)", r"\\binom{\1}{\2}", s)  # C(n, k) -> binomial
    return s if "$" in s or "\\boxed" in s else f"${s}$"


def _sympy_equal(a: str, b: str) -> bool:
    import sympy
    from sympy.parsing.sympy_parser import (
        convert_xor,
        implicit_multiplication_application,
        parse_expr,
        standard_transformations,
    )

    tr = standard_transformations + (implicit_multiplication_application, convert_xor)
    try:
        ea, eb = parse_expr(a, transformations=tr), parse_expr(b, transformations=tr)
        return bool(sympy.simplify(ea - eb) == 0)
    except Exception:  # noqa: BLE001 - unparsable math text is simply not equal
        return False


def slow_equal(prediction: str, golden_answers: list[str]) -> bool:
    """math-verify's verdict (sympy's ``simplify(a - b) == 0`` without it), in this process
    and without a time limit: what the child runs."""
    mv = _mv()
    if mv is None:
        return any(_sympy_equal(prediction, g) for g in golden_answers)
    parse, verify = mv
    try:  # no signal-based timeouts: the parent kills this process instead
        pred = parse(_as_latex(prediction), parsing_timeout=None)
        if not pred:
            return False
        for g in golden_answers:
            gold = parse(_as_latex(g), parsing_timeout=None)
            if gold and verify(gold, pred, timeout_seconds=None):
                return True
    except Exception:  # noqa: BLE001 - math-verify raises on pathological input: not equal
        return False
    return False


def _serve() -> None:
    """The child's loop. Replies go to a private copy of stdout; anything a library prints
    goes to stderr, so it cannot break the protocol."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    # Warm the checker up before saying ready: math-verify and sympy load parsers and caches
    # lazily on their first comparison (about 1 s on a 2-core machine, against 3 ms after),
    # and that first answer's time limit must not pay for it.
    slow_equal("4^n", ["2^{2n}"])
    slow_equal("\\frac{1}{2}", ["0.5"])
    proto.write('{"ready": true}\n')
    for line in sys.stdin:
        req = json.loads(line)
        proto.write(json.dumps({"equal": slow_equal(req["pred"], req["golds"])}) + "\n")


# ---------------------------------------------------------------- the client (caller side)
class MathGrader:
    """One child process that compares math answers (module doc); thread-safe, one request
    at a time (callers wait for each other). ``equal`` returns ``None`` when the answer did not
    come within ``timeout_s``, and raises ``InfraError`` when the child failed."""

    def __init__(self):
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._err = None
        self._buf = b""
        self._ready = False
        self._killer: tuple | None = None  # the last request whose comparison killed a child

    def _spawn(self) -> None:
        code = ("import sys, runpy; sys.path.pop(0); "  # not the cwd: a local math.py would shadow
                f"runpy.run_path({__file__!r}, run_name='__main__')")
        self._err = tempfile.TemporaryFile()
        self._proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=self._err)
        self._buf, self._ready = b"", False

    def _stderr_tail(self) -> str:
        try:
            self._err.seek(0)
            return self._err.read().decode(errors="replace").strip()[-600:]
        except Exception:  # noqa: BLE001 - only for a message
            return ""

    def _read_line(self, deadline: float) -> bytes | None:
        """The child's next line; ``None`` past ``deadline``, ``b""`` if the child is gone."""
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return b""
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.kill()
            proc.wait()
            proc.stdin.close()
            proc.stdout.close()
        if self._err is not None:
            self._err.close()
            self._err = None

    def _unavailable(self, why: str) -> Exception:
        """The infrastructure error of a checker that failed (``core.reliability``): the
        caller waits and asks again; it is never the answer's verdict."""
        from agentsearch.core.reliability import InfraError  # here: the child imports none

        return InfraError(f"the math answer checker ({__name__}) {why}")

    def _restart(self) -> None:
        """Replace the child; the new one starts in the background (a failure to start it
        shows on the next call)."""
        self._stop()
        try:
            self._spawn()
        except OSError as e:
            log.warning("the math answer checker did not restart: %s", e)
            self._stop()

    def _start(self) -> None:
        """A ready child, or ``InfraError``."""
        if self._proc is None or self._proc.poll() is not None:
            self._stop()
            try:
                self._spawn()
            except OSError as e:  # no interpreter, no process left (EAGAIN), ...
                self._stop()
                raise self._unavailable(f"did not start: {type(e).__name__}: {e}") from e
        if not self._ready:
            if not self._read_line(time.monotonic() + START_TIMEOUT_S):
                err = self._stderr_tail()
                self._stop()
                raise self._unavailable(f"did not start: {err or 'no output'}")
            self._ready = True

    def equal(self, prediction: str, golden_answers: list[str], timeout_s: float) -> bool | None:
        """Whether ``prediction`` equals any golden answer (``slow_equal``), or ``None`` if the
        live child did not answer within ``timeout_s`` seconds (it is then replaced): only
        the answer's own time counts, not the wait for another caller's answer (one at a time)
        or for a child to start (at most ``START_TIMEOUT_S``).

        A child that cannot start or dies while it compares is an infrastructure failure, an
        ``InfraError`` (``core.reliability``: the caller waits and asks again), with its error
        output. If the same answer then kills the next child too, the answer is the cause
        (e.g. memory for a huge power): ``None``, as for a timeout."""
        with self._lock:
            self._start()
            request = (prediction, list(golden_answers))
            req = json.dumps({"pred": prediction, "golds": list(golden_answers)}) + "\n"
            try:
                os.write(self._proc.stdin.fileno(), req.encode())
                line = self._read_line(time.monotonic() + timeout_s)
            except OSError:  # the child died (BrokenPipeError)
                line = b""
            if line is None:  # alive, and still comparing: the answer's time is up
                self._restart()
                return None
            try:
                equal = bool(json.loads(line)["equal"]) if line else None
            except (ValueError, KeyError, TypeError):  # a broken reply: the child is unwell
                equal = None
            if equal is not None:
                self._killer = None if self._killer == request else self._killer
                return equal
            err = self._stderr_tail() if line == b"" else f"bad reply {line[:200]!r}"
            self._restart()
            if self._killer == request:  # this answer killed the previous child as well
                log.warning("the math answer checker died twice on the answer %r; counted as not "
                            "equal", prediction[:80])
                return None
            self._killer = request
            raise self._unavailable(f"checker died while comparing ({err or 'killed'})")

    def close(self) -> None:
        """Stop the child (``atexit`` calls it for the shared grader)."""
        with self._lock:
            self._stop()


if __name__ == "__main__":
    _serve()
