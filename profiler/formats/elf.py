"""A small ELF reader (formats layer): header, section headers, notes, bytes at an address.

Enough to tell what runtime built a target's executable (collectors/runtime/detect.py) and to read a
Go binary's symbol table (collectors/runtime/gosym.py) without binutils: 32/64-bit, either byte order.
Sections are read lazily through one open file; nothing is mapped or loaded whole unless asked.
A file that is not ELF, or is cut short, raises :class:`ElfError` (never struct.error).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import BinaryIO

ET_EXEC, ET_DYN = 2, 3
SHT_SYMTAB, SHT_NOTE, SHT_NOBITS, SHT_DYNSYM, SHT_DYNAMIC = 2, 7, 8, 11, 6
PT_LOAD = 1
MAX_SECTION = 512 << 20  # refuse to read a section larger than this (a corrupt header)


class ElfError(Exception):
    pass


@dataclass(frozen=True)
class Section:
    index: int
    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    info: int
    align: int
    entsize: int


@dataclass(frozen=True)
class Segment:
    type: int
    flags: int
    offset: int
    vaddr: int
    filesz: int
    memsz: int


class Elf:
    """An ELF file opened for reading; use as a context manager or call close()."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        try:
            self._fh: BinaryIO = open(self.path, "rb")  # noqa: SIM115 - closed in close()
        except OSError as exc:
            raise ElfError(f"cannot open {self.path}: {exc.strerror or exc}") from None
        try:
            self._read_header()
        except BaseException:
            self._fh.close()
            raise

    def __enter__(self) -> Elf:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._fh.close()

    # ------------------------------------------------------------------ header
    def _read_header(self) -> None:
        ident = self.read_at(0, 64)
        if len(ident) < 52 or ident[:4] != b"\x7fELF":
            raise ElfError(f"{self.path} is not an ELF file")
        cls, data = ident[4], ident[5]
        if cls not in (1, 2) or data not in (1, 2):
            raise ElfError(f"{self.path}: unknown ELF class or byte order")
        self.bits = 64 if cls == 2 else 32
        self.endian = "<" if data == 1 else ">"
        e = self.endian
        if self.bits == 64:
            (self.type, self.machine, _v, self.entry, self.phoff, self.shoff, _fl, _ehs, self.phentsize,
             self.phnum, self.shentsize, self.shnum, self.shstrndx) = struct.unpack(e + "HHIQQQIHHHHHH", ident[16:64])
        else:
            (self.type, self.machine, _v, self.entry, self.phoff, self.shoff, _fl, _ehs, self.phentsize,
             self.phnum, self.shentsize, self.shnum, self.shstrndx) = struct.unpack(e + "HHIIIIIHHHHHH", ident[16:52])
        self.header = ident[: 64 if self.bits == 64 else 52]
        self._sections: list[Section] | None = None
        self._segments: list[Segment] | None = None

    @property
    def ptr_size(self) -> int:
        return 8 if self.bits == 64 else 4

    def read_at(self, offset: int, size: int) -> bytes:
        if size < 0 or offset < 0:
            raise ElfError(f"{self.path}: negative offset or size")
        self._fh.seek(offset)
        return self._fh.read(size)

    # ------------------------------------------------------------------ sections
    @property
    def sections(self) -> list[Section]:
        if self._sections is None:
            self._sections = self._read_sections()
        return self._sections

    def _read_sections(self) -> list[Section]:
        if not self.shoff or not self.shnum:
            return []
        size = self.shentsize * self.shnum
        raw = self.read_at(self.shoff, size)
        if len(raw) < size:
            raise ElfError(f"{self.path}: section headers cut short")
        fmt = self.endian + ("IIQQQQIIQQ" if self.bits == 64 else "IIIIIIIIII")
        if struct.calcsize(fmt) > self.shentsize:
            raise ElfError(f"{self.path}: section header entries of {self.shentsize} bytes")
        # the same ten fields in both classes, 4 or 8 bytes wide
        rows = [struct.unpack_from(fmt, raw, i * self.shentsize) for i in range(self.shnum)]
        names = b""
        if self.shstrndx < len(rows):
            _, _, _, _, off, sz, *_ = rows[self.shstrndx]
            names = self.read_at(off, min(sz, MAX_SECTION))
        out = []
        for i, (name, typ, flags, addr, off, sz, link, info, align, ents) in enumerate(rows):
            end = names.find(b"\0", name)
            label = names[name:end if end >= 0 else None].decode("ascii", "replace") if name < len(names) else ""
            out.append(Section(i, label, typ, flags, addr, off, sz, link, info, align, ents))
        return out

    def section(self, name: str) -> Section | None:
        return next((s for s in self.sections if s.name == name), None)

    def section_data(self, sec: Section, limit: int = MAX_SECTION) -> bytes:
        if sec.type == SHT_NOBITS:
            return b""
        if sec.size > limit:
            raise ElfError(f"{self.path}: section {sec.name} is {sec.size} bytes, more than the {limit} read")
        data = self.read_at(sec.offset, sec.size)
        if len(data) < sec.size:
            raise ElfError(f"{self.path}: section {sec.name} cut short")
        return data

    # ------------------------------------------------------------------ segments
    @property
    def segments(self) -> list[Segment]:
        if self._segments is None:
            out = []
            if self.phoff and self.phnum:
                size = self.phentsize * self.phnum
                raw = self.read_at(self.phoff, size)
                if len(raw) < size:
                    raise ElfError(f"{self.path}: program headers cut short")
                for i in range(self.phnum):
                    if self.bits == 64:
                        typ, flags, off, vaddr, _pa, filesz, memsz, _al = struct.unpack_from(
                            self.endian + "IIQQQQQQ", raw, i * self.phentsize)
                    else:
                        typ, off, vaddr, _pa, filesz, memsz, flags, _al = struct.unpack_from(
                            self.endian + "IIIIIIII", raw, i * self.phentsize)
                    out.append(Segment(typ, flags, off, vaddr, filesz, memsz))
            self._segments = out
        return self._segments

    def read_vaddr(self, vaddr: int, size: int) -> bytes:
        """Bytes at a link-time virtual address (from the loadable segment holding it)."""
        for seg in self.segments:
            if seg.type == PT_LOAD and seg.vaddr <= vaddr and vaddr + size <= seg.vaddr + seg.filesz:
                return self.read_at(seg.offset + vaddr - seg.vaddr, size)
        for sec in self.sections:  # an object without program headers
            if sec.addr and sec.type != SHT_NOBITS and sec.addr <= vaddr and vaddr + size <= sec.addr + sec.size:
                return self.read_at(sec.offset + vaddr - sec.addr, size)
        raise ElfError(f"{self.path}: address {vaddr:#x} is not in the file")

    # ------------------------------------------------------------------ notes and friends
    def notes(self) -> list[tuple[str, int, bytes]]:
        """(owner name, type, descriptor) of every note section."""
        out: list[tuple[str, int, bytes]] = []
        for sec in self.sections:
            if sec.type != SHT_NOTE:
                continue
            data = self.section_data(sec, 1 << 20)
            pos = 0
            while pos + 12 <= len(data):
                namesz, descsz, typ = struct.unpack_from(self.endian + "III", data, pos)
                pos += 12
                name = data[pos:pos + namesz].rstrip(b"\0").decode("ascii", "replace")
                pos += (namesz + 3) & ~3
                desc = data[pos:pos + descsz]
                pos += (descsz + 3) & ~3
                out.append((name, typ, desc))
        return out

    def build_id(self) -> str | None:
        """The GNU build id (hex), as perf and debuginfod name files."""
        for name, typ, desc in self.notes():
            if name == "GNU" and typ == 3 and desc:
                return desc.hex()
        return None

    def has_symtab(self) -> bool:
        return any(s.type == SHT_SYMTAB and s.size > 0 for s in self.sections)

    def needed(self) -> list[str]:
        """DT_NEEDED libraries of a dynamically linked file."""
        dyn = next((s for s in self.sections if s.type == SHT_DYNAMIC), None)
        if dyn is None or dyn.link >= len(self.sections):
            return []
        strtab = self.section_data(self.sections[dyn.link], 16 << 20)
        data = self.section_data(dyn, 1 << 20)
        fmt = self.endian + ("qQ" if self.bits == 64 else "iI")
        step = struct.calcsize(fmt)
        out = []
        for pos in range(0, len(data) - step + 1, step):
            tag, val = struct.unpack_from(fmt, data, pos)
            if tag == 0:
                break
            if tag == 1 and val < len(strtab):  # DT_NEEDED
                end = strtab.find(b"\0", val)
                out.append(strtab[val:end if end >= 0 else None].decode("utf-8", "replace"))
        return out

    def comment(self) -> list[str]:
        """The .comment strings (compiler versions: "GCC: (Debian 12.2.0-14) 12.2.0", "rustc version ...")."""
        sec = self.section(".comment")
        if sec is None:
            return []
        data = self.section_data(sec, 1 << 20)
        return [s.decode("utf-8", "replace") for s in data.split(b"\0") if s.strip()]
