"""pprof profiles, profile.proto gzip or plain (inputs layer).

As Go's net/http/pprof and the TiDB, PD and TiKV status ports serve them.

The protobuf wire format is decoded here directly (no generated code, no dependency): a
message is a run of fields, each a varint key ``field_number << 3 | wire_type`` followed by a
varint (type 0), 8 bytes (1), a varint length and that many bytes (2: strings, sub-messages,
packed repeated numbers) or 4 bytes (5). The Profile fields read, by number:

    Profile   1 sample_type (ValueType)  2 sample  3 mapping  4 location  5 function
              6 string_table  9 time_nanos  10 duration_nanos  11 period_type  12 period
              14 default_sample_type (string index)
    ValueType 1 type  2 unit (string indices)
    Sample    1 location_id (leaf first)  2 value (one per sample type)   (3 label: not read)
    Location  1 id  2 mapping_id  4 line (inlined callees first, the caller last)
    Line      1 function_id
    Function  1 id  2 name  3 system_name
    Mapping   1 id  5 filename

Repeated numbers are accepted packed or not; unknown fields are skipped, as the format asks.
Sniffed when the whole head walks as Profile fields with the wire types they must have (text
never does). The records are stacks, root first, with one value per sample type:
:meth:`Profile.stacks` gives them for one type (``cpu`` nanoseconds of a CPU profile,
``goroutine`` counts of a goroutine dump, ``inuse_space`` bytes of a heap profile).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from profiler.errors import InputError
from profiler.inputs.source import Format, Source
from profiler.inputs.streams import HEAD_SIZE
from profiler.tolerant import uvarint

__all__ = ["FORMAT", "Profile", "SampleType", "parse_profile", "read_source"]

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
# Profile's fields and the wire type each must have (13 comment: packed or not)
_PROFILE_WIRE = {1: _LEN, 2: _LEN, 3: _LEN, 4: _LEN, 5: _LEN, 6: _LEN, 7: _VARINT, 8: _VARINT, 9: _VARINT,
                 10: _VARINT, 11: _LEN, 12: _VARINT, 13: (_VARINT, _LEN), 14: _VARINT, 15: _VARINT}
_ANY = (_VARINT, _I64, _LEN, _I32)


class _Malformed(Exception):
    pass


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    try:
        return uvarint(buf, pos)
    except ValueError as exc:
        raise _Malformed(f"message {exc}") from None


def _fields(buf: bytes, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(field number, wire type, value, end) for a number; (number, 2, start, end) for bytes."""
    pos = start
    while pos < end:
        key, pos = _varint(buf, pos)
        num, wire = key >> 3, key & 7
        if wire == _VARINT:
            value, pos = _varint(buf, pos)
            yield num, wire, value, pos
        elif wire == _LEN:
            n, pos = _varint(buf, pos)
            if pos + n > end:
                raise _Malformed(f"field {num} runs past the end of its message")
            yield num, wire, pos, pos + n
            pos += n
        elif wire == _I64:
            if pos + 8 > end:
                raise _Malformed("message cut inside a number")
            yield num, wire, int.from_bytes(buf[pos : pos + 8], "little"), pos + 8
            pos += 8
        elif wire == _I32:
            if pos + 4 > end:
                raise _Malformed("message cut inside a number")
            yield num, wire, int.from_bytes(buf[pos : pos + 4], "little"), pos + 4
            pos += 4
        else:
            raise _Malformed(f"wire type {wire} (field {num})")


def _int64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _numbers(buf: bytes, wire: int, a: int, b: int, out: list[int]) -> None:
    """Append one repeated-number field's values: packed (a run of varints) or a single one.
    The varint loop is inlined: it is where a large profile's decoding spends its time."""
    if wire == _VARINT:
        out.append(a)
        return
    if wire != _LEN:
        raise _Malformed("a repeated number with a fixed-size encoding")
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
            append(result)
    except IndexError:
        raise _Malformed("message cut inside a number") from None
    if pos != b:
        raise _Malformed("a packed number runs past the end of its field")


@dataclass(frozen=True)
class SampleType:
    type: str  # "cpu", "samples", "goroutine", "inuse_space", ...
    unit: str  # "nanoseconds", "count", "bytes", ...

    def __str__(self) -> str:
        return f"{self.type}/{self.unit}"


@dataclass
class Profile:
    """A decoded profile: sample types, and samples as (location ids leaf first, values)."""

    sample_types: list[SampleType]
    samples: list[tuple[tuple[int, ...], tuple[int, ...]]]
    frames: dict[int, tuple[str, ...]]  # location id -> function names, caller first (inlined after it)
    default_type: str = ""  # the producer's choice of sample type to show, "" when unset
    period_type: SampleType | None = None
    period: int = 0
    time_nanos: int = 0
    duration_nanos: int = 0
    warnings: list[str] = field(default_factory=list)

    def index(self, type_name: str | None = None) -> int:
        """The index of a sample type by name; by default the producer's default type, else the
        last one (what `go tool pprof` shows: cpu over samples)."""
        if not self.sample_types:
            raise InputError("the pprof profile declares no sample types")
        want = type_name or self.default_type
        if want:
            for i, st in enumerate(self.sample_types):
                if st.type == want:
                    return i
            if type_name:
                names = ", ".join(st.type for st in self.sample_types)
                raise InputError(f"no sample type {type_name!r} in this profile (it has: {names})")
        return len(self.sample_types) - 1

    def stacks(self, index: int) -> Iterator[tuple[tuple[str, ...], int]]:
        """(frames root first, value) of every sample with a non-zero value of that type; a
        sample without locations (a goroutine caught with no stack) is one ``[unknown]`` frame,
        so that the totals are pprof's."""
        frames = self.frames
        unknown: tuple[str, ...] = ("[unknown]",)
        for locs, values in self.samples:
            if index >= len(values) or values[index] == 0:
                continue
            stack: list[str] = []
            for loc in reversed(locs):
                stack.extend(frames.get(loc, unknown))
            yield tuple(stack) or unknown, values[index]


def _samples(buf: bytes, spans: list[tuple[int, int]]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Decode Sample messages: (location ids leaf first, values)."""
    out: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    for a, b in spans:
        locs: list[int] = []
        values: list[int] = []
        for n, w, v, e in _fields(buf, a, b):
            if n == 1:
                _numbers(buf, w, v, e, locs)
            elif n == 2:
                _numbers(buf, w, v, e, values)
        out.append((tuple(locs), tuple(_int64(x) for x in values)))
    return out


def _value_type(buf: bytes, a: int, b: int) -> tuple[int, int]:
    t = u = 0
    for num, wire, v, _ in _fields(buf, a, b):
        if wire == _VARINT and num == 1:
            t = v
        elif wire == _VARINT and num == 2:
            u = v
    return t, u


def parse_profile(data: bytes, name: str = "input") -> Profile:
    """Decode a serialized (not gzipped) Profile message; InputError when it is not one."""
    try:
        return _parse(data)
    except _Malformed as exc:
        raise InputError(f"{name}: not a valid pprof profile: {exc}") from None


def _parse(buf: bytes) -> Profile:
    types: list[tuple[int, int]] = []
    raw_samples: list[tuple[int, int]] = []
    locations: dict[int, tuple[int, list[int]]] = {}  # id -> (mapping id, function ids)
    functions: dict[int, tuple[int, int]] = {}  # id -> (name, system name)
    mappings: dict[int, int] = {}  # id -> filename
    strings: list[str] = []
    scalars: dict[int, int] = {}
    period: tuple[int, int] | None = None
    for num, wire, a, b in _fields(buf, 0, len(buf)):
        expected = _PROFILE_WIRE.get(num)
        if expected is None:
            continue  # a field added after this reader was written
        if wire != expected and not (isinstance(expected, tuple) and wire in expected):
            raise _Malformed(f"field {num} has wire type {wire}")
        if num == 1:
            types.append(_value_type(buf, a, b))
        elif num == 2:
            raw_samples.append((a, b))
        elif num == 3:
            mid = fname = 0
            for n, w, v, _ in _fields(buf, a, b):
                if w == _VARINT and n == 1:
                    mid = v
                elif w == _VARINT and n == 5:
                    fname = v
            mappings[mid] = fname
        elif num == 4:
            lid = mapping = 0
            funcs: list[int] = []
            for n, w, v, e in _fields(buf, a, b):
                if w == _VARINT and n == 1:
                    lid = v
                elif w == _VARINT and n == 2:
                    mapping = v
                elif w == _LEN and n == 4:
                    fid = 0
                    for n2, w2, v2, _ in _fields(buf, v, e):
                        if w2 == _VARINT and n2 == 1:
                            fid = v2
                    funcs.append(fid)
            locations[lid] = (mapping, funcs)
        elif num == 5:
            fid = name = system = 0
            for n, w, v, _ in _fields(buf, a, b):
                if w == _VARINT and n == 1:
                    fid = v
                elif w == _VARINT and n == 2:
                    name = v
                elif w == _VARINT and n == 3:
                    system = v
            functions[fid] = (name, system)
        elif num == 6:
            strings.append(buf[a:b].decode("utf-8", "replace"))
        elif num == 11:
            period = _value_type(buf, a, b)
        elif wire == _VARINT:
            scalars[num] = a

    def s(i: int) -> str:
        if 0 <= i < len(strings):
            return strings[i]
        raise _Malformed(f"string index {i} outside the string table ({len(strings)} strings)")

    sample_types = [SampleType(s(t), s(u)) for t, u in types]
    samples = _samples(buf, raw_samples)
    frames: dict[int, tuple[str, ...]] = {}
    for lid, (mapping, funcs) in locations.items():
        names = []
        for fid in reversed(funcs):  # the caller last in the profile, first in a folded stack
            name, system = functions.get(fid, (0, 0))
            names.append(s(name) or s(system) or "[unknown]")
        if not names:  # not symbolized: the mapping's file, as perf names unknown symbols
            path = s(mappings.get(mapping, 0)) if mapping else ""
            names.append(f"[{path.rsplit('/', 1)[-1]}]" if path else "[unknown]")
        frames[lid] = tuple(names)
    return Profile(
        sample_types=sample_types,
        samples=samples,
        frames=frames,
        default_type=s(scalars.get(14, 0)),
        period_type=SampleType(s(period[0]), s(period[1])) if period else None,
        period=_int64(scalars.get(12, 0)),
        time_nanos=_int64(scalars.get(9, 0)),
        duration_nanos=_int64(scalars.get(10, 0)),
    )


def sniff(head: bytes) -> bool:
    """Does the head walk as Profile fields, each with its wire type, to its very end (or past
    it, when the head is a cut of a longer file)? Text never does: its bytes make keys of
    fields 4 to 15 with the wrong wire types, and lengths that overshoot."""
    pos = 0
    n = 0
    first = -1
    try:
        while pos < len(head):
            key, pos = _varint(head, pos)
            num, wire = key >> 3, key & 7
            expected = _PROFILE_WIRE.get(num, _ANY if num > 15 else None)  # later fields need 2-byte keys
            if expected is None or (wire != expected and not (isinstance(expected, tuple) and wire in expected)):
                return False
            if first < 0:
                first = num
            if wire == _VARINT:
                _, pos = _varint(head, pos)
            elif wire == _LEN:
                length, pos = _varint(head, pos)
                pos += length
            else:
                pos += 8 if wire == _I64 else 4
            n += 1
    except _Malformed:
        pos = len(head) + 1  # cut inside a number
    if n > 0 and (pos == len(head) or len(head) >= HEAD_SIZE):
        return True
    # A whole file cut short (a truncated download): it still opens with the sample types, as
    # every producer writes them, and walks as Profile fields up to the cut.
    return first == 1 and n >= 3 and pos > len(head)


FORMAT = Format("pprof", "a pprof profile", sniff, binary=True)


def read_source(src: Source) -> Profile:
    """Decode a detected pprof input (gzip or plain)."""
    import gzip
    import zlib

    try:
        with src.open() as fh:
            data = fh.read()
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise InputError(f"{src.name}: the compressed pprof profile is truncated or corrupt ({exc})") from None
    return parse_profile(data, src.name)
