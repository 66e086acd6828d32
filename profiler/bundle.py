"""The capture bundle (the contract between collectors and analyzers): manifest model, writer, loader.

A bundle is a directory holding ``manifest.json`` and the raw files the collectors wrote
(see docs/bundle.md). Collectors write through :class:`BundleWriter`; analyzers read
through :class:`Bundle`. The manifest is versioned; older versions load with defaults filled
in, newer ones are refused with a clear message. Every file name a manifest mentions must
stay inside the bundle.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import io
import json
import os
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from profiler import __version__
from profiler.errors import BundleError, OutputExists

SCHEMA = "profiler.bundle"
VERSION = 1
MANIFEST = "manifest.json"

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
class TargetInfo:
    """A process the capture attached to, as it was when the capture started."""

    pid: int
    comm: str
    exe: str | None = None
    cmdline: list[str] = field(default_factory=list)
    kind: str | None = None  # "tikv", "tidb", "pd" or None (see analyzers.knowledge)
    runtime: str | None = None  # "go", "rust", "jvm", "native" or None
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

    @classmethod
    def now(cls) -> ClockInfo:
        mono = time.monotonic()
        wall = time.time()
        return cls(monotonic_start=mono, wall_start=wall, offset=wall - mono)


@dataclass
class LoadInfo:
    """The load command a `profiler run` capture wrapped."""

    argv: list[str] = field(default_factory=list)
    exit_code: int | None = None
    log: str | None = None
    started: float | None = None
    ended: float | None = None


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
}

# Upgrades from older manifest versions, applied in order: version N -> N+1.
# (v1 is the first released version; the table is where v2 will put its step.)
_MIGRATIONS: dict[int, Any] = {}


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
    if manifest.load and manifest.load.log:
        check_member_name(manifest.load.log)
    return manifest


def check_member_name(name: str) -> str:
    """Refuse file names that would leave the bundle directory."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise BundleError(f"manifest names an invalid file {name!r}")
    p = Path(name)
    if p.is_absolute() or ".." in p.parts or name.startswith("~"):
        raise BundleError(f"manifest names a file outside the bundle: {name!r}")
    return name


# --------------------------------------------------------------------------- reading


class Bundle:
    """A capture bundle opened for reading (post-mortem or right after a capture)."""

    def __init__(self, root: Path, manifest: Manifest) -> None:
        self.root = root
        self.manifest = manifest
        self.warnings: list[str] = []

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> Bundle:
        root = Path(path)
        if not root.exists():
            raise BundleError(f"no capture bundle at {root}")
        if not root.is_dir():
            raise BundleError(f"{root} is a file, not a capture bundle directory")
        mpath = root / MANIFEST
        if not mpath.is_file():
            if not any(root.iterdir()):
                raise BundleError(f"{root} is empty: not a capture bundle")
            raise BundleError(f"{root} is not a capture bundle (no {MANIFEST})")
        try:
            text = mpath.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise BundleError(f"cannot read {mpath}: {exc}") from None
        return cls(root, parse_manifest(text, str(mpath)))

    @property
    def partial(self) -> bool:
        return self.manifest.status != OK

    def path(self, name: str) -> Path:
        """The path of a member file, refusing names (or symlinks) that leave the bundle."""
        check_member_name(name)
        p = self.root / name
        with contextlib.suppress(OSError):
            if p.exists() and not p.resolve().is_relative_to(self.root.resolve()):
                raise BundleError(f"bundle member {name!r} points outside the bundle")
        return p

    def has(self, name: str) -> bool:
        return self.path(name).is_file()

    def open_binary(self, name: str) -> IO[bytes]:
        """Open a member for reading bytes; ``.gz`` members are decompressed transparently."""
        p = self.path(name)
        try:
            if name.endswith(".gz"):
                return gzip.open(p, "rb")
            return open(p, "rb")
        except OSError as exc:
            raise BundleError(f"cannot read {name} in {self.root}: {exc.strerror or exc}") from None

    def open_text(self, name: str) -> IO[str]:
        return io.TextIOWrapper(self.open_binary(name), encoding="utf-8", errors="replace", newline="")

    def iter_lines(self, name: str) -> Iterator[str]:
        """Yield the member's lines (without newline); a truncated file ends early with a warning."""
        n = 0
        try:
            with self.open_text(name) as fh:
                for line in fh:
                    n += 1
                    yield line.rstrip("\r\n")
        except (EOFError, zlib.error, gzip.BadGzipFile, OSError) as exc:
            self.warnings.append(f"{name} is truncated or corrupted after {n} lines ({exc}); using what was read")

    def read_text(self, name: str) -> str:
        return "\n".join(self.iter_lines(name))


def looks_like_bundle(path: str | os.PathLike[str]) -> bool:
    return (Path(path) / MANIFEST).is_file()


# --------------------------------------------------------------------------- writing


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary name and a rename."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


class BundleWriter:
    """Creates a bundle directory and keeps its manifest current as collectors finish."""

    def __init__(self, root: str | os.PathLike[str], manifest: Manifest, *, force: bool = False) -> None:
        self.root = Path(root)
        self.manifest = manifest
        if self.root.exists():
            if not self.root.is_dir():
                raise OutputExists(f"{self.root} exists and is not a directory")
            if any(self.root.iterdir()) and not force:
                raise OutputExists(f"{self.root} exists and is not empty: pass --force to overwrite it")
            if force:
                for child in self.root.iterdir():
                    if child.is_file() or child.is_symlink():
                        child.unlink()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputExists(f"cannot create {self.root}: {exc.strerror or exc}") from None
        if not manifest.created:
            manifest.created = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(manifest.clock.wall_start or time.time()))
        self.save()

    def path(self, name: str) -> Path:
        check_member_name(name)
        return self.root / name

    def save(self) -> None:
        """Rewrite the manifest atomically (called whenever a collector changes state)."""
        atomic_write_bytes(self.root / MANIFEST, self.manifest.to_json().encode())

    def record(self, rec: CollectorRecord) -> None:
        """Add or replace a collector's record and persist the manifest."""
        for i, old in enumerate(self.manifest.collectors):
            if old.name == rec.name:
                self.manifest.collectors[i] = rec
                break
        else:
            self.manifest.collectors.append(rec)
        for name in rec.files:
            check_member_name(name)
        self.save()

    @contextlib.contextmanager
    def open_member(self, name: str, *, compress: bool | None = None) -> Iterator[IO[bytes]]:
        """Open a member for writing under a temporary name; renamed into place on close.

        On an exception the partial file is still renamed into place (a partial capture keeps
        what it has), and the exception propagates.
        """
        final = self.path(name)
        tmp = final.with_name(f".{final.name}.tmp")
        gz = name.endswith(".gz") if compress is None else compress
        raw = open(tmp, "wb")
        fh: IO[bytes] = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6) if gz else raw
        try:
            yield fh
        finally:
            try:
                if fh is not raw:
                    fh.close()
                raw.flush()
                os.fsync(raw.fileno())
            finally:
                raw.close()
                os.replace(tmp, final)

    def finish(self, status: str, reason: str | None = None) -> None:
        self.manifest.status = status
        self.manifest.reason = reason
        self.manifest.ended = time.monotonic()
        self.save()
