"""raw_syscalls enter/exit events paired per thread (formats layer): the ``syscalls.csv`` member's writer.

An exit pairs with its thread's enter of the same syscall in the same traced window; each
interval of the capture gets one row per thread and syscall, ``time,tid,comm,syscall,count,
total_ns``, written once a later interval has begun. A call still open when its window closed
counts there up to the window's end; one still open at the very end, up to the last event.

One rule, three drivers, the same rows (tests compare them):

- :class:`SyscallPairs`: the rule vectorised over batches of events (numpy), fed by
  :func:`read_direct` straight from the collector's perf.data (formats/perfdata.py);
- :class:`Pairing`: :class:`SyscallPairs` over ``perf script`` lines (:func:`parse_line`),
  where perf.data cannot be read directly;
- :class:`PyPairing`: the same lines in plain Python, where numpy is missing (the cluster
  agent's bare python3); :func:`pairing` picks between the two.

The syscalls collector (collectors/perf/syscalls.py) runs them at the end of a capture, with the
kernel's syscall table it reads from the host; they sit here, below the collectors, as the code
that turns perf's events into the member.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import IO

try:
    import numpy as np
except ImportError:  # the cluster agent runs collectors under a bare python3: perf script text then
    np = None  # type: ignore[assignment]

EVENTS = ["raw_syscalls:sys_enter", "raw_syscalls:sys_exit"]
PAIR_FIELDS = "comm,tid,time,event,trace"
HEADER = "time,tid,comm,syscall,count,total_ns\n"
WINDOW_SLACK = 0.05  # perf switches its events a little after we ask (s)


def syscall_name(nr: int, table: dict[int, str]) -> str:
    return table.get(nr) or f"syscall_{nr}"


def parse_line(line: str) -> tuple[str, int, float, bool, int] | None:
    """One line of ``perf script -F comm,tid,time,event,trace`` for raw_syscalls.

    ``"   python3 15047   625.752142: raw_syscalls:sys_enter: NR 110 (7fb5, 0, ...)"`` ->
    (comm, tid, time, is_enter, nr). The comm may hold spaces, so the line is read from the event
    name outwards.
    """
    i = line.find(" raw_syscalls:sys_")
    if i < 0:
        return None
    head = line[:i].rstrip().rstrip(":").split()
    if len(head) < 3:
        return None
    try:
        t = float(head[-1])
        tid = int(head[-2])
    except ValueError:
        return None
    comm = " ".join(head[:-2])
    rest = line[i + 18:]
    enter = rest.startswith("enter")
    if not enter and not rest.startswith("exit"):
        return None
    words = rest.split(None, 3)
    try:
        nr = int(words[2])
    except (IndexError, ValueError):
        return None
    return comm, tid, t, enter, nr


class PyPairing:
    """Pairs enters and exits per thread, line by line in plain Python: the fallback where numpy is
    missing (the cluster agent's bare python3); the same rules as :class:`SyscallPairs` (tests compare them).
    Writes interval rows as soon as an interval is over.

    The input is time-ordered (perf script sorts it), so each interval is written once the
    first event of a later interval arrives: memory stays bounded by one interval's keys.
    """

    def __init__(self, out: IO[str], t0: float, interval: float, names: dict[int, str],
                 windows: list[list[float]] | None = None) -> None:
        self.out = out
        self.t0 = t0
        self.interval = interval
        self.names = names
        # Traced windows of a duty-cycled capture ([start, end], monotonic): a call still open when
        # its window closed counts there with its time up to the window's end; an exit seen in a
        # later window without its enter adds its time from that window's start (count 0).
        self.windows = windows or []
        self.win = 0
        self.continued = 0
        self.open: dict[int, tuple[int, float]] = {}  # tid -> (nr, enter time)
        self.comm: dict[int, str] = {}
        self.bucket: int | None = None
        self.acc: dict[tuple[int, int], list[int]] = {}  # (tid, nr) -> [count, ns]
        self.calls = 0
        self.rows = 0
        self.unpaired_exits = 0
        self.last_time = t0
        out.write(HEADER)

    def _bucket(self, t: float) -> int:
        return max(0, int((t - self.t0) // self.interval))

    def _flush(self) -> None:
        if self.bucket is None or not self.acc:
            self.acc = {}
            return
        start = self.t0 + self.bucket * self.interval
        for (tid, nr), (count, ns) in sorted(self.acc.items()):
            comm = self.comm.get(tid, "")
            if any(c in comm for c in ',"\n'):
                comm = '"' + comm.replace('"', '""') + '"'
            self.out.write(f"{start:.6f},{tid},{comm},{syscall_name(nr, self.names)},{count},{ns}\n")
            self.rows += 1
        self.acc = {}

    def _add(self, t: float, tid: int, nr: int, ns: int, count: int = 1) -> None:
        b = self._bucket(t)
        if self.bucket is None:
            self.bucket = b
        elif b > self.bucket:
            self._flush()
            self.bucket = b
        slot = self.acc.setdefault((tid, nr), [0, 0])
        slot[0] += count
        slot[1] += ns
        self.calls += count

    def _advance(self, t: float) -> None:
        """Past the end of the current window: close the calls it left open at its end."""
        nxt = self.win + 1
        while nxt < len(self.windows) and t >= self.windows[nxt][0] - WINDOW_SLACK:
            end = self.windows[self.win][1]
            for tid, (nr, te) in sorted(self.open.items()):
                self._add(max(te, end - 1e-6), tid, nr, max(0, int(round((end - te) * 1e9))))
            self.open = {}
            self.win = nxt
            nxt += 1

    def feed(self, line: str) -> None:
        got = parse_line(line)
        if got is None:
            return
        comm, tid, t, enter, nr = got
        self.comm[tid] = comm
        self.last_time = max(self.last_time, t)
        if self.windows:
            self._advance(t)
        if enter:
            self.open[tid] = (nr, t)
            return
        started = self.open.pop(tid, None)
        if started is None or started[0] != nr:
            if self.win > 0 and started is None:
                # blocked since before this window opened: its time inside the window counts
                self.continued += 1
                self._add(t, tid, nr, max(0, int(round((t - self.windows[self.win][0]) * 1e9))), count=0)
                return
            self.unpaired_exits += 1
            return
        self._add(t, tid, nr, max(0, int(round((t - started[1]) * 1e9))))

    def close(self) -> int:
        """Count the syscalls still blocked at the end up to the last event; write the last interval."""
        still = len(self.open)
        for tid, (nr, t) in sorted(self.open.items()):
            self._add(max(t, self.last_time), tid, nr, max(0, int(round((self.last_time - t) * 1e9))))
        self.open = {}
        self._flush()
        return still


# One event of the enter/exit trace, as the pairing reads it (time in ns, CLOCK_MONOTONIC).
EVENT_DTYPE = None if np is None else np.dtype([("off", "i8"), ("t", "i8"), ("tid", "i8"), ("nr", "i8"),
                                                ("enter", "?")])


class SyscallPairs:
    """Pairs enters and exits per thread, a batch of time-ordered events at a time (numpy).

    The rules of the line-by-line ``PyPairing`` above (it reads ``perf script`` text, when perf.data
    cannot be read directly), vectorised: an exit pairs with its thread's previous event when
    that is an enter of the same syscall in the same traced window; an enter followed by
    another enter of its thread is dropped; a call still open when its window closed counts
    there up to the window's end; an exit in a later window without its enter adds its time
    from that window's start (count 0); calls open at the very end count up to the last
    event. A batch costs a few sorts of its events; between batches only the calls still open
    are kept, and intervals are written as soon as a later interval has begun: memory stays
    bounded by a batch. Times are perf's nanoseconds, so ``total_ns`` is exact.
    """

    def __init__(self, out: IO[str], t0: float, interval: float, names: dict[int, str],
                 windows: list[list[float]] | None = None, comm: Callable[[int], str] | None = None) -> None:
        self.out = out
        self.t0 = int(round(t0 * 1e9))
        self.interval = max(1, int(round(interval * 1e9)))
        self.names = names
        self.comm = comm or (lambda tid: "")
        w = windows or []
        self.w_start = np.array([int(round(a * 1e9)) for a, _ in w], np.int64)
        self.w_end = np.array([int(round(b * 1e9)) for _, b in w], np.int64)
        self._advance_at = self.w_start[1:] - int(WINDOW_SLACK * 1e9)
        self.open = np.zeros(0, EVENT_DTYPE)  # enters still open after the last batch
        self.open_win = np.zeros(0, np.int64)
        self.cur_win = 0
        self.adds: list[np.ndarray] = []  # (bucket, tid, nr, count, ns) rows not yet written
        self.flushed = 0  # buckets before this one are written
        self.first_bucket: int | None = None
        self.calls = 0
        self.rows = 0
        self.unpaired_exits = 0
        self.continued = 0
        self.last_time: int | None = None
        out.write(HEADER)

    def _win(self, t: np.ndarray) -> np.ndarray:
        if not len(self.w_start):
            return np.zeros(len(t), np.int64)
        return np.searchsorted(self._advance_at, t, side="right").astype(np.int64)

    def _bucket(self, t: np.ndarray) -> np.ndarray:
        out: np.ndarray = np.maximum(0, (t - self.t0) // self.interval)
        return out

    def _add(self, t: np.ndarray, tid: np.ndarray, nr: np.ndarray, count: int, ns: np.ndarray) -> None:
        if not len(t):
            return
        b = np.maximum(self._bucket(t), self.flushed)
        rows = np.empty((len(t), 5), np.int64)
        rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3], rows[:, 4] = b, tid, nr, count, ns
        self.adds.append(rows)
        self.calls += count * len(t)

    def feed(self, ev: np.ndarray) -> None:
        """One time-ordered batch of EVENT_DTYPE events."""
        if not len(ev):
            return
        # the window a call is in: traced windows only open, so a late event stays in the last one
        win = np.maximum.accumulate(np.maximum(self._win(ev["t"]), self.cur_win))
        w_last = self.cur_win = int(win[-1])
        t_max = int(ev["t"].max())
        self.last_time = t_max if self.last_time is None else max(self.last_time, t_max)
        allev = np.concatenate([self.open, ev])
        allwin = np.concatenate([self.open_win, win])
        order = np.lexsort((np.arange(len(allev)), allev["tid"]))
        e, w = allev[order], allwin[order]
        t, tid, nr, enter = e["t"], e["tid"], e["nr"], e["enter"]
        same_prev = np.zeros(len(e), bool)
        same_prev[1:] = tid[1:] == tid[:-1]
        prev_enter_same_win = np.zeros(len(e), bool)
        prev_enter_same_win[1:] = same_prev[1:] & enter[:-1] & (w[1:] == w[:-1])
        same_nr = np.zeros(len(e), bool)
        same_nr[1:] = nr[1:] == nr[:-1]
        exits = ~enter
        paired = exits & prev_enter_same_win & same_nr
        mismatched = exits & prev_enter_same_win & ~same_nr
        no_start = exits & ~prev_enter_same_win
        later = no_start & (w > 0)
        self.unpaired_exits += int(mismatched.sum()) + int((no_start & (w == 0)).sum())
        self.continued += int(later.sum())
        # an enter is taken by its thread's next event when that comes in the same window
        taken = np.zeros(len(e), bool)
        taken[:-1] = same_prev[1:] & (w[1:] == w[:-1])
        left = enter & ~taken
        cut = left & (w < w_last)  # its window closed before this batch ended
        keep = left & (w >= w_last)
        ip = np.flatnonzero(paired)
        self._add(t[ip], tid[ip], nr[ip], 1, t[ip] - t[ip - 1])
        il = np.flatnonzero(later)
        if len(il):
            self._add(t[il], tid[il], nr[il], 0, np.maximum(0, t[il] - self.w_start[w[il]]))
        ic = np.flatnonzero(cut)
        if len(ic):
            end = self.w_end[w[ic]]
            self._add(np.maximum(t[ic], end - 1000), tid[ic], nr[ic], 1, np.maximum(0, end - t[ic]))
        self.open, self.open_win = e[keep], w[keep]
        self._flush(int(self._bucket(np.array([t_max]))[0]))

    def _flush(self, before: int) -> None:
        """Write the intervals before bucket ``before`` (the current one may still grow)."""
        if not self.adds:
            self.flushed = max(self.flushed, before)
            return
        rows = np.concatenate(self.adds) if len(self.adds) > 1 else self.adds[0]
        done = rows[:, 0] < before
        self.adds = [rows[~done]] if (~done).any() else []
        self.flushed = max(self.flushed, before)
        rows = rows[done]
        if not len(rows):
            return
        order = np.lexsort((rows[:, 2], rows[:, 1], rows[:, 0]))
        rows = rows[order]
        key = rows[:, :3]
        new = np.ones(len(rows), bool)
        new[1:] = (key[1:] != key[:-1]).any(axis=1)
        starts = np.flatnonzero(new)
        counts = np.add.reduceat(rows[:, 3], starts)
        nss = np.add.reduceat(rows[:, 4], starts)
        lines = []
        for (b, tid, nr), count, ns in zip(key[starts].tolist(), counts.tolist(), nss.tolist(), strict=True):
            comm = self.comm(tid)
            if any(c in comm for c in ',"\n'):
                comm = '"' + comm.replace('"', '""') + '"'
            start = (self.t0 + b * self.interval) / 1e9
            lines.append(f"{start:.6f},{tid},{comm},{syscall_name(nr, self.names)},{count},{ns}\n")
        self.out.writelines(lines)
        self.rows += len(lines)

    def close(self) -> int:
        """Count the syscalls still open at the end up to the last event; write the rest."""
        still = len(self.open)
        if still and self.last_time is not None:
            t = self.open["t"]
            self._add(np.maximum(t, self.last_time), self.open["tid"], self.open["nr"], 1,
                      np.maximum(0, self.last_time - t))
        self.open = np.zeros(0, EVENT_DTYPE)
        self._flush(np.iinfo(np.int64).max)
        return still


class Pairing:
    """:class:`SyscallPairs` over ``perf script -F comm,tid,time,event,trace`` lines (the fallback when
    perf.data cannot be read directly), fed a line at a time and paired in batches."""

    BATCH = 1 << 16

    def __init__(self, out: IO[str], t0: float, interval: float, names: dict[int, str],
                 windows: list[list[float]] | None = None) -> None:
        self.comms: dict[int, str] = {}
        self.pairs = SyscallPairs(out, t0, interval, names, windows, lambda tid: self.comms.get(tid, ""))
        self._rows: list[tuple[int, int, int, int, bool]] = []

    def feed(self, line: str) -> None:
        got = parse_line(line)
        if got is None:
            return
        comm, tid, t, enter, nr = got
        self.comms[tid] = comm
        self._rows.append((len(self._rows), int(round(t * 1e9)), tid, nr, enter))
        if len(self._rows) >= self.BATCH:
            self._push()

    def _push(self) -> None:
        if self._rows:
            self.pairs.feed(np.array(self._rows, EVENT_DTYPE))
            self._rows = []

    def close(self) -> int:
        self._push()
        return self.pairs.close()

    @property
    def calls(self) -> int:
        return self.pairs.calls

    @property
    def rows(self) -> int:
        return self.pairs.rows

    @property
    def unpaired_exits(self) -> int:
        return self.pairs.unpaired_exits

    @property
    def continued(self) -> int:
        return self.pairs.continued


def pairing(out: IO[str], t0: float, interval: float, names: dict[int, str],
            windows: list[list[float]] | None = None) -> Pairing | PyPairing:
    """The line-fed pairing: numpy batches where numpy is installed, plain Python elsewhere."""
    return (Pairing(out, t0, interval, names, windows) if np is not None
            else PyPairing(out, t0, interval, names, windows))


def read_direct(data: Path, pids: set[int], pairs_of: Callable[[Callable[[int], str]], SyscallPairs],
                lost_at: list[tuple[int, int]] | None = None) -> tuple[SyscallPairs, int]:
    """Pair the enter/exit trace straight from perf.data (no perf script): the samples of the
    processes ``pids`` (their threads' names from the file's COMM records). Returns the
    pairing and perf's lost-event count (``lost_at`` gets each LOST record's (ns, events));
    PerfDataUnsupported when the file cannot be read so."""
    from profiler.formats import perfdata as pd
    from profiler.formats import tracepoints as tp

    comms: dict[int, str] = {}
    lost = [0]
    with pd.PerfFile(data) as f:
        enter_ev, exit_ev = f.event(EVENTS[0]), f.event(EVENTS[1])
        if enter_ev is None or exit_ev is None:
            raise pd.PerfDataUnsupported("no raw_syscalls events named in perf.data")
        f_enter = f.tp_fields(EVENTS[0])["id"]
        f_exit = f.tp_fields(EVENTS[1])["id"]
        pid_arr = np.array(sorted(pids), np.int64)

        def side(rec: pd.Records) -> None:
            lost[0] += rec.lost()
            if lost_at is not None:
                lost_at.extend(rec.lost_at(enter_ev.sample_type))
            for _pid, tid, comm in rec.comms():
                comms[tid] = comm.decode("utf-8", "replace")

        def decode(rec: pd.Records) -> np.ndarray:
            cols = pd.samples(rec, f, [enter_ev, exit_ev])
            parts = []
            for ev, fld, is_enter in ((enter_ev, f_enter, True), (exit_ev, f_exit, False)):
                c = cols.get(ev.index)
                if c is None or not len(c.offs):
                    continue
                mine = np.isin(c.pid, pid_arr)
                a = np.zeros(int(mine.sum()), EVENT_DTYPE)
                a["off"], a["t"], a["tid"] = c.offs[mine], c.time[mine], c.tid[mine]
                a["nr"] = tp.tp_column(rec, c.raw[mine], fld)
                a["enter"] = is_enter
                parts.append(a)
            return np.concatenate(parts) if parts else np.zeros(0, EVENT_DTYPE)

        pairs = pairs_of(lambda tid: comms.get(tid, ""))
        for batch in pd.ordered(f, decode, side):
            pairs.feed(batch)
    return pairs, lost[0]
