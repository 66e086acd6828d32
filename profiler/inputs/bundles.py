"""Capture bundles as an input (inputs layer): the format, what the manifest says of a collector, the CSV members' rows.

A bundle is a directory with ``manifest.json`` (``profiler/bundle/`` opens it safely). Which
member answers which question, perf backend or bcc, and reading it, is the views' job
(analyzers/views/, docs/bundle.md#views): a verb asks a view, never a member. Here: the
format detection knows a bundle by (``FORMAT``); :func:`collector_status` and
:func:`collector_note`, what a message says when a member is missing or partial; the parsers of
the CSV rows the views read (``offcpu.csv.gz``'s intervals).
"""

from __future__ import annotations

import csv
import itertools
import math
from collections.abc import Iterable, Iterator, Mapping

import numpy as np

from profiler.bundle import Bundle
from profiler.inputs.source import BUNDLE
from profiler.tolerant import ReadLog

__all__ = ["FORMAT", "collector_note", "collector_status", "csv_rows", "read_intervals", "Intervals"]

FORMAT = BUNDLE


def collector_status(bundle: Bundle, name: str) -> str:
    """'ok', 'skipped, no perf', 'not run': what the manifest says of a collector."""
    rec = bundle.manifest.collector(name)
    if rec is None:
        return "not run"
    return rec.status + (f", {rec.reason}" if rec.reason else "")


def collector_note(bundle: Bundle, name: str) -> list[str]:
    """One line when the collector that wrote the evidence did not run the whole window."""
    rec = bundle.manifest.collector(name)
    if rec is not None and rec.status not in ("ok", "pending"):
        return [f"{name} {rec.status}: {rec.reason or 'see manifest'}"]
    return []


def csv_rows(lines: Iterable[str]) -> Iterator[dict[str, str] | None]:
    """The rows of a CSV member as dicts (the first line names the columns); None for a row the
    csv module refuses (a field over its 128 KiB limit, a NUL byte), and the reading goes on."""
    reader = csv.DictReader(lines)
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error:
            yield None
            continue
        yield row


class Intervals(Mapping[tuple[int, int], float]):
    """{(tid, off time in µs): on time} over sorted numpy columns: ~24 bytes an interval where a
    dict of tuples takes ~200 (a lock storm writes a million intervals; the folder looks up only
    the symbolized switch-outs, a bounded number)."""

    def __init__(self, tid: np.ndarray, off_us: np.ndarray, on: np.ndarray, *, ordered: bool = False) -> None:
        if not ordered:
            order = np.lexsort((off_us, tid))
            tid, off_us, on = tid[order], off_us[order], on[order]
        self._tid, self._off, self._on = tid, off_us, on
        tids, first, count = np.unique(self._tid, return_index=True, return_counts=True)
        self._rows = {int(t): (int(a), int(a + n)) for t, a, n in zip(tids, first, count, strict=True)}

    def get(self, key: tuple[int, int], default: float | None = None) -> float | None:  # type: ignore[override]
        rows = self._rows.get(key[0])
        if rows is None:
            return default
        lo, hi = rows
        i = lo + int(np.searchsorted(self._off[lo:hi], key[1]))
        if i < hi and int(self._off[i]) == key[1]:
            return float(self._on[i])
        return default

    def __getitem__(self, key: tuple[int, int]) -> float:
        v = self.get(key)
        if v is None:
            raise KeyError(key)
        return v

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return ((int(t), int(o)) for t, o in zip(self._tid, self._off, strict=True))

    def __len__(self) -> int:
        return len(self._tid)


_BATCH = 1 << 16


def read_intervals(lines: Iterable[str], log: ReadLog | None = None) -> Intervals:
    """offcpu.csv.gz (``tid,comm,off,on,state``) -> {(tid, off in µs): on}; bad rows are skipped
    (and counted in ``log``). A later row with the same key wins, as in a dict."""
    tids: list[np.ndarray] = []
    offs: list[np.ndarray] = []
    ons: list[np.ndarray] = []
    t: list[int] = []
    o: list[float] = []
    n: list[float] = []

    def flush() -> None:
        if t:
            tids.append(np.asarray(t, np.int64))
            offs.append(np.round(np.asarray(o, np.float64) * 1e6).astype(np.int64))
            ons.append(np.asarray(n, np.float64))
            t.clear()
            o.clear()
            n.clear()

    it = iter(lines)
    header = next(it, None)
    if header is not None and header.rstrip("\r\n") != "tid,comm,off,on,state":
        rows = _read_intervals_csv(itertools.chain([header], it), log)
        t.extend(k[0] for k in rows)
        o.extend(k[1] / 1e6 for k in rows)
        n.extend(rows.values())
    elif header is not None:
        # The collector's own layout: tid first, and off, on, state last never hold a comma, so a
        # row is cut from both ends whatever its (possibly quoted) comm holds: ~4x csv's speed.
        bad = 0
        for line in it:
            try:
                tid = int(line[: line.index(",")])
                _, off_s, on_s, _state = line.rsplit(",", 3)
                off, on = float(off_s), float(on_s)
                if not (math.isfinite(off) and math.isfinite(on) and abs(off) < 1e12):
                    raise ValueError("not a time")
            except ValueError:
                bad += 1 if line.strip() else 0
                continue
            t.append(tid)
            o.append(off)
            n.append(on)
            if len(t) >= _BATCH:
                flush()
        if log is not None:
            log.skip(bad, "unreadable rows")
    flush()
    if not tids:
        return Intervals(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64))
    tid_a, off_a = np.concatenate(tids), np.concatenate(offs)
    del tids[:], offs[:]
    # duplicate keys: the last row wins (stable sort keeps file order within a key)
    order = np.lexsort((off_a, tid_a))
    tid_a, off_a = tid_a[order], off_a[order]
    on_a = np.concatenate(ons)[order]
    del order, ons[:]
    last = np.ones(len(tid_a), bool)
    last[:-1] = (tid_a[1:] != tid_a[:-1]) | (off_a[1:] != off_a[:-1])
    if last.all():
        return Intervals(tid_a, off_a, on_a, ordered=True)
    return Intervals(tid_a[last], off_a[last], on_a[last], ordered=True)


def _read_intervals_csv(lines: Iterable[str], log: ReadLog | None) -> dict[tuple[int, int], float]:
    out: dict[tuple[int, int], float] = {}
    bad = 0
    for row in csv_rows(lines):
        try:
            if row is None:
                raise ValueError("not CSV")
            off, on = float(row["off"]), float(row["on"])
            if not (math.isfinite(off) and math.isfinite(on) and abs(off) < 1e12):
                raise ValueError("not a time")
            out[(int(row["tid"]), round(off * 1e6))] = on
        except (KeyError, TypeError, ValueError, OverflowError):
            bad += 1
    if log is not None:
        log.skip(bad, "unreadable rows")
    return out
