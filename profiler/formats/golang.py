"""What a Go executable says about itself (formats layer): its build info and its function table.

Two sections every Go binary keeps, even stripped (``go build -ldflags=-s -w``, ``strip``):

``.go.buildinfo``: what ``go version -m`` prints. A 32-byte header: the magic
``\\xff Go buildinf:`` (14 bytes), the pointer size (1 byte), flags (1 byte: bit 0 big-endian,
bit 1 "strings inline"). Since Go 1.18 the strings follow inline at offset 32, each a varint
length and its bytes: the Go version ("go1.19.8"), then the module info. Before 1.18 two
pointers at offset 16 point at Go string headers (address, length) elsewhere in the file.
The module info is framed by 16 sentinel bytes at each end; its lines are tab-separated:
``path`` (main package), ``mod`` (main module, version, sum), ``dep`` / ``=>`` (dependencies,
replacements), ``build`` (settings: ``-buildmode``, ``-compiler``, ``-trimpath``, ``-ldflags``,
``CGO_ENABLED``, ``GOARCH``, ``GOAMD64``, ``vcs.revision``, ...; Go 1.18+).

``.gopclntab``: the runtime's function table (the runtime needs it for tracebacks, so no
strip removes it). Header: magic (0xfffffffb Go 1.2-1.15, 0xfffffffa 1.16-1.17, 0xfffffff0
1.18-1.19, 0xfffffff1 1.20+), two zero bytes, the PC quantum, the pointer size; then words
of pointer size: for 1.18+ nfunc, nfiles, textStart, and the offsets of the function name
table, compile units, file table, pc tables and function data; for 1.16 the same without
textStart; for 1.2 only nfunc. The function table is nfunc+1 (pc, funcoff) pairs (32-bit
offsets from textStart since 1.18, pointer-size addresses before), sorted by pc, the last
pair closing the last function; each function record's second word is the offset of its name
(a NUL-terminated string) in the name table. This is what perf cannot read: a stripped Go
binary has no .symtab, and perf names its frames ``[unknown]`` (collectors/runtime/gosym.py fixes that).
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass, field

from profiler.formats.elf import Elf, ElfError
from profiler.tolerant import uvarint

BUILDINFO_MAGIC = b"\xff Go buildinf:"
_PCLN_MAGICS = {0xFFFFFFFB: "1.2", 0xFFFFFFFA: "1.16", 0xFFFFFFF0: "1.18", 0xFFFFFFF1: "1.20"}
MAX_MODINFO = 4 << 20


@dataclass
class GoBuildInfo:
    version: str  # "go1.19.8"
    path: str = ""  # the main package ("go.etcd.io/etcd/v3")
    module: str = ""  # the main module and its version ("go.etcd.io/etcd/v3 (devel)")
    settings: dict[str, str] = field(default_factory=dict)  # build settings, in the binary's order
    deps: int = 0  # dependency modules


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    try:
        return uvarint(buf, pos)
    except ValueError:
        raise ElfError("build info: a length cut short") from None


def _parse_modinfo(text: str, info: GoBuildInfo) -> None:
    if len(text) >= 33 and text[-17] == "\n":  # strip the sentinels
        text = text[16:-16]
    for line in text.splitlines():
        parts = line.split("\t")
        if parts[0] == "path" and len(parts) > 1:
            info.path = parts[1]
        elif parts[0] == "mod" and len(parts) > 2:
            info.module = f"{parts[1]} {parts[2]}"
        elif parts[0] == "dep":
            info.deps += 1
        elif parts[0] == "build" and len(parts) > 1:
            key, _, value = parts[1].partition("=")
            info.settings[key] = value


def buildinfo(elf: Elf) -> GoBuildInfo | None:
    """The Go build info of an ELF file, or None when it is not a Go binary (Go >= 1.13)."""
    sec = elf.section(".go.buildinfo")
    if sec is None:
        return None
    head = elf.read_at(sec.offset, 32)
    if len(head) < 32 or not head.startswith(BUILDINFO_MAGIC):
        return None
    ptr, flags = head[14], head[15]
    if flags & 2:  # Go 1.18+: strings inline after the header
        data = elf.read_at(sec.offset + 32, min(sec.size, MAX_MODINFO))
        n, pos = _uvarint(data, 0)
        version = data[pos:pos + n].decode("utf-8", "replace")
        pos += n
        n, pos = _uvarint(data, pos)
        modinfo = data[pos:pos + min(n, MAX_MODINFO)].decode("utf-8", "replace")
    else:  # before 1.18: pointers to Go string headers
        if ptr not in (4, 8):
            return None
        order = ">" if flags & 1 else "<"
        word = "Q" if ptr == 8 else "I"

        def gostring(addr: int) -> str:
            hdr = elf.read_vaddr(addr, 2 * ptr)
            data_addr, length = struct.unpack(order + word + word, hdr)
            if not length:
                return ""
            return elf.read_vaddr(data_addr, min(length, MAX_MODINFO)).decode("utf-8", "replace")

        vaddr, maddr = struct.unpack(order + word + word, head[16:16 + 2 * ptr])
        version = gostring(vaddr)
        modinfo = gostring(maddr) if maddr else ""
    if not version.startswith("go") and not version.startswith("devel"):
        return None
    info = GoBuildInfo(version=version)
    _parse_modinfo(modinfo, info)
    return info


# --------------------------------------------------------------------------- the function table


@dataclass
class FuncTable:
    """Go functions by address: ``starts`` sorted, ``ends`` and ``names`` alongside."""

    starts: list[int]
    ends: list[int]
    names: list[str]
    format: str  # the pclntab version ("1.20")

    def lookup(self, addr: int) -> tuple[str, int] | None:
        """(function name, offset into it) of a link-time address, or None."""
        i = bisect.bisect_right(self.starts, addr) - 1
        if i < 0 or addr >= self.ends[i]:
            return None
        return self.names[i], addr - self.starts[i]

    def __len__(self) -> int:
        return len(self.starts)


def functable(elf: Elf) -> FuncTable | None:
    """The functions of a Go binary from its .gopclntab, or None (not Go, or a format we do not know)."""
    sec = elf.section(".gopclntab")
    if sec is None:
        return None
    data = elf.section_data(sec)
    if len(data) < 16 or data[4] != 0 or data[5] != 0 or data[6] not in (1, 2, 4) or data[7] not in (4, 8):
        return None
    ptr = data[7]
    order = "<" if elf.endian == "<" else ">"
    magic = struct.unpack_from(order + "I", data)[0]
    ver = _PCLN_MAGICS.get(magic)
    if ver is None:
        return None
    word = "Q" if ptr == 8 else "I"

    def w(i: int) -> int:
        return int(struct.unpack_from(order + word, data, 8 + i * ptr)[0])

    text = elf.section(".text")
    text_addr = text.addr if text is not None else 0
    try:
        if ver in ("1.18", "1.20"):
            nfunc = w(0)
            header_text = w(2)
            nametab, ftab = w(3), w(7)
            # textStart in the header is the link-time runtime.text; a PIE may hold it unrelocated (0)
            start = header_text if header_text and text is not None and text.addr <= header_text < text.addr + text.size \
                else text_addr
            raw = struct.unpack_from(f"{order}{2 * (nfunc + 1)}I", data, ftab)
            pcs = [start + raw[2 * i] for i in range(nfunc + 1)]
            funcoffs = [raw[2 * i + 1] for i in range(nfunc)]
            funcdata = ftab
            name_at = 4  # _func{entryOff uint32; nameOff int32; ...}
        elif ver == "1.16":
            nfunc = w(0)
            nametab, ftab = w(2), w(6)
            raw = struct.unpack_from(f"{order}{2 * (nfunc + 1)}{word}", data, ftab)
            pcs = [raw[2 * i] for i in range(nfunc + 1)]
            funcoffs = [raw[2 * i + 1] for i in range(nfunc)]
            funcdata = ftab
            name_at = ptr  # _func{entry uintptr; nameoff int32; ...}
        else:
            nfunc = w(0)
            nametab = 0
            ftab = 8 + ptr
            raw = struct.unpack_from(f"{order}{2 * nfunc + 1}{word}", data, ftab)
            pcs = [raw[2 * i] for i in range(nfunc)] + [raw[2 * nfunc]]
            funcoffs = [raw[2 * i + 1] for i in range(nfunc)]
            funcdata = 0
            name_at = ptr
        names = []
        for off in funcoffs:
            nameoff = struct.unpack_from(order + "i", data, funcdata + off + name_at)[0]
            a = nametab + nameoff
            end = data.find(b"\0", a, a + 4096)
            names.append(data[a:end if end >= 0 else a].decode("utf-8", "replace") or "[unknown]")
    except struct.error:
        raise ElfError(f"{elf.path}: .gopclntab is cut short or corrupt") from None
    return FuncTable(starts=pcs[:-1], ends=pcs[1:], names=names, format=ver)
