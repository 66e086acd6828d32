"""Names for the frames of stripped Go binaries in perf script output (collectors layer).

Go keeps frame pointers (amd64 since Go 1.7; arm64 in later releases), so ``perf record --call-graph
fp`` walks goroutine stacks as well as C ones. Naming the frames is the problem: perf reads
.symtab (and .dynsym), and a Go binary built with ``-ldflags=-s -w`` or passed through
``strip`` (Debian's etcd, most release builds) has neither, so every Go frame comes out as
``[unknown] (/usr/bin/etcd)``. The runtime's own table, .gopclntab, is always there
(profiler/formats/golang.py reads it).

:func:`symbolizers` prepares, while the targets are alive, one function table per stripped Go
executable of the targets (read through ``/proc/PID/exe``, so a container's binary or a deleted
one works too), keyed by the path perf prints (the mapping's path in ``/proc/PID/maps``).
:class:`Rewriter` sits between ``perf script`` and the bundle member and names those frames:
perf 6.x prints an unknown frame's address as an offset in the file (``map_ip``), which the
binary's loadable segments turn into the link-time address the table is keyed by, for
executables and PIEs alike. Lines of other binaries pass through untouched; a chunk holding
none of the paths is written as is (one substring test), so the cost falls on Go frames only.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from typing import IO

from profiler.formats.elf import PT_LOAD, Elf, ElfError
from profiler.formats.golang import FuncTable, functable


@dataclass
class GoSymbols:
    """One stripped Go executable: its function table and its segments (file offset -> address)."""

    path: str  # as perf prints it (the mapping's path)
    table: FuncTable
    segments: list[tuple[int, int, int]]  # (file offset, size, link-time address) of each PT_LOAD

    def name(self, file_offset: int) -> tuple[str, int] | None:
        for off, size, vaddr in self.segments:
            if off <= file_offset < off + size:
                return self.table.lookup(vaddr + file_offset - off)
        return None


def _exe_mapping_path(pid: int) -> str | None:
    """The path /proc/PID/maps (and so perf) shows for the executable's mappings."""
    try:
        exe_stat = os.stat(f"/proc/{pid}/exe")
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                parts = line.split(None, 5)
                if len(parts) < 6 or ":" not in parts[3]:
                    continue
                if int(parts[4]) == exe_stat.st_ino and parts[5].startswith("/"):
                    return parts[5].rstrip("\n")
    except (OSError, ValueError):
        return None
    return None


def load(pid: int) -> GoSymbols | None:
    """The function table of a target whose executable is a Go binary without .symtab, else None."""
    path = _exe_mapping_path(pid)
    if path is None:
        return None
    try:
        with Elf(f"/proc/{pid}/exe") as elf:
            if elf.has_symtab() or elf.section(".gopclntab") is None:
                return None
            table = functable(elf)
            if table is None or not len(table):
                return None
            segs = [(s.offset, s.filesz, s.vaddr) for s in elf.segments if s.type == PT_LOAD]
    except (ElfError, OSError):
        return None
    return GoSymbols(path=path, table=table, segments=segs)


def symbolizers(pids: list[int]) -> dict[str, GoSymbols]:
    """Function tables of the targets' stripped Go executables, by the path perf prints."""
    out: dict[str, GoSymbols] = {}
    for pid in pids:
        with contextlib.suppress(Exception):  # naming frames is a bonus: never fail a capture on it
            syms = load(pid)
            if syms is not None and syms.path not in out:
                out[syms.path] = syms
    return out


class Rewriter:
    """A file-like writer naming ``[unknown]`` frames of the given Go binaries, then writing to ``out``.

    ``symoff``: perf script prints ``+0x..`` offsets (the ``symoff`` field), so named frames get one too.
    """

    def __init__(self, out: IO[bytes], symbols: dict[str, GoSymbols], symoff: bool = True) -> None:
        self.out = out
        self.symbols = symbols
        self.symoff = symoff
        self.named = 0
        self.unnamed = 0
        self._rest = b""
        alts = b"|".join(re.escape(p.encode()) for p in sorted(symbols, key=len, reverse=True))
        self._needles = [p.encode() for p in symbols]
        self._re = re.compile(rb"^([ \t]+)([0-9a-f]+) \[unknown\] \((" + alts + rb")\)$", re.M)

    def _sub(self, m: re.Match[bytes]) -> bytes:
        syms = self.symbols[m.group(3).decode()]
        found = syms.name(int(m.group(2), 16))
        if found is None:
            self.unnamed += 1
            return m.group(0)
        self.named += 1
        name, off = found
        label = f"{name}+{off:#x}" if self.symoff else name
        return m.group(1) + m.group(2) + b" " + label.encode("utf-8", "replace") + b" (" + m.group(3) + b")"

    def write(self, chunk: bytes) -> int:
        data = self._rest + chunk
        cut = data.rfind(b"\n") + 1
        self._rest = data[cut:]
        body = data[:cut]
        if body and any(n in body for n in self._needles):
            body = self._re.sub(self._sub, body)
        if body:
            self.out.write(body)
        return len(chunk)

    def flush(self) -> None:
        if self._rest:
            self.out.write(self._re.sub(self._sub, self._rest))
            self._rest = b""
        self.out.flush()

    def stats(self) -> dict[str, int]:
        return {"go_frames_named": self.named, "go_frames_unnamed": self.unnamed}
