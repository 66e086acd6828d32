"""Off-CPU evidence from sched_switch with stacks (capture layer) -> offcpu.perf.txt.gz, offcpu.csv.gz.

``perf record -e sched:sched_switch --call-graph fp --switch-events -k CLOCK_MONOTONIC -p PIDS``:
each time a target thread leaves the CPU, its stack and ``prev_state`` (S: sleeping, e.g. a
futex or epoll wait; D: uninterruptible, usually IO) are recorded; the switch-in records
tell how long it stayed off. At stop, ``perf script --show-switch-events`` is split into the
verbatim sched_switch samples (offcpu.perf.txt.gz) and one CSV row per off-CPU interval
(offcpu.csv.gz: ``tid,comm,off,on,state``, CLOCK_MONOTONIC seconds).

Frame pointers are used whatever ``--call-graph`` says: a DWARF stack copy on every context
switch would cost far more than the evidence is worth; the kernel half of the stack (futex,
io_schedule, epoll) is what tells waits apart.

The collector also turns ``kernel.task_delayacct`` on for the capture (the procfs sampler
reads per-thread IO-wait ticks from it) and puts back the value it found.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import re

from profiler.collectors._proc import pid_list, read_file, write_file
from profiler.collectors.base import CaptureContext
from profiler.collectors.cpu_stacks import SCRIPT_FIELDS, RecordCollector, SampleCounter

from profiler.bundle import CollectorRecord

OUTPUT = "offcpu.perf.txt.gz"
INTERVALS = "offcpu.csv.gz"
DELAYACCT = "/proc/sys/kernel/task_delayacct"

# "comm 15047/15103 [001]   627.111501: PERF_RECORD_SWITCH IN" (OUT, and "OUT preempt" on newer perf)
_SWITCH = re.compile(rb"^\s*(?P<comm>.*?)\s+(?P<pid>-?\d+)/(?P<tid>-?\d+)\s+\[\d+\]\s+(?P<time>\d+\.\d+):\s+PERF_RECORD_SWITCH\s+(?P<dir>IN|OUT)")
# the sched_switch sample header: "... 627.111407:  1 sched:sched_switch: prev_comm=x prev_pid=15047 ... prev_state=S ==> ..."
_SCHED = re.compile(rb"^\s*.*?\s+(?P<pid>-?\d+)/(?P<tid>-?\d+)\s+\[\d+\]\s+(?P<time>\d+\.\d+):.*?sched:sched_switch:.*?prev_state=(?P<state>\S+)")


class SwitchSplitter(SampleCounter):
    """Streams perf script text: keeps sched_switch samples, turns switch records into intervals."""

    def __init__(self, out: io.TextIOBase) -> None:
        super().__init__()
        self.out = out
        self.pending: dict[int, tuple[float, str, str]] = {}  # tid -> (off time, state, comm)
        self.intervals = 0
        self.off_seconds = 0.0
        self.comms: dict[int, str] = {}

    def __call__(self, line: bytes) -> bytes | None:
        if b"PERF_RECORD_SWITCH" in line:
            m = _SWITCH.match(line)
            if m and m.group("dir") == b"IN":
                tid = int(m.group("tid"))
                t_in = float(m.group("time"))
                got = self.pending.pop(tid, None)
                if got is not None:
                    t_off, state, comm = got
                    self.out.write(f"{tid},{_csv(comm)},{t_off:.6f},{t_in:.6f},{state}\n")
                    self.intervals += 1
                    self.off_seconds += max(0.0, t_in - t_off)
            return None
        if b"sched:sched_switch:" in line:
            m = _SCHED.match(line)
            if m:
                self.pending[int(m.group("tid"))] = (
                    float(m.group("time")), m.group("state").decode(errors="replace"), _comm_of(line))
        return super().__call__(line)


def _comm_of(line: bytes) -> str:
    m = re.match(rb"^\s*(.*?)\s+-?\d+/-?\d+\s+\[", line)
    return m.group(1).decode(errors="replace") if m else ""


def _csv(text: str) -> str:
    if any(c in text for c in ',"\n'):
        return '"' + text.replace('"', '""') + '"'
    return text


class OffCpu(RecordCollector):
    name = "offcpu-stacks"
    events = ["sched:sched_switch"]
    output = OUTPUT
    fields = SCRIPT_FIELDS + ",trace"

    def __init__(self, keep_perf_data: bool = False, delayacct_path: str = DELAYACCT) -> None:
        super().__init__(keep_perf_data)
        self.delayacct_path = delayacct_path
        self.delayacct_was: str | None = None
        self._csv: io.TextIOWrapper | None = None
        self._splitter: SwitchSplitter | None = None

    def argv(self, ctx: CaptureContext) -> list[str]:
        return [ctx.perf, "record", "-e", "sched:sched_switch", "--call-graph", "fp", "--switch-events",
                "-k", "CLOCK_MONOTONIC", "--sample-cpu", "-N", "-B", "-p", pid_list(ctx.pids), "-o", str(self.data_path(ctx))]

    def script_extra(self, ctx: CaptureContext) -> list[str]:
        return ["--show-switch-events"]

    def prepare(self, ctx: CaptureContext) -> None:
        super().prepare(ctx)
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
        if self._csv is not None:
            with contextlib.suppress(OSError, ValueError):
                self._csv.close()
                self._raw.close()
            self._csv = None
        if self.delayacct_was is not None:
            with contextlib.suppress(OSError):
                write_file(self.delayacct_path, self.delayacct_was)
            self.delayacct_was = None

    def line_filter(self, ctx: CaptureContext) -> SampleCounter:
        raw = open(ctx.writer.path(f".{INTERVALS}.tmp"), "wb")  # noqa: SIM115 - closed in after_script
        gz = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6)
        self._raw = raw
        self._csv = io.TextIOWrapper(gz, encoding="utf-8", newline="")
        self._csv.write("tid,comm,off,on,state\n")
        self._splitter = SwitchSplitter(self._csv)
        return self._splitter

    def after_script(self, ctx: CaptureContext, rec: CollectorRecord, counter: SampleCounter) -> None:
        super().after_script(ctx, rec, counter)
        if self._csv is not None and self._splitter is not None:
            self._csv.close()
            self._raw.close()
            self._csv = None
            ctx.writer.path(f".{INTERVALS}.tmp").replace(ctx.writer.path(INTERVALS))
            rec.files.append(INTERVALS)
            rec.stats["intervals"] = self._splitter.intervals
            rec.stats["off_cpu_seconds"] = round(self._splitter.off_seconds, 6)
            rec.stats["open_at_end"] = len(self._splitter.pending)
