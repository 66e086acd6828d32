"""Off-CPU evidence from sched_switch with stacks (collectors layer) -> offcpu.perf.txt.gz, offcpu.csv.gz.

``perf record -a -e sched:sched_switch --filter '<targets' thread ids>' --call-graph fp -k
CLOCK_MONOTONIC``: each time a target thread leaves the CPU, its stack and ``prev_state`` (S:
sleeping, e.g. a futex or epoll wait; D: uninterruptible, usually IO) are recorded, and each
time one comes back (``next_pid``) the switch tells when. At stop, ``perf script --pid`` writes
the targets' switch-outs with their stacks (offcpu.perf.txt.gz), and a second, stack-less
pass pairs each switch-out with the thread's next switch-in: one CSV row per off-CPU interval
(offcpu.csv.gz: ``tid,comm,off,on,state``, CLOCK_MONOTONIC seconds).

The event lives on the CPUs with a kernel filter on ``prev_pid``/``next_pid`` (collectors/
scope.py), not on the targets' threads: a per-thread event is switched with the thread at
every context switch even while the duty cycle has it off, which cost a switch-heavy MariaDB
~8% of its throughput here; off, the per-CPU event costs nothing. The filter holds the threads
the targets have when the capture starts (``untraced_threads`` in the manifest counts those
started later).

Frame pointers are used whatever ``--call-graph`` says: a DWARF stack copy on every context
switch would cost far more than the evidence is worth; the kernel half of the stack (futex,
io_schedule, epoll) is what tells waits apart.

The collector also turns ``kernel.task_delayacct`` on for the capture (the procfs sampler
reads per-thread IO-wait ticks from it) and puts back the value it found.
"""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
from pathlib import Path
from typing import IO

from profiler.collectors import process as _proc
from profiler.collectors.base import CaptureContext
from profiler.collectors.cpu_stacks import SCRIPT_FIELDS, RecordCollector, SampleCounter
from profiler.collectors.duty import DutyCycle
from profiler.collectors.files import read_file, write_file
from profiler.collectors.perf_collector import pid_list
from profiler.collectors.scope import (
    thread_ids,
    tracepoint_filter,
    untraced_threads,
    with_descendants,
)

from profiler.bundle import CollectorRecord, members

OUTPUT = members.OFFCPU_STACKS
INTERVALS = members.OFFCPU_INTERVALS
DELAYACCT = "/proc/sys/kernel/task_delayacct"

# Lines of the second, stack-less pass (``-F pid,tid,time,event,trace``), the running task first:
#   " 9840/9840  10528.328713: sched:sched_switch: prev_comm=fio prev_pid=9840 prev_prio=120
#    prev_state=D ==> next_comm=swapper/0 next_pid=0 next_prio=120"
_LINE = re.compile(r"^\s*(?P<pid>-?\d+)/(?P<tid>-?\d+)\s+(?P<time>\d+\.\d+):\s+sched:sched_switch:\s+"
                   r"prev_comm=(?P<comm>.*?) prev_pid=(?P<prev>-?\d+) prev_prio=\S+ prev_state=(?P<state>\S+) ==> "
                   r"next_comm=.*? next_pid=(?P<next>-?\d+)")
PAIR_FIELDS = "pid,tid,time,event,trace"
WINDOW_SLACK = 0.05  # perf switches its events a little after we ask (s)


class IntervalWriter:
    """Pairs each thread's switch-out (with its prev_state) with its next switch-in."""

    def __init__(self, out: IO[str], windows: list[list[float]] | None = None,
                 pids: set[int] | None = None) -> None:
        """``pids``: the target processes; a switch-out counts when the task leaving the CPU
        belongs to one of them (None: every task)."""
        self.out = out
        self.pids = pids
        self.pending: dict[int, tuple[float, str, str]] = {}  # tid -> (off time, state, comm)
        self.intervals = 0
        self.off_seconds = 0.0
        # Traced windows of a duty-cycled capture: a thread still off the CPU when its window
        # closed gets an interval cut at the window's end (its switch-in was not traced).
        self.windows = windows or []
        self.win = 0
        self.cut = 0
        out.write("tid,comm,off,on,state\n")

    def _write(self, tid: int, comm: str, t_off: float, t_on: float, state: str) -> None:
        self.out.write(f"{tid},{_csv(comm)},{t_off:.6f},{t_on:.6f},{state}\n")
        self.intervals += 1
        self.off_seconds += max(0.0, t_on - t_off)

    def _advance(self, t: float) -> None:
        nxt = self.win + 1
        while nxt < len(self.windows) and t >= self.windows[nxt][0] - WINDOW_SLACK:
            end = self.windows[self.win][1]
            for tid, (t_off, state, comm) in sorted(self.pending.items()):
                self._write(tid, comm, t_off, max(t_off, end), state)
                self.cut += 1
            self.pending = {}
            self.win = nxt
            nxt += 1

    def close(self) -> None:
        """End of a duty-cycled capture: threads still off at the last window's end are cut there."""
        if self.windows:
            self._advance(float("inf"))
            end = self.windows[-1][1]
            for tid, (t_off, state, comm) in sorted(self.pending.items()):
                if end > t_off:
                    self._write(tid, comm, t_off, end, state)
                    self.cut += 1
            self.pending = {}

    def feed(self, line: str) -> None:
        m = _LINE.match(line)
        if m is None:
            return
        t = float(m.group("time"))
        if self.windows:
            self._advance(t)
        nxt = int(m.group("next"))
        got = self.pending.pop(nxt, None)
        if got is not None:  # a target thread comes back
            t_off, state, comm = got
            self._write(nxt, comm, t_off, t, state)
        prev = int(m.group("prev"))
        if prev > 0 and (self.pids is None or int(m.group("pid")) in self.pids):
            self.pending[prev] = (t, m.group("state"), m.group("comm"))


def _csv(text: str) -> str:
    if any(c in text for c in ',"\n'):
        return '"' + text.replace('"', '""') + '"'
    return text


class OffCpu(RecordCollector):
    name = "offcpu-stacks"
    events = ["sched:sched_switch"]
    output = OUTPUT
    fields = SCRIPT_FIELDS + ",trace"
    max_bytes = 256 << 20  # a stack per context switch: ~30 MB/s on a server switching 100K times a second

    def __init__(self, keep_perf_data: bool = False, delayacct_path: str = DELAYACCT,
                 duty: DutyCycle | None = None, full: bool = False) -> None:
        """``full``: a stack on every context switch of the whole capture (``--collector
        offcpu-trace``); otherwise the trace runs ``duty`` (default 1 s of every 10 s)."""
        super().__init__(keep_perf_data)
        self.delayacct_path = delayacct_path
        self.delayacct_was: str | None = None
        self.duty = None if full else (duty or DutyCycle())
        self.traced: list[int] = []  # the thread ids in the filter (argv)
        self.pids: list[int] = []  # the processes whose switch-outs are kept (script_extra)

    def fifo_path(self, ctx: CaptureContext) -> Path:
        return ctx.writer.root / ".offcpu-stacks.ctl"

    def argv(self, ctx: CaptureContext) -> list[str]:
        duty = self.duty.argv(self.fifo_path(ctx)) if self.duty else []
        self.traced = thread_ids(ctx.pids)
        filt = tracepoint_filter(["prev_pid", "next_pid"], self.traced)
        return [ctx.perf, "record", "-a", "-e", "sched:sched_switch", "--filter", filt, "--call-graph", "fp",
                "-k", "CLOCK_MONOTONIC", "--sample-cpu", "-N", "-B", *duty, "-o", str(self.data_path(ctx))]

    def script_extra(self, ctx: CaptureContext) -> list[str]:
        self.pids = with_descendants(ctx.pids)
        return ["--pid", pid_list(self.pids)]

    def start(self, ctx: CaptureContext) -> None:
        super().start(ctx)
        if self.duty is not None:
            self.duty.start()

    def poll(self) -> str | None:
        if self.duty is not None and not self.stopping:
            self.duty.tick()
        return super().poll()

    def request_stop(self) -> None:
        if self.duty is not None:
            self.duty.stop()
        super().request_stop()

    def prepare(self, ctx: CaptureContext) -> None:
        super().prepare(ctx)
        if self.duty is not None:
            self.duty.prepare(self.fifo_path(ctx))
        was = read_file(self.delayacct_path)
        if was is not None and was.strip() == "0":
            try:
                write_file(self.delayacct_path, "1")
                self.delayacct_was = "0"
                self.rec.stats["task_delayacct"] = "turned on for the capture"
            except OSError as exc:
                self.rec.stats["task_delayacct"] = f"off (could not turn it on: {exc.strerror})"
        elif was is not None:
            self.rec.stats["task_delayacct"] = "already on"

    def cleanup(self, ctx: CaptureContext) -> None:
        super().cleanup(ctx)
        if self.duty is not None:
            self.duty.cleanup()
        if self.delayacct_was is not None:
            with contextlib.suppress(OSError):
                write_file(self.delayacct_path, self.delayacct_was)
            self.delayacct_was = None

    def after_script(self, ctx: CaptureContext, rec: CollectorRecord, counter: SampleCounter) -> None:
        super().after_script(ctx, rec, counter)
        windows = None
        if self.duty is not None:
            self.duty.stop(rec.ended)
            windows = self.duty.windows
            rec.stats.update(self.duty.stats(self.started, rec.ended))
            rec.stats["estimates"] = ("offcpu stacks and intervals cover the sampled windows only; "
                                      "whole-capture blocked time is them / duty")
        else:
            rec.stats["sampled"] = False
        data = self.data_path(ctx)
        argv = [ctx.perf, "script", "-i", str(data), "-F", PAIR_FIELDS]
        rec.stats["pair_argv"] = argv
        with ctx.writer.open_member(INTERVALS) as raw:
            rec.files.append(INTERVALS)
            text = io.TextIOWrapper(raw, encoding="utf-8", newline="")
            pairs = IntervalWriter(text, windows, set(self.pids or ctx.pids))
            proc = _proc.spawn(argv, stdout=subprocess.PIPE)
            try:
                assert proc.stdout is not None
                for line in io.TextIOWrapper(proc.stdout, encoding="utf-8", errors="replace"):
                    pairs.feed(line)
            finally:
                _proc.stop_process(proc, 5.0)
            pairs.close()
            text.flush()
            text.detach()
        rec.stats["intervals"] = pairs.intervals
        rec.stats["off_cpu_seconds"] = round(pairs.off_seconds, 6)
        rec.stats["open_at_end"] = len(pairs.pending)
        rec.stats["untraced_threads"] = untraced_threads(ctx.pids, self.traced)
        if windows is not None:
            rec.stats["cut_at_window_end"] = pairs.cut
