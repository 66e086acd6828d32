"""pprof profiles out (renderers layer): any capture's stacks as a gzipped profile.proto.

``go tool pprof``, Pyroscope, Parca and speedscope open it. The encoding is written here from
the format's description (github.com/google/pprof, proto/profile.proto), the same wire format
profiler.inputs.pprof reads: a Profile message whose fields are

    1 sample_type (ValueType: 1 type, 2 unit as string-table indices)
    2 sample (1 location_id, packed, leaf first; 2 value, packed; 3 label: 1 key, 2 str)
    3 mapping (1 id, 5 filename, 7 has_functions)
    4 location (1 id, 2 mapping_id, 4 line: 1 function_id)
    5 function (1 id, 2 name, 3 system_name)
    6 string_table (index 0 is "")
    10 duration_nanos  11 period_type  12 period  13 comment

One function and one location per distinct frame name (folded stacks carry no addresses), its
mapping the binary it was read in when known. Each sample carries its labels (thread, tid,
pool, pid, target; an input profile's own): the thread is a label, not a root frame. Values are
int64, as the format says: a larger one is refused in one line, never wrapped to a negative
number. The whole message is gzipped, as Go's net/http/pprof serves it.
"""

from __future__ import annotations

import gzip

from profiler.analyzers.stacks.export import StackProfile
from profiler.errors import InputError

INT64 = 1 << 63


def _varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _num(field: int, v: int) -> bytes:
    return _key(field, 0) + _varint(v)


def _bytes(field: int, data: bytes) -> bytes:
    return _key(field, 2) + _varint(len(data)) + data


def _packed(field: int, values: list[int]) -> bytes:
    return _bytes(field, b"".join(_varint(v) for v in values))


class _Strings:
    def __init__(self) -> None:
        self.index: dict[str, int] = {"": 0}
        self.table: list[str] = [""]

    def __call__(self, s: str) -> int:
        i = self.index.get(s)
        if i is None:
            i = self.index[s] = len(self.table)
            self.table.append(s)
        return i


def _int64(v: int) -> int:
    if not -INT64 <= v < INT64:
        raise InputError(f"a stack's value {v} does not fit pprof's 64-bit integers")
    return v


def encode(profile: StackProfile) -> bytes:
    """The serialized (not gzipped) Profile message."""
    strings = _Strings()
    out = bytearray()
    out += _bytes(1, _num(1, strings(profile.sample_type)) + _num(2, strings(profile.unit)))
    ids: dict[str, int] = {}
    for frames, value, labels in profile.labeled_stacks():
        locs = []
        for name in reversed(frames):  # leaf first
            i = ids.get(name)
            if i is None:
                i = ids[name] = len(ids) + 1
            locs.append(i)
        sample = _packed(1, locs) + _packed(2, [_int64(value)])
        for key, text in labels:
            sample += _bytes(3, _num(1, strings(key)) + _num(2, strings(text)))
        out += _bytes(2, sample)
    maps: dict[str, int] = {}
    for name in ids:
        path = profile.files.get(name)
        if path and path not in maps:
            maps[path] = len(maps) + 1
    for path, m in maps.items():
        out += _bytes(3, _num(1, m) + _num(5, strings(path)) + _num(7, 1))
    for name, i in ids.items():
        m = maps.get(profile.files.get(name, ""), 0)
        out += _bytes(4, _num(1, i) + (_num(2, m) if m else b"") + _bytes(4, _num(1, i)))
    for name, i in ids.items():
        si = strings(name)
        out += _bytes(5, _num(1, i) + _num(2, si) + _num(3, si))
    period_type = (strings(profile.period_type or profile.sample_type), strings(profile.period_unit or profile.unit))
    comments = [strings(c) for c in profile.comments]
    for text in strings.table:
        out += _bytes(6, text.encode("utf-8"))
    if profile.duration_ns:
        out += _num(10, _int64(profile.duration_ns))
    if profile.period:
        out += _bytes(11, _num(1, period_type[0]) + _num(2, period_type[1]))
        out += _num(12, _int64(profile.period))
    for c in comments:
        out += _num(13, c)
    return bytes(out)


class PprofWriter:
    """A StackProfile as a gzipped pprof profile (``--format pprof``, ``-o out.pb.gz``)."""

    model = StackProfile
    formats = ("pprof",)
    extensions = (".pb.gz", ".pprof", ".pb")

    def render(self, model: StackProfile, options: None = None) -> bytes:
        # mtime 0: the same stacks give the same bytes
        return gzip.compress(encode(model), compresslevel=6, mtime=0)


WRITER = PprofWriter()
