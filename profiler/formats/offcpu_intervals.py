"""sched_switch events paired into off-CPU intervals (formats layer): the ``offcpu.csv.gz`` member's writer.

Each switch-out of a target thread (the task leaving the CPU, with its ``prev_state``) pairs with
that thread's next switch-in: one row per interval, ``tid,comm,off,on,state`` (CLOCK_MONOTONIC
seconds), written as the intervals close. A duty-cycled capture's traced windows cut an interval
still open when its window closed at the window's end, never spanning the gap.

One rule, three drivers, the same rows (tests compare them):

- :class:`SwitchPairs`: the rule vectorised over batches of switches (numpy), fed by
  :func:`read_switches` straight from the collector's perf.data (formats/perfdata.py);
- :class:`IntervalWriter`: :class:`SwitchPairs` over ``perf script`` lines, where perf.data
  cannot be read directly;
- :class:`PyIntervalWriter`: the same lines in plain Python, where numpy is missing (the cluster
  agent's bare python3); :func:`interval_writer` picks between the two.

The off-CPU collector (collectors/perf/offcpu.py) runs them at the end of a capture; they sit
here, below the collectors, as the code that turns perf's events into the member.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import IO

try:
    import numpy as np
except ImportError:  # the cluster agent runs collectors under a bare python3: perf script text then
    np = None  # type: ignore[assignment]

# Lines of the second, stack-less pass (``-F pid,tid,time,event,trace``), the running task first:
#   " 9840/9840  10528.328713: sched:sched_switch: prev_comm=fio prev_pid=9840 prev_prio=120
#    prev_state=D ==> next_comm=swapper/0 next_pid=0 next_prio=120"
_LINE = re.compile(r"^\s*(?P<pid>-?\d+)/(?P<tid>-?\d+)\s+(?P<time>\d+\.\d+):\s+sched:sched_switch:\s+"
                   r"prev_comm=(?P<comm>.*?) prev_pid=(?P<prev>-?\d+) prev_prio=\S+ prev_state=(?P<state>\S+) ==> "
                   r"next_comm=.*? next_pid=(?P<next>-?\d+)")
PAIR_FIELDS = "pid,tid,time,event,trace"
WINDOW_SLACK = 0.05  # perf switches its events a little after we ask (s)


class PyIntervalWriter:
    """Pairs each thread's switch-out (with its prev_state) with its next switch-in, line by line in
    plain Python: the fallback where numpy is missing (the cluster agent's bare python3); the same
    rules as :class:`SwitchPairs` (tests compare them)."""

    def __init__(self, out: IO[str], windows: list[list[float]] | None = None,
                 pids: set[int] | None = None, to_own_ids: bool = False) -> None:
        """``pids``: the target processes; a switch-out counts when the task leaving the CPU
        belongs to one of them (None: every task). ``to_own_ids``: see :func:`read_switches`."""
        self.out = out
        self.pids = pids
        self.own: dict[int, int] | None = {} if to_own_ids else None
        self.pending: dict[int, tuple[float, str, str]] = {}  # tid -> (off time, state, comm)
        self.intervals = 0
        self.off_seconds = 0.0
        # Traced windows of a duty-cycled capture: a thread still off the CPU when its window
        # closed gets an interval cut at the window's end (its switch-in was not traced).
        self.windows = windows or []
        self.win = 0
        self.cut = 0
        out.write("tid,comm,off,on,state\n")

    def _write(self, tid: int, comm: str, t_off: float, t_on: float, state: str) -> None:
        self.out.write(f"{tid},{_csv(comm)},{t_off:.6f},{t_on:.6f},{state}\n")
        self.intervals += 1
        self.off_seconds += max(0.0, t_on - t_off)

    def _advance(self, t: float) -> None:
        nxt = self.win + 1
        while nxt < len(self.windows) and t >= self.windows[nxt][0] - WINDOW_SLACK:
            end = self.windows[self.win][1]
            for tid, (t_off, state, comm) in sorted(self.pending.items()):
                self._write(tid, comm, t_off, max(t_off, end), state)
                self.cut += 1
            self.pending = {}
            self.win = nxt
            nxt += 1

    def close(self) -> None:
        """End of a duty-cycled capture: threads still off at the last window's end are cut there."""
        if self.windows:
            self._advance(float("inf"))
            end = self.windows[-1][1]
            for tid, (t_off, state, comm) in sorted(self.pending.items()):
                if end > t_off:
                    self._write(tid, comm, t_off, end, state)
                    self.cut += 1
            self.pending = {}

    def feed(self, line: str) -> None:
        m = _LINE.match(line)
        if m is None:
            return
        t = float(m.group("time"))
        if self.windows:
            self._advance(t)
        nxt = int(m.group("next"))
        prev = int(m.group("prev"))
        if self.own is not None:
            prev, nxt = _own_ids(self.own, int(m.group("tid")), prev, nxt)
        got = self.pending.pop(nxt, None)
        if got is not None:  # a target thread comes back
            t_off, state, comm = got
            self._write(nxt, comm, t_off, t, state)
        if prev > 0 and (self.pids is None or int(m.group("pid")) in self.pids):
            self.pending[prev] = (t, m.group("state"), m.group("comm"))


# One sched_switch, as the pairing reads it: time in µs as perf script prints it (truncated),
# the sample's process, the task leaving (prev) and the one coming in (next); state and comm
# are ids into the reader's tables.
SWITCH_DTYPE = None if np is None else np.dtype([
    ("off", "i8"), ("t", "i8"), ("pid", "i8"), ("prev", "i8"), ("next", "i8"), ("state", "i8"), ("comm", "i8"),
    ("frames", "i8")])
_ITEM = None if np is None else np.dtype([
    ("t", "i8"), ("tid", "i8"), ("state", "i8"), ("comm", "i8"), ("seq", "i8"), ("win", "i8"), ("out", "?")])


class SwitchPairs:
    """Pairs each thread's switch-out with its next switch-in, a batch of switches at a time.

    A switch-out (the task leaving belongs to a target) pairs with its thread's next switch-in
    in the same traced window; a second switch-out before it replaces it; one still open when
    its window closed is cut at the window's end (``cut``), never spanning the gap. Vectorised:
    a batch costs a sort of its switches by thread; between batches only the open switch-outs
    are kept, so memory stays bounded by a batch. Rows are written as they close:
    ``tid,comm,off,on,state`` (CLOCK_MONOTONIC seconds, off as perf script prints it).
    """

    def __init__(self, out: IO[str], windows: list[list[float]] | None, pids: set[int] | None,
                 states: list[str], comms: list[str]) -> None:
        """``pids``: the target processes (None: every task); ``states``/``comms``: the tables
        the batches' ids point into (they may grow as the reader meets new values)."""
        self.out = out
        self.pids = None if pids is None else np.asarray(sorted(pids), np.int64)
        self.states = states
        self.comms = comms
        self.windows = windows or []
        self._advance_at = np.array([a - WINDOW_SLACK for a, _ in self.windows[1:]], np.float64) * 1e6
        self.open = np.zeros(0, _ITEM)
        self.cur_win = 0
        self.intervals = 0
        self.off_us = 0
        self.cut = 0
        self.switch_outs = 0  # switches whose task leaving belongs to a target (what the stacks hold)
        self.switch_out_frames = 0  # their call-chain frames
        self._comm_csv: list[str] = []  # comms as CSV fields, by id
        out.write("tid,comm,off,on,state\n")

    def _win(self, t: np.ndarray) -> np.ndarray:
        if not len(self._advance_at):
            return np.zeros(len(t), np.int64)
        return np.searchsorted(self._advance_at, t.astype(np.float64), side="right").astype(np.int64)

    def feed(self, ev: np.ndarray) -> None:
        """One batch of SWITCH_DTYPE switches, in time order."""
        if not len(ev):
            return
        # the window a switch is in: traced windows only open, so a late event stays in the last one
        win = np.maximum.accumulate(np.maximum(self._win(ev["t"]), self.cur_win))
        w_last = self.cur_win = int(win[-1])
        seq = np.arange(len(ev), dtype=np.int64)
        mine = np.ones(len(ev), bool) if self.pids is None else np.isin(ev["pid"], self.pids)
        self.switch_outs += int(mine.sum())
        self.switch_out_frames += int(ev["frames"][mine].sum())
        outs = (ev["prev"] > 0) & mine
        ins = ev["next"] > 0
        o = np.zeros(int(outs.sum()), _ITEM)
        o["t"], o["tid"], o["state"], o["comm"] = ev["t"][outs], ev["prev"][outs], ev["state"][outs], ev["comm"][outs]
        o["seq"], o["win"], o["out"] = 2 * seq[outs] + 1, win[outs], True  # a switch's next comes back first
        i = np.zeros(int(ins.sum()), _ITEM)
        i["t"], i["tid"], i["seq"], i["win"] = ev["t"][ins], ev["next"][ins], 2 * seq[ins], win[ins]
        items = np.concatenate([self.open, o, i])  # the open ones (seq -1) come first
        items = items[np.lexsort((items["seq"], items["tid"]))]
        tid, w, is_out = items["tid"], items["win"], items["out"]
        nxt_same = np.zeros(len(items), bool)
        nxt_same[:-1] = (tid[1:] == tid[:-1]) & (w[1:] == w[:-1])
        nxt_in = np.zeros(len(items), bool)
        nxt_in[:-1] = nxt_same[:-1] & ~is_out[1:]
        closed = np.flatnonzero(is_out & nxt_in)
        left = is_out & ~nxt_same
        cut = np.flatnonzero(left & (w < w_last))
        ends = np.array([b for _, b in self.windows], np.float64)
        on = np.concatenate([items["t"][closed + 1] / 1e6, np.maximum(items["t"][cut] / 1e6, ends[w[cut]] if len(cut) else 0)])
        at = np.concatenate([on[: len(closed)], ends[w[cut]] if len(cut) else np.zeros(0)])
        self.cut += len(cut)
        self._write(items[np.concatenate([closed, cut])], on, at)
        self.open = items[left & (w >= w_last)]
        self.open["seq"] = -1

    def _write(self, items: np.ndarray, on: np.ndarray, at: np.ndarray) -> None:
        if not len(items):
            return
        order = np.lexsort((items["tid"], at))
        if len(self._comm_csv) < len(self.comms):  # the reader met new comms
            self._comm_csv.extend(_csv(c) for c in self.comms[len(self._comm_csv):])
        comm, states = self._comm_csv, self.states
        t_off = items["t"][order]
        sec, usec = (t_off // 1_000_000).tolist(), (t_off % 1_000_000).tolist()
        lines = [f"{tid},{comm[cm]},{s}.{u:06d},{t_on:.6f},{states[st]}\n" for tid, cm, s, u, t_on, st in zip(
            items["tid"][order].tolist(), items["comm"][order].tolist(), sec, usec, on[order].tolist(),
            items["state"][order].tolist(), strict=True)]
        self.off_us += int(np.maximum(0, np.round(on * 1e6).astype(np.int64) - items["t"]).sum())
        self.out.writelines(lines)
        self.intervals += len(lines)

    def close(self) -> int:
        """The end of the capture: a duty-cycled trace cuts what is still open at its window's
        end (in the last window: when that ended after the switch-out); returns how many
        switch-outs stay open (a full trace's threads still off the CPU at the end)."""
        if not self.windows or not len(self.open):
            return len(self.open)
        items = self.open
        ends = np.array([b for _, b in self.windows], np.float64)[items["win"]]
        t_off = items["t"] / 1e6
        take = (items["win"] < len(self.windows) - 1) | (ends > t_off)
        self.cut += int(take.sum())
        self._write(items[take], np.maximum(t_off, ends)[take], ends[take])
        self.open = np.zeros(0, _ITEM)
        return 0

    @property
    def off_seconds(self) -> float:
        return self.off_us / 1e6


class IntervalWriter:
    """:class:`SwitchPairs` over ``perf script -F pid,tid,time,event,trace`` lines (the fallback
    when perf.data cannot be read directly), fed a line at a time and paired in batches."""

    BATCH = 1 << 16

    def __init__(self, out: IO[str], windows: list[list[float]] | None = None,
                 pids: set[int] | None = None, to_own_ids: bool = False) -> None:
        """``pids``: the target processes; a switch-out counts when the task leaving the CPU
        belongs to one of them (None: every task). ``to_own_ids``: see :func:`read_switches`."""
        self.own: dict[int, int] | None = {} if to_own_ids else None
        self.states: list[str] = []
        self.comms: list[str] = []
        self._state_id: dict[str, int] = {}
        self._comm_id: dict[str, int] = {}
        self.pairs = SwitchPairs(out, windows, pids, self.states, self.comms)
        self._rows: list[tuple[int, int, int, int, int, int, int, int]] = []

    @staticmethod
    def _id(table: dict[str, int], names: list[str], name: str) -> int:
        i = table.get(name)
        if i is None:
            i = table[name] = len(names)
            names.append(name)
        return i

    def feed(self, line: str) -> None:
        m = _LINE.match(line)
        if m is None:
            return
        t = int(round(float(m.group("time")) * 1e6))
        prev, nxt = int(m.group("prev")), int(m.group("next"))
        if self.own is not None:
            prev, nxt = _own_ids(self.own, int(m.group("tid")), prev, nxt)
        self._rows.append((len(self._rows), t, int(m.group("pid")), prev, nxt,
                           self._id(self._state_id, self.states, m.group("state")),
                           self._id(self._comm_id, self.comms, m.group("comm")), 0))
        if len(self._rows) >= self.BATCH:
            self._push()

    def _push(self) -> None:
        if self._rows:
            self.pairs.feed(np.array(self._rows, SWITCH_DTYPE))
            self._rows = []

    def close(self) -> None:
        """End of the capture: a duty-cycled trace cuts threads still off at the last window's end."""
        self._push()
        self.pairs.close()

    @property
    def pending(self) -> dict[int, tuple[float, str, str]]:
        """Switch-outs still open: tid -> (off time, state, comm)."""
        o = self.pairs.open
        return {int(t): (int(s) / 1e6, self.states[int(st)], self.comms[int(c)])
                for t, s, st, c in zip(o["tid"], o["t"], o["state"], o["comm"], strict=True)}

    @property
    def intervals(self) -> int:
        return self.pairs.intervals

    @property
    def off_seconds(self) -> float:
        return self.pairs.off_seconds

    @property
    def cut(self) -> int:
        return self.pairs.cut


def interval_writer(out: IO[str], windows: list[list[float]] | None = None,
                    pids: set[int] | None = None, to_own_ids: bool = False) -> IntervalWriter | PyIntervalWriter:
    """The line-fed pairing: numpy batches where numpy is installed, plain Python elsewhere."""
    if np is not None:
        return IntervalWriter(out, windows, pids, to_own_ids)
    return PyIntervalWriter(out, windows, pids, to_own_ids)


def _own_ids(own: dict[int, int], tid: int, prev: int, nxt: int) -> tuple[int, int]:
    """One switch's prev/next from the host's ids to this namespace's, ``tid`` being the
    sample's own (translated) thread id (see :func:`read_switches`)."""
    if prev > 0:
        if tid > 0:
            own[prev] = tid
        prev = tid
    return prev, (own.get(nxt, 0) if nxt > 0 else nxt)


def read_switches(data: Path, consume: Callable[[np.ndarray, list[str], list[str]], None], *,
                  to_own_ids: bool = False, lost_at: list[tuple[int, int]] | None = None) -> int:
    """Every sched_switch of an offcpu-stacks perf.data, straight from the file, in time-ordered
    batches: ``consume(batch, states, comms)``. Returns perf's lost-event count;
    PerfDataUnsupported when the file cannot be read so (the caller runs perf script).

    ``to_own_ids``: the capture ran in a nested PID namespace, where ``prev_pid``/``next_pid``
    are the host's ids but perf's sample ids are this namespace's. The task leaving is the one
    the sample was taken in, so ``prev`` becomes the sample's thread id (0 for a task outside
    the namespace), which also maps the host's id to it; ``next`` is mapped through what was
    learned so far (a thread comes back after it left), 0 when unknown."""
    lost = [0]
    own: dict[int, int] = {}  # host id -> this namespace's (to_own_ids)
    states: list[str] = []
    state_id: dict[int, int] = {}
    comms: list[str] = []
    comm_id: dict[bytes, int] = {}

    def intern(name: bytes) -> int:
        i = comm_id.get(name)
        if i is None:
            i = comm_id[name] = len(comms)
            comms.append(name.decode("utf-8", "replace"))
        return i

    from profiler.formats import perfdata as pd
    from profiler.formats import tracepoints as tp

    with pd.PerfFile(data) as f:
        ev = f.event("sched:sched_switch")
        if ev is None:
            raise pd.PerfDataUnsupported("no sched:sched_switch event named in perf.data")
        fields = f.tp_fields("sched_switch")
        need = ("prev_comm", "prev_pid", "prev_state", "next_pid")
        if any(n not in fields for n in need):
            raise pd.PerfDataUnsupported("sched_switch format without " + ", ".join(n for n in need if n not in fields))
        letters = pd.state_letters(f.tp_flags("sched_switch"))
        o_cc = pd.sample_layout(ev.sample_type).callchain

        def side(rec: pd.Records) -> None:
            lost[0] += rec.lost()
            if lost_at is not None:  # (ns, events) of each LOST record: where the loss was
                lost_at.extend(rec.lost_at(ev.sample_type))

        def decode(rec: pd.Records) -> np.ndarray:
            c = pd.samples(rec, f, [ev]).get(ev.index)
            if c is None or not len(c.offs):
                return np.zeros(0, SWITCH_DTYPE)
            a = np.zeros(len(c.offs), SWITCH_DTYPE)
            a["off"], a["t"], a["pid"] = c.offs, c.time // 1000, c.pid
            a["prev"] = tp.tp_column(rec, c.raw, fields["prev_pid"])
            a["next"] = tp.tp_column(rec, c.raw, fields["next_pid"])
            if to_own_ids:
                _to_own_ids(a, c.tid, own)
            raw_state = tp.tp_column(rec, c.raw, fields["prev_state"]).astype(np.int64)
            uniq, inv = np.unique(raw_state, return_inverse=True)
            ids = []
            for v in uniq.tolist():
                i = state_id.get(v)
                if i is None:
                    i = state_id[v] = len(states)
                    states.append(letters(v))
                ids.append(i)
            a["state"] = np.asarray(ids, np.int64)[inv.ravel()]
            a["comm"] = tp.tp_strings(rec, c.raw, fields["prev_comm"], intern)
            if o_cc >= 0:
                a["frames"] = rec.u64[c.offs + o_cc].astype(np.int64)
            return a

        for batch in pd.ordered(f, decode, side):
            consume(batch, states, comms)
    return lost[0]


def _to_own_ids(a: np.ndarray, sample_tid: np.ndarray, own: dict[int, int]) -> None:
    """prev/next from the host's thread ids to this namespace's (see read_switches)."""
    tid = np.asarray(sample_tid, np.int64)
    seen = (tid > 0) & (a["prev"] > 0)
    if seen.any():
        pairs = np.unique(np.stack([a["prev"][seen].astype(np.int64), tid[seen]], axis=1), axis=0)
        own.update(zip(pairs[:, 0].tolist(), pairs[:, 1].tolist(), strict=True))
    a["prev"] = np.where(a["prev"] > 0, tid, a["prev"])
    nxt = a["next"].astype(np.int64)
    uniq, inv = np.unique(nxt, return_inverse=True)
    a["next"] = np.asarray([own.get(v, 0) if v > 0 else v for v in uniq.tolist()], np.int64)[inv.ravel()]


def _csv(text: str) -> str:
    if any(c in text for c in ',"\n'):
        return '"' + text.replace('"', '""') + '"'
    return text
