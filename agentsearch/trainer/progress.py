"""Training progress: a one-line rich bar on a terminal; plain lines otherwise.

When stdout is not a terminal (a log file, CI, ``make demo | tee``), a rich bar would show
nothing until the end, so one plain line is printed every ``every`` steps and at every eval:
step, reward, success, replay acceptance, step time, last eval.
"""

from __future__ import annotations

import sys

__all__ = ["Progress"]


class Progress:
    def __init__(self, total: int, start: int = 0, quiet: bool = False, description: str = "train",
                 every: int = 5):
        self.quiet = quiet or total == 0
        self.total, self.every, self.description = total, every, description
        self._bar = None
        self._eval = float("nan")
        self.plain = not sys.stdout.isatty()
        if self.quiet or self.plain:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as RichProgress

        self._bar = RichProgress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("{task.fields[info]}"),
                                 transient=False)
        self._task = self._bar.add_task(description, total=total, completed=start, info="")
        self._bar.start()

    def line(self, step: int, m: dict) -> str:
        return (f"reward {m.get('reward/total', 0):+.3f}  correct {m.get('rollout/answer_correct', 0):.2f}  "
                f"accept {m.get('replay/accept_rate', 0):.2f}  replayed {int(m.get('replay/accepted', 0))}  "
                f"step {m.get('time/step', 0):.1f}s  eval {self._eval:.3f}")

    def update(self, step: int, m: dict) -> None:
        evaluated = "eval/mean_at_n" in m
        if evaluated:
            self._eval = m["eval/mean_at_n"]
        if self.quiet:
            return
        if self._bar is None:
            if evaluated or step % self.every == 0 or step == self.total:
                print(f"[{self.description}] step {step}/{self.total}  {self.line(step, m)}", flush=True)
            return
        self._bar.update(self._task, completed=step, info=self.line(step, m))

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
