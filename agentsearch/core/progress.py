"""One progress printer for every long job: training steps, warm-start SFT, index builds.

On a terminal it redraws one line. When the stream is not a terminal (a log file, CI,
``make demo | tee``), a redrawn line would show nothing until the end, so it prints one
plain line every ``every`` units (default: every 10% of the total), whenever asked
(``force``, e.g. at an eval), and at the first unit done ``interval_s`` seconds after the last
line (slow units, e.g. a real LM's RL step of minutes: the log never stays quiet for long), so
long work shows progress in any log.
"""

from __future__ import annotations

import sys
import time

__all__ = ["Progress"]


class Progress:
    """``update(done, info)`` after each unit of work; ``close()`` ends the line.

    A line reads ``[desc] done/total (elapsed s, ~left s left) info``.
    """

    def __init__(self, total: int, desc: str, *, start: int = 0, every: int | None = None,
                 stream=None, enabled: bool = True, interval_s: float = 60.0):
        self.total, self.desc, self.done = max(0, total), desc, start
        # every=0 (e.g. ``sft.log_every=0``: "never") prints no periodic line, not a division by 0
        self.every = max(1, every if every is not None else self.total // 10)
        self.stream = stream or sys.stdout
        self.enabled = enabled and self.total > 0
        self.tty = self.enabled and getattr(self.stream, "isatty", lambda: False)()
        self._start, self._t0 = start, time.perf_counter()
        self._next = (start // self.every + 1) * self.every  # the next plain line, in units
        self.interval_s, self._printed = interval_s, self._t0  # ... or after interval_s seconds
        self._open = False

    def line(self, info: str = "") -> str:
        el = time.perf_counter() - self._t0
        done_here = self.done - self._start
        left = el / done_here * (self.total - self.done) if done_here > 0 else float("nan")
        eta = f", ~{left:.0f} s left" if left == left else ""
        return (f"[{self.desc}] {self.done}/{self.total} ({el:.0f} s{eta})"
                + (f"  {info}" if info else ""))

    def update(self, done: int, info: str = "", *, force: bool = False) -> None:
        """Set the units done and show ``info`` with them (``force``: a plain line now)."""
        self.done = done
        if not self.enabled:
            return
        if self.tty:
            self.stream.write("\r" + self.line(info) + "\x1b[K")
            self._open = True
        elif (force or self.done >= self._next or self.done == self.total
              or time.perf_counter() - self._printed >= self.interval_s):
            self.stream.write(self.line(info) + "\n")
            self._next = (self.done // self.every + 1) * self.every
            self._printed = time.perf_counter()
        self.stream.flush()

    def advance(self, n: int = 1, info: str = "") -> None:
        """``n`` more units done."""
        self.update(min(self.total, self.done + n), info)

    def close(self) -> None:
        if self._open:
            self.stream.write("\n")
            self.stream.flush()
            self._open = False
