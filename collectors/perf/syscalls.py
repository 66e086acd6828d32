"""Syscalls of the targets (collectors layer) -> syscalls-rate.csv and syscalls.csv.

``perf record -a -e raw_syscalls:sys_enter --filter '<targets' thread ids>' -e
raw_syscalls:sys_exit --filter ...`` (no stacks), duty-cycled (collectors/perf/duty.py: 1 s of every
10 s by default, ``--collector syscalls-trace`` for all of it); at stop a stack-less ``perf script
--pid`` pass pairs every enter with its thread's exit -> syscalls.csv
(``time,tid,comm,syscall,count,total_ns`` per interval, per thread, per syscall). A syscall is
counted in the interval where it returned; one still blocked when the capture ended (an idle
``epoll_wait``) is counted up to the last event, in the last interval. The syscall rate is
that of the traced windows (counts / sampled seconds). The pairing is
profiler/formats/syscall_pairs.py: perf.data read directly, perf script's lines where it cannot be.

The events live on the CPUs with a kernel filter on the thread id (collectors/perf/scope.py), not on
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

from profiler.collectors import host
from profiler.collectors import process as _proc
from profiler.collectors.base import CaptureContext
from profiler.collectors.files import file_size, read_file
from profiler.collectors.perf.base import PerfCollector, no_side_band, pid_list
from profiler.collectors.perf.duty import DutyCycle, note_lost
from profiler.collectors.perf.scope import (
    comm_filter,
    thread_comms,
    thread_ids,
    tracepoint_filter,
    untraced_threads,
    with_descendants,
)
from profiler.collectors.process import tail

from profiler.bundle import FAILED, PARTIAL, CollectorRecord, members
from profiler.formats.perfdata import PerfDataUnsupported
from profiler.formats.syscall_pairs import (
    EVENTS,
    PAIR_FIELDS,
    Pairing,
    PyPairing,
    SyscallPairs,
    pairing,
    read_direct,
)

RATE_OUTPUT = members.SYSCALLS_RATE
OUTPUT = members.SYSCALLS

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


class SyscallsCollector(PerfCollector):
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
        events: list[str] = []
        if host.nested_pid_namespace():
            # common_pid holds the host's ids, which this namespace cannot name: filter by the
            # targets' thread names (the generic ``comm`` field every event has) and keep the
            # targets' calls by perf's own (translated) ids; never perf's own calls (it would
            # trace its own writes of what it traced)
            named = comm_filter(["comm"], thread_comms(ctx.pids))
            filt = named or 'comm!="perf"'
            self.rec.stats["pid_namespace"] = ("nested: calls filtered by the targets' thread names, kept by their ids"
                                               if named else "nested: every task's calls but perf's traced, the "
                                               "targets' kept by their ids")
            for ev in EVENTS:
                events += ["-e", ev, "--filter", filt]
        else:
            filt = tracepoint_filter(["common_pid"], self.traced)
            for ev in EVENTS:
                events += ["-e", ev, "--filter", filt]
        return [ctx.perf, "record", "-a", *events, "-k", "CLOCK_MONOTONIC", "-m", self.mmap_pages,
                "-N", "-B", *no_side_band(ctx.perf), *duty, "-o", str(self.data_path(ctx))]

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

    def _errpath(self, ctx: CaptureContext) -> Path:
        return ctx.writer.root / ".syscalls.script.stderr"

    def _pair_text(self, ctx: CaptureContext, rec: CollectorRecord, data: Path, pids: list[int], text: IO[str],
                   t0: float, names: dict[int, str],
                   windows: list[list[float]] | None) -> tuple[Pairing | PyPairing, int, int]:
        """The fallback: perf script text, paired line by line."""
        argv = [ctx.perf, "script", "-i", str(data), "-F", PAIR_FIELDS, "--pid", pid_list(pids)]
        rec.stats["pair_argv"] = argv
        pairs = pairing(text, t0, ctx.options.interval, names, windows)
        with open(self._errpath(ctx), "wb") as err:
            proc = _proc.spawn(argv, stdout=subprocess.PIPE, stderr=err)
        try:
            assert proc.stdout is not None
            for line in io.TextIOWrapper(proc.stdout, encoding="utf-8", errors="replace"):
                pairs.feed(line)
            rc = _proc.reap(proc, self.add_child_cpu)
        finally:
            _proc.stop_process(proc, 5.0)
        return pairs, pairs.close(), rc

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
        pids = with_descendants(ctx.pids)
        t0 = self.started or time.monotonic()
        rc = 0
        rows = io.StringIO()  # a few rows per thread and syscall a second: small
        direct: SyscallPairs | None = None
        try:
            lost_at: list[tuple[int, int]] = []
            direct, lost = read_direct(data, set(pids),
                                       lambda comm: SyscallPairs(rows, t0, ctx.options.interval, names, windows, comm),
                                       lost_at)
            note_lost(rec, lost_at, self.duty)
            still = direct.close()
            rec.stats["decoded"] = "perf.data read directly"
            if lost and "lost" not in rec.stats:
                rec.stats["lost"] = lost
        except PerfDataUnsupported as exc:
            rec.stats["decoded"] = f"perf script ({exc})"
        with ctx.writer.open_member(OUTPUT) as raw:
            rec.files.append(OUTPUT)
            text = io.TextIOWrapper(raw, encoding="utf-8", newline="")
            pairs: SyscallPairs | Pairing | PyPairing
            if direct is not None:
                text.write(rows.getvalue())
                pairs = direct
            else:
                pairs, still, rc = self._pair_text(ctx, rec, data, pids, text, t0, names, windows)
            text.flush()
            text.detach()
        if rc != 0:
            rec.status, rec.reason = PARTIAL, f"perf script exited with code {rc}: {tail(self._errpath(ctx))}"
        with contextlib.suppress(OSError):
            os.unlink(self._errpath(ctx))
        rec.stats["untraced_threads"] = untraced_threads(ctx.pids, self.traced)
        rec.stats.update({"calls": pairs.calls, "rows": pairs.rows, "blocked_at_end": still,
                          "unpaired_exits": pairs.unpaired_exits, "continued_into_window": pairs.continued})
        if self.keep_perf_data:
            data.replace(ctx.writer.path(members.perf_data(self.name)))
            rec.files.append(members.perf_data(self.name))
