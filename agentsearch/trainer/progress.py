"""A one-line rich progress bar: step, reward, accept rate, step time, last eval."""

from __future__ import annotations

__all__ = ["Progress"]


class Progress:
    def __init__(self, total: int, start: int = 0, quiet: bool = False, description: str = "train"):
        self.quiet = quiet or total == 0
        self._bar = None
        self._eval = float("nan")
        if self.quiet:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as RichProgress

        self._bar = RichProgress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("{task.fields[info]}"),
                                 transient=False)
        self._task = self._bar.add_task(description, total=total, completed=start, info="")
        self._bar.start()

    def update(self, step: int, m: dict) -> None:
        if "eval/mean_at_n" in m:
            self._eval = m["eval/mean_at_n"]
        if self._bar is None:
            return
        info = (f"reward {m.get('reward/total', 0):+.3f}  correct {m.get('rollout/answer_correct', 0):.2f}  "
                f"accept {m.get('replay/accept_rate', 0):.2f}  replayed {int(m.get('replay/accepted', 0))}  "
                f"step {m.get('time/step', 0):.1f}s  eval {self._eval:.3f}")
        self._bar.update(self._task, completed=step, info=info)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
