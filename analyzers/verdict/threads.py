"""The thread time model (analyzers layer): how each thread spent its sampled span.

Per thread, over its sampled span: ``cpu`` share = delta(utime+stime)/span; ``runnable``
share = delta(schedstat run delay)/span; the rest of the span is split between the wait
classes of analyzers.series.procfs in proportion to how often the sampler saw the thread in
each. Summed over threads, this gives thread-seconds by class, which is what "threads blocked
on IO 60% of the time" means. A thread is *active* when it works, wants a CPU, waits on IO or
hands work on (see ``ThreadTime.active``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from profiler.analyzers.series import procfs as procmod

STATE_KEYS = ("cpu", "runnable", "io", "futex", "idle", "sleep", "other")
_CLASS_TO_KEY = {procmod.DISK: "io", procmod.FUTEX: "futex", procmod.IDLE: "idle", procmod.SLEEP: "sleep",
                 procmod.OTHER: "other"}
ACTIVE_CPU_SHARE = 0.02  # a thread is "busy" if it ran at least 2% of its span...
ACTIVE_DEMAND_SHARE = 0.2  # ...or wanted a CPU (ran or queued) at least 20% of it...
ACTIVE_IO_SHARE = 0.2  # ...or sat in IO at least 20% of it...
ACTIVE_SWITCH_RATE = 20.0  # ...or blocked and woke at least 20 times a second (a thread handing work on)


@dataclass
class ThreadTime:
    """One thread's time split (seconds) over its sampled span."""

    pid: int
    tid: int
    comm: str
    pool: str
    span: float
    seconds: dict[str, float]
    samples: int
    blocked_syscalls: dict[str, int]  # syscall name -> samples blocked in it (io and futex classes)
    wchans: dict[str, int]
    vcsw_rate: float | None = None  # voluntary context switches per second

    @property
    def cpu_share(self) -> float:
        return self.seconds["cpu"] / self.span if self.span > 0 else 0.0

    @property
    def active(self) -> bool:
        if self.span <= 0:
            return False
        # Working threads, and threads stuck on IO (D state is never an idle pool parked on a
        # condvar). Run-queue time alone does not count below 20%: on a busy host an idle worker
        # that wakes up every 500 ms to re-check its condition queues for a while each time.
        # A connection thread queued on a hot row uses almost no CPU yet wakes hundreds of
        # times a second; an idle worker re-checking its condition wakes a few times, and a
        # thread polling on a timer wakes often but waits on nothing (not futex, not IO).
        span = self.span
        return (self.seconds["cpu"] / span >= ACTIVE_CPU_SHARE
                or (self.seconds["cpu"] + self.seconds["runnable"]) / span >= ACTIVE_DEMAND_SHARE
                or self.seconds["io"] / span >= ACTIVE_IO_SHARE
                or ((self.vcsw_rate or 0.0) >= ACTIVE_SWITCH_RATE
                    and (self.seconds["futex"] + self.seconds["io"]) / span >= 0.3))


def thread_time(s: procmod.ThreadSeries, names: dict[int, str]) -> ThreadTime:
    span = s.span
    secs = dict.fromkeys(STATE_KEYS, 0.0)
    n = len(s.t)
    blocked: dict[str, int] = {}
    wch: dict[str, int] = {}
    if n and span > 0:
        cpu = min(span, max(0.0, s.delta(s.cpu)))
        runq = max(0.0, s.delta(s.run_delay)) if not np.all(np.isnan(s.run_delay)) else 0.0
        runq = min(runq, span - cpu)
        secs["cpu"], secs["runnable"] = cpu, runq
        rest = span - cpu - runq
        counts = np.bincount(s.wait, minlength=6)
        off = counts[1:].sum()
        if off > 0:
            for cls, key in _CLASS_TO_KEY.items():
                secs[key] = rest * counts[cls] / off
        else:
            secs["cpu"] += rest * (cpu / (cpu + runq)) if cpu + runq > 0 else 0.0
            secs["runnable"] = span - secs["cpu"]
        for i in np.nonzero((s.wait == procmod.DISK) | (s.wait == procmod.FUTEX))[0]:
            nr = int(s.syscall[i])
            key = names.get(nr, f"syscall_{nr}") if nr >= 0 else ("(page fault / kernel)" if s.state[i] == ord("D") else "(none)")
            blocked[key] = blocked.get(key, 0) + 1
        for i in np.nonzero(s.wait != procmod.RUNNING)[0]:
            w = s.wchans[i]
            if w:
                wch[w] = wch.get(w, 0) + 1
    vc = s.vcsw[~np.isnan(s.vcsw)]
    vts = s.t[~np.isnan(s.vcsw)]
    rate = float((vc[-1] - vc[0]) / (vts[-1] - vts[0])) if len(vc) >= 2 and vts[-1] > vts[0] else None
    return ThreadTime(pid=s.pid, tid=s.tid, comm=s.comm, pool=s.pool, span=span, seconds=secs, samples=n,
                      blocked_syscalls=blocked, wchans=wch, vcsw_rate=rate)


def shares(secs: dict[str, float]) -> dict[str, float]:
    tot = sum(secs.values())
    return {k: (v / tot if tot > 0 else 0.0) for k, v in secs.items()}


def sum_secs(tts: list[ThreadTime]) -> dict[str, float]:
    out = dict.fromkeys(STATE_KEYS, 0.0)
    for tt in tts:
        for k, v in tt.seconds.items():
            out[k] += v
    return out


def top(d: dict[str, float], n: int = 5) -> list[tuple[str, float]]:
    tot = sum(d.values())
    if tot <= 0:
        return []
    return [(k, v / tot) for k, v in sorted(d.items(), key=lambda kv: (-kv[1], kv[0]))[:n]]
