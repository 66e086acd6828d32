"""proc.jsonl.gz -> numpy time series per thread, process, system and cgroup (analyzers layer).

Also the wait-reason model: each sample of a thread that is not running is put in one class
(disk IO, futex, idle wait, sleep, other) from its state, the syscall it sits in and its
wchan. The classes are what the verdict rules weigh: D state and fsync-like syscalls are IO
waits, futex is a lock (or an idle worker parked on a condition variable: the metrics tell
them apart by whether the thread also works), epoll/poll/accept/recv is waiting for requests.
"""

from __future__ import annotations

import json
import sys
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from profiler.knowledge import pool_of

# Wait classes, in the order they are stored (uint8 codes in ThreadSeries.wait).
RUNNING, DISK, FUTEX, IDLE, SLEEP, OTHER = range(6)
WAIT_NAMES = ("running", "io", "futex", "idle", "sleep", "other")

# Syscalls by what waiting in them means (names from the kernel's table).
IO_SYSCALLS = frozenset({
    "fsync", "fdatasync", "sync_file_range", "sync", "syncfs", "io_getevents", "io_pgetevents",
    "io_uring_enter", "io_submit", "pread64", "pwrite64", "preadv", "pwritev", "preadv2", "pwritev2",
    "fallocate", "msync", "openat", "unlink", "rename", "renameat", "renameat2", "ftruncate",
})
FUTEX_SYSCALLS = frozenset({"futex", "futex_waitv", "futex_wait", "semop", "semtimedop", "flock"})
IDLE_SYSCALLS = frozenset({
    "epoll_wait", "epoll_pwait", "epoll_pwait2", "poll", "ppoll", "select", "pselect6", "accept",
    "accept4", "recvfrom", "recvmsg", "recvmmsg", "read", "readv", "wait4", "waitid", "pause",
    "rt_sigtimedwait", "rt_sigsuspend", "sigsuspend", "msgrcv", "mq_timedreceive", "connect",
    "sendto", "sendmsg", "write", "writev",
})
SLEEP_SYSCALLS = frozenset({"nanosleep", "clock_nanosleep", "sched_yield"})

# wchan fragments (kernel function a thread sleeps in) when the syscall does not say.
_WCHAN_RULES: tuple[tuple[str, int], ...] = (
    ("futex", FUTEX), ("rwsem", FUTEX), ("mutex_lock", FUTEX),
    ("io_schedule", DISK), ("folio_wait", DISK), ("wait_on_page", DISK), ("blk_", DISK),
    ("jbd2", DISK), ("wait_for_completion_io", DISK), ("ext4", DISK), ("xfs", DISK), ("writeback", DISK),
    ("epoll", IDLE), ("ep_poll", IDLE), ("poll_schedule", IDLE), ("do_select", IDLE), ("sk_wait", IDLE),
    ("pipe_", IDLE), ("unix_stream", IDLE), ("inet_csk_accept", IDLE), ("do_wait", IDLE),
    ("sigsuspend", IDLE), ("sigtimedwait", IDLE),
    ("nanosleep", SLEEP), ("hrtimer", SLEEP),
)


def classify(state: str, syscall_name: str | None, wchan: str | None) -> int:
    """The wait class of one sample."""
    if state == "R":
        return RUNNING
    if state == "D":
        # D is uninterruptible: disk IO or page-in almost always; kernel locks show in wchan.
        if wchan and ("rwsem" in wchan or "mutex_lock" in wchan):
            return FUTEX
        return DISK
    if state in ("I",):
        return IDLE
    if syscall_name:
        if syscall_name in FUTEX_SYSCALLS:
            return FUTEX
        if syscall_name in IO_SYSCALLS:
            return DISK
        if syscall_name in SLEEP_SYSCALLS:
            return SLEEP
        if syscall_name in IDLE_SYSCALLS:
            return IDLE
    if wchan:
        for frag, cls in _WCHAN_RULES:
            if frag in wchan:
                return cls
    return OTHER


@dataclass
class ThreadSeries:
    pid: int
    tid: int
    comm: str
    pool: str
    t: np.ndarray  # monotonic seconds
    cpu: np.ndarray  # cumulative utime+stime, seconds
    state: np.ndarray  # uint8 ord() of the state letter
    wait: np.ndarray  # uint8 wait class (RUNNING..OTHER)
    syscall: np.ndarray  # int32: -2 running/unknown, -1 not in a syscall, else the number
    run_delay: np.ndarray  # cumulative seconds waiting on a run queue (NaN if unknown)
    blkio: np.ndarray  # cumulative seconds of delay-accounted block IO wait (NaN if unknown)
    vcsw: np.ndarray  # cumulative voluntary context switches (NaN where not sampled)
    ivcsw: np.ndarray
    wchans: list[str | None] = field(default_factory=list)

    def delta(self, arr: np.ndarray) -> float:
        v = arr[~np.isnan(arr)] if arr.dtype.kind == "f" else arr
        return float(v[-1] - v[0]) if len(v) >= 2 else 0.0

    @property
    def span(self) -> float:
        return float(self.t[-1] - self.t[0]) if len(self.t) >= 2 else 0.0


@dataclass
class Series:
    """A set of named numeric arrays sharing one time axis."""

    t: np.ndarray
    values: dict[str, np.ndarray]

    def get(self, name: str) -> np.ndarray | None:
        return self.values.get(name)

    def names_under(self, prefix: str) -> list[str]:
        """The names flattened under ``prefix`` (``disks`` -> the disks), whole whatever they hold:
        a disk named ``a.b`` is ``a.b`` (``disks.a.b.reads``: the field is after the last dot)."""
        head = prefix + "."
        return sorted({k[len(head):].rsplit(".", 1)[0] for k in self.values if k.startswith(head) and
                       "." in k[len(head):]})

    def rate(self, name: str) -> float | None:
        """Average per-second increase of a cumulative counter over the window."""
        v = self.values.get(name)
        if v is None or len(self.t) < 2:
            return None
        ok = ~np.isnan(v)
        if ok.sum() < 2:
            return None
        tt, vv = self.t[ok], v[ok]
        span = tt[-1] - tt[0]
        return float((vv[-1] - vv[0]) / span) if span > 0 else None

    def delta(self, name: str) -> float | None:
        v = self.values.get(name)
        if v is None:
            return None
        v = v[~np.isnan(v)]
        return float(v[-1] - v[0]) if len(v) >= 2 else None

    def last(self, name: str) -> float | None:
        v = self.values.get(name)
        if v is None:
            return None
        v = v[~np.isnan(v)]
        return float(v[-1]) if len(v) else None

    def mean(self, name: str) -> float | None:
        v = self.values.get(name)
        if v is None:
            return None
        v = v[~np.isnan(v)]
        return float(v.mean()) if len(v) else None

    def max(self, name: str) -> float | None:
        v = self.values.get(name)
        if v is None:
            return None
        v = v[~np.isnan(v)]
        return float(v.max()) if len(v) else None


@dataclass
class ProcData:
    host: dict[str, Any]
    threads: dict[tuple[int, int], ThreadSeries]
    processes: dict[int, Series]
    system: Series | None
    cgroups: dict[int, Series]
    events: list[dict[str, Any]]
    syscall_names: dict[int, str]
    top: list[dict[str, Any]] = field(default_factory=list)  # "top" records: the host's top CPU users
    clk_tck: int = 100
    bad_lines: int = 0

    @property
    def t0(self) -> float | None:
        ts = [s.t[0] for s in self.threads.values() if len(s.t)]
        if self.system is not None and len(self.system.t):
            ts.append(self.system.t[0])
        return float(min(ts)) if ts else None

    @property
    def t1(self) -> float | None:
        ts = [s.t[-1] for s in self.threads.values() if len(s.t)]
        if self.system is not None and len(self.system.t):
            ts.append(self.system.t[-1])
        return float(max(ts)) if ts else None

    def syscall_name(self, nr: int) -> str:
        return self.syscall_names.get(nr, f"syscall_{nr}")

    def threads_of(self, pid: int) -> list[ThreadSeries]:
        return [s for (p, _), s in sorted(self.threads.items()) if p == pid]


def _flatten(prefix: str, obj: Any, out: dict[str, float]) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(obj, bool):
        return
    elif isinstance(obj, int | float):
        f = float(obj)
        if abs(f) < MAX_VALUE:
            out[prefix] = f


def _series(rows: list[dict[str, float]], ts: list[float]) -> Series:
    keys = sorted({k for r in rows for k in r})
    t = np.asarray(ts, dtype=np.float64)
    values = {k: np.asarray([r.get(k, np.nan) for r in rows], dtype=np.float64) for k in keys}
    return Series(t=t, values=values)


def parse_lines(lines: Iterable[str]) -> ProcData:
    """Parse proc.jsonl lines; malformed lines are counted and skipped (a cut-off last line is normal)."""
    host: dict[str, Any] = {}
    per_thread: dict[tuple[int, int], _ThreadRows] = {}
    proc_rows: dict[int, tuple[list[dict[str, float]], list[float]]] = {}
    sys_rows: tuple[list[dict[str, float]], list[float]] = ([], [])
    cg_rows: dict[int, tuple[list[dict[str, float]], list[float]]] = {}
    events: list[dict[str, Any]] = []
    top: list[dict[str, Any]] = []
    bad = 0
    for line in lines:
        if not line.startswith("{"):  # every record is an object: anything else is damage (cheaply)
            if line.strip():
                bad += 1
            continue
        try:
            rec = json.loads(line)
            if not isinstance(rec, dict):
                raise TypeError("not an object")
            kind = rec["kind"]
            t = _finite(rec["t"])
            if kind == "thread":
                key = (_id(rec["pid"]), _id(rec["tid"]))
                rows_ = per_thread.get(key)
                if rows_ is None:
                    rows_ = per_thread[key] = _ThreadRows()
                rows_.add(rec, t)
            elif kind == "process":
                flat: dict[str, float] = {}
                _flatten("", {k: v for k, v in rec.items() if k not in ("kind", "t", "pid")}, flat)
                rows, ts = proc_rows.setdefault(_id(rec.get("pid", 0)), ([], []))
                rows.append(flat)
                ts.append(t)
            elif kind == "system":
                flat = {}
                _flatten("", {k: v for k, v in rec.items() if k not in ("kind", "t")}, flat)
                sys_rows[0].append(flat)
                sys_rows[1].append(t)
            elif kind == "cgroup":
                flat = {}
                _flatten("", {k: v for k, v in rec.items() if k not in ("kind", "t", "pid")}, flat)
                rows, ts = cg_rows.setdefault(_id(rec.get("pid", 0)), ([], []))
                rows.append(flat)
                ts.append(t)
            elif kind == "host":
                if not host:
                    host = _host(rec)
            elif kind == "event":
                events.append(rec)
            elif kind == "top":
                top.append(_top(rec, t))
            # an unknown kind from a newer writer: ignored on purpose
        except (ValueError, KeyError, TypeError, OverflowError, RecursionError):
            bad += 1  # not JSON, a cut line, a wrong type, an absurd number, deep nesting
    clk = int(host.get("clk_tck") or 100)
    names = {}
    for k, v in (host.get("syscall_names") or {}).items():
        try:
            names[int(k)] = str(v)
        except (TypeError, ValueError):
            continue
    threads: dict[tuple[int, int], ThreadSeries] = {}
    for key, rows_ in per_thread.items():
        threads[key] = rows_.series(key, clk, names)
    return ProcData(
        host=host,
        threads=threads,
        processes={p: _series(r, ts) for p, (r, ts) in proc_rows.items()},
        system=_series(*sys_rows) if sys_rows[1] else None,
        cgroups={p: _series(r, ts) for p, (r, ts) in cg_rows.items()},
        events=events,
        syscall_names=names,
        top=top,
        clk_tck=clk,
        bad_lines=bad,
    )


MAX_TIME = 1e10  # CLOCK_MONOTONIC seconds (since boot): three centuries is no uptime
MAX_VALUE = float(1 << 63)  # counters are 64-bit: a larger number is damage


def _finite(v: Any) -> float:
    """A time: a number 0 <= t < MAX_TIME (ValueError otherwise: the record is damaged)."""
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= float(v) < MAX_TIME:
        raise ValueError("not a monotonic time")
    return float(v)


def _id(v: Any) -> int:
    """A pid or tid: a whole number 0 <= v < 2^31 (ValueError otherwise)."""
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < (1 << 31):
        raise ValueError("not a process id")
    return v


def _top(rec: dict[str, Any], t: float) -> dict[str, Any]:
    """A ``top`` record (the busiest processes since the previous one) with its numbers checked:
    ``dt`` a time, each of ``procs`` [pid, comm, ticks] with a process id and a finite tick count
    (a damaged row is left out; a damaged ``dt`` or ``procs`` makes the record a bad line)."""
    procs = rec.get("procs") or []
    if not isinstance(procs, list):
        raise TypeError("procs is not a list")
    rows: list[list[Any]] = []
    for row in procs:
        if not isinstance(row, list) or len(row) < 3 or not isinstance(row[1], str):
            continue
        try:
            ticks = _num(row[2])
            if ticks >= 0:
                rows.append([_id(row[0]), row[1], ticks])
        except ValueError:
            continue
    return {"kind": "top", "t": t, "dt": _finite(rec.get("dt") or 0.0), "procs": rows}


# the host record's numbers the analysis uses: key -> (lowest, highest)
_HOST_NUMBERS = {"clk_tck": (1, 1e6), "page_size": (1, 1 << 30), "hz": (1e-3, 1e6), "slow_hz": (1e-3, 1e6),
                 "ncpu": (1, 1 << 20), "task_delayacct": (0, 1)}


def _host(rec: dict[str, Any]) -> dict[str, Any]:
    """The host record with its numbers checked (an out-of-range one is dropped: defaults apply)."""
    host = dict(rec)
    for key, (lo, hi) in _HOST_NUMBERS.items():
        v = host.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or not lo <= v <= hi):
            del host[key]
    if not isinstance(host.get("syscall_names"), dict):
        host.pop("syscall_names", None)
    if not isinstance(host.get("block_devices"), dict):
        host.pop("block_devices", None)
    return host


_EXACT = 1 << 53  # an int below this in size is a float exactly (and far under MAX_VALUE)


def _num(v: Any) -> float:
    t = type(v)  # the usual numbers first (a JSON record's are exactly float or int)
    if t is float:
        return v if -MAX_VALUE < v < MAX_VALUE else np.nan  # (NaN and infinities too)
    if t is int and -_EXACT < v < _EXACT:
        return float(v)
    if isinstance(v, int | float) and not isinstance(v, bool):
        try:
            f = float(v)
        except OverflowError:
            return np.nan
        return f if abs(f) < MAX_VALUE else np.nan  # (NaN and infinities too)
    return np.nan


class _ThreadRows:
    """One thread's records as columns while the member is read: a record kept as its parsed
    dict took ~1.5 KB (a 0.9 MB member of 300,000 thread records peaked at 565 MB)."""

    __slots__ = ("t", "ticks", "state", "syscall", "wchan", "run_delay", "blkio", "vcsw", "ivcsw", "comm", "last")

    def __init__(self) -> None:
        self.t, self.ticks = array("d"), array("d")  # utime + stime, in clock ticks
        self.state: list[str] = []
        self.syscall = array("i")
        self.wchan: list[str | None] = []
        self.run_delay, self.blkio, self.vcsw, self.ivcsw = array("d"), array("d"), array("d"), array("d")
        self.comm, self.last = "", -1.0

    def add(self, r: dict[str, Any], t: float) -> None:
        self.t.append(t)
        self.ticks.append(_num(r.get("utime")) + _num(r.get("stime")))
        self.state.append(str(r.get("state") or "?")[:1])
        s = r.get("syscall")
        self.syscall.append(s if isinstance(s, int) and not isinstance(s, bool) and -(1 << 31) <= s < (1 << 31) else -2)
        w = r.get("wchan")
        self.wchan.append(sys.intern(w) if isinstance(w, str) else None)
        self.run_delay.append(_num(r.get("run_delay_ns")) / 1e9)
        self.blkio.append(_num(r.get("blkio_ticks")))
        self.vcsw.append(_num(r.get("vcsw")))
        self.ivcsw.append(_num(r.get("ivcsw")))
        if t >= self.last:  # the name of the latest record (of the last one among equal times)
            self.comm, self.last = str(r.get("comm") or ""), t

    def series(self, key: tuple[int, int], clk: int, names: dict[int, str]) -> ThreadSeries:
        order = np.argsort(np.frombuffer(self.t), kind="stable")

        def col(a: array[float]) -> np.ndarray:
            return np.frombuffer(a)[order] if len(a) else np.empty(0)

        states = [self.state[i] for i in order.tolist()]
        sc = np.frombuffer(self.syscall, dtype=np.int32)[order] if len(self.syscall) else np.empty(0, np.int32)
        wchans = [self.wchan[i] for i in order.tolist()]
        state = np.array([ord(st) if st.isascii() else 63 for st in states], dtype=np.uint8)  # 63: '?'
        wait = np.array([classify(st, names.get(nr) if nr >= 0 else None, w)
                         for st, nr, w in zip(states, sc.tolist(), wchans, strict=True)], dtype=np.uint8)
        return ThreadSeries(pid=key[0], tid=key[1], comm=self.comm, pool=pool_of(self.comm), t=col(self.t),
                            cpu=col(self.ticks) / clk, state=state, wait=wait, syscall=sc,
                            run_delay=col(self.run_delay), blkio=col(self.blkio) / clk, vcsw=col(self.vcsw),
                            ivcsw=col(self.ivcsw), wchans=wchans)
