"""`attach --live` and `run --live` (CLI layer): the running verdict redrawn in the terminal every interval.

A thread asks profiler.usecases.live for the capture's running verdict (the same verdict code
as the report, on what the capture holds so far: the last ``WINDOW`` seconds) and draws it on
stdout: on a terminal the screen is redrawn in place (the cursor home and the rest cleared, no
scrolling), in a pipe each redraw is a block of plain lines. Thread names, functions and the
load's figures come from the targets and are untrusted: control characters are dropped before
they reach the terminal. The capture, its bundle and its report are the same as without it.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

from profiler.bundle import Manifest
from profiler.collectors.bcc.oncpu import LiveOnCpu
from profiler.renderers import formatting
from profiler.untrusted import sanitize
from profiler.usecases.live import LiveCapture, LiveModel, pools_of

HOME_CLEAR = "\x1b[H\x1b[J"
HIDE, SHOW = "\x1b[?25l", "\x1b[?25h"
LABELS = {"cpu": "CPU-BOUND", "io_wait": "IO WAIT", "memory": "MEMORY", "lock_contention": "LOCK CONTENTION",
          "not_saturated": "NOT SATURATED"}


def render(m: LiveModel, width: int = 100) -> list[str]:
    """The lines of one redraw."""
    def fit(text: str) -> str:
        text = sanitize(text)
        return text if len(text) <= width else text[: max(0, width - 1)] + "…"

    head = (f"profiler --live: {m.elapsed:,.0f}s into the capture, verdict over the last {m.window:g}s "
            f"(backend {m.backend}; Ctrl-C ends the capture and writes the bundle and report)")
    lines = [fit(head), ""]
    if m.category is None:
        lines.append("  verdict: waiting for the first samples...")
    else:
        lines.append(fit(f"  verdict: {LABELS.get(m.category, m.category.upper())}   score {m.score:.2f}   "
                         f"confidence {m.confidence}"))
        lines.append(fit(f"  {m.headline}"))
        for metric, value, unit, note in m.evidence:
            lines.append(fit(f"    {metric:28s} {formatting.value(value, unit):>14s}  {note}"))
    lines.append("")
    lines.append("  top waits (threads waiting, on average):")
    if m.waits:
        for w in m.waits:
            lines.append(fit(f"    {w.threads:6.2f}  {w.pool:18s} {w.reason}: {w.frames}"))
    else:
        lines.append("    (none yet)" if m.backend == "bcc" else "    (off-CPU stacks need the bcc backend live)")
    lines.append("")
    lines.append("  top on-CPU functions per thread pool (share of the pool's samples):")
    if m.oncpu:
        for pool, fns in list(m.oncpu.items())[:6]:
            lines.append(fit(f"    {pool:18s} " + ", ".join(f"{fn} {100 * share:.0f}%" for fn, share in fns)))
    else:
        lines.append(fit(f"    ({m.oncpu_note or 'no samples yet'})"))
    if m.load:
        lines += ["", fit(f"  {m.load}")]
    for n in m.notes:
        lines.append(fit(f"  note: {n}"))
    return lines


def on_cpu_sampler(live: LiveCapture, pids: list[int], interval: float) -> LiveOnCpu | None:
    """The bcc on-CPU sampler for the live view's top functions (the bcc backend only), started."""
    if live.backend != "bcc":
        live.oncpu = lambda lo, hi: ({}, "on-CPU functions live need the bcc backend (perf's are named after the capture)")
        return None
    sampler = LiveOnCpu(pids, interval)
    sampler.start()

    def top(lo: float, hi: float) -> tuple[dict[str, list[tuple[str, float]]], str]:
        counts, note = sampler.top(lo, hi)
        return pools_of(counts), note

    live.oncpu = top
    return sampler


class LiveScreen:
    """Redraws the running verdict every ``every`` seconds until stopped."""

    def __init__(self, live: LiveCapture, manifest: Callable[[], Manifest | None], every: float,
                 out: TextIO | None = None) -> None:
        self.live = live
        self.manifest = manifest
        self.every = max(0.5, every)
        self.out = out if out is not None else sys.stdout
        self.tty = self._isatty()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="profiler-live", daemon=True)
        self.redraws = 0

    def _isatty(self) -> bool:
        try:
            return self.out.isatty()
        except (AttributeError, ValueError):
            return False

    def start(self) -> None:
        if self.tty:
            self._write(HIDE + HOME_CLEAR)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        if self.tty:
            self._write(SHOW + "\n")

    def _loop(self) -> None:
        next_at = time.monotonic() + min(self.every, 1.0)
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            next_at = time.monotonic() + self.every
            try:
                model = self.live.snapshot(self.manifest())
            except Exception as exc:  # noqa: BLE001 - the capture goes on whatever the live view does
                model = LiveModel(elapsed=time.monotonic() - self.live.started, window=self.live.window,
                                  backend=self.live.backend, notes=[f"{type(exc).__name__}: {exc}"])
            self.draw(model)

    def draw(self, model: LiveModel) -> None:
        size = shutil.get_terminal_size((100, 40))
        lines = render(model, max(40, size.columns - 1))
        if self.tty:
            self._write(HOME_CLEAR + "\n".join(lines[: max(5, size.lines - 1)]) + "\n")
        else:
            self._write("\n".join(lines) + "\n\n")
        self.redraws += 1

    def _write(self, text: str) -> None:
        try:
            self.out.write(text)
            self.out.flush()
        except (OSError, ValueError):
            self._stop.set()  # the terminal is gone: the capture goes on without the view
