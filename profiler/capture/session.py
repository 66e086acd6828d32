"""The capture session (capture layer): targets -> bundle, every collector side by side, one clock.

Resolve what the targets are (threads, cgroup, container), open the bundle, probe every
collector (the ones this host cannot run are recorded as skipped, with the reason), start
the rest together, say how far the capture got through a :class:`~profiler.progress.Progress`,
and stop them all when the duration ends, on Ctrl-C, SIGTERM or SIGHUP (profiler/capture/signals.py:
a flag the loop reads, never an exception in the middle of the stop path), when every target has
exited, or when the wrapped load command exits. Each collector is stopped in its own try/finally;
no helper process outlives the session. The manifest says ``ok`` only when every collector that
ran covered the whole window; a capture ended by a signal is ``partial`` and names it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import psutil
except ImportError:  # a remote host of a cluster capture may have only python3
    psutil = None  # type: ignore[assignment]

from profiler.bundle import (
    FAILED,
    OK,
    PARTIAL,
    RUNNING,
    SKIPPED,
    BundleWriter,
    ClockInfo,
    CollectorRecord,
    EarlyReads,
    LoadInfo,
    Manifest,
)
from profiler.capture import signals
from profiler.capture.loadlog import Load, LoadStart
from profiler.collectors import host
from profiler.collectors import process as _proc
from profiler.collectors.base import (
    CaptureContext,
    CaptureOptions,
    Collector,
    Target,
    disk_reason,
    skipped,
)
from profiler.collectors.tracefs import instance
from profiler.errors import CapabilityError, Interrupted, OutputError
from profiler.progress import Progress

TICK = 0.1  # main loop period (s)
PROGRESS_EVERY = 0.5  # progress refresh (s)
CAPTURING = "capturing"  # the progress tasks of a capture (seconds of the window, bytes written, collectors stopped)
WRITING = "writing the bundle"
STOPPING = "stopping: finishing files"
START_GRACE = 0.3  # perf fails fast on bad events or pids: look again after this (s)


@dataclass
class CaptureResult:
    manifest: Manifest
    output: Path
    interrupted: bool = False
    signal: int | None = None  # the signal that ended the capture (SIGINT, SIGTERM, SIGHUP), if one did
    stop_reason: str = ""
    load_exit_code: int | None = None
    records: list[CollectorRecord] = field(default_factory=list)
    # what made the capture partial that the user must act on (perf missing or no permission, a
    # target gone, a full disk, a collector failed or killed): exit code 6. A capture partial only
    # because collectors lost events to a busy host is kept, reported and exits 0, as perf does.
    fault: str | None = None


def _alive(pid: int) -> bool:
    if psutil is None:
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                stat = fh.read()
            return stat[stat.rindex(b")") + 2:][:1] != b"Z"
        except (OSError, ValueError):
            return False
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def build_manifest(targets: list[Target], options: CaptureOptions, perf: str = "perf",
                   extra_options: dict[str, Any] | None = None) -> Manifest:
    """What the manifest knows before any collector starts: host, targets, clock, options."""
    caps = {
        "hw_counters": host.hw_counters_supported(perf) if host.perf_path() else False,
        "tracefs": host.tracefs_path(),
        "kprobes": host.kprobes_available(),
        "perf_event_paranoid": host.perf_event_paranoid(),
        "root": host.is_root(),
    }
    infos = []
    for t in targets:
        info = host.target_info(t.pid, t.comm, t.exe, list(t.cmdline), t.kind)
        infos.append(info)
    opts = dataclasses.asdict(options)
    opts.update(extra_options or {})
    return Manifest(
        duration=options.duration,
        clock=ClockInfo.now(),
        host=host.host_info(caps),
        targets=infos,
        options=opts,
    )


class Session:
    """One capture. ``run()`` returns when the bundle is finished (even on Ctrl-C)."""

    def __init__(
        self,
        targets: list[Target],
        output: Path,
        options: CaptureOptions,
        collectors: list[Collector],
        *,
        force: bool = False,
        perf: str = "perf",
        load: list[str] | None = None,
        load_log: Path | None = None,
        load_start: LoadStart | None = None,
        progress: Progress | None = None,
        say: Callable[[str], None] | None = None,
        extra_options: dict[str, Any] | None = None,
        on_stopped: Callable[[CollectorRecord, Manifest], None] | None = None,
        early: EarlyReads | None = None,
        tees: dict[str, Callable[[bytes], None]] | None = None,
    ) -> None:
        self.targets = targets
        self.output = Path(output)
        self.options = options
        self.collectors = collectors
        self.force = force
        self.perf = perf
        self.load = Load(load, load_log, load_start)  # the command run beside, or the log followed
        self.progress = progress  # how far the capture got (profiler.progress); None: nothing is shown
        self.say = say  # one line for the user (tracefs mounted, a collector ended early); None: nothing
        self.extra_options = extra_options or {}
        self.early = early  # handed to the collectors (their writers' taps)
        self.tees = tees or {}  # member -> hears what is written to it (the live view)
        self.on_stopped = on_stopped  # hears each collector's record (and the manifest) once its files are final
        self._signal: int | None = None  # a stop signal arrived (profiler/capture/signals.py)
        self._finishing = False  # the stop path runs: a second signal cannot cut it
        self.stop_request: str | None = None  # set from another thread: end the capture, this is why
        self._manifest: Manifest | None = None
        self.started: list[Collector] = []
        self.records: dict[str, CollectorRecord] = {}

    # ------------------------------------------------------------------ signals
    def _on_signal(self, signum: int) -> None:
        """Ctrl-C, SIGTERM, SIGHUP: the loop ends the capture; the stop path is never cut."""
        if self._signal is None and not self._finishing:
            self._signal = signum

    def _interrupted(self) -> str:
        return f"interrupted ({signals.describe(self._signal or 2)})"

    def _note(self, line: str) -> None:
        if self.say is not None:
            with contextlib.suppress(Exception):
                self.say(line)

    def _show(self, task: str, done: float, total: float | None, unit: str) -> None:
        if self.progress is not None:
            with contextlib.suppress(Exception):  # a terminal gone (SIGHUP) must not stop the capture
                self.progress(task, done, total, unit)

    # ------------------------------------------------------------------ run
    def prepare(self) -> Manifest:
        """Learn the host and targets now (probing perf takes a while), so that ``run()`` starts at once:
        a cluster capture prepares every node, then starts them all at one agreed instant."""
        if self._manifest is None:
            _path, note = host.ensure_tracefs()  # as root, mount tracefs when it is not mounted (as perf does)
            if note:
                self._note(note)
            if host.is_root():  # tracefs instances a killed capture left (their process is gone), never others'
                gone = instance.remove_stale_instances(host.tracefs_path())
                if gone:
                    self._note(f"removed {len(gone)} tracefs instance(s) a killed capture left: {', '.join(gone)}")
            self._manifest = build_manifest(self.targets, self.options, self.perf, self.extra_options)
        return self._manifest

    def run(self) -> CaptureResult:
        """Capture, then finish the bundle whatever ended the capture. The stop signals are ours
        from the first line: one arriving before the collectors start leaves them unstarted."""
        with signals.catch(self._on_signal):
            return self._run()

    def _run(self) -> CaptureResult:
        manifest = self.prepare()
        manifest.clock = ClockInfo.now()
        try:
            writer = BundleWriter(self.output, manifest, force=self.force)
        except OSError as exc:
            raise CapabilityError(f"cannot create the bundle at {self.output}: {exc.strerror or exc}") from None
        writer.tees.update(self.tees)
        ctx = CaptureContext(writer=writer, targets=self.targets, options=self.options, perf=self.perf, early=self.early)
        result = CaptureResult(manifest=manifest, output=self.output)
        load_proc: subprocess.Popen[bytes] | None = None
        load_info: LoadInfo | None = None
        error: Exception | None = None
        try:
            try:
                if self._signal is None:
                    self._start_all(ctx)
                if self.load.log is not None and self._signal is None:
                    self.load.follow(writer)
                if self.load.argv and self._signal is None:
                    load_proc, load_info = self.load.start(writer)
                if self._signal is not None:
                    result.stop_reason = self._interrupted()
                elif self.load.argv and load_proc is None:
                    result.stop_reason = "the load command could not start"
                else:
                    result.stop_reason = self._wait(ctx, manifest, load_proc)
            except (Interrupted, KeyboardInterrupt) as exc:  # a library caller's own handler raised
                self._signal = self._signal or getattr(exc, "signum", 2)
                result.stop_reason = self._interrupted()
            except Exception as exc:  # noqa: BLE001 - finish the bundle, then let it propagate
                error = exc
                result.stop_reason = f"internal error: {type(exc).__name__}: {exc}"
        finally:
            # Finalization must finish whatever signal comes next.
            self._finishing = True
            if self._signal is not None:
                result.interrupted, result.signal = True, self._signal
                result.stop_reason = self._interrupted()
            try:
                self._stop_all(ctx)
                if load_proc is not None and load_info is not None:
                    result.load_exit_code = self.load.stop(load_proc, load_info)
                elif load_info is not None:
                    result.load_exit_code = load_info.exit_code
                self.load.stop_follow(writer)
            finally:
                killed = _proc.kill_all_children()
                if killed:
                    result.stop_reason += f"; killed leftover helpers {killed}"
        self._finish(writer, manifest, result)
        if error is not None:
            with contextlib.suppress(OSError, OutputError):
                writer.finish(FAILED if manifest.status == FAILED else PARTIAL,
                              "; ".join(filter(None, [result.stop_reason, manifest.reason])))
            raise error
        result.records = list(manifest.collectors)
        return result

    def _start_all(self, ctx: CaptureContext) -> None:
        writer = ctx.writer
        for c in self.collectors:
            try:
                probe = c.probe(ctx)
                ok, reason = probe.ok, probe.reason
                if not ok and probe.fix:
                    reason = f"{reason}; fix: {probe.fix}"
            except Exception as exc:  # noqa: BLE001 - a broken probe skips one collector, not the capture
                ok, reason = False, f"probe failed: {type(exc).__name__}: {exc}"
            if not ok:
                rec = skipped(c.name, c.backend, reason)
                rec.argv = _safe_argv(c, ctx)
                self._record(writer, rec)
                continue
            rec = CollectorRecord(name=c.name, backend=c.backend, argv=_safe_argv(c, ctx),
                                  status=RUNNING, started=time.monotonic())
            try:
                c.start(ctx)
            except Exception as exc:  # noqa: BLE001 - one collector failing to start must not stop the rest
                msg = str(exc) or type(exc).__name__
                status = SKIPPED if _is_permission(msg) or "not found" in msg else FAILED
                rec.status, rec.reason, rec.ended = status, msg, time.monotonic()
                self._record(writer, rec)
                continue
            self.started.append(c)
            self._record(writer, rec)
        if self.started:
            time.sleep(START_GRACE)
        for c in list(self.started):
            try:
                c.check_started(ctx)
            except Exception as exc:  # noqa: BLE001
                msg = str(exc) or type(exc).__name__
                rec = self.records[c.name]
                rec.status = SKIPPED if _is_permission(msg) else FAILED
                rec.reason, rec.ended = msg, time.monotonic()
                self.started.remove(c)
                self._record(writer, rec)

    def _record(self, writer: BundleWriter, rec: CollectorRecord) -> None:
        self.records[rec.name] = rec
        writer.record(rec)  # a full disk: noted by the writer; the in-memory manifest has it, finish() writes it

    def _wait(self, ctx: CaptureContext, manifest: Manifest,
              load: subprocess.Popen[bytes] | None) -> str:
        start = time.monotonic()
        duration = self.options.duration
        last_progress = 0.0
        ended: set[str] = set()
        if not self.started:
            return "no collector could run"
        while True:
            now = time.monotonic()
            if self._signal is not None:
                return self._interrupted()
            if self.stop_request:
                return self.stop_request
            elapsed = now - start
            if duration is not None and elapsed >= duration:
                return "duration reached"
            for info in manifest.targets:
                if info.exited is None and not _alive(info.pid):
                    info.exited = now
                    with contextlib.suppress(OSError):
                        ctx.writer.save()
            if all(t.exited is not None for t in manifest.targets):
                return "every target exited"
            if ctx.writer.ran_short is not None:
                return "the output disk is full"
            if load is not None and load.poll() is not None:
                if manifest.load is not None:
                    manifest.load.ended = now
                return "the load command exited"
            states = {c.name: _poll(c) for c in self.started}
            if all(s is not None for s in states.values()):
                return "every collector ended"
            for name, state in states.items():
                if state is not None and name not in ended:
                    ended.add(name)
                    self._note(f"{name} stopped before the end of the capture ({state})")
            if now - last_progress >= PROGRESS_EVERY:
                self._show(CAPTURING, elapsed, duration, "s")
                self._show(WRITING, sum(_size(c) for c in self.started), None, "B")
                last_progress = now
            time.sleep(TICK)

    # ------------------------------------------------------------------ stop
    def _stop_all(self, ctx: CaptureContext) -> None:
        for c in self.started:  # everyone stops at the same moment...
            with contextlib.suppress(Exception):
                c.request_stop()
        # ...then each finishes its files, whatever the others do, side by side: symbolizing
        # (perf script), decoding perf.data (numpy) and compressing run outside the interpreter
        # lock, so one collector's finish overlaps another's on the CPUs
        recs: dict[int, CollectorRecord] = {}

        def stop(i: int, c: Collector) -> None:
            try:
                rec = recs[i] = c.stop(ctx)
                if self.on_stopped is not None and rec.status not in (FAILED, SKIPPED) and self._manifest is not None:
                    old = self.records.get(c.name)
                    rec.started = rec.started or (old.started if old is not None else None)  # as recorded below
                    with contextlib.suppress(Exception):  # a head start for the analysis, never a fault
                        self.on_stopped(rec, self._manifest)
            except Exception as exc:  # noqa: BLE001 - one broken stop must not lose the others
                rec = c.rec if c.rec is not None else (
                    self.records.get(c.name) or CollectorRecord(name=c.name, backend=c.backend))
                rec.status = PARTIAL  # it ran through the window; what it wrote before the error is kept
                rec.reason = disk_reason(exc) if isinstance(exc, OSError) else f"stop failed: {type(exc).__name__}: {exc}"
                rec.ended = time.monotonic()
                recs[i] = rec

        workers = [threading.Thread(target=stop, args=(i, c), name=f"profiler-stop-{c.name}", daemon=True)
                   for i, c in enumerate(self.started)]
        for w in workers:
            w.start()
        for n, w in enumerate(workers):
            while w.is_alive():
                self._show(STOPPING, n, len(workers), "collectors")
                w.join(PROGRESS_EVERY)
        if workers:
            self._show(STOPPING, len(workers), len(workers), "collectors")
        for i, c in enumerate(self.started):
            rec = recs[i]
            old = self.records.get(c.name)
            if old is not None:
                rec.argv = rec.argv or old.argv
                rec.started = rec.started or old.started
            if rec.status in (RUNNING, "pending"):
                rec.status = OK
            self._record(ctx.writer, rec)

    def _finish(self, writer: BundleWriter, manifest: Manifest, result: CaptureResult) -> None:
        recs = manifest.collectors
        reasons: list[str] = []
        status = OK
        if result.interrupted:
            status = PARTIAL
            reasons.append(result.stop_reason.split("; ")[0])
        ran = [r for r in recs if r.status in (OK, PARTIAL)]
        if manifest.load is not None and manifest.load.exit_code == 127 and result.stop_reason.startswith("the load command could"):
            status = FAILED
            reasons.append(f"the load command {manifest.load.argv[0]!r} could not start")
        if not ran:
            status = FAILED
            why = "; ".join(f"{r.name}: {r.reason}" for r in recs if r.reason) or "no collector"
            reasons.append(f"no collector captured anything ({why})")
        faults: list[str] = []
        for r in recs:
            if r.status == SKIPPED and _setup_problem(r.reason or ""):
                # perf missing or no permission: fixable by the user, so the evidence is incomplete
                if status == OK:
                    status = PARTIAL
                reasons.append(f"{r.name} skipped: {r.reason}")
                faults.append(reasons[-1])
            if r.status in (PARTIAL, FAILED):
                if status == OK:
                    status = PARTIAL
                reasons.append(f"{r.name} {r.status}: {r.reason}")
                if r.status == FAILED or r.stats.get("died") or _disk(r.reason or ""):
                    faults.append(reasons[-1])
        early = [t for t in manifest.targets if t.exited is not None]
        if early and manifest.load is None and (
            manifest.duration is None or result.stop_reason == "every target exited"
        ):
            if status == OK:
                status = PARTIAL
            start = manifest.clock.monotonic_start
            reasons.append("target exited: " + ", ".join(f"{t.comm} (pid {t.pid}) after {t.exited - start:.1f}s"
                                                        for t in early if t.exited is not None))
            faults.append(reasons[-1])
        if writer.ran_short is not None:
            if status == OK:
                status = PARTIAL
            reasons.append(f"the output disk filled up ({writer.ran_short})")
            faults.append(reasons[-1])
        if status == FAILED and reasons:
            faults.append(reasons[0])
        result.fault = faults[0] if faults else None
        manifest.options["stop_reason"] = result.stop_reason
        writer.finish(status, "; ".join(reasons) or None)  # a full disk: the held-back space is given up for it


def _poll(c: Collector) -> str | None:
    try:
        return c.poll()
    except Exception:  # noqa: BLE001 - a broken poll must not end the capture
        return None


def _size(c: Collector) -> int:
    try:
        return int(c.size())
    except Exception:  # noqa: BLE001 - the progress line shows no size then
        return 0


def _safe_argv(c: Collector, ctx: CaptureContext) -> list[str]:
    try:
        return list(c.argv(ctx))
    except Exception:  # noqa: BLE001
        return []


def _disk(reason: str) -> bool:
    """A collector's reason that says the output disk filled up (disk_reason, or an OutputError line)."""
    return "disk full" in reason or "no space left" in reason


def _setup_problem(reason: str) -> bool:
    """Skips the user can fix (perf missing, permission) make the bundle partial; host limits do not."""
    return reason.startswith("perf not found") or _is_permission(reason)


def _is_permission(msg: str) -> bool:
    return "ermission" in msg or "not permitted" in msg or "paranoid" in msg
