"""The bundle's load members, read once (analyzers layer): load.log parsed in one pass, and the
arrival time of each of its lines (load.times.csv.gz) when the capture recorded them."""

from __future__ import annotations

import codecs
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO

from profiler.analyzers.load.model import ParsedLoad
from profiler.analyzers.load.parse import parse_lines

from profiler.bundle import Bundle, LoadInfo, members
from profiler.errors import ProfilerError


@dataclass
class LoadLog:
    info: LoadInfo
    parsed: ParsedLoad
    line_times: dict[int, float] = field(default_factory=dict)  # load.log line -> CLOCK_MONOTONIC arrival
    missing: str | None = None  # why the log could not be read


def _lines(fh: IO[bytes]) -> Iterator[str]:
    """Lines split at ``\\n`` only (as the capture counted them), decoded leniently."""
    dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
    for raw in fh:
        yield dec.decode(raw)


def _times(bundle: Bundle, name: str, wanted: set[int]) -> dict[int, float]:
    """The arrival times of the ``wanted`` lines (the report lines): memory for those only, however
    many lines the load printed."""
    out: dict[int, float] = {}
    for line in bundle.iter_lines(name):
        n, _, t = line.partition(",")
        try:
            k = int(n)
            if k in wanted:
                out[k] = float(t)
        except ValueError:
            continue  # the header, or a line cut off by a killed capture
    return out


def read_load(bundle: Bundle) -> LoadLog | None:
    """The load's log and line times, None when the capture had no load."""
    info = bundle.manifest.load
    if info is None:
        return None
    if not info.log or not bundle.has(info.log):
        return LoadLog(info=info, parsed=ParsedLoad(tool=None),
                       missing=f"the bundle has no {info.log or members.LOAD_LOG}")
    year = time.gmtime(bundle.manifest.clock.wall_start).tm_year if bundle.manifest.clock.wall_start else None
    offset = bundle.manifest.clock.utc_offset or 0.0
    try:
        with bundle.open_binary(info.log) as fh:
            parsed = parse_lines(_lines(fh), utc_offset=offset, year=year)
    except (OSError, ProfilerError) as exc:
        return LoadLog(info=info, parsed=ParsedLoad(tool=None), missing=f"{info.log} could not be read: {exc}")
    wanted = {iv.line for iv in parsed.intervals}
    times = _times(bundle, info.times, wanted) if info.times and wanted and bundle.has(info.times) else {}
    return LoadLog(info=info, parsed=parsed, line_times=times)
