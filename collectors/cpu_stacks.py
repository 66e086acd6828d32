"""cpu-clock stack samples on the targets (collectors layer) -> cpu.perf.txt.gz.

``perf record -a -e cpu-clock:I -F 99 --call-graph fp -k CLOCK_MONOTONIC`` during the capture,
then ``perf script --pid PIDS`` (no inline resolution: fast) at the end, so the bundle holds
symbolized text of the targets' samples that post-mortem on another host can read. perf.data
itself stays out of the bundle unless ``keep_perf_data``.

The sampler runs on the CPUs, not on the targets' threads (collectors/scope.py): a per-thread
``cpu-clock`` event re-arms a timer at every context switch of the target, which cost a
switch-heavy MariaDB ~11% of its throughput here; per CPU it costs the target nothing beyond
the samples. ``:I`` leaves idle CPUs alone. Without the right to open system-wide events
(not root and perf_event_paranoid > 0) it samples the targets' threads (``-p``) instead.

Containers: perf records each target's mount namespace and reads its binaries through it
(``/proc/PID/root``) while the target is alive, so symbolizing happens before the targets
are let go; frames of a target that exited before then may come out ``[unknown]``.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from profiler.collectors import gosym
from profiler.collectors.base import CaptureContext, Probe
from profiler.collectors.files import file_size
from profiler.collectors.perf_collector import PerfCollector, pid_list
from profiler.collectors.process import run_to_file, tail

from profiler.bundle import FAILED, PARTIAL, CollectorRecord, members

OUTPUT = members.CPU_STACKS
CALL_GRAPHS = ("fp", "dwarf", "lbr")
SCRIPT_FIELDS = "comm,pid,tid,cpu,time,period,event,ip,sym,symoff,dso"


def call_graph_arg(mode: str) -> str:
    if mode not in CALL_GRAPHS:
        raise ValueError(f"call graph {mode!r}: use one of {', '.join(CALL_GRAPHS)}")
    return mode


def script_argv(perf: str, data: Path, fields: str, inline: bool, extra: list[str] | None = None) -> list[str]:
    """perf script with fast options: explicit fields, no inline resolution unless asked."""
    argv = [perf, "script", "-i", str(data), "-F", fields, "--inline" if inline else "--no-inline"]
    return argv + (extra or [])


class SampleCounter:
    """Counts samples in perf script text as it streams by: one blank line ends each sample."""

    def __init__(self) -> None:
        self.samples = 0
        self._last = b""

    def __call__(self, chunk: bytes) -> None:
        if not chunk:
            return
        self.samples += chunk.count(b"\n\n") + (1 if self._last == b"\n" and chunk[:1] == b"\n" else 0)
        self._last = chunk[-1:]


class RecordCollector(PerfCollector):
    """perf record on the targets, then perf script into a gzip member at stop."""

    output = ""
    fields = SCRIPT_FIELDS
    script_timeout = 600.0

    def __init__(self, keep_perf_data: bool = False) -> None:
        super().__init__()
        self.keep_perf_data = keep_perf_data
        self._data: Path | None = None  # perf.data, known once perf is about to start

    def data_path(self, ctx: CaptureContext) -> Path:
        return ctx.writer.path(f".{self.name}.perf.data")

    def script_extra(self, ctx: CaptureContext) -> list[str]:
        return []

    def counter(self, ctx: CaptureContext) -> SampleCounter:
        return SampleCounter()

    def size(self) -> int:
        return file_size(self._data) if self._data is not None else 0

    def prepare(self, ctx: CaptureContext) -> None:
        self._data = self.data_path(ctx)
        # stripped Go executables: read their function tables while the targets are alive
        self._gosyms = gosym.symbolizers(ctx.pids)

    def finish(self, ctx: CaptureContext, rec: CollectorRecord, stderr: str) -> None:
        data = self.data_path(ctx)
        if not data.exists() or data.stat().st_size == 0:
            rec.status, rec.reason = FAILED, "perf record wrote no data" + (f": {self.died}" if self.died else "")
            return
        counter = self.counter(ctx)
        argv = script_argv(ctx.perf, data, self.fields, ctx.options.inline, self.script_extra(ctx))
        rec.stats["script_argv"] = argv
        errpath = ctx.writer.root / f".{self.name}.script.stderr"
        try:
            with ctx.writer.open_member(self.output) as out:
                rec.files = [self.output]
                syms = getattr(self, "_gosyms", None)
                sink = gosym.Rewriter(out, syms, "symoff" in self.fields) if syms else out
                try:
                    rc = run_to_file(argv, sink, timeout=self.script_timeout, stderr_path=errpath, on_chunk=counter)
                finally:
                    if isinstance(sink, gosym.Rewriter):
                        sink.flush()
                        rec.stats.update(sink.stats())
            if rc != 0:
                rec.status, rec.reason = PARTIAL, f"perf script exited with code {rc}: {tail(errpath)}"
        except TimeoutError as exc:
            rec.status, rec.reason = PARTIAL, f"symbolizing was cut short: {exc}"
        finally:
            with contextlib.suppress(OSError):
                errpath.unlink()
        self.after_script(ctx, rec, counter)
        if self.keep_perf_data:
            kept = members.perf_data(self.name)
            data.replace(ctx.writer.path(kept))
            rec.files.append(kept)

    def after_script(self, ctx: CaptureContext, rec: CollectorRecord, counter: SampleCounter) -> None:
        # No samples is evidence too (an idle target), not a failure of the collector.
        rec.stats["samples"] = counter.samples

    def cleanup(self, ctx: CaptureContext) -> None:
        with contextlib.suppress(OSError):
            self.data_path(ctx).unlink()


class CpuStacks(RecordCollector):
    name = "cpu-stacks"
    events = ["cpu-clock"]
    output = OUTPUT

    def probe(self, ctx: CaptureContext) -> Probe:
        p = super().probe(ctx)
        if p.ok and ctx.options.call_graph == "lbr":
            from profiler.collectors import host

            if not host.hw_counters_supported(ctx.perf):
                return Probe(False, "--call-graph lbr needs hardware LBR, which this host (a VM?) does not expose",
                             "use --call-graph dwarf")
        return p

    def system_wide(self) -> bool:
        from profiler.collectors.scope import system_wide_allowed

        return system_wide_allowed()

    def argv(self, ctx: CaptureContext) -> list[str]:
        scope = ["-a", "-e", "cpu-clock:I"] if self.system_wide() else ["-p", pid_list(ctx.pids), "-e", "cpu-clock"]
        self.rec.stats["scope"] = "system-wide, samples of the targets kept" if scope[0] == "-a" else "targets' threads"
        return [ctx.perf, "record", *scope, "-F", str(ctx.options.frequency),
                "--call-graph", call_graph_arg(ctx.options.call_graph), "-k", "CLOCK_MONOTONIC",
                "--sample-cpu", "-N", "-B", "-o", str(self.data_path(ctx))]

    def script_extra(self, ctx: CaptureContext) -> list[str]:
        from profiler.collectors.scope import with_descendants

        return ["--pid", pid_list(with_descendants(ctx.pids))]
