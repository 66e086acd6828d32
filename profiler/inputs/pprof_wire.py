"""The protobuf wire format, as the pprof reader needs it (inputs layer).

A message is a run of fields, each a varint key ``field_number << 3 | wire_type`` followed by a
varint (type 0), 8 bytes (1), a varint length and that many bytes (2: strings, sub-messages,
packed repeated numbers) or 4 bytes (5). A varint runs at most 10 bytes (64 bits), packed runs
included: a longer run of continuation bytes is an error, never a number that grows with every
byte (which costs quadratic time: issue 27's 1 KB gzip that took 51 CPU seconds).
"""

from __future__ import annotations

from collections.abc import Iterator

from profiler.tolerant import uvarint

VARINT, I64, LEN, I32 = 0, 1, 2, 5


class Malformed(Exception):
    pass


def varint(buf: bytes, pos: int) -> tuple[int, int]:
    try:
        return uvarint(buf, pos)
    except ValueError as exc:
        raise Malformed(f"message {exc}") from None


def fields(buf: bytes, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(field number, wire type, value, end) for a number; (number, 2, start, end) for bytes."""
    pos = start
    while pos < end:
        key, pos = varint(buf, pos)
        num, wire = key >> 3, key & 7
        if wire == VARINT:
            value, pos = varint(buf, pos)
            yield num, wire, value, pos
        elif wire == LEN:
            n, pos = varint(buf, pos)
            if pos + n > end:
                raise Malformed(f"field {num} runs past the end of its message")
            yield num, wire, pos, pos + n
            pos += n
        elif wire == I64:
            if pos + 8 > end:
                raise Malformed("message cut inside a number")
            yield num, wire, int.from_bytes(buf[pos : pos + 8], "little"), pos + 8
            pos += 8
        elif wire == I32:
            if pos + 4 > end:
                raise Malformed("message cut inside a number")
            yield num, wire, int.from_bytes(buf[pos : pos + 4], "little"), pos + 4
            pos += 4
        else:
            raise Malformed(f"wire type {wire} (field {num})")


def int64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def numbers(buf: bytes, wire: int, a: int, b: int, out: list[int]) -> None:
    """Append one repeated-number field's values: packed (a run of varints) or a single one.
    The varint loop is inlined: it is where a large profile's decoding spends its time. A varint
    runs at most 10 bytes (64 bits): a longer run of continuation bytes is an error, not a
    number that grows with every byte (which costs quadratic time)."""
    if wire == VARINT:
        out.append(a)
        return
    if wire != LEN:
        raise Malformed("a repeated number with a fixed-size encoding")
    append = out.append
    pos = a
    try:
        while pos < b:
            c = buf[pos]
            pos += 1
            if c < 0x80:
                append(c)
                continue
            result = c & 0x7F
            shift = 7
            while True:
                c = buf[pos]
                pos += 1
                result |= (c & 0x7F) << shift
                if c < 0x80:
                    break
                shift += 7
                if shift > 63:
                    raise Malformed("message a number longer than 10 bytes")
            append(result)
    except IndexError:
        raise Malformed("message cut inside a number") from None
    if pos != b:
        raise Malformed("a packed number runs past the end of its field")
