"""Duty-cycled perf record (collectors layer): trace a few seconds of every period, cheaply in between.

The per-event collectors (syscalls' enter/exit trace, offcpu-stacks' sched_switch stacks)
cost the target on every event they record: measured here, ~480 ns per syscall for
``raw_syscalls:sys_enter,sys_exit`` into the perf buffer (4x the CPU of a getppid loop), while
the same perf record with its events disabled costs ~40 ns, as much as counting them.
So by default these collectors start perf record with its events off (``-D -1``) and switch
them on for ``on`` seconds of every ``period`` (``--control fifo:``, perf's own enable/disable
commands): one perf process, one perf.data, the cost of the trace times the duty cycle.

The windows actually traced are kept (CLOCK_MONOTONIC, the clock perf's ``-k`` stamps events
with), so the files can say what they cover and the manifest can say ``sampled``. perf acts on
a command some time after it is written (measured: up to ~150 ms on a loaded host), so a
window runs from when ``enable`` was sent to when perf acknowledged ``disable`` (its ack
fifo): every traced event lies inside its window.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from profiler.bundle import CollectorRecord

DEFAULT_ON = 1.0  # seconds traced...
DEFAULT_PERIOD = 10.0  # ...out of every period
POLL = 0.1  # the session polls the collectors (and so reads perf's acks) this often (s)


class DutyCycle:
    """Switches a perf record's events on and off through its control fifo.

    ``tick`` is called from the collector's ``poll`` (the session polls every 0.1 s), so no
    thread is needed; windows are as precise as that tick.
    """

    def __init__(self, on: float = DEFAULT_ON, period: float = DEFAULT_PERIOD) -> None:
        if not 0 < on <= period:
            raise ValueError(f"duty cycle: on ({on}s) must be > 0 and at most the period ({period}s)")
        self.on = on
        self.period = period
        self.fifo: Path | None = None
        self.ack: Path | None = None
        self.fd: int | None = None
        self.ack_fd: int | None = None
        self.awaiting: list[int | None] = []  # per command sent, in order: window index of a disable, None for enable
        self.windows: list[list[float]] = []  # [start, end] per traced window
        self.enabled = False
        self.acked = False  # perf acknowledged the open window's enable
        self.last_start = 0.0
        self.open_at_stop: set[int] = set()

    def argv(self, fifo: Path) -> list[str]:
        """perf record options: start with the events off, listen for enable/disable on the fifo,
        acknowledge each on ``<fifo>.ack``."""
        return ["-D", "-1", "--control", f"fifo:{fifo},{self.ack_path(fifo)}"]

    @staticmethod
    def ack_path(fifo: Path) -> Path:
        return fifo.with_name(fifo.name + ".ack")

    def prepare(self, fifo: Path) -> None:
        """Before perf starts: make the fifo and hold it open (O_RDWR never blocks), so commands
        written before perf opened its end wait in the pipe."""
        ack = self.ack_path(fifo)
        for f in (fifo, ack):
            with contextlib.suppress(FileNotFoundError):
                f.unlink()
            os.mkfifo(f, 0o600)
        self.fifo, self.ack = fifo, ack
        self.fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
        self.ack_fd = os.open(ack, os.O_RDWR | os.O_NONBLOCK)

    def _read_acks(self, now: float) -> None:
        """perf's acks arrive in command order: a disable's ack ends its window."""
        if self.ack_fd is None:
            return
        try:
            got = os.read(self.ack_fd, 4096).decode(errors="replace").count("ack")
        except (BlockingIOError, OSError):
            return
        for _ in range(min(got, len(self.awaiting))):
            idx = self.awaiting.pop(0)
            if idx is not None:
                self.windows[idx][1] = now
            elif self.enabled and self.windows and not self.acked:
                # perf acts on an enable only once it is set up (seconds on a loaded host, so a
                # window counted from the send could close before perf ever traced): the ``on``
                # seconds run from perf's ack, and the window from one poll before we read it
                self.acked = True
                self.last_start = now
                self.windows[-1][0] = max(self.windows[-1][0], now - POLL)
                self.windows[-1][1] = now

    def _send(self, word: str) -> bool:
        if self.fd is None:
            return False
        try:
            os.write(self.fd, f"{word}\n".encode())
            return True
        except OSError:
            return False

    def start(self, now: float | None = None) -> None:
        """perf has been started: the first window opens at once (short captures get one too)."""
        self._enable(time.monotonic() if now is None else now)

    def _enable(self, now: float) -> None:
        if self._send("enable"):
            self.awaiting.append(None)
            self.enabled = True
            self.acked = False
            self.last_start = now
            self.windows.append([now, now])

    def _disable(self, now: float) -> None:
        self.enabled = False
        if self._send("disable"):
            self.awaiting.append(len(self.windows) - 1)
        if self.windows:
            self.windows[-1][1] = now  # provisional: perf's ack moves it later

    def tick(self, now: float | None = None) -> None:
        t = time.monotonic() if now is None else now
        if self.fd is None:
            return
        self._read_acks(t)
        if self.enabled and self.acked and t - self.last_start >= self.on:
            self._disable(t)
        elif not self.enabled and self.windows and t - self.last_start >= self.period:
            self._enable(t)

    def stop(self, now: float | None = None) -> None:
        """The capture ends: the open window runs until perf stops (call again with that time)."""
        t = time.monotonic() if now is None else now
        self._read_acks(t)
        if self.enabled and self.windows:
            self.open_at_stop.add(len(self.windows) - 1)
        # a disable perf never acknowledged: traced until perf stopped
        self.open_at_stop.update(idx for idx in self.awaiting if idx is not None)
        self.awaiting = []
        self.enabled = False
        for idx in self.open_at_stop:  # called again with the time perf ended: the window runs to it
            self.windows[idx][1] = max(self.windows[idx][1], t)
        self._close()

    def _close(self) -> None:
        for fd in (self.fd, self.ack_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.fd = self.ack_fd = None

    def cleanup(self) -> None:
        self._close()
        for f in (self.fifo, self.ack):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.unlink()
        self.fifo = self.ack = None

    def traced_seconds(self) -> float:
        return sum(max(0.0, b - a) for a, b in self.windows)

    def stats(self, started: float | None, ended: float | None) -> dict[str, object]:
        """What the manifest says: sampled, the duty actually achieved, the windows."""
        traced = self.traced_seconds()
        span = (ended - started) if started is not None and ended is not None else 0.0
        return {
            "sampled": True,
            "duty": round(traced / span, 4) if span > 0 else None,
            "duty_on_seconds": self.on,
            "duty_period_seconds": self.period,
            "sampled_seconds": round(traced, 3),
            "windows": [[round(a, 6), round(b, 6)] for a, b in self.windows],
        }

    def window_of(self, t: float, slack: float = 0.05) -> int | None:
        """Index of the traced window holding time t (with a little slack for perf's lag), or None."""
        for i, (a, b) in enumerate(self.windows):
            if a - slack <= t <= b + slack:
                return i
        return None


MAX_LOST_AT = 2000


def note_lost(rec: CollectorRecord, lost_at: list[tuple[int, int]], duty: DutyCycle | None) -> None:
    """Where perf lost events, from its LOST records' times: ``stats.lost_at`` ([[monotonic s,
    events], ...] merged per 0.1 s, -1 when perf gave no time) and, for a duty-cycled trace,
    ``stats.lost_per_window`` (events lost in each of ``stats.windows``), so the report can say
    which seconds are incomplete rather than one count for the capture."""
    if not lost_at:
        return
    merged: dict[float, int] = {}
    for t, n in lost_at:
        key = round(t / 1e9, 1) if t >= 0 else -1.0
        merged[key] = merged.get(key, 0) + n
    rec.stats["lost_at"] = [[k, v] for k, v in sorted(merged.items())][:MAX_LOST_AT]
    if duty is None or not duty.windows:
        return
    per = [0] * len(duty.windows)
    for t, n in lost_at:
        s = t / 1e9
        i = duty.window_of(s) if t >= 0 else None
        if i is None:  # perf writes a LOST record when it next can: the window it last traced
            starts = [a for a, _b in duty.windows]
            i = max(0, max((j for j, a in enumerate(starts) if a <= s), default=len(per) - 1))
        per[i] += n
    rec.stats["lost_per_window"] = per
