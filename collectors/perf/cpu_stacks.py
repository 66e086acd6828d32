"""cpu-clock stack samples on the targets (collectors layer) -> cpu.perf.txt.gz.

``perf record -a -e cpu-clock:I -F 99 --call-graph fp -k CLOCK_MONOTONIC`` during the capture,
then ``perf script --pid PIDS`` (no inline resolution: fast) at the end, so the bundle holds
symbolized text of the targets' samples that post-mortem on another host can read. perf.data
itself stays out of the bundle unless ``keep_perf_data``.

The sampler runs on the CPUs, not on the targets' threads (collectors/perf/scope.py): a per-thread
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
import io
import itertools
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

from profiler.collectors.base import CaptureContext, Probe
from profiler.collectors.files import file_size
from profiler.collectors.perf.base import PerfCollector, pid_list
from profiler.collectors.process import run_to_file, tail
from profiler.collectors.runtime import gosym

from profiler.bundle import FAILED, OK, PARTIAL, CollectorRecord, members

OUTPUT = members.CPU_STACKS
CALL_GRAPHS = ("fp", "dwarf", "lbr")
SCRIPT_FIELDS = "comm,pid,tid,cpu,time,period,event,ip,sym,symoff,dso"
_BPF_RECORD_FAILED = re.compile(r"failed to process type: (17|18)\b")


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


def _root_of(pid: int) -> str:
    """Where a process's files are seen from here: /proc/PID/root when it lives in another mount
    namespace (a container), as perf opens them."""
    try:
        if os.stat(f"/proc/{pid}/ns/mnt").st_ino != os.stat("/proc/self/ns/mnt").st_ino:
            return f"/proc/{pid}/root"
    except OSError:
        pass
    return ""


class RecordCollector(PerfCollector):
    """perf record on the targets, then perf script into a gzip member at stop."""

    output = ""
    fields = SCRIPT_FIELDS
    script_timeout = 600.0
    # samples symbolized at most, and call-chain frames: past either, a uniform sample of the
    # targets' samples is symbolized (stats.symbolized says what was kept). perf script costs
    # ~1 us a frame and the text ~80 bytes a frame, so these bound the work after any capture.
    max_symbolized = 50_000
    max_frames = 1_000_000

    def __init__(self, keep_perf_data: bool = False) -> None:
        super().__init__()
        self.keep_perf_data = keep_perf_data
        self._data: Path | None = None  # perf.data, known once perf is about to start
        self._pids: list[int] | None = None
        self._counts: tuple[int, int] | None = None
        self._counts_done = False

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

    def script_pids(self, ctx: CaptureContext) -> list[int]:
        """The processes whose samples are symbolized (perf script --pid)."""
        if self._pids is None:
            from profiler.collectors.perf.scope import with_descendants

            self._pids = with_descendants(ctx.pids)
        return self._pids

    def targets_in_data(self, ctx: CaptureContext, rec: CollectorRecord) -> tuple[int, int] | None:
        """(samples, call-chain frames) of the targets in perf.data, when already known."""
        return None

    def _counted(self, ctx: CaptureContext, rec: CollectorRecord) -> tuple[int, int] | None:
        """targets_in_data, once (it may write a member: the off-CPU intervals)."""
        if not self._counts_done:
            self._counts, self._counts_done = self.targets_in_data(ctx, rec), True
        return self._counts

    def script_input(self, ctx: CaptureContext, rec: CollectorRecord, data: Path, drop: tuple[int, ...] = ()) -> Path:
        """The perf.data perf script reads: a copy holding the targets' samples only, and a
        uniform sample of them past ``max_symbolized`` samples or ``max_frames`` frames (what
        perf script costs grows with the frames it resolves and the binaries they ran in;
        stats.symbolized says what was kept). The original when the copy cannot be made."""
        out = ctx.writer.root / f".{self.name}.targets.perf.data"
        try:
            import numpy as np

            from profiler.formats import perfdata_reduce as pr
            from profiler.formats.perfdata import PerfDataUnsupported
        except ImportError:  # the cluster agent's bare python3
            rec.stats["symbolized"] = "every sample (no numpy to filter perf.data)"
            return data
        pids = np.asarray(sorted(self.script_pids(ctx)), np.int64)
        mine: pr.Keep = lambda pid, tid, t: np.isin(pid, pids)  # noqa: E731
        try:
            total, frames = self._counted(ctx, rec) or pr.count_samples(data, mine)
            keep = mine
            fraction = min(1.0, self.max_symbolized / max(total, 1), self.max_frames / max(frames, 1))
            if fraction < 1.0:
                thin = pr.thinning(fraction)
                keep = lambda pid, tid, t: mine(pid, tid, t) & thin(pid, tid, t)  # noqa: E731
            kept, others = pr.filter_samples(data, out, keep, drop_types=drop)
        except (PerfDataUnsupported, OSError) as exc:
            rec.stats["symbolized"] = f"every sample (perf.data not filtered: {exc})"
            return data
        rec.stats["symbolized"] = {"target_samples": total, "target_frames": frames, "kept": kept,
                                   "fraction": round(kept / total, 4) if total else 1.0,
                                   "other_samples_dropped": others - (total - kept)}
        return out

    def finish(self, ctx: CaptureContext, rec: CollectorRecord, stderr: str) -> None:
        data = self.data_path(ctx)
        if not data.exists() or data.stat().st_size == 0:
            rec.status, rec.reason = FAILED, "perf record wrote no data" + (f": {self.died}" if self.died else "")
            return
        if not ctx.options.inline and os.environ.get("PROFILER_SYMBOLIZER") != "perf":
            counter = self.counter(ctx)
            if self._finish_direct(ctx, rec, data, counter):
                self.after_script(ctx, rec, counter)
                self._keep(rec, ctx, data)
                return
        src = self.script_input(ctx, rec, data)
        errpath = ctx.writer.root / f".{self.name}.script.stderr"
        for attempt in (1, 2):
            counter = self.counter(ctx)
            argv = script_argv(ctx.perf, src, self.fields, ctx.options.inline, self.script_extra(ctx))
            rec.stats["script_argv"] = argv
            rc = None
            try:
                with ctx.writer.open_member(self.output) as out:
                    if self.output not in rec.files:
                        rec.files.insert(0, self.output)
                    syms = getattr(self, "_gosyms", None)
                    sink = gosym.Rewriter(out, syms, "symoff" in self.fields) if syms else out
                    try:
                        rc = run_to_file(argv, sink, timeout=self.script_timeout, stderr_path=errpath,
                                         on_chunk=counter, on_cpu=self.add_child_cpu)
                    finally:
                        if isinstance(sink, gosym.Rewriter):
                            sink.flush()
                            rec.stats.update(sink.stats())
                if rc != 0:
                    rec.status, rec.reason = PARTIAL, f"perf script exited with code {rc}: {tail(errpath)}"
            except TimeoutError as exc:
                rec.status, rec.reason = PARTIAL, f"symbolizing was cut short: {exc}"
            finally:
                err = errpath.read_text(errors="replace") if errpath.exists() else ""
                with contextlib.suppress(OSError):
                    errpath.unlink()
            if attempt == 1 and rc not in (0, None) and src != data and _BPF_RECORD_FAILED.search(err):
                # perf 6.1 stops at a BPF program's symbol record it cannot process (a bcc tool
                # loaded or unloaded one during the capture), losing every later sample: again
                # without those records (frames inside BPF programs then show as [unknown])
                rec.status, rec.reason = OK, None
                rec.stats["bpf_symbols"] = "dropped: perf script could not process them"
                from profiler.formats.perfdata import RECORD_BPF_EVENT, RECORD_KSYMBOL

                src = self.script_input(ctx, rec, data, drop=(RECORD_KSYMBOL, RECORD_BPF_EVENT))
                continue
            break
        if src != data:
            with contextlib.suppress(OSError):
                src.unlink()
        self.after_script(ctx, rec, counter)
        self._keep(rec, ctx, data)

    def _keep(self, rec: CollectorRecord, ctx: CaptureContext, data: Path) -> None:
        if self.keep_perf_data:
            kept = members.perf_data(self.name)
            data.replace(ctx.writer.path(kept))
            rec.files.append(kept)

    def _finish_direct(self, ctx: CaptureContext, rec: CollectorRecord, data: Path, counter: SampleCounter) -> bool:
        """The member written from perf.data without perf script (profiler.formats.perfscript_text:
        the text perf script prints, byte for byte); perf script names only the samples that
        cannot be named so, from a copy holding just them. False when the file cannot be read so
        (the caller runs perf script as before); stats.symbolizer says which it was."""
        try:
            import numpy as np

            from profiler.formats import perfdata_reduce as pr
            from profiler.formats import perfscript_text as pt
            from profiler.formats.perfdata import (
                RECORD_BPF_EVENT,
                RECORD_KSYMBOL,
                PerfDataUnsupported,
            )
        except ImportError:  # the cluster agent's bare python3
            return False
        self._counted(ctx, rec)  # the off-CPU intervals are paired from perf.data first
        pids = set(self.script_pids(ctx))
        gosyms = getattr(self, "_gosyms", None) or {}
        copy = ctx.writer.root / f".{self.name}.targets.perf.data"
        res = pt.Result()

        def fallback(pid: np.ndarray, tid: np.ndarray, t: np.ndarray) -> Iterator[bytes]:
            with np.errstate(over="ignore"):
                wanted = np.unique(t.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) ^ tid.astype(np.uint64))

            def keep(p: np.ndarray, tid_: np.ndarray, t_: np.ndarray) -> np.ndarray:
                with np.errstate(over="ignore"):
                    h = t_.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) ^ tid_.astype(np.uint64)
                out: np.ndarray = np.isin(h, wanted)
                return out

            errpath = ctx.writer.root / f".{self.name}.script.stderr"
            argv = script_argv(ctx.perf, copy, self.fields, False)
            rec.stats["script_argv"] = argv
            for drop in ((), (RECORD_KSYMBOL, RECORD_BPF_EVENT)):
                pr.filter_samples(data, copy, keep, drop_types=drop)
                buf = io.BytesIO()
                rc = None
                try:
                    rc = run_to_file(argv, buf, timeout=self.script_timeout, stderr_path=errpath,
                                     on_cpu=self.add_child_cpu)
                except TimeoutError as exc:
                    rec.status, rec.reason = PARTIAL, f"symbolizing was cut short: {exc}"
                err = errpath.read_text(errors="replace") if errpath.exists() else ""
                if rc not in (0, None) and not drop and _BPF_RECORD_FAILED.search(err):
                    # perf 6.1 stops at a BPF program's symbol record (a bcc tool loaded or
                    # unloaded one): again without them, frames inside BPF programs [unknown]
                    rec.stats["bpf_symbols"] = "dropped: perf script could not process them"
                    continue
                if rc not in (0, None):
                    rec.status, rec.reason = PARTIAL, f"perf script exited with code {rc}: {tail(errpath)}"
                break
            for f in (errpath, copy):
                with contextlib.suppress(OSError):
                    f.unlink()
            yield buf.getvalue()

        def go_table(path: str) -> Callable[[int], tuple[str, int] | None] | None:
            syms = gosyms.get(path)
            return syms.name if syms is not None else None

        try:
            chunks = pt.render(str(data), self.fields, pids=pids, go_tables=go_table, root_of=_root_of,
                               fallback=fallback, result=res, bound=(self.max_symbolized, self.max_frames))
            first = next(chunks, b"")  # every sample is read and named before the first chunk
        except (PerfDataUnsupported, OSError, ValueError, IndexError, KeyError, OverflowError) as exc:
            rec.stats["symbolizer"] = f"perf script ({type(exc).__name__}: {exc})" if not isinstance(
                exc, PerfDataUnsupported) else f"perf script ({exc})"
            return False
        with ctx.writer.open_member(self.output) as out:
            if self.output not in rec.files:
                rec.files.insert(0, self.output)
            for chunk in itertools.chain([first], chunks):
                counter(chunk)
                out.write(chunk)
        rec.stats["symbolized"] = {"target_samples": res.samples, "target_frames": res.target_frames, "kept": res.kept,
                                   "fraction": round(res.kept / res.samples, 4) if res.samples else 1.0}
        rec.stats["symbolizer"] = {"direct": res.kept - res.by_perf, "perf_script": res.by_perf,
                                   **({"perf_script_for": res.reasons} if res.reasons else {})}
        if gosyms:
            rec.stats.update({"go_frames_named": res.go_named, "go_frames_unnamed": res.go_unnamed})
        return True

    def after_script(self, ctx: CaptureContext, rec: CollectorRecord, counter: SampleCounter) -> None:
        # No samples is evidence too (an idle target), not a failure of the collector.
        rec.stats["samples"] = counter.samples

    def cleanup(self, ctx: CaptureContext) -> None:
        for p in (self.data_path(ctx), ctx.writer.root / f".{self.name}.targets.perf.data"):
            with contextlib.suppress(OSError):
                p.unlink()


class CpuStacksCollector(RecordCollector):
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
        from profiler.collectors.perf.scope import system_wide_allowed

        return system_wide_allowed()

    def argv(self, ctx: CaptureContext) -> list[str]:
        scope = ["-a", "-e", "cpu-clock:I"] if self.system_wide() else ["-p", pid_list(ctx.pids), "-e", "cpu-clock"]
        self.rec.stats["scope"] = "system-wide, samples of the targets kept" if scope[0] == "-a" else "targets' threads"
        return [ctx.perf, "record", *scope, "-F", str(ctx.options.frequency),
                "--call-graph", call_graph_arg(ctx.options.call_graph), "-k", "CLOCK_MONOTONIC",
                "--sample-cpu", "-N", "-B", "-o", str(self.data_path(ctx))]

    def script_extra(self, ctx: CaptureContext) -> list[str]:
        return ["--pid", pid_list(self.script_pids(ctx))]
