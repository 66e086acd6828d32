"""Syscalls of the targets (collectors layer) -> syscalls-rate.csv and syscalls.csv.

``perf record -a -e raw_syscalls:sys_enter --filter '<targets' thread ids>' -e
raw_syscalls:sys_exit --filter ...`` (no stacks), duty-cycled (collectors/duty.py: 1 s of every
10 s by default, ``--collector syscalls-trace`` for all of it); at stop a stack-less ``perf script
--pid`` pass pairs every enter with its thread's exit -> syscalls.csv
(``time,tid,comm,syscall,count,total_ns`` per interval, per thread, per syscall). A syscall is
counted in the interval where it returned; one still blocked when the capture ended (an idle
``epoll_wait``) is counted up to the last event, in the last interval. The syscall rate is
that of the traced windows (counts / sampled seconds).

The events live on the CPUs with a kernel filter on the thread id (collectors/scope.py), not on
the targets' threads: per-thread events (and the per-thread ``perf stat`` rate counter this
collector ran before) are switched with the thread at every context switch, which cost a
switch-heavy MariaDB ~8% of its throughput here. The filter holds the threads the targets have
when the capture starts (``untraced_threads`` in the manifest counts those started later). Older bundles may hold ``syscalls-rate.csv``
(that counter's series); the analyzers still read it.

Syscall names come from the kernel's own table for this machine (the uapi ``unistd_64.h``
that linux-libc-dev installs, or ``ausyscall --dump``); numbers without a name are written
as ``syscall_<nr>``.

(``perf trace -s`` would give per-thread totals, but Debian's perf 6.1 summary dropped most
events on a syscall-heavy target here, and it prints totals for the whole capture only.)
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import platform
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import IO

from profiler.collectors import process as _proc
from profiler.collectors.base import CaptureContext
from profiler.collectors.duty import DutyCycle
from profiler.collectors.files import file_size, read_file
from profiler.collectors.perf_collector import PerfCollector, pid_list
from profiler.collectors.process import tail
from profiler.collectors.scope import (
    thread_ids,
    tracepoint_filter,
    untraced_threads,
    with_descendants,
)

from profiler.bundle import FAILED, PARTIAL, CollectorRecord, members

RATE_OUTPUT = members.SYSCALLS_RATE
OUTPUT = members.SYSCALLS
EVENTS = ["raw_syscalls:sys_enter", "raw_syscalls:sys_exit"]
PAIR_FIELDS = "comm,tid,time,event,trace"
HEADER = "time,tid,comm,syscall,count,total_ns\n"
WINDOW_SLACK = 0.05  # perf switches its events a little after we ask (s)

_UNISTD = {
    "x86_64": ["/usr/include/x86_64-linux-gnu/asm/unistd_64.h", "/usr/include/asm/unistd_64.h"],
    "aarch64": ["/usr/include/asm-generic/unistd.h"],
}
_DEFINE = re.compile(r"^#define\s+__NR_(\w+)\s+(\d+)\s*$", re.M)


def parse_unistd(text: str) -> dict[int, str]:
    """``#define __NR_read 0`` lines -> {0: 'read'}."""
    out: dict[int, str] = {}
    for name, nr in _DEFINE.findall(text):
        if name.startswith("syscalls") or name == "arch_specific_syscall":
            continue
        out.setdefault(int(nr), name)
    return out


def parse_ausyscall(text: str) -> dict[int, str]:
    """``ausyscall --dump`` output ("Using x86_64 syscall table:" then "0\tread") -> {0: 'read'}."""
    out: dict[int, str] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit():
            out[int(parts[0])] = parts[1]
    return out


@functools.lru_cache(maxsize=1)
def syscall_names() -> dict[int, str]:
    """This machine's syscall numbers -> names, from the kernel's table (never a hard-coded list)."""
    for path in _UNISTD.get(platform.machine(), []):
        text = read_file(path)
        if text:
            table = parse_unistd(text)
            if table:
                return table
    exe = shutil.which("ausyscall")
    if exe:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run([exe, "--dump"], capture_output=True, text=True, timeout=10).stdout
            table = parse_ausyscall(out)
            if table:
                return table
    return {}


def syscall_name(nr: int, table: dict[int, str]) -> str:
    return table.get(nr) or f"syscall_{nr}"


def parse_line(line: str) -> tuple[str, int, float, bool, int] | None:
    """One line of ``perf script -F comm,tid,time,event,trace`` for raw_syscalls.

    ``"   python3 15047   625.752142: raw_syscalls:sys_enter: NR 110 (7fb5, 0, ...)"`` ->
    (comm, tid, time, is_enter, nr). The comm may hold spaces, so the line is read from the event
    name outwards.
    """
    i = line.find(" raw_syscalls:sys_")
    if i < 0:
        return None
    head = line[:i].rstrip().rstrip(":").split()
    if len(head) < 3:
        return None
    try:
        t = float(head[-1])
        tid = int(head[-2])
    except ValueError:
        return None
    comm = " ".join(head[:-2])
    rest = line[i + 18:]
    enter = rest.startswith("enter")
    if not enter and not rest.startswith("exit"):
        return None
    words = rest.split(None, 3)
    try:
        nr = int(words[2])
    except (IndexError, ValueError):
        return None
    return comm, tid, t, enter, nr


class Pairing:
    """Pairs enters and exits per thread and writes interval rows as soon as an interval is over.

    The input is time-ordered (perf script sorts it), so each interval is written once the
    first event of a later interval arrives: memory stays bounded by one interval's keys.
    """

    def __init__(self, out: IO[str], t0: float, interval: float, names: dict[int, str],
                 windows: list[list[float]] | None = None) -> None:
        self.out = out
        self.t0 = t0
        self.interval = interval
        self.names = names
        # Traced windows of a duty-cycled capture ([start, end], monotonic): a call still open when
        # its window closed counts there with its time up to the window's end; an exit seen in a
        # later window without its enter adds its time from that window's start (count 0).
        self.windows = windows or []
        self.win = 0
        self.continued = 0
        self.open: dict[int, tuple[int, float]] = {}  # tid -> (nr, enter time)
        self.comm: dict[int, str] = {}
        self.bucket: int | None = None
        self.acc: dict[tuple[int, int], list[int]] = {}  # (tid, nr) -> [count, ns]
        self.calls = 0
        self.rows = 0
        self.unpaired_exits = 0
        self.last_time = t0
        out.write(HEADER)

    def _bucket(self, t: float) -> int:
        return max(0, int((t - self.t0) // self.interval))

    def _flush(self) -> None:
        if self.bucket is None or not self.acc:
            self.acc = {}
            return
        start = self.t0 + self.bucket * self.interval
        for (tid, nr), (count, ns) in sorted(self.acc.items()):
            comm = self.comm.get(tid, "")
            if any(c in comm for c in ',"\n'):
                comm = '"' + comm.replace('"', '""') + '"'
            self.out.write(f"{start:.6f},{tid},{comm},{syscall_name(nr, self.names)},{count},{ns}\n")
            self.rows += 1
        self.acc = {}

    def _add(self, t: float, tid: int, nr: int, ns: int, count: int = 1) -> None:
        b = self._bucket(t)
        if self.bucket is None:
            self.bucket = b
        elif b > self.bucket:
            self._flush()
            self.bucket = b
        slot = self.acc.setdefault((tid, nr), [0, 0])
        slot[0] += count
        slot[1] += ns
        self.calls += count

    def _advance(self, t: float) -> None:
        """Past the end of the current window: close the calls it left open at its end."""
        nxt = self.win + 1
        while nxt < len(self.windows) and t >= self.windows[nxt][0] - WINDOW_SLACK:
            end = self.windows[self.win][1]
            for tid, (nr, te) in sorted(self.open.items()):
                self._add(max(te, end - 1e-6), tid, nr, max(0, int(round((end - te) * 1e9))))
            self.open = {}
            self.win = nxt
            nxt += 1

    def feed(self, line: str) -> None:
        got = parse_line(line)
        if got is None:
            return
        comm, tid, t, enter, nr = got
        self.comm[tid] = comm
        self.last_time = max(self.last_time, t)
        if self.windows:
            self._advance(t)
        if enter:
            self.open[tid] = (nr, t)
            return
        started = self.open.pop(tid, None)
        if started is None or started[0] != nr:
            if self.win > 0 and started is None:
                # blocked since before this window opened: its time inside the window counts
                self.continued += 1
                self._add(t, tid, nr, max(0, int(round((t - self.windows[self.win][0]) * 1e9))), count=0)
                return
            self.unpaired_exits += 1
            return
        self._add(t, tid, nr, max(0, int(round((t - started[1]) * 1e9))))

    def close(self) -> int:
        """Count the syscalls still blocked at the end up to the last event; write the last interval."""
        still = len(self.open)
        for tid, (nr, t) in sorted(self.open.items()):
            self._add(max(t, self.last_time), tid, nr, max(0, int(round((self.last_time - t) * 1e9))))
        self.open = {}
        self._flush()
        return still


class Syscalls(PerfCollector):
    name = "syscalls"
    events = EVENTS
    max_bytes = 256 << 20  # two events per syscall: ~40 MB/s on a server making 200K syscalls a second
    mmap_pages = "1024"  # 4 MiB per CPU: syscall-heavy servers make tens of thousands of events a second

    def __init__(self, keep_perf_data: bool = False, duty: DutyCycle | None = None, full: bool = False) -> None:
        """``full``: trace every syscall of the whole capture (``--collector syscalls-trace``);
        otherwise the enter/exit trace runs ``duty`` (default 1 s of every 10 s)."""
        super().__init__()
        self.keep_perf_data = keep_perf_data
        self.duty = None if full else (duty or DutyCycle())
        self.traced: list[int] = []  # the thread ids in the filter (argv)

    def data_path(self, ctx: CaptureContext) -> Path:
        return ctx.writer.path(".syscalls.perf.data")

    def argv(self, ctx: CaptureContext) -> list[str]:
        duty = self.duty.argv(self.fifo_path(ctx)) if self.duty else []
        self.traced = thread_ids(ctx.pids)
        filt = tracepoint_filter(["common_pid"], self.traced)
        events: list[str] = []
        for ev in EVENTS:
            events += ["-e", ev, "--filter", filt]
        return [ctx.perf, "record", "-a", *events, "-k", "CLOCK_MONOTONIC", "-m", self.mmap_pages,
                "-N", "-B", *duty, "-o", str(self.data_path(ctx))]

    def fifo_path(self, ctx: CaptureContext) -> Path:
        return ctx.writer.root / ".syscalls.ctl"

    def start(self, ctx: CaptureContext) -> None:
        super().start(ctx)
        if self.duty is not None:
            self.duty.start()

    def prepare(self, ctx: CaptureContext) -> None:
        if self.duty is not None:
            self.duty.prepare(self.fifo_path(ctx))

    def size(self) -> int:
        return file_size(self.errpath.parent / ".syscalls.perf.data") if self.errpath else 0

    def request_stop(self) -> None:
        if self.duty is not None:
            self.duty.stop()
        super().request_stop()

    def poll(self) -> str | None:
        if self.duty is not None and not self.stopping:
            self.duty.tick()
        return super().poll()

    def cleanup(self, ctx: CaptureContext) -> None:
        if self.duty is not None:
            self.duty.cleanup()
        if not self.keep_perf_data:
            with contextlib.suppress(OSError):
                self.data_path(ctx).unlink()

    def finish(self, ctx: CaptureContext, rec: CollectorRecord, stderr: str) -> None:
        windows = None
        if self.duty is not None:
            self.duty.stop(rec.ended)
            windows = self.duty.windows
            rec.stats.update(self.duty.stats(self.started, rec.ended))
            rec.stats["estimates"] = ("syscalls.csv covers the sampled windows only: its counts and total_ns "
                                      "are exact for them; rates are per sampled second")
        else:
            rec.stats["sampled"] = False
        data = self.data_path(ctx)
        if not data.exists() or data.stat().st_size == 0:
            rec.status = PARTIAL if rec.files else FAILED
            rec.reason = "perf record wrote no syscall data" + (f": {self.died}" if self.died else "")
            return
        names = syscall_names()
        rec.stats["syscall_table"] = "kernel uapi table" if names else "not found: numbers only"
        argv = [ctx.perf, "script", "-i", str(data), "-F", PAIR_FIELDS, "--pid", pid_list(with_descendants(ctx.pids))]
        rec.stats["pair_argv"] = argv
        errpath = ctx.writer.root / ".syscalls.script.stderr"
        t0 = self.started or time.monotonic()
        with ctx.writer.open_member(OUTPUT) as raw:
            rec.files.append(OUTPUT)
            text = io.TextIOWrapper(raw, encoding="utf-8", newline="")
            pairs = Pairing(text, t0, ctx.options.interval, names, windows)
            with open(errpath, "wb") as err:
                proc = _proc.spawn(argv, stdout=subprocess.PIPE, stderr=err)
            try:
                assert proc.stdout is not None
                for line in io.TextIOWrapper(proc.stdout, encoding="utf-8", errors="replace"):
                    pairs.feed(line)
                rc = proc.wait()
            finally:
                _proc.stop_process(proc, 5.0)
            still = pairs.close()
            text.flush()
            text.detach()
        if rc != 0:
            rec.status, rec.reason = PARTIAL, f"perf script exited with code {rc}: {tail(errpath)}"
        with contextlib.suppress(OSError):
            os.unlink(errpath)
        rec.stats["untraced_threads"] = untraced_threads(ctx.pids, self.traced)
        rec.stats.update({"calls": pairs.calls, "rows": pairs.rows, "blocked_at_end": still,
                          "unpaired_exits": pairs.unpaired_exits, "continued_into_window": pairs.continued})
        if self.keep_perf_data:
            data.replace(ctx.writer.path(members.perf_data(self.name)))
            rec.files.append(members.perf_data(self.name))
