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
    Sample    1 location_id (leaf first)  2 value (one per sample type)  3 label
    Label     1 key  2 str  3 num  4 num_unit (key, str and num_unit: string indices)
    Location  1 id  2 mapping_id  4 line (inlined callees first, the caller last)
    Line      1 function_id
    Function  1 id  2 name  3 system_name
    Mapping   1 id  5 filename

Repeated numbers are accepted packed or not; unknown fields are skipped, as the format asks.
Sniffed when the whole head walks as Profile fields with the wire types they must have (text
never does). The records are stacks, root first, with one value per sample type and the
sample's labels (Go's ``pprof.Do`` labels, TiDB's and TiKV's Top SQL digests):
:meth:`Profile.stacks` gives them for one type (``cpu`` nanoseconds of a CPU profile,
``goroutine`` counts of a goroutine dump, ``inuse_space`` bytes of a heap profile), optionally
rooted at the values of some labels (``group_by``).

Bounds, so that a profile of a few KB cannot take gigabytes or minutes (docs/inputs.md#pprof):
a varint longer than 10 bytes is an error (never a huge number: packed runs included); at most
:data:`MAX_BYTES` of serialized profile; values are int64 as the format says, negative ones (a
difference of two profiles) kept and said; a stack holds at most :data:`MAX_FRAMES` frames
after inlining (the root side beyond them becomes one ``[deeper frames cut]`` frame, said); a
name at most :data:`MAX_NAME` characters, control characters escaped (a newline in a name
would forge a line of folded output); all the samples' stacks together at most
:data:`MAX_EXPANDED` characters, or the profile is refused in one line. Samples are held in
flat arrays (a few bytes per location reference), so memory follows the input's size.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field

from profiler.errors import InputError
from profiler.inputs import pprof_wire as pw
from profiler.inputs.pprof_wire import LEN, VARINT, Malformed, fields, int64, numbers, varint
from profiler.inputs.source import Format, Source
from profiler.inputs.streams import HEAD_SIZE

__all__ = ["CUT_FRAME", "FORMAT", "MAX_BYTES", "MAX_EXPANDED", "MAX_FRAMES", "MAX_NAME", "Labels", "Profile",
           "SampleType", "parse_profile", "read_source"]

MAX_BYTES = 32 << 20  # serialized profile, decompressed (Go's largest heap profiles: a few MB)
MAX_FRAMES = 1024  # frames of one stack, inlined ones included (Go keeps 64-128, perf 127)
MAX_NAME = 1000  # characters of a function or file name
MAX_EXPANDED = 200_000_000  # characters of every sample's stack written out (what folding holds)
CUT_FRAME = "[deeper frames cut]"

# Profile's fields and the wire type each must have (13 comment: packed or not)
_PROFILE_WIRE = {1: LEN, 2: LEN, 3: LEN, 4: LEN, 5: LEN, 6: LEN, 7: VARINT, 8: VARINT, 9: VARINT,
                 10: VARINT, 11: LEN, 12: VARINT, 13: (VARINT, LEN), 14: VARINT, 15: VARINT}
_ANY = (VARINT, pw.I64, LEN, pw.I32)
# control characters in names, made visible: "\n" in a name must not start a line of folded output
_ESCAPES = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F)} | {0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"}

Labels = tuple[tuple[str, str], ...]  # (key, value) sorted by key; numbers as "123" or "123 bytes"


def clean_name(text: str) -> str:
    """A name as folded stacks and pages can carry it: control characters escaped, at most
    MAX_NAME characters."""
    if not text.isprintable():
        text = text.translate(_ESCAPES)
    return text if len(text) <= MAX_NAME else text[: MAX_NAME - 1] + "…"


@dataclass(frozen=True)
class SampleType:
    type: str  # "cpu", "samples", "goroutine", "inuse_space", ...
    unit: str  # "nanoseconds", "count", "bytes", ...

    def __str__(self) -> str:
        return f"{self.type}/{self.unit}"


@dataclass
class Profile:
    """A decoded profile: sample types, and samples as flat arrays (location indices leaf first,
    values, label sets). Location index 0 is the ``[unknown]`` location (an id no location has)."""

    sample_types: list[SampleType]
    frames: list[tuple[str, ...]]  # location index -> function names, caller first (inlined after it)
    locs: array[int] = field(default_factory=lambda: array("I"))  # every sample's location indices, leaf first
    starts: array[int] = field(default_factory=lambda: array("Q", [0]))  # sample i: locs[starts[i]:starts[i + 1]]
    values: array[int] = field(default_factory=lambda: array("q"))  # sample i: values[i * ntypes:(i + 1) * ntypes]
    label_of: array[int] = field(default_factory=lambda: array("I"))  # sample -> index in label_sets
    label_sets: list[Labels] = field(default_factory=lambda: [()])
    files: list[str] = field(default_factory=list)  # location index -> its mapping's file ("" unknown)
    default_type: str = ""  # the producer's choice of sample type to show, "" when unset
    period_type: SampleType | None = None
    period: int = 0
    time_nanos: int = 0
    duration_nanos: int = 0
    warnings: list[str] = field(default_factory=list)
    negative: int = 0  # samples with a negative value (a difference of two profiles)
    cut: int = 0  # samples whose stack was cut to MAX_FRAMES

    def __len__(self) -> int:
        return len(self.starts) - 1

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

    def label_keys(self) -> list[str]:
        """Every label key the samples carry, sorted."""
        return sorted({k for labels in self.label_sets for k, _ in labels})

    def stack(self, i: int) -> tuple[str, ...]:
        """Sample ``i``'s frames, root first, at most MAX_FRAMES (the root side beyond them as one
        CUT_FRAME); a sample without locations (a goroutine caught with no stack) is one
        ``[unknown]`` frame, so that the totals are pprof's."""
        frames, locs = self.frames, self.locs
        out: list[str] = []  # leaf first
        for k in range(self.starts[i], self.starts[i + 1]):
            out.extend(reversed(frames[locs[k]]))
            if len(out) >= MAX_FRAMES:
                if len(out) > MAX_FRAMES or k + 1 < self.starts[i + 1]:
                    del out[MAX_FRAMES - 1 :]
                    out.append(CUT_FRAME)
                break
        out.reverse()
        return tuple(out) or ("[unknown]",)

    def labels(self, i: int) -> Labels:
        return self.label_sets[self.label_of[i]]

    def sample_values(self, i: int) -> tuple[int, ...]:
        n = len(self.sample_types)
        return tuple(self.values[i * n : (i + 1) * n])

    def stacks(self, index: int, group_by: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], int]]:
        """(frames root first, value) of every sample with a non-zero value of that type;
        ``group_by``: label keys whose values become the stack's first frames (``key=value``,
        ``key unset`` for a sample without it), as `go tool pprof -tagroot` roots them."""
        n = len(self.sample_types)
        values = self.values
        for i in range(len(self)):
            v = values[i * n + index] if index < n else 0
            if v == 0:
                continue
            stack = self.stack(i)
            if group_by:
                labels = dict(self.labels(i))
                stack = tuple(f"{k}={labels[k]}" if k in labels else f"{k} unset" for k in group_by) + stack
            yield stack, v

    def samples_with_labels(self, index: int) -> Iterator[tuple[tuple[str, ...], int, Labels]]:
        """(frames root first, value, labels) of every sample with a non-zero value of that type."""
        n = len(self.sample_types)
        for i in range(len(self)):
            v = self.values[i * n + index] if index < n else 0
            if v != 0:
                yield self.stack(i), v, self.labels(i)

    def all_values(self) -> Iterator[tuple[tuple[str, ...], tuple[int, ...]]]:
        """(frames root first, every type's value) of every sample (a mutex profile's contentions and delay)."""
        for i in range(len(self)):
            yield self.stack(i), self.sample_values(i)

    def function_files(self) -> dict[str, str]:
        """Function name -> the file of the mapping it was first seen in (for exports' mappings)."""
        out: dict[str, str] = {}
        for names, path in zip(self.frames, self.files, strict=False):
            if path:
                for name in names:
                    out.setdefault(name, path)
        return out


class _Samples:
    """Sample messages decoded into a Profile's flat arrays."""

    def __init__(self, prof: Profile, dense: dict[int, int], strings: list[str]) -> None:
        self.p = prof
        self.dense = dense
        self.strings = strings
        self.ntypes = len(prof.sample_types)
        self.label_ix: dict[Labels, int] = {(): 0}

    def _s(self, i: int) -> str:
        if 0 <= i < len(self.strings):
            return self.strings[i]
        raise Malformed(f"string index {i} outside the string table ({len(self.strings)} strings)")

    def _label(self, buf: bytes, a: int, b: int) -> tuple[str, str] | None:
        key = text = unit = 0
        number: int | None = None
        for n, w, v, _ in fields(buf, a, b):
            if w != VARINT:
                continue
            if n == 1:
                key = v
            elif n == 2:
                text = v
            elif n == 3:
                number = int64(v)
            elif n == 4:
                unit = v
        if not key:
            return None
        if text or number is None:
            value = self._s(text)
        else:
            value = f"{number} {self._s(unit)}" if unit else str(number)
        return clean_name(self._s(key)), clean_name(value)

    def add(self, buf: bytes, a: int, b: int) -> None:
        locs: list[int] = []
        values: list[int] = []
        labels: list[tuple[str, str]] = []
        for n, w, v, e in fields(buf, a, b):
            if n == 1:
                numbers(buf, w, v, e, locs)
            elif n == 2:
                numbers(buf, w, v, e, values)
            elif n == 3 and w == LEN:
                lab = self._label(buf, v, e)
                if lab is not None:
                    labels.append(lab)
        p, dense = self.p, self.dense
        p.locs.extend(dense.get(x, 0) for x in locs)
        p.starts.append(len(p.locs))
        vals = [int64(x) for x in values[: self.ntypes]]
        vals += [0] * (self.ntypes - len(vals))
        if any(x < 0 for x in vals):
            p.negative += 1
        p.values.extend(vals)
        key: Labels = tuple(sorted(set(labels)))
        ix = self.label_ix.get(key)
        if ix is None:
            ix = self.label_ix[key] = len(p.label_sets)
            p.label_sets.append(key)
        p.label_of.append(ix)


def _value_type(buf: bytes, a: int, b: int) -> tuple[int, int]:
    t = u = 0
    for num, wire, v, _ in fields(buf, a, b):
        if wire == VARINT and num == 1:
            t = v
        elif wire == VARINT and num == 2:
            u = v
    return t, u


def parse_profile(data: bytes, name: str = "input") -> Profile:
    """Decode a serialized (not gzipped) Profile message; InputError when it is not one, or
    when it is larger than this reader takes (the bounds above)."""
    if len(data) > MAX_BYTES:
        raise InputError(f"{name}: the pprof profile is larger than {MAX_BYTES >> 20} MiB uncompressed: not read")
    try:
        prof = _parse(data)
    except Malformed as exc:
        raise InputError(f"{name}: not a valid pprof profile: {exc}") from None
    _bound(prof, name)
    return prof


def _bound(p: Profile, name: str) -> None:
    """Refuse a profile whose stacks, written out, exceed MAX_EXPANDED characters; count the
    stacks cut to MAX_FRAMES and the negative values, as warnings."""
    nf = [len(f) for f in p.frames]
    nc = [sum(len(x) + 1 for x in f) for f in p.frames]
    total = 0
    locs, starts = p.locs, p.starts
    for i in range(len(p)):
        frames = chars = 0
        for k in range(starts[i], starts[i + 1]):
            frames += nf[locs[k]]
            chars += nc[locs[k]]
            if frames > MAX_FRAMES:
                p.cut += 1
                break
        total += chars
        if total > MAX_EXPANDED:
            raise InputError(f"{name}: the pprof profile's stacks expand to more than {MAX_EXPANDED:,} characters "
                             f"(a few locations named many times over): not read")
    if p.cut:
        p.warnings.append(f"{name}: {p.cut:,} stack{'s' if p.cut != 1 else ''} deeper than {MAX_FRAMES:,} frames: "
                          f"the frames nearest the root are drawn as one {CUT_FRAME} frame")
    if p.negative:
        p.warnings.append(f"{name}: {p.negative:,} sample{'s' if p.negative != 1 else ''} with negative values "
                          "(a difference of two profiles, as `go tool pprof -diff_base` writes): each stack's values "
                          "are summed, and a stack whose sum is below zero is not drawn (`profiler diff OLD NEW` "
                          "draws both directions)")


def _parse(buf: bytes) -> Profile:
    types: list[tuple[int, int]] = []
    raw_samples: list[tuple[int, int]] = []
    locations: dict[int, tuple[int, list[int]]] = {}  # id -> (mapping id, function ids)
    functions: dict[int, tuple[int, int]] = {}  # id -> (name, system name)
    mappings: dict[int, int] = {}  # id -> filename
    strings: list[str] = []
    scalars: dict[int, int] = {}
    period: tuple[int, int] | None = None
    for num, wire, a, b in fields(buf, 0, len(buf)):
        expected = _PROFILE_WIRE.get(num)
        if expected is None:
            continue  # a field added after this reader was written
        if wire != expected and not (isinstance(expected, tuple) and wire in expected):
            raise Malformed(f"field {num} has wire type {wire}")
        if num == 1:
            types.append(_value_type(buf, a, b))
        elif num == 2:
            raw_samples.append((a, b))
        elif num == 3:
            mid = fname = 0
            for n, w, v, _ in fields(buf, a, b):
                if w == VARINT and n == 1:
                    mid = v
                elif w == VARINT and n == 5:
                    fname = v
            mappings[mid] = fname
        elif num == 4:
            lid = mapping = 0
            funcs: list[int] = []
            for n, w, v, e in fields(buf, a, b):
                if w == VARINT and n == 1:
                    lid = v
                elif w == VARINT and n == 2:
                    mapping = v
                elif w == LEN and n == 4:
                    fid = 0
                    for n2, w2, v2, _ in fields(buf, v, e):
                        if w2 == VARINT and n2 == 1:
                            fid = v2
                    funcs.append(fid)
            locations[lid] = (mapping, funcs)
        elif num == 5:
            fid = name = system = 0
            for n, w, v, _ in fields(buf, a, b):
                if w == VARINT and n == 1:
                    fid = v
                elif w == VARINT and n == 2:
                    name = v
                elif w == VARINT and n == 3:
                    system = v
            functions[fid] = (name, system)
        elif num == 6:
            strings.append(buf[a:b].decode("utf-8", "replace"))
        elif num == 11:
            period = _value_type(buf, a, b)
        elif wire == VARINT:
            scalars[num] = a

    def s(i: int) -> str:
        if 0 <= i < len(strings):
            return strings[i]
        raise Malformed(f"string index {i} outside the string table ({len(strings)} strings)")

    names: dict[int, str] = {}  # function id -> its clean name, each decided once

    def func_name(fid: int) -> str:
        got = names.get(fid)
        if got is None:
            name, system = functions.get(fid, (0, 0))
            got = names[fid] = clean_name(s(name) or s(system)) or "[unknown]"
        return got

    frames: list[tuple[str, ...]] = [("[unknown]",)]
    files = [""]
    dense: dict[int, int] = {}
    for lid, (mapping, funcs) in locations.items():
        path = clean_name(s(mappings.get(mapping, 0))) if mapping else ""
        # the caller last in the profile, first in a folded stack
        got = [func_name(fid) for fid in reversed(funcs)]
        if not got:  # not symbolized: the mapping's file, as perf names unknown symbols
            got.append(f"[{path.rsplit('/', 1)[-1]}]" if path else "[unknown]")
        dense[lid] = len(frames)
        frames.append(tuple(got))
        files.append(path)
    prof = Profile(
        sample_types=[SampleType(s(t), s(u)) for t, u in types],
        frames=frames,
        files=files,
        default_type=s(scalars.get(14, 0)),
        period_type=SampleType(s(period[0]), s(period[1])) if period else None,
        period=int64(scalars.get(12, 0)),
        time_nanos=int64(scalars.get(9, 0)),
        duration_nanos=int64(scalars.get(10, 0)),
    )
    decoder = _Samples(prof, dense, strings)
    for a, b in raw_samples:
        decoder.add(buf, a, b)
    return prof


def sniff(head: bytes) -> bool:
    """Does the head walk as Profile fields, each with its wire type, to its very end (or past
    it, when the head is a cut of a longer file)? Text never does: its bytes make keys of
    fields 4 to 15 with the wrong wire types, and lengths that overshoot."""
    pos = 0
    n = 0
    first = -1
    try:
        while pos < len(head):
            key, pos = varint(head, pos)
            num, wire = key >> 3, key & 7
            expected = _PROFILE_WIRE.get(num, _ANY if num > 15 else None)  # later fields need 2-byte keys
            if expected is None or (wire != expected and not (isinstance(expected, tuple) and wire in expected)):
                return False
            if first < 0:
                first = num
            if wire == VARINT:
                _, pos = varint(head, pos)
            elif wire == LEN:
                length, pos = varint(head, pos)
                pos += length
            else:
                pos += 8 if wire == pw.I64 else 4
            n += 1
    except Malformed:
        pos = len(head) + 1  # cut inside a number
    if n > 0 and (pos == len(head) or len(head) >= HEAD_SIZE):
        return True
    # A whole file cut short (a truncated download): it still opens with the sample types, as
    # every producer writes them, and walks as Profile fields up to the cut.
    return first == 1 and n >= 3 and pos > len(head)


FORMAT = Format("pprof", "a pprof profile", sniff, binary=True, untimed="a pprof profile has none", labels=True)


def read_source(src: Source) -> Profile:
    """Decode a detected pprof input (gzip or plain)."""
    import gzip
    import zlib

    try:
        with src.open() as fh:
            data = fh.read(MAX_BYTES + 1)  # parse_profile refuses more: no need to inflate it all
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise InputError(f"{src.name}: the compressed pprof profile is truncated or corrupt ({exc})") from None
    return parse_profile(data, src.name)
