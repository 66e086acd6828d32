"""Interval counters of the targets (collectors layer) -> stat.csv, in ``perf stat -I -x,`` format.

Software counters (task-clock, context-switches, cpu-migrations, page-faults, major-faults)
are read every ``--interval`` from the kernel's own per-thread accounting, which it keeps
whether anyone asks or not: ``/proc/PID/task/TID/sched`` (CPU time in ns, migrations, voluntary
and involuntary switches) and ``/proc/PID/stat`` (faults of the whole process, exited threads
included). ``perf stat -p`` counts the same things with per-thread perf events, and a per-thread
event is switched in and out with the thread at every context switch: measured here, on
MariaDB under sysbench oltp_point_select (a context switch every few µs of CPU), that cost
~10-15% of throughput with the other collectors running, and a futex ping-pong 44% more CPU
per round trip (docs/collectors.md, "Overhead"). The rows keep perf stat's CSV layout so the
readers and older bundles need nothing new.

Hardware counters (cycles, instructions, cache-misses) exist only in perf: where the host has
them, ``perf stat -I <ms> -x, -e cycles,instructions,cache-misses -p PIDS`` runs beside the
sampler and its rows are appended; where it has not (VMs), they are written as
``<not supported>`` rows, listed in ``stats.not_supported``, and are not an error.
Times are seconds since the collector started (add its ``started``), as perf's are.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from profiler.collectors.base import CaptureContext, CollectorBase, Probe
from profiler.collectors.files import file_size
from profiler.collectors.perf.base import PerfCollector, perf_probe, pid_list

from profiler.bundle import FAILED, OK, PARTIAL, SKIPPED, CollectorRecord, members

SOFTWARE_EVENTS = ["task-clock", "context-switches", "cpu-migrations", "page-faults", "major-faults"]
HARDWARE_EVENTS = ["cycles", "instructions", "cache-misses"]
OUTPUT = members.STAT


def interval_ms(seconds: float) -> int:
    """perf stat -I takes whole milliseconds, 10 at least."""
    return max(10, int(round(seconds * 1000)))


def read_thread_sched(path: str) -> tuple[float, int, int] | None:
    """``/proc/PID/task/TID/sched`` -> (CPU ms, migrations, context switches), or None if gone."""
    try:
        with open(path, "rb") as fh:
            text = fh.read(4096)
    except OSError:
        return None
    ms, mig, sw = 0.0, 0, 0
    for line in text.split(b"\n")[2:12]:
        key, _, val = line.partition(b":")
        key = key.strip()
        if key == b"se.sum_exec_runtime":
            ms = float(val)
        elif key == b"se.nr_migrations":
            mig = int(val)
        elif key == b"nr_switches":
            sw = int(val)
    return ms, mig, sw


def read_process_faults(pid: int) -> tuple[int, int] | None:
    """``/proc/PID/stat`` -> (minor + major faults, major faults) of the whole process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
        f = stat[stat.rindex(b")") + 2:].split()
        minflt, majflt = int(f[7]), int(f[9])  # fields 10 and 12 of proc(5)
        return minflt + majflt, majflt
    except (OSError, ValueError, IndexError):
        return None


class KernelCounters:
    """Samples the targets' per-thread accounting; one row per event per interval."""

    def __init__(self, pids: list[int], out: Path, interval: float) -> None:
        self.pids = pids
        self.out = out
        self.interval = max(0.01, interval)
        self.stop_event = threading.Event()
        self.rows = 0
        self.errors: list[str] = []
        self.threads: dict[tuple[int, int], tuple[float, int, int]] = {}
        self.faults: dict[int, tuple[int, int]] = {}
        self.alive: dict[int, bool] = dict.fromkeys(pids, True)

    def _read(self) -> tuple[dict[tuple[int, int], tuple[float, int, int]], dict[int, tuple[int, int]]]:
        threads: dict[tuple[int, int], tuple[float, int, int]] = {}
        faults: dict[int, tuple[int, int]] = {}
        for pid in self.pids:
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                self.alive[pid] = False
                continue
            for tid in tids:
                got = read_thread_sched(f"/proc/{pid}/task/{tid}/sched")
                if got is not None:
                    threads[(pid, int(tid))] = got
            fl = read_process_faults(pid)
            if fl is not None:
                faults[pid] = fl
        return threads, faults

    def _deltas(self, threads: dict[tuple[int, int], tuple[float, int, int]],
                faults: dict[int, tuple[int, int]]) -> list[float]:
        """Counts since the last sample: threads seen both times, plus threads new since (all of
        theirs); a thread that exited in between takes its last part with it."""
        ms = mig = sw = 0.0
        for key, (m, g, s) in threads.items():
            m0, g0, s0 = self.threads.get(key, (0.0, 0, 0))
            ms, mig, sw = ms + max(0.0, m - m0), mig + max(0, g - g0), sw + max(0, s - s0)
        pf = mj = 0
        for pid, (a, b) in faults.items():
            a0, b0 = self.faults.get(pid, (a, b))
            pf, mj = pf + max(0, a - a0), mj + max(0, b - b0)
        return [ms, sw, mig, pf, mj]

    def run(self, started: float) -> None:
        """The sampling thread's body: a write error (a full disk) ends the counting and is kept
        in ``errors`` for stop() to report, instead of escaping the thread."""
        try:
            self._run(started)
        except OSError as exc:
            self.errors.append(f"writing the counters: {exc.strerror or exc}")

    def _run(self, started: float) -> None:
        self.threads, self.faults = self._read()
        last = started
        with open(self.out, "w", encoding="utf-8") as fh:
            fh.write(f"# software counters from /proc/PID/task/TID/sched and /proc/PID/stat every {self.interval:g}s\n\n")
            while not self.stop_event.wait(max(0.0, last + self.interval - time.monotonic())):
                now = time.monotonic()
                threads, faults = self._read()
                values = self._deltas(threads, faults)
                self.threads, self.faults = threads, faults
                span_ns = int((now - last) * 1e9)
                t = now - started
                for ev, v in zip(SOFTWARE_EVENTS, values, strict=True):
                    unit = "msec" if ev == "task-clock" else ""
                    val = f"{v:.2f}" if ev == "task-clock" else str(int(v))
                    fh.write(f"{t:16.9f},{val},{unit},{ev},{span_ns},100.00,,\n")
                    self.rows += 1
                fh.flush()
                last = now
                if not any(self.alive.values()):
                    return


class HardwareStat(PerfCollector):
    """perf stat of the hardware counters on the targets, where the host has them."""

    name = "perf-stat"
    events = HARDWARE_EVENTS

    def argv(self, ctx: CaptureContext) -> list[str]:
        return [ctx.perf, "stat", "-I", str(interval_ms(ctx.options.interval)), "-x", ",",
                "-e", ",".join(HARDWARE_EVENTS), "-p", pid_list(ctx.pids),
                "-o", str(ctx.writer.path(f".{OUTPUT}.hw.tmp"))]


class PerfStatCollector(CollectorBase):
    name = "perf-stat"
    backend = "perf"
    events = SOFTWARE_EVENTS

    def __init__(self, hardware: bool | None = None) -> None:
        """``hardware``: whether to run perf stat for the hardware counters (None: where the host has them)."""
        self.hardware = hardware
        self.hw: HardwareStat | None = None
        self.counters: KernelCounters | None = None
        self._thread: threading.Thread | None = None
        self._started: float | None = None
        self.hw_error: str | None = None

    def probe(self, ctx: CaptureContext) -> Probe:
        for pid in ctx.pids:
            if not os.access(f"/proc/{pid}/task", os.R_OK):
                return Probe(False, f"cannot read /proc/{pid}/task", "run as root or as the target's user")
        return Probe(True)

    def _want_hw(self, ctx: CaptureContext) -> bool:
        if self.hardware is None:
            from profiler.collectors import host

            self.hardware = perf_probe(ctx, HARDWARE_EVENTS).ok and host.hw_counters_supported(ctx.perf)
        return self.hardware

    def argv(self, ctx: CaptureContext) -> list[str]:
        return HardwareStat().argv(ctx) if self._want_hw(ctx) else []

    def start(self, ctx: CaptureContext) -> None:
        self._started = time.monotonic()
        self.counters = KernelCounters(ctx.pids, ctx.writer.path(f".{OUTPUT}.tmp"), ctx.options.interval)
        self._thread = threading.Thread(target=self.counters.run, args=(self._started,), name="profiler-counters",
                                        daemon=True)
        self._thread.start()
        if self._want_hw(ctx):
            self.hw = HardwareStat()
            self.hw.start(ctx)

    def check_started(self, ctx: CaptureContext) -> None:
        if self.hw is not None:
            try:
                self.hw.check_started(ctx)
            except RuntimeError as exc:  # the software counters go on without it
                self.hw_error = str(exc)
                self.hw = None

    def poll(self) -> str | None:
        return self.hw.poll() if self.hw is not None else None

    def request_stop(self) -> None:
        if self.counters is not None:
            self.counters.stop_event.set()
        if self.hw is not None:
            self.hw.request_stop()

    def size(self) -> int:
        return file_size(self.counters.out) if self.counters is not None else 0

    def stop(self, ctx: CaptureContext) -> CollectorRecord:
        rec = CollectorRecord(name=self.name, backend=self.backend, argv=self.argv(ctx) if self.hw else [],
                              started=self._started)
        c = self.counters
        if c is None or self._thread is None:
            rec.status, rec.reason = SKIPPED, "never started"
            return rec
        c.stop_event.set()
        self._thread.join(timeout=10)
        hw_rows: list[str] = []
        hw_rec = None
        if self.hw is not None:
            hw_rec = self.hw.stop(ctx)
            tmp = ctx.writer.path(f".{OUTPUT}.hw.tmp")
            if tmp.exists():
                hw_rows = [ln for ln in tmp.read_text(errors="replace").splitlines(keepends=True)
                           if ln.strip() and not ln.startswith("#")]
                tmp.unlink()
        rec.ended = time.monotonic()
        out = ctx.writer.path(OUTPUT)
        try:
            with open(c.out, "a", encoding="utf-8") as fh:
                fh.writelines(hw_rows)
                if not self.hardware:  # this host cannot count them: say so the way perf does
                    for ev in HARDWARE_EVENTS:
                        fh.write(f"{rec.ended - (self._started or rec.ended):16.9f},<not supported>,,{ev},0,100.00,,\n")
            c.out.replace(out)
        except OSError as exc:
            rec.status, rec.reason = FAILED, f"writing {OUTPUT}: {exc.strerror}"
            return rec
        rec.files = [OUTPUT]
        rows, unsupported = summarize(out.read_text(encoding="utf-8", errors="replace"))
        rec.stats = {"rows": rows, "not_supported": sorted(unsupported),
                     "source": "software counters: /proc/PID/task/TID/sched and /proc/PID/stat; hardware: "
                               + ("perf stat -p" if self.hardware else "not counted on this host")}
        if self.hw_error:
            rec.stats["hardware_error"] = self.hw_error
        rec.status = OK
        if c.rows == 0:
            rec.status, rec.reason = PARTIAL, "no interval was counted (capture shorter than one interval?)"
        elif hw_rec is not None and hw_rec.status not in (OK,):
            rec.status, rec.reason = PARTIAL, f"hardware counters: {hw_rec.reason}"
        elif c.errors:
            rec.status, rec.reason = PARTIAL, f"{c.errors[0]}; counted up to then"
        elif not any(c.alive.values()):
            rec.status, rec.reason = PARTIAL, "every target exited during the capture"
        return rec


def summarize(text: str) -> tuple[int, set[str]]:
    """Count the data rows of perf stat -x, output and the events it could not count."""
    rows = 0
    unsupported: set[str] = set()
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split(",")
        if len(fields) < 4:
            continue
        rows += 1
        if fields[1] == "<not supported>":
            unsupported.add(fields[3])
    return rows, unsupported
