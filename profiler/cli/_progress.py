"""Progress bars on stderr (cli layer): the CLI's side of profiler.progress.Progress.

A bar per task with the share done, the rate and the time left (rich.progress), drawn only when
stderr is a terminal and removed when the work ends; in a pipe or a log nothing is printed for
progress. Warnings are always one line each.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from profiler.untrusted import sanitize


def _rate(done: float, secs: float, unit: str) -> str:
    r = done / secs if secs > 0 else 0.0
    if unit == "B":
        return f"{r / 1e6:,.1f} MB/s"
    if unit == "s":
        return ""
    return f"{r:,.0f} {unit}/s" if unit else f"{r:,.0f}/s"


def _amount(v: float, unit: str) -> str:
    if unit == "B":
        return f"{v / 1e6:,.0f} MB"
    if unit == "s":
        return f"{v:,.0f} s"
    return f"{v:,.0f} {unit}".strip()


class Bars:
    """Implements profiler.progress.Progress; also ``warn`` and ``done`` for the verbs."""

    def __init__(self, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._bars: Any = None
        self._tasks: dict[str, tuple[Any, float]] = {}  # task -> (rich task id, start time)
        self._last = 0.0

    def _start(self) -> Any:
        if self._bars is None:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeRemainingColumn,
            )

            self._bars = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(bar_width=30),
                                  TextColumn("{task.fields[amount]}"), TextColumn("{task.fields[rate]}"),
                                  TimeRemainingColumn(), console=Console(stderr=True), transient=True)
            self._bars.start()
        return self._bars

    def __call__(self, task: str, done: float, total: float | None = None, unit: str = "") -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if task in self._tasks and now - self._last < 0.1 and (total is None or done < total):
            return
        self._last = now
        bars = self._start()
        if task not in self._tasks:
            from rich.markup import escape

            # a task names files and targets: no escape sequences, no rich markup from their names
            self._tasks[task] = (bars.add_task(escape(sanitize(task)), total=total, amount="", rate=""), now)
        tid, t0 = self._tasks[task]
        amount = _amount(done, unit) + (f" of {_amount(total, unit)}" if total else "")
        bars.update(tid, completed=done, total=total, amount=amount, rate=_rate(done, now - t0, unit))

    def warn(self, msg: str) -> None:
        self.say(f"warning: {msg}")

    def say(self, msg: str) -> None:
        """One line on stderr, above the bars while they are drawn: ``profiler: msg``."""
        msg = sanitize(msg)  # names from an input reach the terminal without escape sequences
        if self._bars is not None:
            self._bars.console.print(f"profiler: {msg}", highlight=False, markup=False)
        else:
            sys.stderr.write(f"profiler: {msg}\n")
            sys.stderr.flush()

    def done(self) -> None:
        if self._bars is not None:
            self._bars.stop()
            self._bars = None
            self._tasks.clear()
