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
import functools
import json
import math
import time
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from profiler import __version__
from profiler.bundle.members import MANIFEST
from profiler.errors import BundleError

SCHEMA = "profiler.bundle"
VERSION = 4

# Collector and bundle status words.
PENDING, RUNNING, OK, PARTIAL, FAILED, SKIPPED = (
    "pending", "running", "ok", "partial", "failed", "skipped",
)
STATUSES = (PENDING, RUNNING, OK, PARTIAL, FAILED, SKIPPED)  # a collector's
BUNDLE_STATUSES = (RUNNING, OK, PARTIAL, FAILED)  # the capture's as a whole


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
    """What built a target's executable (collectors/runtime/detect.py): read from the binary, not guessed."""

    name: str | None = None  # "go", "rust", "c++", "c", "jvm"; None: not known
    version: str | None = None  # "go1.19.8", "rustc 1.74.0", "GCC 12.2.0"
    evidence: str = ""  # how we know ("Go build info (.go.buildinfo)", ".comment: rustc version", ...)
    build: dict[str, str] = field(default_factory=dict)  # Go build settings (-buildmode, -trimpath, ...), compiler
    binary: dict[str, Any] = field(default_factory=dict)  # ELF type (executable | pie), stripped, build_id
    frame_pointers: bool | None = None  # True where the runtime guarantees them (Go)
    symbols: str = ""  # where user frames get their names (".symtab", "... from .gopclntab by the profiler")


@dataclass
class ContainerInfo:
    """The container a target runs in (collectors/containers/): its cgroup path names it, its
    runtime's state on disk names the rest. Optional fields: a runtime's files may be unreadable."""

    runtime: str  # docker | podman | containerd | cri-o | kubernetes
    id: str  # 64 hex digits
    name: str | None = None
    image: str | None = None
    cgroup: str = ""  # the cgroup path the id was read from
    pod: str | None = None  # Kubernetes: pod name, namespace, UID, the container's name in the pod, QoS class
    namespace: str | None = None
    pod_uid: str | None = None
    container: str | None = None
    qos: str | None = None
    state: str | None = None  # the runtime's file the name came from


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
    container_info: ContainerInfo | None = None  # the container it runs in (docker, podman, a pod...)
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


# --------------------------------------------------------------------------- decoding and validation
#
# A manifest comes from another machine: every field is checked for its type and range on load
# (a wrong one is a BundleError naming the field, exit code 4), so nothing downstream meets a
# string where it expects a number. Unknown fields are ignored (a newer minor writer may add
# them). Free-form objects (stats, options, capabilities, cgroup) hold any JSON up to
# MAX_DEPTH levels; the keys the analysis reads in them are checked like fields.

MAX_MANIFEST_BYTES = 64 << 20
MAX_DEPTH = 16  # nesting of free-form objects
_INT_MAX = (1 << 63) - 1
_ID_MAX = (1 << 31) - 1  # pids, tids
_CPU_MAX = 1 << 20


class _Huge:
    """An integer literal too long to be a number we keep (validation names its field)."""

    def __init__(self, digits: int) -> None:
        self.digits = digits


class _NonFinite:
    """NaN or Infinity, which JSON does not have but Python's json reads."""

    def __init__(self, text: str) -> None:
        self.text = text


def _parse_int(text: str) -> int | _Huge:
    return int(text) if len(text) <= 40 else _Huge(len(text))


def _parse_float(text: str) -> float | _NonFinite:
    v = float(text)
    return v if math.isfinite(v) else _NonFinite(text)


def _type_name(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, _Huge):
        return f"a {v.digits:,}-digit number"
    if isinstance(v, _NonFinite):
        return v.text
    if isinstance(v, int | float):
        return "a number"
    if isinstance(v, str):
        return f"a string ({v[:20]!r})"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, dict):
        return "an object"
    return type(v).__name__  # pragma: no cover


def _bad(where: str, want: str, v: Any) -> BundleError:
    return BundleError(f"manifest field {where} should be {want}, not {_type_name(v)}")


# (class, field) -> (lowest, highest) for numbers
_RANGES: dict[tuple[str, str], tuple[float, float]] = {
    ("Manifest", "version"): (0, VERSION),
    ("Manifest", "duration"): (0, 1e9),
    ("HostInfo", "cpus"): (0, _CPU_MAX),
    ("HostInfo", "memory_bytes"): (0, _INT_MAX),
    ("HostInfo", "cgroup_version"): (0, 2),
    ("TargetInfo", "pid"): (0, _ID_MAX),
    ("ThreadInfo", "tid"): (0, _ID_MAX),
    ("LoadInfo", "exit_code"): (-(1 << 31), (1 << 31) - 1),
}
_LIST_RANGES: dict[tuple[str, str], tuple[float, float]] = {("TargetInfo", "cpus_allowed"): (0, _CPU_MAX)}
_STATUS_FIELDS = {("Manifest", "status"): BUNDLE_STATUSES, ("CollectorRecord", "status"): STATUSES}
# keys the analysis reads inside free-form objects: key -> (types, lowest, highest)
_NUM = (int, float)
_KNOWN_KEYS: dict[tuple[str, str], dict[str, tuple[tuple[type, ...], float, float]]] = {
    ("CollectorRecord", "stats"): {"sampled": ((bool,), 0, 1), "sampled_seconds": (_NUM, 0, 1e9),
                                   "lost": ((int,), 0, _INT_MAX), "samples": ((int,), 0, _INT_MAX),
                                   "events": ((int,), 0, _INT_MAX)},
    ("Manifest", "options"): {"interval": (_NUM, 1e-3, 1e6), "frequency": (_NUM, 0, 1e9), "proc_hz": (_NUM, 0, 1e6),
                              "duration": (_NUM, 0, 1e9)},
    ("TargetInfo", "cgroup"): {"cpu_quota_us": ((int,), -1, _INT_MAX), "cpu_period_us": ((int,), 0, _INT_MAX),
                               "memory_limit_bytes": ((int,), 0, _INT_MAX), "version": ((int,), 0, 2),
                               "blkio_throttle": ((dict,), 0, 0), "path": ((dict,), 0, 0)},
}


def _check_json(v: Any, where: str, depth: int = 0) -> None:
    """Any JSON value, bounded in depth, with no NaN, Infinity or absurd integers."""
    if depth > MAX_DEPTH:
        raise BundleError(f"manifest field {where} nests deeper than {MAX_DEPTH} levels")
    if isinstance(v, _Huge | _NonFinite):
        raise _bad(where, "a number in range", v)
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) > _INT_MAX:
        raise _bad(where, "a number in range", v)
    if isinstance(v, dict):
        for k, x in v.items():
            _check_json(x, f"{where}.{k}", depth + 1)
    elif isinstance(v, list):
        for i, x in enumerate(v):
            _check_json(x, f"{where}[{i}]", depth + 1)


def _check_number(v: Any, where: str, types: tuple[type, ...], lo: float, hi: float) -> None:
    want = "an integer" if types == (int,) else "a number"
    if isinstance(v, bool) or not isinstance(v, int | float) or not isinstance(v, types):
        raise _bad(where, want, v)
    if not lo <= v <= hi:
        raise BundleError(f"manifest field {where} is out of range ({v!r} not in {_num(lo)}..{_num(hi)})")


def _num(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e18 else f"{x:g}"


def _check_known(owner: tuple[str, str], value: dict[str, Any], where: str) -> None:
    for key, (kinds, lo, hi) in _KNOWN_KEYS.get(owner, {}).items():
        if key not in value or value[key] is None:
            continue
        v = value[key]
        if kinds == (dict,):
            if not isinstance(v, dict):
                raise _bad(f"{where}.{key}", "an object", v)
            if key == "blkio_throttle":
                for kind, per_dev in v.items():
                    if not isinstance(per_dev, dict):
                        raise _bad(f"{where}.{key}.{kind}", "an object", per_dev)
                    for dev, limit in per_dev.items():
                        _check_number(limit, f"{where}.{key}.{kind}.{dev}", (int,), 0, _INT_MAX)
            continue
        if kinds == (bool,):
            if not isinstance(v, bool):
                raise _bad(f"{where}.{key}", "true or false", v)
            continue
        _check_number(v, f"{where}.{key}", kinds, lo, hi)


def _value(owner: tuple[str, str], hint: Any, v: Any, where: str) -> Any:
    """Check ``v`` against the field's type ``hint``; returns the value to store."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        if v is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return _value(owner, inner[0], v, where)
    if dataclasses.is_dataclass(hint):
        return _build(typing.cast(type, hint), v, where)
    if origin is list:
        if not isinstance(v, list):
            raise _bad(where, "a list", v)
        (item,) = args
        out = [_value(owner, item, x, f"{where}[{i}]") for i, x in enumerate(v)]
        if owner in _LIST_RANGES:
            lo, hi = _LIST_RANGES[owner]
            for i, x in enumerate(out):
                _check_number(x, f"{where}[{i}]", (int,), lo, hi)
        return out
    if origin is dict:
        if not isinstance(v, dict):
            raise _bad(where, "an object", v)
        _check_json(v, where)
        _check_known(owner, v, where)
        return v
    if hint is Any:
        _check_json(v, where)
        return v
    if hint is bool:
        if not isinstance(v, bool):
            raise _bad(where, "true or false", v)
        return v
    if hint is int or hint is float:
        types_ = (int,) if hint is int else _NUM
        lo, hi = _RANGES.get(owner, (-1e300 if hint is float else -_INT_MAX, 1e300 if hint is float else _INT_MAX))
        _check_number(v, where, types_, lo, hi)
        return float(v) if hint is float else v
    if hint is str:
        if not isinstance(v, str):
            raise _bad(where, "a string", v)
        words = _STATUS_FIELDS.get(owner)
        if words is not None and v not in words:
            raise BundleError(f"manifest field {where} is an unknown status {v[:40]!r} (one of {', '.join(words)})")
        return v
    raise BundleError(f"manifest field {where} has an unexpected type")  # pragma: no cover - a model bug


def _build(cls: type, data: Any, where: str) -> Any:
    """Build dataclass ``cls`` from a dict, filling defaults for missing fields and checking every
    field's type and range. Unknown keys are ignored (a newer minor writer may add fields)."""
    if not isinstance(data, dict):
        raise _bad(where or "(the whole manifest)", "an object", data)
    kwargs: dict[str, Any] = {}
    for f, hint in _fields(cls):
        if f.name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise BundleError(f"manifest field {where + '.' if where else ''}{f.name} is missing")
            continue
        kwargs[f.name] = _value((cls.__name__, f.name), hint, data[f.name], f"{where}.{f.name}" if where else f.name)
    return cls(**kwargs)


@functools.cache
def _fields(cls: type) -> tuple[tuple[dataclasses.Field[Any], Any], ...]:
    """A model's fields and their type hints, resolved once per class (resolving them compiles
    every annotation: 2 ms an object, 25 s for a manifest of 3,000 targets)."""
    hints = typing.get_type_hints(cls)
    return tuple((f, hints[f.name]) for f in dataclasses.fields(cls))

def load_checked_json(text: str) -> Any:
    """JSON text with integers over 40 digits and NaN/Infinity kept as markers that validation
    refuses naming their field (``json.loads`` alone would raise on 5,000 digits or accept NaN)."""
    return json.loads(text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_NonFinite)


def build_checked(cls: type, data: Any, where: str) -> Any:
    """Dataclass ``cls`` from parsed JSON, every field checked by its type hint (the validation
    the bundle manifest gets; the cluster manifest uses it too). Raises BundleError naming the field."""
    return _build(cls, data, where)


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


def _v3_to_v4(data: dict[str, Any]) -> dict[str, Any]:
    """v4's block-io (perf backend) writes block.events.bin, binary columns, instead of the
    ftrace text block.trace.gz; a v3 bundle keeps its text member, read as before. Nothing
    in the manifest changes: the readers pick the member the bundle holds."""
    return data


_MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _v1_to_v2, 2: _v2_to_v3, 3: _v3_to_v4}


def parse_manifest(text: str, where: str = MANIFEST) -> Manifest:
    """Parse and validate manifest text; raises BundleError with a one-line reason."""
    if not text.strip():
        raise BundleError(f"{where} is empty: the capture was cut off before it wrote anything")
    try:
        data = json.loads(text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_NonFinite)
    except json.JSONDecodeError as exc:
        raise BundleError(f"{where} is truncated or corrupted ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise BundleError(f"{where} nests objects too deeply to be a manifest") from None
    except ValueError as exc:  # pragma: no cover - parse hooks take the numbers
        raise BundleError(f"{where} is corrupted ({exc})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise BundleError(f"{where} is not a profiler bundle manifest (schema is not {SCHEMA!r})")
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
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
    manifest: Manifest = _build(Manifest, data, "")
    for rec in manifest.collectors:
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
