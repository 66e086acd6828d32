"""perf stat interval counters on the targets (capture layer) -> stat.csv.

``perf stat -I <ms> -x, -e task-clock,...,cycles,... -p PIDS -o stat.csv`` prints one CSV line per
event per interval, times in seconds since perf started (add the collector's ``started``).
Hardware counters that this host cannot count come out as ``<not supported>`` rows; they
are listed in ``stats.not_supported`` and are not an error.
"""

from __future__ import annotations

from profiler.collectors._proc import PerfCollector, file_size, pid_list
from profiler.collectors.base import CaptureContext

from profiler.bundle import FAILED, PARTIAL, CollectorRecord

SOFTWARE_EVENTS = ["task-clock", "context-switches", "cpu-migrations", "page-faults", "major-faults"]
HARDWARE_EVENTS = ["cycles", "instructions", "cache-misses"]
OUTPUT = "stat.csv"


def interval_ms(seconds: float) -> int:
    """perf stat -I takes whole milliseconds, 10 at least."""
    return max(10, int(round(seconds * 1000)))


class PerfStat(PerfCollector):
    name = "perf-stat"
    events = SOFTWARE_EVENTS

    def argv(self, ctx: CaptureContext) -> list[str]:
        return [ctx.perf, "stat", "-I", str(interval_ms(ctx.options.interval)), "-x", ",",
                "-e", ",".join(SOFTWARE_EVENTS + HARDWARE_EVENTS),
                "-p", pid_list(ctx.pids), "-o", str(ctx.writer.path(f".{OUTPUT}.tmp"))]

    def finish(self, ctx: CaptureContext, rec: CollectorRecord, stderr: str) -> None:
        tmp = ctx.writer.path(f".{OUTPUT}.tmp")
        if not tmp.exists():
            rec.status, rec.reason = FAILED, "perf stat wrote nothing"
            return
        tmp.replace(ctx.writer.path(OUTPUT))
        rec.files = [OUTPUT]
        rows, unsupported = summarize(ctx.writer.path(OUTPUT).read_text(encoding="utf-8", errors="replace"))
        rec.stats["rows"] = rows
        rec.stats["not_supported"] = sorted(unsupported)
        if rows == 0:
            rec.status, rec.reason = PARTIAL, "perf stat printed no interval (capture shorter than one interval?)"

    def size(self) -> int:
        return 0 if self.errpath is None else file_size(self.errpath.parent / f".{OUTPUT}.tmp")


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
