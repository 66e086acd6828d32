"""Tolerant, accounted reading of text and gzip bytes (core layer: imports nothing of ours).

Every text or gzip input goes through :class:`TolerantReader`: standalone inputs (through
``profiler.inputs``) and bundle members (through ``profiler.bundle.Bundle``). It never raises on
damaged data; it reads as far as the data can be read and writes down what it met in the
input's :class:`ReadLog`, which the verbs print as warnings and the reports show (capture
health, warnings, the JSON's ``reading`` section). What it does (docs/bundle.md#damaged-members):

- gzip is recognised by its magic, not by the file name; members concatenated (``cat a.gz b.gz``)
  are read one after the other;
- a gzip stream cut off (a capture killed while writing) is read up to the cut; every byte that
  inflates is delivered, the bytes of the chunk at the cut included;
- corrupt deflate data: everything before the corruption is delivered, the rest is lost (deflate
  cannot resynchronise), noted with the offset;
- a wrong CRC or length in a member's trailer is noted; the data is kept (it inflated cleanly);
- bytes after the last member that are not another member are ignored and noted (zero padding
  silently, as gzip(1) does); at most :data:`TRAILING_LIMIT` of them are read (a member grown to a
  terabyte of holes by ``truncate`` is not read to its end);
- text mode: CRLF line ends become LF; a line longer than :data:`LINE_LIMIT` stops the reading
  there (the input is not text), noted;
- a stream that inflates to more than :data:`BOMB_RATIO` times its compressed size beyond
  :data:`BOMB_FLOOR` stops there (a decompression bomb), noted; memory stays flat: data is
  inflated in chunks of at most :data:`CHUNK` bytes whatever the input;
- an operating-system error while reading (EIO, a directory) ends the input there, noted.

Readers count what they skip (lines that do not parse) into the same log in bulk
(:meth:`ReadLog.skip`): one call per chunk or per input, never per line.

Binary readers share :func:`uvarint` (pprof's protobuf, Go's build information): it raises on a
number cut short, and each reader names that in its own terms.
"""

from __future__ import annotations

import io
import re
import struct
import zlib
from dataclasses import dataclass, field
from typing import IO, Any

__all__ = [
    "BOMB_FLOOR", "BOMB_RATIO", "CHUNK", "GZIP_MAGIC", "LINE_LIMIT", "ReadLog", "TolerantReader", "open_tolerant",
    "human_bytes", "squeeze_blank_lines", "uvarint",
]

GZIP_MAGIC = b"\x1f\x8b"
CHUNK = 1 << 20  # bytes inflated (or read) at a time
LINE_LIMIT = 16 << 20  # a text line longer than this is not text: reading stops
BOMB_RATIO = 200  # inflating beyond this ratio (real captures: 10-60x; gzip of zeros: 230-1030x) ...
BOMB_FLOOR = 16 << 20  # ... past this many bytes stops the reading
_RAW_CHUNK = 256 << 10  # compressed bytes fed to zlib at a time
TRAILING_LIMIT = 16 << 20  # bytes after the last gzip member read (to tell padding from garbage)


def uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """One unsigned LEB128 number (protobuf's varint, Go's uvarint) at ``pos``: (value, next pos).
    ValueError when the bytes end inside it or it runs past 10 bytes (64 bits): callers name it."""
    result = shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise ValueError("cut inside a number")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("a number longer than 10 bytes")


def human_bytes(n: int) -> str:
    """12345678 -> '12.3 MB' (decimal units, as `ls -h --si`)."""
    if n < 1000:
        return f"{n} bytes"
    for unit in ("kB", "MB", "GB", "TB"):
        n_f = n / 1000
        if n_f < 1000 or unit == "TB":
            return f"{n_f:.1f} {unit}"
        n = int(n_f)
    return f"{n} bytes"  # pragma: no cover


@dataclass
class ReadLog:
    """What reading one input met: damage (a cut, bad CRC, trailing garbage, a limit) and lines
    skipped by the parser, by kind."""

    name: str
    compressed: bool = False
    bytes_in: int = 0  # bytes read from the file (compressed size when gzip)
    bytes_out: int = 0  # bytes delivered (inflated)
    damage: list[str] = field(default_factory=list)  # one phrase per problem, in order met
    stopped: str | None = None  # why reading ended before the end of the data, if it did
    skipped: dict[str, int] = field(default_factory=dict)  # kind of line -> lines skipped

    def reset(self) -> None:
        """Forget everything: the input is read again from its start."""
        self.compressed, self.bytes_in, self.bytes_out, self.stopped = False, 0, 0, None
        self.damage.clear()
        self.skipped.clear()

    def note(self, what: str) -> None:
        if what not in self.damage:
            self.damage.append(what)

    def stop(self, why: str) -> None:
        if self.stopped is None:
            self.stopped = why
        self.note(why)

    def skip(self, n: int, what: str = "lines that could not be read") -> None:
        """Count ``n`` skipped lines of one kind (call once per chunk or input, not per line)."""
        if n > 0:
            self.skipped[what] = self.skipped.get(what, 0) + int(n)

    @property
    def skipped_lines(self) -> int:
        return sum(self.skipped.values())

    @property
    def clean(self) -> bool:
        return not self.damage and not self.skipped

    def summary(self) -> str | None:
        """One line naming everything tolerated, or None when the input was read cleanly."""
        if self.clean:
            return None
        parts = list(self.damage)
        parts += [f"{what}: {n:,} skipped" for what, n in self.skipped.items()]
        return f"{self.name}: " + "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "compressed": self.compressed, "bytes_read": self.bytes_in,
                "bytes_decoded": self.bytes_out, "damage": list(self.damage), "stopped": self.stopped,
                "skipped_lines": dict(self.skipped)}


class _GzipHeaderError(Exception):
    pass


def _gzip_header_len(data: bytes) -> int | None:
    """Length of the gzip member header at the start of ``data``; None if more bytes are needed."""
    if len(data) < 10:
        return None
    if data[:2] != GZIP_MAGIC or data[2] != 8:
        raise _GzipHeaderError("not a gzip header")
    flags = data[3]
    pos = 10
    if flags & 4:  # FEXTRA
        if len(data) < pos + 2:
            return None
        pos += 2 + struct.unpack_from("<H", data, pos)[0]
    for bit in (8, 16):  # FNAME, FCOMMENT: zero-terminated
        if flags & bit:
            end = data.find(b"\0", pos)
            if end < 0:
                if len(data) - pos > 1 << 16:
                    raise _GzipHeaderError("gzip header name too long")
                return None
            pos = end + 1
    if flags & 2:  # FHCRC
        pos += 2
    return pos if len(data) >= pos else None


class TolerantReader(io.RawIOBase):
    """A read-only byte stream over ``raw`` that inflates gzip (by magic) and never raises on
    damaged data; see the module docstring. ``text`` turns on CRLF folding and the line limit."""

    def __init__(self, raw: IO[bytes], log: ReadLog, *, text: bool = True, line_limit: int = LINE_LIMIT,
                 head: bytes = b"") -> None:
        self.raw = raw
        self.log = log
        self.text = text
        self.line_limit = line_limit
        self._pending = head  # raw bytes already read from ``raw`` (sniffing), in front of the rest
        self._out = b""  # delivered bytes not yet handed out
        self._outpos = 0
        self._eof_raw = False
        self._done = False
        self._mode: str | None = None  # "plain" | "gzip"
        self._z: Any = None  # the member being inflated
        self._crc = 0
        self._size = 0
        self._members = 0
        self._cr = False  # text: a chunk ended in '\r'
        self._run = 0  # text: bytes since the last newline

    # -- io.RawIOBase

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while self._outpos >= len(self._out):
            if self._done:
                return 0
            self._out, self._outpos = self._produce(), 0
        n = min(len(b), len(self._out) - self._outpos)
        b[:n] = self._out[self._outpos : self._outpos + n]
        self._outpos += n
        return n

    def close(self) -> None:
        if not self.closed:
            try:
                self.raw.close()
            except OSError:
                pass
            super().close()

    # -- producing chunks

    def _read_raw(self, n: int) -> bytes:
        if self._pending:
            data, self._pending = self._pending[:n], self._pending[n:]
            return data
        if self._eof_raw:
            return b""
        try:
            data = self.raw.read(n)
        except OSError as exc:
            self._eof_raw = True
            self.log.stop(f"read error after {human_bytes(self.log.bytes_in)} ({exc.strerror or exc})")
            return b""
        if not data:
            self._eof_raw = True
            return b""
        self.log.bytes_in += len(data)
        return data

    def _produce(self) -> bytes:
        """The next chunk of delivered bytes (b'' is not the end: check ``_done``)."""
        if self._mode is None:
            first = self._read_raw(_RAW_CHUNK)
            self._pending = first + self._pending
            self._mode = "gzip" if first[:2] == GZIP_MAGIC else "plain"
            self.log.compressed = self._mode == "gzip"
            if self.log.bytes_in == 0 and not first:
                self._done = True
                return b""
        data = self._plain() if self._mode == "plain" else self._gzip()
        if self.text:
            if data:
                data = self._text(data)
            if self._done and self._cr:  # a lone '\r' at the very end
                data += b"\r"
                self._cr = False
        if data:
            self.log.bytes_out += len(data)
            if (self._mode == "gzip" and self.log.bytes_out > BOMB_FLOOR
                    and self.log.bytes_out > BOMB_RATIO * max(self.log.bytes_in, 1)):
                self.log.stop(f"inflates to more than {BOMB_RATIO}x its size (a decompression bomb?): "
                              f"reading stopped after {human_bytes(self.log.bytes_out)}")
                self._done = True
        return data

    def _plain(self) -> bytes:
        data = self._read_raw(CHUNK)
        if not data:
            self._done = True
        return data

    def _gzip(self) -> bytes:
        log = self.log
        while True:
            if self._z is None:
                if not self._start_member():
                    self._done = True
                    return b""
                continue
            z = self._z
            if z.unconsumed_tail:
                src = z.unconsumed_tail
            else:
                src = self._read_raw(_RAW_CHUNK)
                if not src:
                    log.note(f"truncated: the gzip stream is cut off (read up to the cut, {human_bytes(log.bytes_out)} "
                             f"decoded{'' if self._members <= 1 else f' in member {self._members}'})")
                    self._z = None
                    self._eof_raw = True
                    self._done = True
                    return b""
            saved = z.copy()
            try:
                out = z.decompress(src, CHUNK)
            except zlib.error:
                out = self._salvage(saved, src)
                log.stop(f"corrupt compressed data after {human_bytes(log.bytes_out + len(out))} decoded "
                         f"(the rest of the member cannot be read)")
                self._z = None
                self._done = True
                return out
            if out:
                self._crc = zlib.crc32(out, self._crc)
                self._size += len(out)
            if z.eof:
                self._end_member()
            if out:
                return bytes(out)

    def _salvage(self, z: Any, src: bytes) -> bytes:
        """Inflate ``src`` piece by piece from a copy made before it: every byte before the
        corrupt one comes out (a whole chunk would be lost with the exception)."""
        parts: list[bytes] = []
        step = 4096
        pos = 0
        got = 0
        while pos < len(src) and got < 16 * CHUNK:
            piece = src[pos : pos + step]
            trial = z.copy()
            try:
                out = trial.decompress(piece)
            except zlib.error:
                if step == 1:
                    break
                step = max(1, step // 16)
                continue
            parts.append(out)
            got += len(out)
            z = trial
            pos += len(piece)
            if z.eof:
                break
        out = b"".join(parts)
        if out:
            self._crc = zlib.crc32(out, self._crc)
            self._size += len(out)
        return out

    def _start_member(self) -> bool:
        """Parse the next member's header; False at the end of the data (or trailing garbage)."""
        buf = b""
        while True:
            try:
                n = _gzip_header_len(buf) if buf[:2] == GZIP_MAGIC or len(buf) < 2 else -1
            except _GzipHeaderError:
                n = -1
            if n is not None and n >= 0:
                self._pending = buf[n:] + self._pending
                self._z = zlib.decompressobj(-zlib.MAX_WBITS)
                self._crc = 0
                self._size = 0
                self._members += 1
                return True
            if n == -1:
                self._trailing(buf)
                return False
            more = self._read_raw(4096)
            if not more:
                if buf[:2] == GZIP_MAGIC or (buf == GZIP_MAGIC[:1] and not self._members):
                    self.log.note("truncated: the gzip stream ends inside a member header")
                elif buf:
                    self._trailing(buf)
                return False
            buf += more

    def _trailing(self, buf: bytes) -> None:
        """Bytes after the last member that are no member: counted, and ignored."""
        total = len(buf)
        nonzero = bool(buf.strip(b"\0"))
        while self._members and total <= TRAILING_LIMIT:
            more = self._read_raw(CHUNK)
            if not more:
                break
            total += len(more)
            nonzero = nonzero or bool(more.strip(b"\0"))
        if self._members == 0:
            self._eof_raw = True
            self.log.stop("not a gzip stream after all: nothing could be decoded")
        elif total > TRAILING_LIMIT:
            self._eof_raw = True
            self.log.note(f"more than {human_bytes(TRAILING_LIMIT)} of trailing data after the gzip data: not read")
        elif nonzero:
            self.log.note(f"{human_bytes(total)} of trailing garbage after the gzip data ignored")

    def _end_member(self) -> None:
        z = self._z
        self._z = None
        trailer = z.unused_data
        while len(trailer) < 8:
            more = self._read_raw(8 - len(trailer))
            if not more:
                break
            trailer += more
        if len(trailer) < 8:
            self.log.note("truncated: the gzip trailer (CRC and length) is missing; the data before it was kept")
            return
        crc, size = struct.unpack_from("<II", trailer)
        if crc != self._crc:
            self.log.note(f"bad CRC in gzip member {self._members} (data kept: it inflated cleanly)")
        elif size != self._size & 0xFFFFFFFF:
            self.log.note(f"wrong length in the trailer of gzip member {self._members} (data kept)")
        self._pending = trailer[8:] + self._pending

    # -- text mode

    def _text(self, data: bytes) -> bytes:
        if self._cr:
            data = b"\r" + data
            self._cr = False
        if b"\r" in data:
            if data.endswith(b"\r"):
                data = data[:-1]
                self._cr = True
            data = data.replace(b"\r\n", b"\n")
        nl = data.find(b"\n")
        if nl < 0:
            self._run += len(data)
        elif self._run + nl > self.line_limit:
            self._run += nl
            data = data[:nl]  # nothing after the over-long line is delivered
        else:
            self._run = len(data) - data.rfind(b"\n") - 1
        if self._run > self.line_limit:
            start = max(self.log.bytes_out + len(data) - self._run, 0)
            self.log.stop(f"a line longer than {self.line_limit >> 20} MiB (from byte {start:,}): not text; "
                          "reading stopped there")
            self._done = True
        return data


_BLANKS = re.compile(r"\n{3,}")


def squeeze_blank_lines(text: str) -> str:
    """Runs of blank lines as one blank line (call only when ``"\n\n\n" in text``: the test is
    the cheap part)."""
    return _BLANKS.sub("\n\n", text)


def open_tolerant(raw: IO[bytes], log: ReadLog, *, text: bool = True, head: bytes = b"",
                  buffer: int = 1 << 20, line_limit: int = LINE_LIMIT) -> IO[bytes]:
    """``raw`` read through a :class:`TolerantReader`, buffered (``line_limit``: a format whose
    records are longer than text lines, e.g. a /metrics body inside one JSON line)."""
    return io.BufferedReader(TolerantReader(raw, log, text=text, head=head, line_limit=line_limit), buffer)
