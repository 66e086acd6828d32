"""The perf-backed collector base (collectors layer): one long-lived perf process per collector.

``PerfCollector`` runs perf on the targets from ``start`` until ``stop`` (SIGINT, so perf
finishes its file), notices when perf dies early or its output outgrows its bound, and leaves
turning perf's output into bundle members to the subclass's ``finish``. ``perf_probe`` holds
the checks every perf collector shares.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import IO

from profiler.collectors import host
from profiler.collectors.base import CaptureContext, CollectorBase, Probe, disk_reason
from profiler.collectors.process import cpu_seconds, forget, spawn, stop_process, tail

from profiler.bundle import FAILED, OK, PARTIAL, CollectorRecord

_LOST = re.compile(r"lost\s+(\d+)\s+chunks|Lost\s+(\d+)\s+events|(\d+)\s+samples?\s+lost", re.I)


def lost_from_stderr(text: str) -> int:
    """Lost-event counts perf prints on stderr ('Processed N events and lost M chunks!')."""
    n = 0
    for m in _LOST.finditer(text):
        n += int(next(g for g in m.groups() if g))
    return n


def perf_probe(ctx: CaptureContext, events: list[str]) -> Probe:
    """The common checks for a perf collector: perf present, root or a permissive paranoid, events exist."""
    from profiler.collectors import host

    if shutil.which(ctx.perf) is None:
        return Probe(False, f"perf not found ({ctx.perf!r} is not on PATH)", "apt-get install linux-perf")
    if not host.is_root():
        paranoid = host.perf_event_paranoid()
        if paranoid is None or paranoid > 1 or any(":" in e for e in events):
            return Probe(False, "permission denied: run as root (perf_event_paranoid is "
                         f"{paranoid}, tracepoints need root)", "run profiler as root (sudo)")
    for ev in events:
        if ":" in ev:
            ok, why, fix = host.tracepoint_status(ev)
            if not ok:
                return Probe(False, why, fix)
    return Probe(True)


class PerfCollector(CollectorBase):
    """A collector that runs one long-lived perf process on the targets until stopped.

    Subclasses give ``name``, ``events`` and ``argv``; they finish their files in ``finish``.
    """

    name = "perf"
    backend = "perf"
    events: list[str] = []
    stop_timeout = 15.0
    max_bytes: int | None = None  # bound on perf.data; None: unbounded (low-rate collectors)
    rec: CollectorRecord

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.rec = CollectorRecord(name=self.name, backend=self.backend)
        self.started: float | None = None
        self.errpath: Path | None = None
        self.died: str | None = None  # why perf ended before it was asked to
        self.stopping = False
        self.capped: str | None = None  # why perf was stopped before the end of the capture
        self.child_cpu = 0.0  # CPU seconds of the helpers finish() ran (perf script)

    # -- protocol
    def probe(self, ctx: CaptureContext) -> Probe:
        return perf_probe(ctx, self.events)

    def argv(self, ctx: CaptureContext) -> list[str]:
        raise NotImplementedError

    def start(self, ctx: CaptureContext) -> None:
        argv = self.argv(ctx)
        self.rec.argv = argv
        self.errpath = ctx.writer.root / f".{self.name}.stderr"
        self.prepare(ctx)
        with open(self.errpath, "wb") as err:
            self.started = time.monotonic()
            self.proc = spawn(argv, stderr=err, stdout=self.stdout_target(ctx))
        self.rec.started = self.started

    def check_started(self, ctx: CaptureContext) -> None:
        """Called a moment after every collector started: perf fails fast on bad events,
        missing pids or permissions; raise with perf's own words if it did."""
        if self.proc is not None and self.proc.poll() not in (None, 0):
            rc = self.proc.returncode
            msg = (tail(self.errpath) if self.errpath else "") or (
                f"killed by signal {signal.Signals(-rc).name}" if rc < 0 else f"exit code {rc}")
            forget(self.proc)
            self.cleanup(ctx)
            raise RuntimeError(f"perf exited at once: {msg}")

    def stdout_target(self, ctx: CaptureContext) -> IO[bytes] | int | None:
        return subprocess.DEVNULL

    def prepare(self, ctx: CaptureContext) -> None:
        """Before perf starts (open output files, change tracing state)."""

    def cleanup(self, ctx: CaptureContext) -> None:
        """Undo ``prepare`` (always called once perf is gone)."""

    def poll(self) -> str | None:
        """None while perf runs; a word on how it ended once it has (self.died says why if badly).

        Also keeps the output bounded: past ``max_bytes`` of perf.data, perf is asked to stop
        (it finishes its file properly) and the collector will say it stopped early.
        """
        if self.proc is None:
            return "not started"
        if (self.max_bytes and not self.stopping and self.capped is None
                and self.proc.poll() is None and self.size() > self.max_bytes):
            elapsed = time.monotonic() - (self.started or time.monotonic())
            self.capped = (f"stopped early after {elapsed:.1f}s: perf.data reached {self.max_bytes >> 20} MiB "
                           "(the bound that keeps long captures on busy targets finite)")
            self.request_stop()
        rc = self.proc.poll()
        if rc is None:
            return None
        if rc != 0 and self.died is None and not self.stopping:
            self.died = self._death_reason(rc)
        return self.died or "ended"

    def _death_reason(self, rc: int) -> str:
        if rc < 0:
            return f"perf was killed by signal {signal.Signals(-rc).name} during the capture"
        msg = tail(self.errpath) if self.errpath else ""
        return f"perf exited with code {rc} during the capture" + (f": {msg}" if msg else "")

    def note_cpu(self) -> None:
        """Record the CPU time perf itself used during the capture (what the collector costs in user space)."""
        if self.proc is not None and "perf_cpu_seconds" not in self.rec.stats:
            used = cpu_seconds(self.proc.pid)
            if used is not None:
                self.rec.stats["perf_cpu_seconds"] = round(used, 2)

    def request_stop(self) -> None:
        """Ask perf to stop (SIGINT) without waiting, so every collector stops at the same moment."""
        self.stopping = True
        self.note_cpu()
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGINT)

    def size(self) -> int:
        return 0

    def stop(self, ctx: CaptureContext) -> CollectorRecord:
        rec = self.rec
        rc: int | None = None
        t0 = time.monotonic()
        try:
            if self.proc is not None:
                self.poll()  # notes a death that happened before the stop was asked for
                self.note_cpu()
                self.stopping = True
                rc = stop_process(self.proc, self.stop_timeout)
                if self.died is None and rc not in (0, -signal.SIGINT, 130, 2):
                    self.died = self._death_reason(rc)
            rec.ended = time.monotonic()
            rec.stats["stop_seconds"] = round(rec.ended - t0, 3)
            stderr = self.errpath.read_text(errors="replace") if self.errpath and self.errpath.exists() else ""
            lost = lost_from_stderr(stderr)
            if lost:
                rec.stats["lost"] = lost
            t1, c1 = time.monotonic(), time.thread_time()
            self.child_cpu = 0.0
            self.finish(ctx, rec, stderr)
            rec.stats["finish_seconds"] = round(time.monotonic() - t1, 3)
            # what turning perf's output into members cost: this thread plus the helpers it ran
            rec.stats["finish_cpu_seconds"] = round(time.thread_time() - c1 + self.child_cpu, 3)
            lost = lost or int(rec.stats.get("lost") or 0)  # finish may count LOST records in perf.data itself
            if rec.status in ("pending", "running"):
                rec.status = OK
            if self.died:
                # perf's own end comes first in the reason: later errors (perf script refusing a
                # perf.data whose header was never finished) follow from it
                rec.reason = self.died + (f"; {rec.reason}" if rec.reason and self.died not in rec.reason else "")
                rec.stats["died"] = True  # a fault, not a loss: the capture's exit code says so (session)
                if rec.status == OK:
                    rec.status = PARTIAL
                if rec.stats.get("samples") == 0 and rec.status == PARTIAL:
                    rec.status = FAILED
            if self.capped:
                rec.stats["stopped_early"] = True
                if rec.status == OK:
                    rec.status, rec.reason = PARTIAL, self.capped
            if lost and rec.status == OK:
                per = rec.stats.get("lost_per_window")
                where = (f" in {sum(1 for n in per if n)} of its {len(per)} traced windows (stats.lost_per_window)"
                         if isinstance(per, list) and per else "")
                rec.status, rec.reason = PARTIAL, f"perf lost {lost} events (buffer overrun){where}"
        except OSError as exc:
            rec.ended = rec.ended or time.monotonic()
            rec.status = PARTIAL if any(ctx.writer.path(f).exists() for f in rec.files) else FAILED
            rec.reason = disk_reason(exc)
        finally:
            self.cleanup(ctx)
            if self.errpath is not None:
                with contextlib.suppress(OSError):
                    self.errpath.unlink()
        return rec

    def finish(self, ctx: CaptureContext, rec: CollectorRecord, stderr: str) -> None:
        """Turn perf's output into bundle files; set rec.files, rec.stats, maybe rec.status."""

    def add_child_cpu(self, seconds: float) -> None:
        """A helper finish() ran has ended, having used this much CPU (finish_cpu_seconds)."""
        self.child_cpu += seconds


def no_side_band(perf: str) -> list[str]:
    """``--no-bpf-event`` where perf has it (5.1 on), for the recorders whose samples need no BPF
    program names (tracepoints without stacks, and off-CPU stacks, which end in the scheduler).

    Without it perf record runs a side-band thread for BPF program loads that polls with a
    one-second timeout, and on SIGINT perf waits for that poll to end: stopping took 0.06-1.0 s
    (0.96-1.02 s in three of three tries under a lock storm) instead of 0.07-0.10 s. The CPU
    stacks keep the BPF events: a target's samples inside a BPF program (a container's seccomp
    filter runs at every system call) are named only with them."""
    m = re.match(r"(\d+)\.(\d+)", host.perf_version(perf) or "")
    return ["--no-bpf-event"] if m and (int(m.group(1)), int(m.group(2))) >= (5, 1) else []


def pid_list(pids: list[int]) -> str:
    return ",".join(str(p) for p in pids)
