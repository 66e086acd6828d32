"""Off-CPU evidence from sched_switch with stacks (collectors layer) -> offcpu.perf.txt.gz, offcpu.csv.gz.

``perf record -a -e sched:sched_switch --filter '<targets' thread ids>' --call-graph fp -k
CLOCK_MONOTONIC``: each time a target thread leaves the CPU, its stack and ``prev_state`` (S:
sleeping, e.g. a futex or epoll wait; D: uninterruptible, usually IO) are recorded, and each
time one comes back (``next_pid``) the switch tells when. At stop, ``perf script --pid`` writes
the targets' switch-outs with their stacks (offcpu.perf.txt.gz), and a second, stack-less
pass pairs each switch-out with the thread's next switch-in: one CSV row per off-CPU interval
(offcpu.csv.gz: ``tid,comm,off,on,state``, CLOCK_MONOTONIC seconds). The pairing is
profiler/formats/offcpu_intervals.py: perf.data read directly, perf script's lines where it cannot be.

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
import subprocess
from pathlib import Path

try:
    import numpy as np
except ImportError:  # the cluster agent runs collectors under a bare python3: perf script text then
    np = None  # type: ignore[assignment]

from profiler.collectors import host
from profiler.collectors import process as _proc
from profiler.collectors.base import CaptureContext
from profiler.collectors.files import read_file, write_file
from profiler.collectors.perf.base import no_side_band, pid_list
from profiler.collectors.perf.cpu_stacks import SCRIPT_FIELDS, RecordCollector, SampleCounter
from profiler.collectors.perf.duty import DutyCycle, note_lost
from profiler.collectors.perf.scope import (
    comm_filter,
    thread_comms,
    thread_ids,
    tracepoint_filter,
    untraced_threads,
)

from profiler.bundle import CollectorRecord, members
from profiler.formats.offcpu_intervals import (
    PAIR_FIELDS,
    SwitchPairs,
    interval_writer,
    read_switches,
)
from profiler.formats.perfdata import PerfDataUnsupported

OUTPUT = members.OFFCPU_STACKS
INTERVALS = members.OFFCPU_INTERVALS
DELAYACCT = "/proc/sys/kernel/task_delayacct"

class OffCpuCollector(RecordCollector):
    name = "offcpu-stacks"
    events = ["sched:sched_switch"]
    output = OUTPUT
    fields = SCRIPT_FIELDS + ",trace"
    # stacks symbolized at most (a uniform sample past it): perf script and folding cost ~25 us
    # a switch (~1 us a frame), and a lock storm switches hundreds of thousands of times a second
    max_symbolized = 20_000
    max_frames = 500_000
    max_bytes = 256 << 20  # a stack per context switch: ~30 MB/s on a server switching 100K times a second
    # 2 MiB per CPU: a stack per switch fills perf's default buffer when the host is busy and perf
    # itself waits for a CPU (the demo lost 361 switches on this 2-vCPU host at load 6)
    mmap_pages = "512"

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
        self._windows: list[list[float]] | None = None
        self._paired: tuple[int, float, int, int] | None = None  # intervals, off seconds, open, cut
        self.nested = False  # in a nested PID namespace (collectors/host.py): the events hold the host's ids

    def fifo_path(self, ctx: CaptureContext) -> Path:
        return ctx.writer.root / ".offcpu-stacks.ctl"

    def argv(self, ctx: CaptureContext) -> list[str]:
        duty = self.duty.argv(self.fifo_path(ctx)) if self.duty else []
        self.traced = thread_ids(ctx.pids)
        self.nested = host.nested_pid_namespace()
        if self.nested:
            # the events' prev_pid/next_pid are the host's ids: filter by the threads' names, and
            # map the ids back through perf's own (translated) sample ids when decoding
            named = comm_filter(["prev_comm", "next_comm"], thread_comms(ctx.pids))
            filt_args = ["--filter", named] if named else []
            self.rec.stats["pid_namespace"] = ("nested: switches filtered by the targets' thread names, their ids "
                                               "mapped to this namespace's" if named else
                                               "nested: every switch traced, the targets' kept by their ids")
        else:
            filt_args = ["--filter", tracepoint_filter(["prev_pid", "next_pid"], self.traced)]
        return [ctx.perf, "record", "-a", "-e", "sched:sched_switch", *filt_args, "--call-graph", "fp",
                "-k", "CLOCK_MONOTONIC", "-m", self.mmap_pages, "--sample-cpu", "-N", "-B", *no_side_band(ctx.perf), *duty,
                "-o", str(self.data_path(ctx))]

    def script_extra(self, ctx: CaptureContext) -> list[str]:
        self.pids = self.script_pids(ctx)
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

    def finish(self, ctx: CaptureContext, rec: CollectorRecord, stderr: str) -> None:
        self._windows = None
        if self.duty is not None:
            self.duty.stop(rec.ended)
            self._windows = self.duty.windows
            rec.stats.update(self.duty.stats(self.started, rec.ended))
            rec.stats["estimates"] = ("offcpu stacks and intervals cover the sampled windows only; "
                                      "whole-capture blocked time is them / duty")
        else:
            rec.stats["sampled"] = False
        self._paired = None
        super().finish(ctx, rec, stderr)

    def targets_in_data(self, ctx: CaptureContext, rec: CollectorRecord) -> tuple[int, int] | None:
        """The intervals first, straight from perf.data (every switch), which also counts the
        targets' switch-outs and their frames: their stacks are symbolized up to the bounds."""
        data = self.data_path(ctx)
        self.pids = self.script_pids(ctx)
        buf = io.StringIO()
        try:
            pairs: SwitchPairs | None = None

            def consume(batch: np.ndarray, states: list[str], comms: list[str]) -> None:
                nonlocal pairs
                if pairs is None:
                    pairs = SwitchPairs(buf, self._windows, set(self.pids), states, comms)
                pairs.feed(batch)

            lost_at: list[tuple[int, int]] = []
            lost = read_switches(data, consume, to_own_ids=self.nested, lost_at=lost_at)
            note_lost(rec, lost_at, self.duty)
            if pairs is None:
                pairs = SwitchPairs(buf, self._windows, set(self.pids), [], [])
            still = pairs.close()
        except PerfDataUnsupported as exc:
            rec.stats["decoded"] = f"perf script ({exc})"
            return None
        rec.stats["decoded"] = "perf.data read directly"
        if lost and "lost" not in rec.stats:
            rec.stats["lost"] = lost
        with ctx.writer.open_member(INTERVALS) as raw:
            raw.write(buf.getvalue().encode("utf-8"))
        rec.files.append(INTERVALS)
        self._paired = (pairs.intervals, pairs.off_seconds, still, pairs.cut)
        return pairs.switch_outs, pairs.switch_out_frames

    def after_script(self, ctx: CaptureContext, rec: CollectorRecord, counter: SampleCounter) -> None:
        super().after_script(ctx, rec, counter)
        windows = self._windows
        if self._paired is not None:
            intervals, off_seconds, still, cut = self._paired
        else:  # perf.data could not be read directly: a second, stack-less perf script pass
            intervals, off_seconds, still, cut = self._pair_text(ctx, rec, windows)
        rec.stats["intervals"] = intervals
        rec.stats["off_cpu_seconds"] = round(off_seconds, 6)
        rec.stats["open_at_end"] = still
        rec.stats["untraced_threads"] = untraced_threads(ctx.pids, self.traced)
        if windows is not None:
            rec.stats["cut_at_window_end"] = cut

    def _pair_text(self, ctx: CaptureContext, rec: CollectorRecord,
                   windows: list[list[float]] | None) -> tuple[int, float, int, int]:
        data = self.data_path(ctx)
        argv = [ctx.perf, "script", "-i", str(data), "-F", PAIR_FIELDS]
        rec.stats["pair_argv"] = argv
        with ctx.writer.open_member(INTERVALS) as raw:
            rec.files.append(INTERVALS)
            text = io.TextIOWrapper(raw, encoding="utf-8", newline="")
            pairs = interval_writer(text, windows, set(self.pids or ctx.pids), self.nested)
            proc = _proc.spawn(argv, stdout=subprocess.PIPE)
            try:
                assert proc.stdout is not None
                for line in io.TextIOWrapper(proc.stdout, encoding="utf-8", errors="replace"):
                    pairs.feed(line)
                _proc.reap(proc, self.add_child_cpu)
            finally:
                _proc.stop_process(proc, 5.0)
            pairs.close()
            text.flush()
            text.detach()
        return pairs.intervals, pairs.off_seconds, len(pairs.pending), pairs.cut
