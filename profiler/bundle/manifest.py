"""The bundle manifest (bundle layer): its model, parsing and validation, and migrations.

``manifest.json`` says what was captured, how each collector ran and which member files it
wrote. It is versioned: older versions load with defaults filled in (``_MIGRATIONS`` upgrades
them step by step), newer ones are refused with a clear message. Versions: 1 the first; 2
records each target's runtime (``TargetInfo.runtime_info``: Go version and build settings,
Rust, C/C++, JVM; the ELF facts stack walking depends on). Every file name a manifest
mentions must stay inside the bundle (:func:`check_member_name`).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from profiler import __version__
from profiler.bundle.members import MANIFEST
from profiler.errors import BundleError

SCHEMA = "profiler.bundle"
VERSION = 3

# Collector and bundle status words.
PENDING, RUNNING, OK, PARTIAL, FAILED, SKIPPED = (
    "pending", "running", "ok", "partial", "failed", "skipped",
)
STATUSES = (PENDING, RUNNING, OK, PARTIAL, FAILED, SKIPPED)


@dataclass
class CollectorRecord:
    """How one collector ran. Times are CLOCK_MONOTONIC seconds."""

    name: str
    backend: str = "perf"
    argv: list[str] = field(default_factory=list)
    started: float | None = None
    ended: float | None = None
    status: str = PENDING
    reason: str | None = None
    files: list[str] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass
class ThreadInfo:
    tid: int
    comm: str


@dataclass
class RuntimeInfo:
    """What built a target's executable (collectors/runtime.py): read from the binary, not guessed."""

    name: str | None = None  # "go", "rust", "c++", "c", "jvm"; None: not known
    version: str | None = None  # "go1.19.8", "rustc 1.74.0", "GCC 12.2.0"
    evidence: str = ""  # how we know ("Go build info (.go.buildinfo)", ".comment: rustc version", ...)
    build: dict[str, str] = field(default_factory=dict)  # Go build settings (-buildmode, -trimpath, ...), compiler
    binary: dict[str, Any] = field(default_factory=dict)  # ELF type (executable | pie), stripped, build_id
    frame_pointers: bool | None = None  # True where the runtime guarantees them (Go)
    symbols: str = ""  # where user frames get their names (".symtab", "... from .gopclntab by the profiler")


@dataclass
class TargetInfo:
    """A process the capture attached to, as it was when the capture started."""

    pid: int
    comm: str
    exe: str | None = None
    cmdline: list[str] = field(default_factory=list)
    kind: str | None = None  # "tikv", "tidb", "pd" or None (see analyzers.knowledge)
    runtime: str | None = None  # "go", "rust", "c++", "c", "jvm" or None (runtime_info.name)
    runtime_info: RuntimeInfo | None = None  # bundle v2+; None in v1 bundles and when unreadable
    threads: list[ThreadInfo] = field(default_factory=list)
    cgroup: dict[str, Any] = field(default_factory=dict)  # limits, see docs/bundle.md
    cpus_allowed: list[int] = field(default_factory=list)
    root: str | None = None  # the target's filesystem root (for symbols), e.g. /proc/PID/root
    container: bool = False  # in another mount namespace than the profiler
    exited: float | None = None  # monotonic time the target was seen gone, if it exited


@dataclass
class HostInfo:
    hostname: str = ""
    kernel: str = ""
    machine: str = ""
    cpus: int = 0
    memory_bytes: int = 0
    perf_version: str | None = None
    cgroup_version: int | None = None
    capabilities: dict[str, Any] = field(default_factory=dict)


@dataclass
class ClockInfo:
    """All times in the bundle are CLOCK_MONOTONIC seconds; wall = monotonic + offset."""

    monotonic_start: float = 0.0
    wall_start: float = 0.0
    offset: float = 0.0
    utc_offset: float | None = None  # the capture host's local time zone, seconds east of UTC (v3)

    @classmethod
    def now(cls) -> ClockInfo:
        mono = time.monotonic()
        wall = time.time()
        return cls(monotonic_start=mono, wall_start=wall, offset=wall - mono,
                   utc_offset=float(time.localtime(wall).tm_gmtoff))


@dataclass
class LoadInfo:
    """The load next to the capture: the command `profiler run` wrapped, or the log file
    `profiler attach --load-log` followed. Times are CLOCK_MONOTONIC seconds (docs/load.md)."""

    argv: list[str] = field(default_factory=list)  # run: the load command (attach: empty)
    exit_code: int | None = None  # run: its exit code (128+N when a signal N ended it)
    log: str | None = None  # the member holding its output (load.log)
    started: float | None = None  # when the load started, if known (run: spawned; attach: --load-start)
    ended: float | None = None  # run: when it exited
    source: str = "run"  # "run" or "attach" (v3)
    times: str | None = None  # the member with each log line's arrival time (load.times.csv.gz) (v3)
    start_from: str | None = None  # how ``started`` is known: "spawn", or the --load-start given (v3)
    file: str | None = None  # attach: the log file that was followed (v3)


@dataclass
class Manifest:
    schema: str = SCHEMA
    version: int = VERSION
    tool_version: str = __version__
    created: str = ""  # ISO 8601 wall-clock time of the capture start
    status: str = RUNNING  # running | ok | partial | failed
    reason: str | None = None
    duration: float | None = None  # requested seconds, None = until stopped
    ended: float | None = None  # monotonic time the capture ended
    clock: ClockInfo = field(default_factory=ClockInfo)
    host: HostInfo = field(default_factory=HostInfo)
    targets: list[TargetInfo] = field(default_factory=list)
    collectors: list[CollectorRecord] = field(default_factory=list)
    load: LoadInfo | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def collector(self, name: str) -> CollectorRecord | None:
        for rec in self.collectors:
            if rec.name == name:
                return rec
        return None

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True) + "\n"


# --------------------------------------------------------------------------- decoding


def _build(cls: type, data: Any, where: str) -> Any:
    """Build dataclass ``cls`` from a dict, filling defaults for missing fields.

    Unknown keys are ignored (a newer minor writer may add fields); wrong types raise.
    """
    if not isinstance(data, dict):
        raise BundleError(f"manifest field {where} should be an object")
    kwargs: dict[str, Any] = {}
    hints = [f.name for f in dataclasses.fields(cls)]
    for name in hints:
        if name not in data:
            continue
        value = data[name]
        sub = _NESTED.get((cls.__name__, name))
        if sub is not None and value is not None:
            kind, subcls = sub
            if kind == "list":
                if not isinstance(value, list):
                    raise BundleError(f"manifest field {where}.{name} should be a list")
                value = [_build(subcls, v, f"{where}.{name}[{i}]") for i, v in enumerate(value)]
            else:
                value = _build(subcls, value, f"{where}.{name}")
        kwargs[name] = value
    try:
        return cls(**kwargs)
    except TypeError as exc:  # pragma: no cover - defensive
        raise BundleError(f"manifest field {where} is malformed: {exc}") from None


_NESTED: dict[tuple[str, str], tuple[str, type]] = {
    ("Manifest", "clock"): ("one", ClockInfo),
    ("Manifest", "host"): ("one", HostInfo),
    ("Manifest", "targets"): ("list", TargetInfo),
    ("Manifest", "collectors"): ("list", CollectorRecord),
    ("Manifest", "load"): ("one", LoadInfo),
    ("TargetInfo", "threads"): ("list", ThreadInfo),
    ("TargetInfo", "runtime_info"): ("one", RuntimeInfo),
}


# Upgrades from older manifest versions, applied in order: version N -> N+1.
def _v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    """v2 adds ``runtime_info`` to each target; v1 never read the binary, so it stays unknown
    (None), and v1's ``runtime`` (always None in practice) is kept."""
    for t in data.get("targets") or []:
        if isinstance(t, dict):
            t.setdefault("runtime_info", None)
    return data


def _v2_to_v3(data: dict[str, Any]) -> dict[str, Any]:
    """v3 says where a load came from (older bundles only had `profiler run`'s: its start was the
    spawn) and which member holds its lines' arrival times (older ones recorded none)."""
    load = data.get("load")
    if isinstance(load, dict):
        load.setdefault("source", "run")
        if load.get("started") is not None:
            load.setdefault("start_from", "spawn")
    return data


_MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _v1_to_v2, 2: _v2_to_v3}


def parse_manifest(text: str, where: str = MANIFEST) -> Manifest:
    """Parse and validate manifest text; raises BundleError with a one-line reason."""
    if not text.strip():
        raise BundleError(f"{where} is empty: the capture was cut off before it wrote anything")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BundleError(f"{where} is truncated or corrupted ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise BundleError(f"{where} is not a profiler bundle manifest (schema is not {SCHEMA!r})")
    version = data.get("version")
    if not isinstance(version, int) or version < 0:
        raise BundleError(f"{where} has no valid version number")
    if version > VERSION:
        raise BundleError(
            f"bundle format v{version} was written by a newer profiler "
            f"({data.get('tool_version', '?')}); this one ({__version__}) reads up to v{VERSION}: upgrade profiler"
        )
    while version < VERSION:
        step = _MIGRATIONS.get(version)
        if step is None:
            raise BundleError(f"bundle format v{version} is too old to read")
        data = step(data)
        version += 1
    data["version"] = VERSION
    manifest: Manifest = _build(Manifest, data, "manifest")
    for rec in manifest.collectors:
        if rec.status not in STATUSES:
            raise BundleError(f"collector {rec.name!r} has an unknown status {rec.status!r}")
        for name in rec.files:
            check_member_name(name)
    if manifest.load:
        for member in (manifest.load.log, manifest.load.times):
            if member:
                check_member_name(member)
    return manifest


def check_member_name(name: str) -> str:
    """Refuse file names that would leave the bundle directory."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise BundleError(f"manifest names an invalid file {name!r}")
    p = Path(name)
    if p.is_absolute() or ".." in p.parts or name.startswith("~"):
        raise BundleError(f"manifest names a file outside the bundle: {name!r}")
    return name
