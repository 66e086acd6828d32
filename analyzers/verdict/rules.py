"""The verdict's rules (analyzers layer): small named rules over the metrics, one per cause.

Each rule is a function ``TargetMetrics (+ capture Metrics) -> Finding | None`` over the
thresholds of findings.py. A rule's score is its strongest evidence (``ramp``), scaled by a
weight when the evidence is indirect (a system-wide figure on a shared host). When nothing
reaches ``PRIMARY`` the target is not saturated (``rule_not_saturated``). The ranking of the
findings into a verdict, its confidence and runner-up are ranking.py's.
"""

from __future__ import annotations

from profiler.analyzers.verdict import rules_server
from profiler.analyzers.verdict.findings import (
    PRIMARY,
    THRESHOLDS,
    Evidence,
    Finding,
    evidence,
    ramp,
)
from profiler.analyzers.verdict.metrics import Metrics, TargetMetrics
from profiler.analyzers.verdict.rules_requests import client_rows, phase_rows, requests_of

from profiler.knowledge import TIDB_ADVICE, TIKV_ADVICE
from profiler.knowledge import requests as kr
from profiler.knowledge.waits import BY_KEY


def _pct(x: float | None) -> str:
    return "?" if x is None else f"{100 * x:.0f}%"


def _mib(x: float | None) -> str:
    return "?" if x is None else f"{x / 1048576:.0f} MiB"


# --------------------------------------------------------------------------- rules


def rule_io_wait(t: TargetMetrics, m: Metrics) -> Finding | None:
    ev: list[Evidence] = []
    scores: list[float] = []
    # The work path waits on storage when its threads block in IO (D state, fsync, pread...),
    # or wait for completions of IOs they submitted while a device or a cgroup throttle is at
    # its limit. A reaper waiting for completions (io_uring_enter, io_getevents) is idle by
    # design and is not a work thread (analyzers.verdict.threads.assign_roles); a completion
    # wait with nothing at its limit is waiting for work, not for IO (issue 14).
    blocked = t.time.active_states.get("io") if t.time.active_states else None
    aio = t.time.active_states.get("aio", 0.0) if t.time.active_states else 0.0
    disk = m.system.disks[0] if m.system and m.system.disks else None
    throttle_use = max((u for u in (t.limits.blkio_limit_use, t.limits.blkio_iops_use) if u is not None), default=None)
    at_limit = max(ramp(throttle_use, "io.blkio_limit"),
                   ramp(disk.util, "io.disk_util") if disk is not None and (t.process.disk_share or 0) > 0.3 else 0.0)
    if blocked is not None:
        scores.append(ramp(blocked, "io.blocked"))
        ev.append(evidence("io_blocked_share", blocked, "io.blocked", "D state or IO syscalls, work-path threads"))
    if aio > 0:
        scores.append(ramp(aio, "io.blocked") if at_limit >= PRIMARY else 0.0)
        ev.append(evidence("completion_wait_share", aio, "io.blocked",
                      "work threads waiting for IO completions (io_uring_enter/io_getevents); counts only when "
                      "a device or blkio throttle is at its limit" + ("" if at_limit >= PRIMARY else ": none is")))
    own = (blocked is not None and blocked >= THRESHOLDS["io.blocked"].value * 0.5) or (
        aio >= THRESHOLDS["io.blocked"].value * 0.5 and at_limit >= PRIMARY)
    if t.time.blkio_delay_share is not None:
        # delay accounting counts every iowait sleep, completion waits included: full weight only
        # when the work path is seen waiting on IO itself
        scores.append(ramp(t.time.blkio_delay_share, "io.delayacct") * (1.0 if own else 0.5))
        ev.append(evidence("blkio_delay_share", t.time.blkio_delay_share, "io.delayacct", "delay accounting"))
    if disk is not None and (own or (t.process.disk_share or 0) > 0.3):
        scores.append(ramp(disk.util, "io.disk_util") * 0.6)
        ev.append(evidence(f"disk_util[{disk.name}]", disk.util, "io.disk_util",
                      f"{disk.iops:.0f} IOPS, await {disk.await_ms or 0:.1f} ms, queue {disk.queue_depth:.1f}"))
    if m.io is not None and m.io.p99_ms is not None and (own or (m.io.target_share or 0) > 0.3):
        scores.append(ramp(m.io.p99_ms, "io.p99") * 0.7)
        ev.append(evidence("io_p99_ms", m.io.p99_ms, "io.p99", f"{m.io.total} IOs, p50 {m.io.p50_ms:.2f} ms"))
    if m.system is not None and "io_some" in m.system.psi and own:
        scores.append(ramp(m.system.psi["io_some"], "io.psi") * 0.5)
        ev.append(evidence("psi_io_some", m.system.psi["io_some"], "io.psi", "system-wide"))
    if throttle_use is not None:
        # a throttle at its limit holds the target back when its work path waits for it
        scores.append(ramp(throttle_use, "io.blkio_limit") * (1.0 if own else 0.6))
        ev.append(evidence("blkio_limit_use", throttle_use, "io.blkio_limit", "IOs or bytes per second done / the cgroup's blkio limit"))
    if not scores:
        return None
    score = max(scores)
    # sub-cause: which syscall dominates IO-blocked time, which device/op is slow, which limit
    bits = []
    if t.time.io_syscalls:
        name, share = t.time.io_syscalls[0]
        bits.append(f"{name} {_pct(share)} of IO-blocked time")
    if m.io is not None and m.io.groups:
        g = max(m.io.groups, key=lambda g: (g.p99_ms * g.count, g.count))
        bits.append(f"{g.dev} {g.op} p99 {g.p99_ms:.1f} ms over {g.count} IOs")
    elif disk is not None and disk.await_ms is not None:
        bits.append(f"{disk.name} await {disk.await_ms:.1f} ms, {disk.util * 100:.0f}% busy")
    if t.limits.blkio_limits:
        lim = "; ".join(f"{k} {', '.join(f'{d}={v}' for d, v in devs.items())}" for k, devs in sorted(t.limits.blkio_limits.items()))
        use = f" at {_pct(throttle_use)} of its limit" if throttle_use is not None else ""
        bits.append(f"{_cgroup_of(t)} blkio throttle ({lim}){use}")
    if aio > 0 and at_limit >= PRIMARY:
        bits.append(f"work threads wait for IO completions {_pct(aio)} of their time")
    if t.process.majflt_rate and t.process.majflt_rate > THRESHOLDS["mem.majflt"].value:
        bits.append(f"{t.process.majflt_rate:.0f} major faults/s: part of this IO is paging")
    sub = "; ".join(bits) or "threads blocked on IO"
    rec = "faster storage or fewer synchronous writes (group commits, larger writes); check the IO heatmap for latency outliers"
    if t.limits.blkio_limits:
        rec = "the cgroup's blkio throttle caps the IO: raise blkio.throttle.* (or the container's IO limit)"
    if t.kind == "tikv":
        rec = TIKV_ADVICE["io_wait"]
    return Finding("io_wait", "io_wait", score, "IO wait dominates", sub, ev, rec, t.label)


def _cgroup_of(t: TargetMetrics) -> str:
    """Whose limit it is: "cgroup", or the container's when the target runs in one (issue 24:
    the CPU rule names a container's pin and quota; IO and memory limits are named the same way)."""
    return t.limits.container_name or "cgroup"  # "podman container tikv1"


def rule_memory(t: TargetMetrics, m: Metrics) -> Finding | None:
    ev: list[Evidence] = []
    pressure: list[float] = []
    majflt = max(t.process.majflt_rate or 0.0, t.limits.cg_majflt_rate or 0.0) if (t.process.majflt_rate is not None or t.limits.cg_majflt_rate is not None) else None
    if majflt is not None:
        pressure.append(ramp(majflt, "mem.majflt"))
        ev.append(evidence("major_faults_per_s", majflt, "mem.majflt", "target process or its cgroup"))
    if t.limits.mem_failcnt_rate is not None and t.limits.mem_limit:
        pressure.append(ramp(t.limits.mem_failcnt_rate, "mem.failcnt") * 0.8)
        ev.append(evidence("cgroup_failcnt_per_s", t.limits.mem_failcnt_rate, "mem.failcnt"))
    # Host-wide pressure (PSI, swap) counts fully only when the target shows a sign of its own
    # (faults, a full cgroup, its own swap): on a shared host it is often someone else's.
    own = ((majflt or 0.0) >= 10 or (t.limits.mem_usage_share or 0.0) >= 0.9 or (t.process.swap or 0.0) > 0)
    w = 0.7 if own else 0.3
    if m.system is not None:
        if "memory_some" in m.system.psi:
            pressure.append(ramp(m.system.psi["memory_some"], "mem.psi") * w)
            ev.append(evidence("psi_memory_some", m.system.psi["memory_some"], "mem.psi", "system-wide"))
        if m.system.swap_io_rate is not None:
            pressure.append(ramp(m.system.swap_io_rate, "mem.swap") * w)
            ev.append(evidence("swap_pages_per_s", m.system.swap_io_rate, "mem.swap", "system-wide"))
    usage = 0.0
    if t.limits.mem_usage_share is not None:
        usage = ramp(t.limits.mem_usage_share, "mem.usage")
        ev.append(evidence("cgroup_memory_usage", t.limits.mem_usage_share, "mem.usage", f"limit {_mib(t.limits.mem_limit)}"))
    if not ev:
        return None
    # Being at the limit alone is not a bottleneck (page cache fills any limit); it is when paging follows.
    p = max(pressure, default=0.0)
    score = max(p, min(usage, p + 0.2)) if usage else p
    bits = []
    if t.limits.mem_limit and t.limits.mem_usage_share is not None:
        bits.append(f"{_cgroup_of(t)} memory limit {_mib(t.limits.mem_limit)}: usage {_pct(t.limits.mem_usage_share)}")
    if majflt:
        bits.append(f"{majflt:.0f} major faults/s (working set does not fit: page cache thrash)")
    if m.system is not None and m.system.swap_io_rate and m.system.swap_io_rate > THRESHOLDS["mem.swap"].value:
        bits.append(f"swapping {m.system.swap_io_rate:.0f} pages/s")
    if m.system is not None and m.system.mem_available_share is not None and m.system.mem_available_share < 0.05:
        bits.append(f"host memory available {_pct(m.system.mem_available_share)}")
    sub = "; ".join(bits) or "memory pressure"
    rec = "raise the memory limit or shrink the working set (caches sized to the limit)"
    if t.kind == "tikv":
        rec = TIKV_ADVICE["memory"]
    return Finding("memory", "memory_pressure", score, "memory pressure", sub, ev, rec, t.label)


def condition_wait_weight(t: TargetMetrics) -> tuple[float, str, list[Evidence]]:
    """How much of the busy threads' futex time counts as waiting on a lock, and why ("" when all of it).

    A futex wait is a lock acquire (a mutex or rwlock: the off-CPU stacks name it) or a condition
    wait: a thread waiting for another to signal it. Unnamed, a condition wait may be a request
    waiting for a row lock (InnoDB's, in request code) or a pool thread waiting for its next task
    (TiKV's read pool, raftstore and apply threads between tasks, thousands of times a second
    under load): the OS alone cannot tell them apart, and reads both as lock waits. A server that
    times its own lock waits can: when its histograms are there (TiKV's lock manager and scheduler
    latches), its condition waits count only as much as its requests wait on locks, lock acquires
    in full; without off-CPU stacks that name lock acquires (the bcc backend's user stacks are
    not symbolized), the server's timings decide alone. Without such a server, all of it counts,
    as before. The server's lock phases it read come back as evidence rows."""
    rt = requests_of(t)
    if rt is None or not rt.reports(kr.LOCK):
        return 1.0, "", []
    acquire = t.stacks.lock_acquire_share
    waiting = max((p.waiting for p in rt.of_kind(kr.LOCK)), default=0.0)
    said = ramp(waiting, "req.lock_waiting")
    weight = (acquire or 0.0) + (1.0 - (acquire or 0.0)) * said
    named = ("no off-CPU stacks name lock acquires: " if acquire is None
             else f"{_pct(acquire)} lock acquires (off-CPU stacks), ")
    rows = [r for p in rt.of_kind(kr.LOCK) for r in phase_rows(p, "req.lock_waiting", "req.lock_share")]
    return weight, (f"{named}the condition waits counted as much as the server's own histograms say its requests "
                    f"wait on locks ({waiting:.2f} waiting on average: "
                    f"{', '.join(kr.BY_KEY[k].title for k in rt.present if kr.BY_KEY[k].kind == kr.LOCK)})"), rows


def rule_lock(t: TargetMetrics, m: Metrics) -> Finding | None:
    if not t.time.active_states:
        return None
    fut = t.time.active_states.get("futex", 0.0)
    ev = [evidence("futex_wait_share", fut, "lock.futex", f"{t.time.active_threads} busy threads")]
    weight, why, server_rows = condition_wait_weight(t)
    if why:
        ev.append(evidence("lock_share_of_futex_time", weight, None, why, unit="of futex time"))
        ev.extend(server_rows)
    score = ramp(fut * weight, "lock.futex")
    if t.time.busy_vcsw_rate is not None:
        # Waiting in futex is lock waiting when the waiters block and wake constantly (a contended
        # mutex, a hot row handed from session to session) or when many of them stay blocked: a lock
        # held for seconds (MariaDB's LOCK TABLES ... WRITE) keeps its waiters asleep with few
        # wake-ups, and the time they spend blocked per second of wall time is its evidence. A pool
        # handing out rare work is neither: its threads are not on the work path (they run under 2%
        # of their span) or wait in the idle-by-design table.
        blocked = fut * weight * t.time.active_threads
        ev.append(evidence("busy_thread_switches_per_s", t.time.busy_vcsw_rate, "lock.switches"))
        ev.append(evidence("threads_blocked_in_lock_waits", blocked, "lock.waiting",
                           "busy threads x their lock-wait share: thread-seconds blocked per second"))
        score *= 0.4 + 0.6 * max(ramp(t.time.busy_vcsw_rate, "lock.switches"), ramp(blocked, "lock.waiting"))
    # One thread cannot contend with itself (a futex wait there is a handoff), but single-threaded
    # processes of one program (PostgreSQL backends, nginx workers) contend with each other.
    peers = sum(o.time.active_threads for o in m.targets if (o.kind or o.comm) == (t.kind or t.comm))
    if max(t.time.active_threads, peers) < 2:
        score *= 0.5
    if t.process.vcsw_rate is not None and t.time.active_threads:
        ev.append(evidence("voluntary_switches_per_s", t.process.vcsw_rate, None, "context switches (seed 001: high = IO or lock waits)", "/s"))
    bits = [f"{t.time.active_threads} busy thread{'s spend' if t.time.active_threads != 1 else ' spends'} {_pct(fut)} "
            f"of {'their' if t.time.active_threads != 1 else 'its'} time waiting on locks (futex and lock waits)"]
    if t.stacks.lock_acquire_share is not None:
        bits.append(f"{_pct(t.stacks.lock_acquire_share)} of it acquiring a mutex or rwlock (off-CPU stacks), "
                    "the rest condition waits")
    if t.stacks.lock_wait_stacks:
        frames, n = t.stacks.lock_wait_stacks[0]
        bits.append(f"top lock wait stack: {frames} ({n} switches)")
    elif t.stacks.offcpu_futex_stacks:
        frames, n = t.stacks.offcpu_futex_stacks[0]
        bits.append(f"top futex wait stack: {frames} ({n} switches)")
    elif t.stacks.futex_wait_stacks:
        frames, secs = t.stacks.futex_wait_stacks[0]
        bits.append(f"top futex wait stack: {frames} ({secs:.2f} s waited)")
    if t.stacks.futex_wait_s is not None and m.window > 0:
        # bcc's in-kernel futex totals: threads waiting at once (thread-seconds per second)
        ev.append(evidence("futex_waiting_threads", t.stacks.futex_wait_s / m.window, None,
                      f"{t.stacks.futex_waits or 0} futex waits, {t.stacks.futex_wait_s:.2f} thread-s (bcc futex-waits)", "threads"))
    if len(t.time.futex_threads) > 1 or (t.time.futex_threads and t.time.futex_threads[0][0] != t.comm):
        bits.append("futex time by pool: " + ", ".join(f"{p} {_pct(s)}" for p, s in t.time.futex_threads))
    kernel_locks = [w for w, _ in t.time.wchans if "rwsem" in w or "mutex" in w]
    if kernel_locks:
        bits.append(f"kernel lock waits in {kernel_locks[0]}")
    sub = "; ".join(bits) or "threads wait on futexes"
    rec = ("find the contended lock in the off-CPU flame graph (futex stacks) and shorten its critical section "
           "or shard it")
    if t.kind == "tikv":
        rec = TIKV_ADVICE["lock_contention"]
    elif t.kind == "tidb":
        rec = TIDB_ADVICE["lock_contention"]
    return Finding("lock_contention", "lock_contention", score, "lock contention", sub, ev, rec, t.label)


def waits_elsewhere(t: TargetMetrics) -> tuple[list[Evidence], str] | None:
    """Where a calm server's requests spend their time when another tier serves it: TiDB's statements
    waiting for TiKV's answers (its KV request duration) or PD's timestamps, by its own histograms."""
    rt = requests_of(t)
    if rt is None or rt.total is None:
        return None
    rpc = [p for p in rt.of_kind(kr.RPC) if p.share is not None and p.tier]
    if not rpc:
        return None
    best = max(rpc, key=lambda p: (p.share or 0.0, p.key))
    if (best.share or 0.0) < THRESHOLDS["req.elsewhere_share"].value:
        return None
    text = (f"its requests spend {_pct(best.share)} of their time waiting for the {best.tier} tier "
            f"({best.title.lower()}: {best.waiting:.1f} waiting on average, p99 {(best.p99 or 0) * 1000:.1f} ms"
            + (f", most in {best.top}" if best.top else "") + ")")
    return [evidence(f"{best.key}.share", best.share, "req.elsewhere_share",
                     f"{best.title}: share of the request time ({best.metric})", panel=best.panel)], text


def rule_not_saturated(t: TargetMetrics, m: Metrics, others: list[Finding]) -> Finding:
    worst = max((f.score for f in others), default=0.0)
    ev = []
    if t.process.cpu_util is not None:
        ev.append(evidence("cpu_util", t.process.cpu_util, "idle.cpu", f"{t.process.cpu_cores or 0:.2f} of {t.limits.cpu_available or 0:g} cores"))
    idle = t.time.states.get("idle", 0.0) + t.time.states.get("sleep", 0.0) if t.time.states else None
    if idle is not None:
        ev.append(Evidence("idle_wait_share", float(idle), None, "of thread time", "waiting for work (epoll, recv, sleep)"))
    score = max(0.0, 1.0 - worst) if worst < PRIMARY else max(0.0, 0.5 - worst / 2)
    sub = (f"CPU at {_pct(t.process.cpu_util)} of {t.limits.cpu_available or 0:g} cores and little waiting on IO, locks or memory: "
           "the bottleneck is elsewhere (the client's concurrency, another tier, the network)")
    if t.time.idle_by_design:
        by = ", ".join(f"{BY_KEY[k].kind} {k} {_pct(v)}" if k in BY_KEY else f"{k} {_pct(v)}"
                       for k, v in t.time.idle_by_design[:3])
        sub += f"; threads wait by design (idle, not held back): {by} of thread time"
        ev.append(Evidence("idle_by_design_share", float(sum(v for _, v in t.time.idle_by_design)), None, "of thread time",
                           "pollers, reapers, parked runtime/pool threads, timers (profiler.knowledge.waits)"))
    crows, ctext = client_rows(t, m)
    ev.extend(crows)
    if ctext:
        sub += f"; {ctext}"
    elsewhere = waits_elsewhere(t)
    if elsewhere is not None:
        ev.extend(elsewhere[0])
        sub += f"; {elsewhere[1]}"
    go_idle = rules_server.idle_goroutines(t, t.server)
    if go_idle is not None:
        ev.extend(go_idle[0])
        sub += f"; {go_idle[1]}"
    rec = "raise the load generator's concurrency, or profile the other tiers (TiDB, TiKV, PD, the client)"
    if t.kind == "tikv":
        rec = TIKV_ADVICE["not_saturated"]
    elif t.kind == "tidb":
        rec = TIDB_ADVICE["not_saturated"]
    return Finding("not_saturated", "not_saturated", score, "not saturated", sub, ev, rec, t.label)
