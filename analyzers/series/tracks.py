"""Threads and their tracks, for the HTML report's filters and per-thread rows (analyzers layer).

:class:`ThreadTable`: every thread any source names (procfs, CPU and off-CPU stacks, syscalls,
block IO issuers), with its process, name and pool (profiler.knowledge's pool names: TiKV's
``raftstore``, ``apply``, ``grpc-server``...). The page filters every view to a target, a pool or
a thread through it: each view's data names threads by their index here.

:func:`tracks`: per thread and timeline bucket, the share of the bucket it spent on a CPU,
waiting for one (runnable: schedstat's run delay) and off CPU, and what it mostly waited in
when off CPU (procfs's wait classes). Each track is a short string, run-length encoded
(:func:`rle`): a level per bucket as a letter (``a`` = 0 to ``z`` = 100% of one CPU), a run of
three or more as the letter and its length (``a300``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from profiler.analyzers.series import procfs as procmod

from profiler.knowledge import pool_info, pool_of

LEVELS = 26  # a..z
MAX_CELLS = 60_000  # thread x bucket cells embedded; the least active threads beyond it get no track
# the wait class a thread mostly sat in while off CPU, per bucket: io, futex, idle, sleep, other;
# R: on CPU or runnable the whole bucket; "-": no procfs sample
STATE_CHARS = {procmod.DISK: "I", procmod.FUTEX: "F", procmod.IDLE: "D", procmod.SLEEP: "S", procmod.OTHER: "O"}


@dataclass
class ThreadTable:
    pid: list[int] = field(default_factory=list)
    tid: list[int] = field(default_factory=list)
    comm: list[str] = field(default_factory=list)
    index: dict[int, int] = field(default_factory=dict)  # tid -> row

    def add(self, pid: int, tid: int, comm: str) -> int:
        """The row of thread ``tid`` (added when new; a later name fills an empty one)."""
        i = self.index.get(tid)
        if i is None:
            i = self.index[tid] = len(self.tid)
            self.pid.append(pid)
            self.tid.append(tid)
            self.comm.append(comm.strip())
        elif not self.comm[i] and comm.strip():
            self.comm[i] = comm.strip()
        return i

    def to_json(self, kinds: dict[int, str | None]) -> dict[str, object]:
        """Columns; ``kinds``: pid -> target kind (tikv, tidb...), for the pools' roles."""
        pools = [pool_of(c) if c else "?" for c in self.comm]
        roles: dict[str, str] = {}
        for pid, pool in zip(self.pid, pools, strict=True):
            info = pool_info(kinds.get(pid), pool)
            if info is not None:
                roles[pool] = info.role + (f" ({info.knob})" if info.knob else "")
        return {"pid": self.pid, "tid": self.tid, "comm": self.comm, "pool": pools, "roles": roles}


@dataclass
class Tracks:
    on: list[str]  # per thread row: share of each bucket on a CPU (rle); "" no track
    runq: list[str]  # waiting for a CPU
    state: list[str]  # what it mostly waited in off CPU (STATE_CHARS, rle)
    left_out: int = 0  # threads without a track (MAX_CELLS)

    def to_json(self) -> dict[str, object]:
        return {"on": self.on, "runq": self.runq, "state": self.state, "left_out": self.left_out}


def rle(chars: str) -> str:
    """``aaaab`` -> ``a4b``: runs of three or more as the character and its count."""
    out: list[str] = []
    i = 0
    while i < len(chars):
        j = i
        while j < len(chars) and chars[j] == chars[i]:
            j += 1
        out.append(chars[i] + (str(j - i) if j - i >= 3 else chars[i] * (j - i - 1)))
        i = j
    return "".join(out)


def _levels(v: np.ndarray) -> str:
    q = np.where(np.isfinite(v), np.clip(np.round(v * (LEVELS - 1)), 0, LEVELS - 1), 0).astype(np.int64)
    return rle("".join(chr(97 + int(x)) for x in q))


def _per_bucket(t: np.ndarray, cum: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Share of each bucket a cumulative seconds counter grew by (NaN outside its samples)."""
    ok = np.isfinite(cum)
    t, cum = t[ok], cum[ok]
    out = np.full(len(edges) - 1, np.nan)
    if len(t) < 2:
        return out
    e = np.clip(edges, t[0], t[-1])
    c = np.interp(e, t, cum)
    de = np.diff(e)
    inside = de > 0.2 * np.diff(edges)
    out[inside] = np.diff(c)[inside] / de[inside]
    return out


def tracks(pd: procmod.ProcData, table: ThreadTable, edges: np.ndarray) -> Tracks:
    """Each procfs thread's track on the timeline's buckets (``edges``, monotonic seconds); the
    rows of ``table`` procfs does not know get empty tracks."""
    n = len(table.tid)
    out = Tracks(on=[""] * n, runq=[""] * n, state=[""] * n)
    nb = len(edges) - 1
    rows: list[tuple[float, int, procmod.ThreadSeries]] = []
    for (pid, tid), s in pd.threads.items():
        i = table.add(pid, tid, s.comm)
        if len(s.t) >= 2:
            busy = s.delta(s.cpu) + s.delta(s.run_delay)
            rows.append((busy + 0.001 * float(np.sum(s.wait != procmod.IDLE)), i, s))
    n = len(table.tid)
    for lst in (out.on, out.runq, out.state):
        lst.extend([""] * (n - len(lst)))
    rows.sort(key=lambda r: -r[0])
    keep = max(1, MAX_CELLS // max(1, nb))
    out.left_out = max(0, len(rows) - keep)
    for _, i, s in rows[:keep]:
        on = np.clip(_per_bucket(s.t, s.cpu, edges), 0, 1)
        rq = np.clip(_per_bucket(s.t, s.run_delay, edges), 0, 1)
        rq = np.where(np.isfinite(on), np.minimum(rq, 1 - np.nan_to_num(on)), rq)
        idx = np.clip(np.searchsorted(edges, s.t, side="right") - 1, 0, nb - 1)
        chars = []
        for b in range(nb):
            w = s.wait[idx == b]
            if not len(w):
                chars.append("-")
                continue
            off = w[w != procmod.RUNNING]
            if not len(off):
                chars.append("R")
                continue
            vals, counts = np.unique(off, return_counts=True)
            chars.append(STATE_CHARS.get(int(vals[int(np.argmax(counts))]), "O"))
        out.on[i] = _levels(on)
        out.runq[i] = _levels(rq)
        out.state[i] = rle("".join(chars))
    return out
