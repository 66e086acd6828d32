"""Byte streams every reader shares (inputs layer): gzip by magic, a head read without losing it,
text decoded in large chunks, bytes cut at line ends.

Every stream is read through ``profiler.tolerant`` (the one tolerant, accounted reading path:
cut or corrupt gzip, trailing garbage, CRLF, over-long lines, decompression bombs; see its
docstring). A stream that is already tolerant (a Source's or a bundle member's) is used as it
is, so its damage lands in its owner's ReadLog; any other is wrapped, and what was tolerated
is appended to the ``warnings`` list the caller gives.

Nothing here seeks, so stdin, named pipes and `perf script` pipes read the same way as files.
"""

from __future__ import annotations

import codecs
import io
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from profiler.errors import InputError
from profiler.tolerant import GZIP_MAGIC, ReadLog, TolerantReader, open_tolerant

__all__ = [
    "GZIP_MAGIC", "HEAD_SIZE", "Prefixed", "gunzip_head", "is_binary", "iter_chunks", "iter_decoded", "log_of",
    "open_binary", "open_path", "prefixed", "read_head",
]

HEAD_SIZE = 64 << 10  # what sniffing looks at (decompressed)


class Prefixed(io.RawIOBase):
    """A read-only stream that gives back ``head`` before the rest of ``stream``."""

    def __init__(self, head: bytes, stream: IO[bytes]) -> None:
        self.head = head
        self.stream = stream

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray) -> int:  # type: ignore[override]
        if self.head:
            n = min(len(b), len(self.head))
            b[:n] = self.head[:n]
            self.head = self.head[n:]
            return n
        data = self.stream.read(len(b))
        b[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self.stream.close()
        super().close()


def prefixed(head: bytes, stream: IO[bytes], buffer: int = 1 << 20) -> IO[bytes]:
    """``stream`` with ``head`` (bytes already read from it) put back in front."""
    out: IO[bytes] = io.BufferedReader(Prefixed(head, stream), buffer)  # type: ignore[type-var]
    return out


def log_of(stream: IO[bytes]) -> ReadLog | None:
    """The ReadLog of a tolerant stream (None for any other stream)."""
    raw = getattr(stream, "raw", stream)
    return raw.log if isinstance(raw, TolerantReader) else None


def open_binary(stream: IO[bytes], log: ReadLog | None = None, *, text: bool = True) -> IO[bytes]:
    """The same stream, decompressed when it starts with the gzip magic, read tolerantly
    (a stream that already is tolerant is returned as it is)."""
    if log_of(stream) is not None:
        return stream
    return open_tolerant(stream, log if log is not None else ReadLog("input"), text=text)


def open_path(path: str | Path, log: ReadLog | None = None) -> IO[bytes]:
    """Open a plain or gzip file (by magic, not by name) for reading bytes; a FIFO works too."""
    p = Path(path)
    try:
        fh = open(p, "rb")  # noqa: SIM115 - handed to the caller
    except OSError as exc:
        raise InputError(f"cannot read {p}: {exc.strerror or exc}") from None
    return open_binary(fh, log if log is not None else ReadLog(p.name))


def read_head(stream: IO[bytes], size: int = HEAD_SIZE) -> bytes:
    """Up to ``size`` bytes from the start of a stream, waiting on a pipe until they come or it ends."""
    parts: list[bytes] = []
    left = size
    while left > 0:
        data = stream.read(left)
        if not data:
            break
        parts.append(data)
        left -= len(data)
    return b"".join(parts)


def gunzip_head(data: bytes, size: int = HEAD_SIZE) -> bytes:
    """The first ``size`` decompressed bytes of the start of a gzip stream (what can be had,
    tolerantly: a cut or corrupt start gives what inflates before the damage)."""
    out = open_tolerant(io.BytesIO(data), ReadLog("head"), text=False).read(size)
    return bytes(out)


def _report(log: ReadLog, warnings: list[str] | None, own: bool) -> None:
    """Hand what a stream we wrapped ourselves tolerated to the caller's warnings list."""
    if own and warnings is not None:
        summary = log.summary()
        if summary is not None:
            warnings.append(summary)


def iter_decoded(stream: IO[bytes], chunk_size: int = 1 << 22, warnings: list[str] | None = None) -> Iterator[str]:
    """Decode a binary stream (gzip or plain) in large chunks; invalid UTF-8 becomes U+FFFD as in
    inferno and stackcollapse-perf.pl. Damage is tolerated (see the module docstring)."""
    own = log_of(stream) is None
    src = open_binary(stream, ReadLog("input"))
    log = log_of(src)
    assert log is not None
    dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
    while True:
        data = src.read(chunk_size)
        if not data:
            tail = dec.decode(b"", final=True)
            if tail:
                yield tail
            _report(log, warnings, own)
            return
        yield dec.decode(data)


def iter_decoded_lines(stream: IO[bytes]) -> Iterator[str]:
    """:func:`iter_decoded`'s text as lines, split at ``\\n`` (without it), the last one kept when unterminated."""
    rest = ""
    for chunk in iter_decoded(stream):
        parts = (rest + chunk).split("\n")
        rest = parts.pop()
        yield from parts
    if rest:
        yield rest


def iter_chunks(fh: IO[bytes], size: int = 2 << 20, warnings: list[str] | None = None) -> Iterator[bytes]:
    """Chunks of whole lines (each ending in a newline), read tolerantly (a line longer than the
    line limit ends the input, noted in the stream's ReadLog)."""
    own = log_of(fh) is None
    src = open_binary(fh, ReadLog("input"))
    log = log_of(src)
    assert log is not None
    rest = b""
    while True:
        data = src.read(size)
        if not data:
            break
        data = rest + data if rest else data
        cut = data.rfind(b"\n")
        if cut < 0:
            rest = data  # bounded: the tolerant text stream stops at a line over LINE_LIMIT
            continue
        rest = data[cut + 1 :]
        yield data[: cut + 1]
    if rest.strip():
        yield rest + b"\n"
    _report(log, warnings, own)


def is_binary(head: bytes) -> bool:
    """NUL bytes near the start: not text."""
    return b"\x00" in head[:4096]
