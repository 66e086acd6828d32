"""bcc's biosnoop output, as the tool prints it (inputs layer).

One line per block IO, under a header (bcc tools/biosnoop.py; Debian's ``biosnoop-bpfcc``)::

    TIME(s)     COMM           PID     DISK      T SECTOR     BYTES   LAT(ms)
    0.000000    fio            24785   vda       W 4716544    4096       0.09

``-Q`` adds ``QUE(ms)`` (time queued in the OS) before ``LAT(ms)``, ``-P`` a ``P`` column
(sequential or random); newer versions print ``PID`` before ``COMM``. The header names the
columns, so they are read by name: TIME is seconds since the first IO, LAT milliseconds from
the issue to the device until completion. COMM may hold spaces: it is what lies between the
fixed columns. Lines that do not parse (a "Tracing... Ctrl-C" banner, a cut last line) are
skipped and counted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from profiler.errors import InputError
from profiler.inputs.source import Format, Source
from profiler.inputs.streams import iter_decoded_lines

__all__ = ["FORMAT", "Biosnoop", "parse_biosnoop", "read_source", "sniff"]

_HEADER = re.compile(rb"^\s*TIME\(s\)\s+.*\bT\s+SECTOR\s+BYTES\b.*\bLAT\(ms\)\s*$", re.M)
# the columns after COMM (or after PID when PID comes second), right to left
_TAIL_NAMES = ("DISK", "T", "SECTOR", "BYTES", "P", "QUE(ms)", "LAT(ms)")


def sniff(head: bytes) -> bool:
    """A biosnoop header line among the first lines."""
    return _HEADER.search(b"\n".join(head.splitlines()[:5])) is not None


@dataclass
class Biosnoop:
    """One record per IO: times in seconds."""

    t: np.ndarray  # completion time, seconds since the first IO biosnoop saw
    lat: np.ndarray  # issue to completion (s)
    queue: np.ndarray | None  # time queued before issue (s), with -Q
    op: list[str]  # "R" or "W"
    disk: list[str]
    comm: list[str]
    pid: np.ndarray
    nbytes: np.ndarray
    skipped_lines: int = 0
    columns: list[str] = field(default_factory=list)


MAX_TIME = 1e10  # seconds (a time or a latency): three centuries is no IO


def _time(text: str) -> float:
    """A time or latency: finite, 0 <= v < MAX_TIME (ValueError otherwise)."""
    v = float(text)
    if not 0 <= v < MAX_TIME:  # also NaN
        raise ValueError(f"not a time: {text[:40]}")
    return v


def _whole(text: str, limit: int) -> int:
    """A pid or a byte count: digits only, below ``limit`` (ValueError otherwise)."""
    if not text.isdigit() or len(text) > 20:
        raise ValueError(f"not a count: {text[:40]}")
    v = int(text)
    if v >= limit:
        raise ValueError(f"not a count: {text[:40]}")
    return v


def parse_biosnoop(lines: Iterable[str]) -> Biosnoop:
    cols: list[str] | None = None
    t: list[float] = []
    lat: list[float] = []
    que: list[float] = []
    op: list[str] = []
    disk: list[str] = []
    comm: list[str] = []
    pid: list[int] = []
    nbytes: list[int] = []
    skipped = 0
    for line in lines:
        if not line.strip():
            continue
        if cols is None:
            if _HEADER.match(line.encode("utf-8", "replace")):
                cols = line.split()
            else:
                skipped += 1  # a banner before the header
            continue
        f = line.split()
        tail = [c for c in cols if c in _TAIL_NAMES]
        lead = [c for c in cols if c not in _TAIL_NAMES]  # TIME(s), COMM, PID in some order
        if len(f) < len(cols):
            skipped += 1
            continue
        rec = dict(zip(tail, f[len(f) - len(tail):], strict=True))
        head = f[: len(f) - len(tail)]
        try:
            if lead == ["TIME(s)", "COMM", "PID"]:
                rec["PID"], name = head[-1], " ".join(head[1:-1])
            else:  # TIME(s) PID COMM
                rec["PID"], name = head[1], " ".join(head[2:])
            ts, lt, p = _time(head[0]), _time(rec["LAT(ms)"]) / 1e3, _whole(rec["PID"], 1 << 31)
            q = _time(rec["QUE(ms)"]) / 1e3 if "QUE(ms)" in rec else None
            size = _whole(rec["BYTES"], 1 << 40)
            kind, dev = rec["T"], rec["DISK"]
        except (ValueError, IndexError, KeyError):
            skipped += 1  # a cut or damaged line, numbers no IO has (negative, NaN, 5,000 digits)
            continue
        t.append(ts)
        lat.append(lt)
        if q is not None:
            que.append(q)
        op.append(kind)
        disk.append(dev)
        comm.append(name)
        pid.append(p)
        nbytes.append(size)
    if cols is None:
        raise InputError("biosnoop output: no header line (TIME(s) COMM PID DISK T SECTOR BYTES ... LAT(ms))")
    return Biosnoop(t=np.asarray(t, dtype=np.float64), lat=np.asarray(lat, dtype=np.float64),
                    queue=np.asarray(que, dtype=np.float64) if "QUE(ms)" in cols else None, op=op, disk=disk,
                    comm=comm, pid=np.asarray(pid, dtype=np.int64), nbytes=np.asarray(nbytes, dtype=np.int64),
                    skipped_lines=skipped, columns=cols)


def read_source(src: Source) -> Biosnoop:
    """The IOs of ``src``; lines that are no IO are counted in its ReadLog."""
    with src.open() as fh:
        b = parse_biosnoop(iter_decoded_lines(fh))
    src.log.skip(b.skipped_lines, "lines that are not IOs")
    return b


FORMAT = Format("biosnoop", "biosnoop output (bcc)", sniff)
