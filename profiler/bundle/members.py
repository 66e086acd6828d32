"""Every member file name of a capture bundle, in one place (bundle layer).

Collectors write these names, analyzers and verbs read them: spell a member through its
constant here, never as a string literal. docs/bundle.md says what each holds and which
collector writes it; docs/bundle.md#views says which analysis view reads it.
"""

from __future__ import annotations

MANIFEST = "manifest.json"

# perf stat -I (and the kernel's per-thread counters): interval counters of the targets
STAT = "stat.csv"
# the procfs sampler: per-thread and per-process /proc samples, cgroup and system counters
PROC = "proc.jsonl.gz"
# cpu-clock stack samples as `perf script` text (both backends)
CPU_STACKS = "cpu.perf.txt.gz"

# off-CPU evidence: the perf backend's sched_switch stacks and their exact switch-out/in pairs ...
OFFCPU_STACKS = "offcpu.perf.txt.gz"
OFFCPU_INTERVALS = "offcpu.csv.gz"
# ... or the bcc backend's blocked time summed in the kernel per stack, and its per-thread totals
OFFCPU_FOLDED = "offcpu.folded.gz"
OFFCPU_SUMMARY = "offcpu.summary.json"
# ... and the same blocked time per time slot and thread (bcc: every second of the capture)
OFFCPU_SLOTS = "offcpu.slots.jsonl.gz"

# block IO: the perf backend's block_rq_* events, binary columns (bundle format v4) ...
BLOCK_EVENTS = "block.events.bin"
# ... or, in bundles before v4, its ftrace text (one event per line) ...
BLOCK_TRACE = "block.trace.gz"
# ... or the bcc backend's in-kernel latency histograms per time slot
BLOCK_HIST = "block.hist.jsonl.gz"

# syscalls: per-thread counts and times per interval (both backends) ...
SYSCALLS = "syscalls.csv"
# ... or, in bundles from older versions, a perf stat -I count of raw_syscalls:sys_enter
SYSCALLS_RATE = "syscalls-rate.csv"

# futex waits (bcc backend): time waited per stack, and per-thread totals
FUTEX_FOLDED = "futex.folded.gz"
FUTEX_SUMMARY = "futex.summary.json"
FUTEX_SLOTS = "futex.slots.jsonl.gz"

# server-status: every request to the targets' HTTP status ports (index, JSON lines) ...
SERVER_STATUS = "server-status.jsonl"
# ... their /metrics scrapes (JSON lines: pid, t0, t1, url, body) ...
SERVER_METRICS = "server-metrics.jsonl.gz"
SERVER_METRICS_BODY_MAX = 32 << 20  # bytes of one /metrics body kept (decompressed) ...
SERVER_METRICS_LINE_MAX = 2 * SERVER_METRICS_BODY_MAX + (1 << 20)  # ... and of its record, JSON-escaped (UTF-8, no \u escapes)
# ... and their Go profiles, one file each (see server_profile)

# the load: `profiler run`'s load command output, or the log `profiler attach --load-log` followed
LOAD_LOG = "load.log"
# ... and when the profiler read each of its lines (CSV `line,t`: CLOCK_MONOTONIC seconds)
LOAD_TIMES = "load.times.csv.gz"
# the report `profiler attach` / `profiler analyze` writes beside the evidence
REPORT = "report.html"


def server_profile(pid: int, kind: str, tag: str, gzipped: bool = True) -> str:
    """A pprof profile a server served, as it came: ``server-4242-goroutine-1.pb.gz``,
    ``server-4242-mutex-start.pb.gz``, ``server-4242-cpu-window.pb.gz``."""
    return f"server-{int(pid)}-{kind}-{tag}.pb" + (".gz" if gzipped else "")


def server_goroutine_text(pid: int, tag: str) -> str:
    """A Go goroutine dump in text (``?debug=2``), where the server gave no pprof."""
    return f"server-{int(pid)}-goroutine-{tag}.txt"


SERVER_PROFILE_PREFIX = "server-"


def perf_data(collector: str) -> str:
    """The perf.data a collector keeps with ``--keep-perf-data`` (e.g. ``cpu-stacks.perf.data``)."""
    return f"{collector}.perf.data"

