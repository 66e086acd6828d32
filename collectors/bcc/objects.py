"""BPF objects built once and loaded as they are (collectors layer): no compiler at capture time.

Compiling a program with bcc runs clang inside the tool: 0.25 s per program on an idle host,
seconds on a busy one. The programs in collectors/bcc/bpf/ take nothing from the capture at
compile time (its start, slot length and targets are written to their `cfg` map; map sizes are
set when the maps are created), so their bytecode is the same for every capture on every host
whose tracepoints have the same layout. An *object* is that bytecode with what loading it needs:

- the maps, by name, with their type, key and value sizes (max_entries is the collector's);
- each program's instructions, and where each one loads a map (the instructions that bcc
  filled with a map's file descriptor are remembered by map name and filled in again);
- the layout of every tracepoint it reads (field, offset, size, signed), as the kernel that
  built it stated it in tracefs: bcc compiled the field offsets into the instructions.

``load`` checks the running kernel's tracepoint layouts against the object's (a single field
that moved and the object is not used: bcc compiles the program instead, with the reason said),
creates the maps, fills their descriptors in, and loads the programs with bpf(); nothing of
libbcc runs. The objects shipped with the tool are in collectors/bcc/bpf/objects.json, made by
``python -m profiler.collectors.bcc.objects build`` (root, bcc and kernel headers;
docs/bcc.md); an object whose source changed since is *stale* and not used either.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import platform
import re
import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from profiler.collectors.bcc import bpfsys

FORMAT = "profiler.bpf-objects"
VERSION = 1
OBJECTS_FILE = "objects.json"
_LD_IMM64 = 0x18
_PSEUDO_MAP_FD = 1


@dataclass(frozen=True)
class Program:
    """One C source and what it attaches to; ``sizes`` are the map-size defines bcc needs to compile.

    ``raw_since``: the source also builds (with -DPF_RAW) a variant attached to the *raw*
    tracepoints, whose arguments are as the program reads them from that kernel version on;
    its object is named ``SOURCE+raw``. Raw tracepoint programs do not keep other BPF programs
    off the CPU while they run (classic ones do: docs/bcc.md), so they are preferred.
    """

    source: str
    tracepoints: tuple[tuple[str, str], ...]  # (category:event, function)
    sizes: tuple[tuple[str, int], ...]  # (define, default entries), for compiling only
    raw_since: tuple[int, int] | None = None
    raw_as: tuple[tuple[str, str], ...] = ()  # the raw build attaches to another tracepoint than the classic


PROGRAMS: dict[str, Program] = {p.source: p for p in (
    Program("syscalls.c", (("raw_syscalls:sys_enter", "pf_sys_enter"), ("raw_syscalls:sys_exit", "pf_sys_exit")),
            (("MAX_THREADS", 16384), ("COUNT_ENTRIES", 65536)), raw_since=(4, 17)),
    Program("blockio.c", (("block:block_rq_issue", "pf_rq_issue"), ("block:block_rq_complete", "pf_rq_complete")),
            (("MAX_INFLIGHT", 16384), ("HIST_ENTRIES", 65536), ("TASK_ENTRIES", 8192))),
    # sched_switch's raw arguments gained prev_state in Linux 5.18
    Program("offcpu.c", (("sched:sched_switch", "pf_sched_switch"),),
            (("USER_STACKS", 16384), ("KERNEL_STACKS", 8192), ("BLOCKED_ENTRIES", 65536), ("MAX_THREADS", 16384)),
            raw_since=(5, 18)),
    # classic only: syscalls:*_futex programs run on futex calls alone; attached raw to
    # raw_syscalls they would run on every syscall of the host (measured: +36 ns a getppid)
    Program("futex.c", (("syscalls:sys_enter_futex", "pf_futex_enter"), ("syscalls:sys_exit_futex", "pf_futex_exit")),
            (("USER_STACKS", 16384), ("WAIT_ENTRIES", 32768), ("LOCK_ENTRIES", 16384), ("MAX_THREADS", 16384))),
    # the live view's sampler: a perf_event program on every CPU's cpu-clock ("perf:" events)
    Program("oncpu.c", (("perf:cpu-clock", "pf_oncpu"),),
            (("COUNT_ENTRIES", 32768), ("USER_STACKS", 16384), ("KERNEL_STACKS", 8192))),
)}
RAW = "+raw"


def variants() -> list[str]:
    """Every object name: each source, and SOURCE+raw for those with a raw build."""
    out = []
    for p in PROGRAMS.values():
        out.append(p.source)
        if p.raw_since is not None:
            out.append(p.source + RAW)
    return sorted(out)


def kernel_version() -> tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", platform.release())
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def preferred(source: str) -> str:
    """The object name to load for a program here: its raw build where this kernel gives the raw
    arguments it reads, else the classic one."""
    since = PROGRAMS[source].raw_since
    return source + RAW if since is not None and kernel_version() >= since else source


class ObjectUnusable(Exception):
    """This object cannot be loaded here as it is (stale, another tracepoint layout, refused):
    the message says why, and the caller compiles the program instead."""


def _data(name: str) -> str:
    """The text of collectors/bcc/bpf/NAME (package data). Read beside this module where the package
    is files on disk; importlib.resources (which with what it imports costs the bcc helper 15 ms of
    CPU at every capture's start, seconds' worth on a saturated host) only where it is not."""
    try:
        with open(os.path.join(os.path.dirname(__file__), "bpf", name), encoding="utf-8") as fh:
            return fh.read()
    except OSError:
        import importlib.resources

        return (importlib.resources.files("profiler.collectors.bcc") / "bpf" / name).read_text(encoding="utf-8")


def program_source(name: str) -> str:
    """The text of collectors/bcc/bpf/NAME (shipped as package data; NAME+raw: the same with
    PF_RAW defined first), with ``#include "common.h"`` replaced by the shared helpers' text
    (bcc compiles one string, so the include is done here)."""
    raw = name.endswith(RAW)
    name = name.removesuffix(RAW)
    text = _data(name).replace('#include "common.h"\n', _data("common.h"))
    return ("#define PF_RAW 1\n" + text) if raw else text


def source_digest(name: str) -> str:
    return hashlib.sha256(program_source(name).encode()).hexdigest()


# --------------------------------------------------------------------------- tracepoint layouts

_FIELD = re.compile(r"^\s*field:(.*?);\s*offset:(\d+);\s*size:(\d+);\s*signed:(\d+);", re.M)


def tracepoint_layout(tracefs: str, tp: str) -> list[list[Any]]:
    """[[declaration, offset, size, signed], ...] of a tracepoint, from its tracefs format file."""
    category, _, event = tp.partition(":")
    with open(os.path.join(tracefs, "events", category, event, "format")) as fh:
        text = fh.read()
    return [[" ".join(d.split()), int(o), int(s), int(g)] for d, o, s, g in _FIELD.findall(text)]


# --------------------------------------------------------------------------- the object


@dataclass
class MapSpec:
    name: str
    type: int
    key_size: int
    value_size: int
    max_entries: int
    flags: int


@dataclass
class ProgSpec:
    name: str
    tracepoint: str
    insns: bytes
    maps_at: list[tuple[int, str]]  # (instruction index of an ld_imm64 map load, map name)
    raw: bool = False  # attached to the raw tracepoint (a BPF_PROG_TYPE_RAW_TRACEPOINT program)

    @property
    def perf_event(self) -> bool:
        """A BPF_PROG_TYPE_PERF_EVENT program on a software event of every CPU ("perf:cpu-clock")."""
        return self.tracepoint.startswith("perf:")


@dataclass
class BpfObject:
    source: str
    digest: str
    maps: list[MapSpec]
    progs: list[ProgSpec]
    layouts: dict[str, list[list[Any]]]
    built: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source, "source_sha256": self.digest, "built": self.built,
            "maps": [vars(m) for m in self.maps],
            "programs": [{"name": p.name, "tracepoint": p.tracepoint, "maps_at": [list(x) for x in p.maps_at],
                          "raw": p.raw, "insns": base64.b64encode(p.insns).decode()} for p in self.progs],
            "tracepoints": self.layouts,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> BpfObject:
        return cls(
            source=str(d["source"]), digest=str(d["source_sha256"]), built=dict(d.get("built") or {}),
            maps=[MapSpec(**m) for m in d["maps"]],
            progs=[ProgSpec(name=p["name"], tracepoint=p["tracepoint"], insns=base64.b64decode(p["insns"]),
                            maps_at=[(int(i), str(n)) for i, n in p["maps_at"]], raw=bool(p.get("raw")))
                   for p in d["programs"]],
            layouts={k: [list(f) for f in v] for k, v in d["tracepoints"].items()},
        )


def map_loads(insns: bytes) -> Iterator[tuple[int, int]]:
    """(instruction index, fd) of every 64-bit immediate load of a map's file descriptor."""
    i = 0
    while i + 16 <= len(insns):
        op, regs, _off, imm = struct.unpack_from("<BBhi", insns, i)
        if op == _LD_IMM64:
            if regs >> 4 == _PSEUDO_MAP_FD:
                yield i // 8, imm
            i += 16  # the load takes two instruction slots
        else:
            i += 8


@contextlib.contextmanager
def _stderr_to(path: str) -> Iterator[None]:
    saved = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.dup2(fd, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


def _first_error(text: str) -> str:
    for line in text.splitlines():
        if "error" in line.lower():
            return line.strip()[:200]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:200] if lines else ""


def compile_object(source: str, tracefs: str) -> BpfObject:
    """Compile one program with bcc (clang, in this process) and keep its bytecode as an object.

    Raises ObjectUnusable with clang's first error when it does not compile.
    """
    from bcc import BPF

    raw = source.endswith(RAW)
    prog = PROGRAMS[source.removesuffix(RAW)]
    cflags = [f"-D{k}={v}" for k, v in prog.sizes]
    import tempfile  # compiling only: the helper's start imports none of it

    with tempfile.TemporaryDirectory(prefix="profiler-bcc-") as tmp:
        err = os.path.join(tmp, "stderr")
        try:
            with _stderr_to(err):
                b = BPF(text=program_source(source).encode(), cflags=cflags)
        except Exception as exc:
            with open(err, errors="replace") as fh:
                why = _first_error(fh.read()) or str(exc)
            raise ObjectUnusable(f"bcc could not compile {source}: {why}") from None
    try:
        maps: dict[str, MapSpec] = {}
        progs = []
        raw_as = dict(prog.raw_as) if raw else {}
        for tp, fn in prog.tracepoints:
            tp = raw_as.get(tp, tp)
            code = bytearray(b.dump_func(fn.encode()))
            at = []
            for idx, fd in map_loads(bytes(code)):
                mtype, ks, vs, me, flags, name = bpfsys.map_info(fd)
                maps.setdefault(name, MapSpec(name, mtype, ks, vs, me, flags))
                at.append((idx, name))
                struct.pack_into("<i", code, idx * 8 + 4, 0)  # this process's fd: filled in at load
            progs.append(ProgSpec(fn, tp, bytes(code), at, raw))
        # a raw program reads no tracepoint field: only the classic build depends on their layout
        layouts = {} if raw else {tp: tracepoint_layout(tracefs, tp) for tp, _fn in prog.tracepoints
                                  if not tp.startswith("perf:")}
    finally:
        b.cleanup()
    import platform

    from bcc import version

    built = {"bcc": str(version.__version__), "kernel": platform.release(), "machine": platform.machine()}
    return BpfObject(source, source_digest(source), sorted(maps.values(), key=lambda m: m.name), progs, layouts, built)


# --------------------------------------------------------------------------- loading


@dataclass
class Loaded:
    """An object's maps and programs in the kernel (file descriptors of this process)."""

    maps: dict[str, bpfsys.Map]
    progs: dict[str, int]  # function name -> program fd
    attached: list[int] = field(default_factory=list)  # perf event fds

    def detach(self) -> None:
        for fd in self.attached:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.attached = []

    def close(self) -> None:
        self.detach()
        for fd in self.progs.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self.progs = {}
        for m in self.maps.values():
            with contextlib.suppress(OSError):
                m.close()
        self.maps = {}


def check(obj: BpfObject, tracefs: str) -> None:
    """Raise ObjectUnusable when the object cannot run here as built: stale, or a tracepoint laid out otherwise."""
    if obj.digest != source_digest(obj.source):
        raise ObjectUnusable(f"the prebuilt {obj.source} is stale (its source changed since it was built)")
    if not bpfsys.supported():
        raise ObjectUnusable(f"no bpf() syscall number known for this machine ({obj.built.get('machine')} built it)")
    for tp, want in obj.layouts.items():
        try:
            have = tracepoint_layout(tracefs, tp)
        except OSError as exc:
            raise ObjectUnusable(f"tracepoint {tp}: {exc.strerror or exc}") from None
        if have != want:
            diff = next((f"{h} here, {w} built" for h, w in zip(have, want, strict=False) if h != w),
                        f"{len(have)} fields here, {len(want)} built")
            raise ObjectUnusable(f"tracepoint {tp} is laid out otherwise on this kernel ({diff})")


def load(obj: BpfObject, entries: dict[str, int], tracefs: str) -> Loaded:
    """Create the maps (``entries``: max_entries by map name, else as built) and load the programs."""
    check(obj, tracefs)
    loaded = Loaded(maps={}, progs={})
    try:
        for m in obj.maps:
            n = int(entries.get(m.name, m.max_entries))
            fd = bpfsys.map_create(m.type, m.key_size, m.value_size, n, m.flags, m.name)
            loaded.maps[m.name] = bpfsys.Map(fd, m.name, m.type, m.key_size, m.value_size, n)
        for p in obj.progs:
            code = bytearray(p.insns)
            for idx, name in p.maps_at:
                struct.pack_into("<i", code, idx * 8 + 4, loaded.maps[name].fd)
            try:
                kind = (bpfsys.PROG_PERF_EVENT if p.perf_event else
                        bpfsys.PROG_RAW_TRACEPOINT if p.raw else bpfsys.PROG_TRACEPOINT)
                loaded.progs[p.name] = bpfsys.prog_load(kind, bytes(code), p.name)
            except OSError as exc:
                raise ObjectUnusable(f"the kernel refused the prebuilt {p.name}: {exc.strerror or exc}") from None
    except BaseException:
        loaded.close()
        raise
    return loaded


def attach(obj: BpfObject, loaded: Loaded, tracefs: str, freq: int = 49) -> None:
    """Attach every program (``freq``: samples per second per CPU of a perf_event program)."""
    for p in obj.progs:
        if p.perf_event:
            for cpu in bpfsys.online_cpus():
                loaded.attached.append(bpfsys.attach_cpu_clock(loaded.progs[p.name], cpu, freq))
            continue
        if p.raw:
            loaded.attached.append(bpfsys.attach_raw_tracepoint(loaded.progs[p.name], p.tracepoint.partition(":")[2]))
            continue
        tp_id = bpfsys.tracepoint_id(tracefs, p.tracepoint)
        loaded.attached.append(bpfsys.attach_tracepoint(loaded.progs[p.name], tp_id))


def shipped() -> dict[str, BpfObject]:
    """The objects shipped with the tool, by source name ({} when there are none)."""
    try:
        d = json.loads(_data(OBJECTS_FILE))
    except (OSError, ValueError):
        return {}
    if d.get("format") != FORMAT or d.get("version") != VERSION:
        return {}
    return {o["source"]: BpfObject.from_json(o) for o in d.get("objects", [])}


def build_all(tracefs: str) -> dict[str, Any]:
    return {"format": FORMAT, "version": VERSION,
            "objects": [compile_object(name, tracefs).to_json() for name in variants()]}


def main(argv: list[str]) -> int:
    """``python -m profiler.collectors.bcc.objects build [OUT]``: compile every program with bcc
    and write the objects (default: the package's bpf/objects.json)."""
    if not argv or argv[0] != "build":
        print("usage: python -m profiler.collectors.bcc.objects build [OUT]", file=sys.stderr)
        return 2
    from profiler.collectors import host

    tracefs = host.tracefs_path()
    if tracefs is None:
        print("objects: tracefs is not mounted", file=sys.stderr)
        return 1
    out = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), "bpf", OBJECTS_FILE)
    data = build_all(tracefs)
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
        fh.write("\n")
    print(f"objects: wrote {len(data['objects'])} objects to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
