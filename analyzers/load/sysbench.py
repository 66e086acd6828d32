"""sysbench 1.0 output -> intervals and summary (analyzers layer).

Line variants, each seen in real output (tests/data/load/ holds one file per quirk):

- ``[ 10s ] thds: 8 tps: 905.23 qps: 905.23 (r/w/o: 905.23/0.00/0.00) lat (ms,95%): 14.73 err/s: 0.00 reconn/s: 0.00``
  an OLTP interval (``--report-interval``): the rates over the last interval, which ends
  ``10s`` after sysbench started; the percentile is ``--percentile`` (``lat (ms,0%): 0.00``
  when it is disabled: no latency then);
- ``thds: 128 tps: 13029.46 qps: ...`` and ``128 tps: 2311.03 qps: ...``: the same line pasted
  without its time (and without ``thds:``), as users quote them (seed 000): an interval
  whose time is unknown;
- ``[ 1s ] thds: 1 eps: 2030.50 lat (ms,95%): 0.52``: cpu, threads and mutex tests count
  events, not transactions: eps is read as the throughput;
- ``[ 1s ] reads: 92.58 MiB/s writes: 61.72 MiB/s fsyncs: 196.53/s latency (ms,95%): 0.005``:
  fileio; operations per second come from the MiB/s and the ``Block size 16KiB`` the
  options block printed (none without it);
- ``[ 1s ] queue length: 0, concurrency: 2`` (``--rate``): recognised, not a rate;
- the summary: ``transactions: N (X per sec.)``, ``queries: N (X per sec.)``, ``ignored
  errors: N (X per sec.)``, ``total time: 8.0079s``, ``total number of events: N``, the
  ``Latency (ms):`` block (``min``, ``avg``, ``max``, ``95th percentile`` or ``99th
  percentile`` with ``--percentile``, ``percentile stats: disabled``, ``sum``); cpu prints
  ``events per second: X``; fileio ``reads/s``, ``writes/s``, ``fsyncs/s``. The summary's
  throughput is transactions per second where printed, else events per second, else
  events over total time;
- ``Latency histogram`` rows (``--histogram``), the banner, the options block, ``FATAL:`` and
  ``WARNING:`` lines: recognised (FATAL lines are kept: they say why a run failed).
"""

from __future__ import annotations

import re

from profiler.analyzers.load.model import Interval, Summary, percentile_key

_NUM = r"(\d+(?:\.\d+)?)"
_TIME = re.compile(r"^\s*\[\s*" + _NUM + r"s\s*\]\s*")
_FIELD = re.compile(
    r"(?P<key>thds|tps|eps|qps|err/s|reconn/s):\s*" + _NUM
    + r"|lat(?:ency)?\s*\(ms,\s*(?P<pct>\d+(?:\.\d+)?)%\):\s*(?P<lat>\d+(?:\.\d+)?)"
)
_LEADING_THREADS = re.compile(r"^\s*(\d+)\s+(?:tps|eps):")
_FILEIO = re.compile(
    r"reads:\s*" + _NUM + r"\s*MiB/s\s+writes:\s*" + _NUM + r"\s*MiB/s\s+fsyncs:\s*" + _NUM + r"/s"
    r"(?:\s+latency\s*\(ms,\s*(\d+(?:\.\d+)?)%\):\s*" + _NUM + ")?"
)
_QUEUE = re.compile(r"queue length:\s*\d+,\s*concurrency:\s*\d+")
_BANNER = re.compile(r"^sysbench\s+(\d+\.\d+(?:\.\d+)?)\b")
_BLOCK = re.compile(r"^Block size\s+(\d+)(KiB|MiB|b)\b", re.IGNORECASE)
_THREADS = re.compile(r"^Number of threads:\s*(\d+)")
_HIST_ROW = re.compile(r"^\s+\d+(?:\.\d+)?\s+\|\**\s+\d+\s*$")
_PER_SEC = re.compile(r"^\s*(transactions|queries|ignored errors|reconnects):\s+(\d+)\s+\(" + _NUM + r" per sec\.\)")
_STAT = re.compile(r"^\s*(total time|total number of events|events per second|reads/s|writes/s|fsyncs/s):\s+" + _NUM + r"s?\s*$")
_LAT = re.compile(r"^\s*(min|avg|max|sum|(\d+(?:\.\d+)?)th percentile):\s+" + _NUM + r"\s*$")
# Lines sysbench prints around the figures (banner, options block, section titles, fileio setup,
# prepare/cleanup): recognised so that the unknown-line count means something.
_KNOWN = re.compile(
    r"^\s*(?:Running the test with following options:|Report intermediate results every|Initializing random number"
    r"|Initializing worker threads|Threads started!|Prime numbers limit:|SQL statistics:|queries performed:"
    r"|read:\s+\d|write:\s+\d|other:\s+\d|total:\s+\d|General statistics:|Latency \(ms\):|Threads fairness:"
    r"|events \(avg/stddev\):|execution time \(avg/stddev\):|CPU speed:|File operations:|Throughput:"
    r"|read, MiB/s:|written, MiB/s:|Extra file open flags|\d+ files?, \d+\w+ each|\d+\w+ total file size"
    r"|Number of IO requests:|Read/Write ratio|Periodic FSYNC|Calling fsync|Using synchronous|Using asynchronous"
    r"|Doing (?:random|sequential)|Creating (?:table|a secondary index|file|\d+ files)|Inserting \d+ records"
    r"|Removing file|Dropping table|Latency histogram|value\s+-+\s+distribution|percentile stats:\s+disabled"
    r"|Total operations:|\d+(?:\.\d+)? MiB transferred|Running memory speed test|block size:|total size:"
    r"|operation:|scope:|Number of threads:|\(last message repeated)"
)


def _block_kib(size: str, unit: str) -> float:
    n = float(size)
    return {"kib": n, "mib": n * 1024, "b": n / 1024}[unit.lower()]


class SysbenchParser:
    """Feed lines one at a time (streaming); ``intervals`` and ``summary`` hold what was read."""

    tool = "sysbench"

    def __init__(self) -> None:
        self.intervals: list[Interval] = []
        self.summary = Summary()
        self.fatal: list[str] = []
        self.version: str | None = None
        self.data_lines = 0  # intervals and summary figures: how sure we are this is sysbench
        self._block_kib: float | None = None
        self._threads: int | None = None
        self._prev_end: float | None = None
        self._summary_seen = False
        self._events: int | None = None
        self._eps: float | None = None
        self._fileio: dict[str, float] = {}

    # ------------------------------------------------------------------ lines
    def feed(self, lineno: int, text: str) -> bool:
        """True when the line is sysbench's."""
        if self._interval(lineno, text) or self._summary_line(lineno, text):
            self.data_lines += 1
            return True
        m = _BANNER.match(text)
        if m:
            self.version = m.group(1)
            return True
        stripped = text.strip()
        if stripped.startswith("FATAL:"):
            self.fatal.append(stripped)
            return True
        if stripped.startswith("WARNING:"):
            return True
        m = _BLOCK.match(stripped)
        if m:
            self._block_kib = _block_kib(m.group(1), m.group(2))
            return True
        m = _THREADS.match(stripped)
        if m:
            self._threads = int(m.group(1))
            return True
        return bool(_KNOWN.match(text) or _HIST_ROW.match(text))

    def _interval(self, lineno: int, text: str) -> bool:
        tm = _TIME.match(text)
        end = float(tm.group(1)) if tm else None
        body = text[tm.end():] if tm else text
        if tm and _QUEUE.search(body):
            return True
        fields: dict[str, float] = {}
        lat: dict[str, float] = {}
        for m in _FIELD.finditer(body):
            if m.group("key"):
                fields[m.group("key")] = float(m.group(2))
            else:
                key = percentile_key(m.group("pct"))
                if key is not None:
                    lat[key] = float(m.group("lat"))
        rate = fields.get("tps", fields.get("eps"))
        if rate is not None and ("qps" in fields or "lat" in body or "thds" in fields):
            threads = fields.get("thds")
            if threads is None:
                lead = _LEADING_THREADS.match(body)
                threads = float(lead.group(1)) if lead else None
            self._add(lineno, end, Interval(end=end, duration=None, tps=rate, qps=fields.get("qps"),
                                            errors=fields.get("err/s"), latency_ms=lat,
                                            threads=int(threads) if threads is not None else self._threads))
            return True
        fm = _FILEIO.search(body)
        if fm and tm:
            reads, writes, fsyncs = float(fm.group(1)), float(fm.group(2)), float(fm.group(3))
            ops = None
            if self._block_kib:
                ops = (reads + writes) * 1024 / self._block_kib + fsyncs
            flat = {}
            if fm.group(4) and fm.group(5):
                key = percentile_key(fm.group(4))
                if key is not None:
                    flat[key] = float(fm.group(5))
            self._add(lineno, end, Interval(end=end, duration=None, tps=ops, latency_ms=flat, threads=self._threads))
            return True
        return False

    def _add(self, lineno: int, end: float | None, iv: Interval) -> None:
        iv.line = lineno
        if end is not None:
            iv.duration = end - self._prev_end if self._prev_end is not None and end > self._prev_end else end
            self._prev_end = end
        self.intervals.append(iv)

    def _summary_line(self, lineno: int, text: str) -> bool:
        s = self.summary
        m = _PER_SEC.match(text)
        if m:
            what, n, rate = m.group(1), int(m.group(2)), float(m.group(3))
            if what == "transactions":
                s.transactions, s.tps = n, rate
            elif what == "queries":
                s.qps = rate
            elif what == "ignored errors":
                s.errors = rate
            self._seen(lineno)
            return True
        m = _STAT.match(text)
        if m:
            what, value = m.group(1), float(m.group(2))
            if what == "total time":
                s.seconds = value
            elif what == "total number of events":
                self._events = int(value)
            elif what == "events per second":
                self._eps = value
            else:
                self._fileio[what] = value
            self._seen(lineno)
            return True
        m = _LAT.match(text)
        if m and self._summary_seen:
            name = m.group(1)
            key = percentile_key(m.group(2)) if m.group(2) else name
            if key is not None and name != "sum":
                s.latency_ms[key] = float(m.group(3))
            self._seen(lineno)
            return True
        return False

    def _seen(self, lineno: int) -> None:
        self._summary_seen = True
        self.summary.line = lineno

    # ------------------------------------------------------------------ result
    def result(self) -> Summary | None:
        """The summary, with the throughput rule of the module docstring; None when sysbench printed none."""
        if not self._summary_seen:
            return None
        s = self.summary
        s.threads = self._threads
        if s.tps is None:
            if self._eps is not None:
                s.tps = self._eps
            elif self._fileio:
                s.tps = sum(self._fileio.values())
            elif self._events is not None and s.seconds:
                s.tps = self._events / s.seconds
        if s.transactions is None and self._events is not None:
            s.transactions = self._events
        return s
