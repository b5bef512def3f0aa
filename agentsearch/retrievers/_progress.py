"""A dependency-free progress bar for index builds (stderr, redraws only on a terminal)."""

from __future__ import annotations

import sys
import time

__all__ = ["Progress"]


class Progress:
    """``update(n)`` after each unit of work; ``close()`` prints the final line.

    On a terminal it redraws one line; in logs (not a tty) it prints at most every 10%.
    """

    def __init__(self, total: int, desc: str, stream=None, enabled: bool = True, width: int = 30):
        self.total, self.desc, self.width = max(1, total), desc, width
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = enabled and getattr(self.stream, "isatty", lambda: False)()
        self.done = 0
        self.start = time.perf_counter()
        self._last_decile = -1

    def update(self, n: int = 1) -> None:
        self.done = min(self.total, self.done + n)
        if not self.enabled:
            return
        decile = 10 * self.done // self.total
        if self.tty or decile > self._last_decile:
            self._last_decile = decile
            self._draw(end="" if self.tty else "\n")

    def _draw(self, end: str) -> None:
        frac = self.done / self.total
        bar = "#" * int(frac * self.width) + "-" * (self.width - int(frac * self.width))
        el = time.perf_counter() - self.start
        rate = self.done / el if el > 0 else 0.0
        line = f"{self.desc} [{bar}] {self.done}/{self.total} {el:5.1f}s {rate:,.0f}/s"
        self.stream.write(("\r" + line if self.tty else line) + end)
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.tty:
            self._draw(end="\n")
