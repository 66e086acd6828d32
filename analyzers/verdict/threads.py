"""The thread time model (analyzers layer): how each thread spent its sampled span.

Per thread, over its sampled span: ``cpu`` share = delta(utime+stime)/span; ``runnable``
share = delta(schedstat run delay)/span; the rest of the span is split between the wait
classes of analyzers.series.procfs in proportion to how often the sampler saw the thread in
each (analyzers.stacks.waits: the procfs sample's state, syscall and wchan, refined by the
thread's off-CPU stacks). Summed over threads, this gives thread-seconds by class, which is
what "threads blocked on IO 60% of the time" means. A thread is *active* (on the work path)
when it works, wants a CPU, waits on IO or hands work on (see ``ThreadTime.active``); idle-by-
design waits (profiler.knowledge.waits) never count; ``assign_roles`` names the helpers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from profiler.analyzers.series import procfs as procmod
from profiler.analyzers.stacks import waits

from profiler.knowledge import waits as kw

STATE_KEYS = ("cpu", "runnable", "io", "aio", "futex", "idle", "sleep", "other")
ACTIVE_CPU_SHARE = 0.02  # a thread is "busy" if it ran at least 2% of its span...
ACTIVE_DEMAND_SHARE = 0.2  # ...or wanted a CPU (ran or queued) at least 20% of it...
ACTIVE_IO_SHARE = 0.2  # ...or sat in IO at least 20% of it...
ACTIVE_SWITCH_RATE = 20.0  # ...or blocked and woke at least 20 times a second (a thread handing work on)
REAPER_SHARE = 0.5  # a thread whose waits are mostly completion waits, and that does little of the work, reaps


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
    blocked_syscalls: dict[str, int]  # syscall name -> samples blocked in it (io, aio and futex classes)
    wchans: dict[str, int]
    vcsw_rate: float | None = None  # voluntary context switches per second
    idle_by_design: dict[str, float] = field(default_factory=dict)  # knowledge.waits key -> seconds
    completion_waits: dict[str, float] = field(default_factory=dict)  # reaper key -> seconds of aio time
    io_calls: dict[str, int] = field(default_factory=dict)  # syscall -> samples in the io and aio classes
    from_stacks: float = 0.0  # blocked seconds whose class the off-CPU stacks decided
    lock_seconds: float = 0.0  # futex seconds that are lock acquires (mutex, rwlock, kernel lock), not condvar waits
    role: str = "work"  # work | reaper | poller | parked | timer | idle (see ``assign_roles``)
    futex_frames: dict[str, int] = field(default_factory=dict)  # who waits in its futex-class stacks
    blkio_seconds: float | None = None  # block-IO wait by delay accounting, within the span (``blkio_wait``)

    @property
    def cpu_share(self) -> float:
        return self.seconds["cpu"] / self.span if self.span > 0 else 0.0

    @property
    def demand_share(self) -> float:
        """Running or runnable: how much of its span the thread wanted a CPU."""
        return (self.seconds["cpu"] + self.seconds["runnable"]) / self.span if self.span > 0 else 0.0

    @property
    def active(self) -> bool:
        """On the work path: the thread works, wants a CPU, waits on IO or hands work on.

        Idle-by-design waits (pollers, reapers, parking, timers) never make a thread active: a
        Go runtime thread parked in futex or an io_uring reaper in io_uring_enter waits
        whatever the load.
        """
        if self.span <= 0 or self.role == "reaper":
            return False
        # Run-queue time alone does not count below 20%: on a busy host an idle worker that
        # wakes up every 500 ms to re-check its condition queues for a while each time.
        # A connection thread queued on a hot row uses almost no CPU yet wakes hundreds of
        # times a second; an idle worker re-checking its condition wakes a few times, and a
        # thread polling on a timer wakes often but waits on nothing (not futex, not IO).
        span = self.span
        return (self.seconds["cpu"] / span >= ACTIVE_CPU_SHARE
                or self.demand_share >= ACTIVE_DEMAND_SHARE
                or (self.seconds["io"] + self.seconds["aio"]) / span >= ACTIVE_IO_SHARE
                or ((self.vcsw_rate or 0.0) >= ACTIVE_SWITCH_RATE
                    and (self.seconds["futex"] + self.seconds["io"]) / span >= 0.3))


def thread_time(s: procmod.ThreadSeries, names: dict[int, str], runtime: str | None = None,
                mix: waits.StackMix | None = None) -> ThreadTime:
    """Split one thread's span: CPU and run queue from its counters, the rest between wait classes
    in proportion to its samples (analyzers.stacks.waits), refined by its off-CPU stacks."""
    span = s.span
    secs = dict.fromkeys(STATE_KEYS, 0.0)
    n = len(s.t)
    blocked: dict[str, int] = {}
    wch: dict[str, int] = {}
    idle_keys: dict[str, float] = {}
    aio_keys: dict[str, float] = {}
    io_calls: dict[str, int] = {}
    from_stacks = lock_secs = 0.0
    if n and span > 0:
        cpu = min(span, max(0.0, s.delta(s.cpu)))
        runq = max(0.0, s.delta(s.run_delay)) if not np.all(np.isnan(s.run_delay)) else 0.0
        runq = min(runq, span - cpu)
        secs["cpu"], secs["runnable"] = cpu, runq
        rest = span - cpu - runq
        classes: list[waits.WaitClass] = []
        for i in np.nonzero(s.wait != procmod.RUNNING)[0]:
            nr = int(s.syscall[i])
            name = names.get(nr, f"syscall_{nr}") if nr >= 0 else None
            st = chr(int(s.state[i]))
            wc = waits.classify_sample(st, name, s.wchans[i], runtime)
            classes.append(wc)
            if wc.cls in (waits.IO, waits.AIO, waits.FUTEX):
                key = name if name else ("(page fault / kernel)" if st == "D" else "(none)")
                blocked[key] = blocked.get(key, 0) + 1
                if wc.cls != waits.FUTEX:
                    io_calls[key] = io_calls.get(key, 0) + 1
            w = s.wchans[i]
            if w:
                wch[w] = wch.get(w, 0) + 1
        if classes:
            each = rest / len(classes)
            for wc in classes:
                parts = mix.split(wc.cls) if mix is not None else None
                if parts is None:
                    parts = [(wc, 1.0)]
                else:
                    from_stacks += each
                parts = waits.by_pool(parts, s.pool)
                for part, frac in parts:
                    secs[part.cls] += each * frac
                    if part.entry is not None and part.cls in (waits.IDLE, waits.SLEEP):
                        idle_keys[part.entry] = idle_keys.get(part.entry, 0.0) + each * frac
                    elif part.cls == waits.AIO:
                        key = part.entry or "io_uring-reaper"
                        aio_keys[key] = aio_keys.get(key, 0.0) + each * frac
                    if part.cls == waits.FUTEX and part.lock:
                        lock_secs += each * frac
        else:
            secs["cpu"] += rest * (cpu / (cpu + runq)) if cpu + runq > 0 else 0.0
            secs["runnable"] = span - secs["cpu"]
    vc = s.vcsw[~np.isnan(s.vcsw)]
    vts = s.t[~np.isnan(s.vcsw)]
    rate = float((vc[-1] - vc[0]) / (vts[-1] - vts[0])) if len(vc) >= 2 and vts[-1] > vts[0] else None
    return ThreadTime(pid=s.pid, tid=s.tid, comm=s.comm, pool=s.pool, span=span, seconds=secs, samples=n,
                      blocked_syscalls=blocked, wchans=wch, vcsw_rate=rate, idle_by_design=idle_keys,
                      completion_waits=aio_keys, io_calls=io_calls,
                      futex_frames=dict(mix.futex_frames) if mix is not None else {},
                      from_stacks=from_stacks, lock_seconds=lock_secs, blkio_seconds=blkio_wait(s))


def _maybe_in_io(s: procmod.ThreadSeries) -> np.ndarray:
    """Per sample: could the thread have been in an IO wait then (D state, or an IO syscall)?"""
    out: np.ndarray = (s.state == ord("D")) | (s.wait == procmod.DISK)
    return out


def blkio_wait(s: procmod.ThreadSeries) -> float | None:
    """Seconds of the thread's span it waited for block IO, by delay accounting (stat field 42),
    or None when the counter was never read twice.

    The kernel adds a whole wait to the counter when the thread wakes: the wake time minus the
    time it stamped when the thread blocked. So one increase between two samples is a claim that
    the thread waited from (wake - increase) to the wake, and it may reach back before the
    previous sample, legitimately (a 300 ms fsync read every 50 ms shows as one +30 ticks). On
    6.18 the stamp is sometimes stale and the claim impossible: an etcd thread's counter jumped by
    10012 s at uptime 10012 s (a stamp never taken), mariadb and etcd threads the sampler saw in
    futex or running for seconds gained 0.1-9 s at a wake; summed raw, that read 12195-17344% of
    the busy threads' time. So a claim is believed only back to the last sample that saw the
    thread doing something else (running, or sleeping in a wait that is not IO) and to the end of
    the thread's previous wait; what reaches before the span is outside it. A claim cut by what
    was seen is stale: of the stretch left, only the time the thread was neither running nor
    queued for a CPU is kept (not done for every claim: CPU ticks and run delay are too coarse
    over one 50 ms interval, and a thread queued for a CPU 60% of the time would lose half its
    real IO wait). The total is at most the span. A stale claim that stays inside one sample interval cannot be told from a short real
    wait: what is left on CPU-bound etcd under a quota is 2-4% (its threads were seen in D or an
    IO call 0.4-0.8% of the time, and off CPU in D 3% by the off-CPU trace).
    """
    b, t = s.blkio, s.t
    idx = np.nonzero(~np.isnan(b))[0]
    if len(idx) < 2:
        return None
    curves = [(s.t[ok], arr[ok]) for arr in (s.cpu, s.run_delay) for ok in [~np.isnan(arr)] if ok.sum() >= 2]

    def busy(at: float) -> float:  # seconds run or queued for a CPU by ``at`` (cumulative)
        return sum(float(np.interp(at, ct, cv)) for ct, cv in curves)

    other = ~_maybe_in_io(s)
    last_other = np.maximum.accumulate(np.where(other, np.arange(len(t)), -1))
    total, prev_end = 0.0, 0
    for a, z in zip(idx[:-1], idx[1:], strict=True):
        inc = float(b[z] - b[a])
        if inc <= 0:
            continue
        k = int(last_other[z - 1])
        seen = max(float(t[k]) if k >= 0 else -np.inf, float(t[prev_end - 1]) if prev_end > 0 else -np.inf)
        start = max(float(t[z]) - inc, float(t[0]))  # what reaches before the span is outside it
        credit = float(t[z]) - start
        if t[z] - inc < seen:  # the claim reaches past what was seen: a stale stamp
            start = max(start, seen)
            credit = (t[z] - start) - max(0.0, busy(float(t[z])) - busy(start))
        credit = min(inc, max(0.0, credit))
        if credit > 0:
            total += credit
            prev_end = int(z)
    return min(total, s.span)


def assign_roles(tts: list[ThreadTime]) -> None:
    """Tell the work path from helpers, per process (``ThreadTime.role``).

    A completion wait (io_uring_enter, io_getevents) is the work path waiting on IO in the
    thread that does the work (a fio job, a synchronous client), and idle by design in a
    dedicated reaper: a thread whose waits are mostly completion waits and that does less of the
    process's work (CPU) than some other thread is a reaper; its completion time becomes idle.
    Threads that are not active are named by their main idle-by-design wait.
    """
    top_cpu = max((t.seconds["cpu"] for t in tts), default=0.0)
    for t in tts:
        waited = sum(t.seconds[k] for k in ("io", "aio", "futex", "idle", "sleep", "other"))
        if waited > 0 and t.seconds["aio"] >= REAPER_SHARE * waited and t.seconds["cpu"] < top_cpu:
            t.role = "reaper"
            t.seconds["idle"] += t.seconds["aio"]
            t.seconds["aio"] = 0.0
            for k, v in t.completion_waits.items():
                t.idle_by_design[k] = t.idle_by_design.get(k, 0.0) + v
            for k in [k for k in t.io_calls if k in kw.COMPLETION_SYSCALLS]:
                del t.io_calls[k]
            continue
        if t.active:
            t.role = "work"
            continue
        if t.idle_by_design:
            key = max(t.idle_by_design.items(), key=lambda kv: (kv[1], kv[0]))[0]
            w = kw.BY_KEY.get(key)
            t.role = {kw.POLLER: "poller", kw.REAPER: "reaper", kw.PARKING: "parked", kw.TIMER: "timer",
                      kw.SIGNAL: "idle"}.get(w.kind if w else "", "idle")
        else:
            t.role = "idle"


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
