"""The one progress protocol (core layer): how long work says how far it got.

Use cases, the analysis and the capture take a ``progress`` callable and call it often with a
task, the amount done and, when known, the total; the CLI draws it (profiler/cli/_progress.py:
a bar with the rate and the time left on stderr, only when stderr is a terminal). Nothing here
prints: a library caller passes None, or its own callable.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["Progress"]


class Progress(Protocol):
    def __call__(self, task: str, done: float, total: float | None = None, unit: str = "") -> None:
        """``task`` (a short phrase: "folding cpu.perf.txt.gz") has ``done`` of ``total`` ``unit``
        done ("B" for bytes, "events", "samples", "s"); ``total`` None when unknown (a rate, no
        time left). Called as often as convenient: implementations throttle."""
        ...
