"""Independent evidence from /proc while the profiler watches (test layer).

A background thread samples the target's threads (state, wchan, syscall number) at a fixed
rate and reads the process counters (CPU ticks, major faults, context switches) at the start
and end of the window, plus host-wide load. The scenario's own `confirm` turns this into a
yes/no on its label; none of it comes from the profiler.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

CLK_TCK = os.sysconf("SC_CLK_TCK")
SYS_FUTEX = 202  # x86_64


def _stat_fields(path: str) -> list[str] | None:
    try:
        with open(path) as fh:
            text = fh.read()
    except OSError:
        return None
    # fields after "pid (comm)": index 0 is state (field 3 of proc(5))
    return text.rsplit(")", 1)[1].split()


def process_counters(pid: int) -> dict[str, float] | None:
    """Cumulative utime+stime (seconds), majflt, minflt, voluntary/involuntary switches."""
    f = _stat_fields(f"/proc/{pid}/stat")
    if f is None:
        return None
    out: dict[str, float] = {
        "cpu_s": (int(f[11]) + int(f[12])) / CLK_TCK,  # utime, stime: fields 14, 15
        "majflt": int(f[9]),  # field 12
        "minflt": int(f[7]),  # field 10
        "blkio_ticks": int(f[39]) if len(f) > 39 else 0,  # field 42 (delayacct)
    }
    try:
        with open(f"/proc/{pid}/io") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key in ("read_bytes", "write_bytes", "syscr", "syscw"):
                    out[key] = int(value)
    except OSError:
        pass
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS"):
                    out["rss_bytes"] = int(line.split()[1]) * 1024
    except OSError:
        pass
    # Context switches and schedstat are per thread in /proc: sum the live threads.
    out["vcsw"] = out["ivcsw"] = 0
    out["run_ns"] = out["run_delay_ns"] = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        tids = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as fh:
                for line in fh:
                    if line.startswith("voluntary_ctxt_switches"):
                        out["vcsw"] += int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches"):
                        out["ivcsw"] += int(line.split()[1])
        except OSError:
            pass
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                run, delay = fh.read().split()[:2]
                out["run_ns"] += int(run)
                out["run_delay_ns"] += int(delay)
        except (OSError, ValueError):
            pass
    return out


def host_counters() -> dict[str, float]:
    """Host CPU ticks (busy, iowait, total), the 1-minute load average, and the busiest disk's
    io_ticks (ms with IO in flight) and completed IOs."""
    with open("/proc/stat") as fh:
        cpu = [int(x) for x in fh.readline().split()[1:]]
    idle, iowait = cpu[3], cpu[4]
    total = sum(cpu[:8])
    with open("/proc/loadavg") as fh:
        load1 = float(fh.read().split()[0])
    out = {"busy": total - idle - iowait, "iowait": iowait, "total": total, "load1": load1}
    try:
        with open("/proc/diskstats") as fh:
            for line in fh:
                f = line.split()
                if len(f) >= 14 and f[2] == DISK_NAME:
                    out["disk_ios"] = int(f[3]) + int(f[7])
                    out["disk_ticks_ms"] = int(f[12])
    except OSError:
        pass
    return out


DISK_NAME = "vda"  # the disk tests.scenarios.cgroup.DISK (254:0) names


def thread_sample(pid: int) -> list[tuple[str, str, str]]:
    """(state, wchan, syscall) for each thread of pid; syscall is a number, 'running' or ''."""
    return [(st, wchan, sc) for _, _, st, wchan, sc in thread_rows(pid)]


def thread_rows(pid: int) -> list[tuple[int, str, str, str, str]]:
    """(tid, comm, state, wchan, syscall) for each thread of pid."""
    out: list[tuple[int, str, str, str, str]] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        base = f"/proc/{pid}/task/{tid}"
        f = _stat_fields(base + "/stat")
        if f is None:
            continue
        try:
            with open(base + "/wchan") as fh:
                wchan = fh.read().strip()
        except OSError:
            wchan = ""
        try:
            with open(base + "/syscall") as fh:
                sc = fh.read().split(" ", 1)[0].strip()
        except OSError:
            sc = ""
        try:
            with open(base + "/comm") as fh:
                name = fh.read().strip()
        except OSError:
            name = ""
        out.append((int(tid), name, f[0], wchan if wchan != "0" else "", sc))
    return out


def is_futex_wait(state: str, wchan: str, syscall: str) -> bool:
    return state == "S" and ("futex" in wchan or syscall == str(SYS_FUTEX))


@dataclass
class Observation:
    """What /proc showed about one target over one window."""

    pid: int
    seconds: float = 0.0
    samples: int = 0
    threads_mean: float = 0.0
    states: dict[str, float] = field(default_factory=dict)  # mean threads per state
    futex_waiting: float = 0.0  # mean threads asleep in futex
    io_blocked: float = 0.0  # mean threads in D state
    top_wchan: list[tuple[str, float]] = field(default_factory=list)
    top_syscall: list[tuple[str, float]] = field(default_factory=list)
    cpu_cores: float = 0.0  # target CPU use in cores over the window
    majflt_per_s: float = 0.0
    read_bytes_per_s: float = 0.0  # storage-layer bytes, /proc/PID/io
    write_bytes_per_s: float = 0.0
    syscr_per_s: float = 0.0
    vcsw_per_s: float = 0.0
    # run-queue delay / (running + run-queue delay) of the target's threads (schedstat):
    # how much of the CPU the target asked for it had to wait for.
    runq_share: float = 0.0
    ivcsw_per_s: float = 0.0
    rss_bytes: float = 0.0
    host_busy: float = 0.0  # host CPU busy share, all cores, 0..1
    host_iowait: float = 0.0
    host_load1: tuple[float, float] = (0.0, 0.0)
    disk_util: float = 0.0  # share of the window vda had IO in flight (/proc/diskstats io_ticks)
    disk_iops: float = 0.0
    # per thread name (comm): mean threads of that name in each state, and in each syscall
    by_comm: dict[str, dict[str, float]] = field(default_factory=dict)
    # the busiest thread: share of samples it was R (running or runnable), and its comm
    top_thread_r: float = 0.0
    top_thread: str = ""
    pids: list[int] = field(default_factory=list)  # every process sampled (the target first)
    noise: dict[str, float] = field(default_factory=dict)  # the noisy neighbours' CPU and IO, if any
    cgroups: dict[str, dict[str, int]] = field(default_factory=dict)  # group -> counter deltas
    extra: dict[str, float] = field(default_factory=dict)  # scenario-specific (e.g. row lock waits)
    exited: bool = False

    def to_json(self) -> dict[str, object]:
        return {
            "pid": self.pid,
            "seconds": round(self.seconds, 2),
            "samples": self.samples,
            "threads_mean": round(self.threads_mean, 2),
            "states": {k: round(v, 2) for k, v in sorted(self.states.items())},
            "futex_waiting": round(self.futex_waiting, 2),
            "io_blocked": round(self.io_blocked, 2),
            "top_wchan": [[k, round(v, 2)] for k, v in self.top_wchan],
            "top_syscall": [[k, round(v, 2)] for k, v in self.top_syscall],
            "cpu_cores": round(self.cpu_cores, 3),
            "majflt_per_s": round(self.majflt_per_s, 1),
            "read_bytes_per_s": round(self.read_bytes_per_s),
            "write_bytes_per_s": round(self.write_bytes_per_s),
            "syscr_per_s": round(self.syscr_per_s, 1),
            "vcsw_per_s": round(self.vcsw_per_s, 1),
            "runq_share": round(self.runq_share, 3),
            "ivcsw_per_s": round(self.ivcsw_per_s, 1),
            "rss_bytes": int(self.rss_bytes),
            "host_busy": round(self.host_busy, 3),
            "host_iowait": round(self.host_iowait, 3),
            "host_load1": list(self.host_load1),
            "disk_util": round(self.disk_util, 3),
            "disk_iops": round(self.disk_iops, 1),
            "by_comm": {k: {s: round(v, 2) for s, v in sorted(d.items())} for k, d in sorted(self.by_comm.items())},
            "top_thread_r": round(self.top_thread_r, 3),
            "top_thread": self.top_thread,
            "pids": self.pids,
            "noise": {k: round(v, 3) for k, v in sorted(self.noise.items())},
            "cgroups": self.cgroups,
            "extra": {k: round(v, 3) for k, v in sorted(self.extra.items())},
            "exited": self.exited,
        }


class Sampler:
    """Samples the threads of one or more pids at `hz` in a background thread between start() and stop().

    The process counters (CPU, faults, IO, switches, schedstat) are summed over the pids."""

    def __init__(self, pid: int | list[int], hz: float = 10.0) -> None:
        self.pids = [pid] if isinstance(pid, int) else list(pid)
        self.pid = self.pids[0]
        self.interval = 1.0 / hz
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"sampler-{self.pid}", daemon=True)
        self._states: Counter[str] = Counter()
        self._wchan: Counter[str] = Counter()
        self._syscall: Counter[str] = Counter()
        self._by_comm: dict[str, Counter[str]] = {}
        self._r_by_tid: Counter[tuple[int, str]] = Counter()
        self._futex = 0
        self._threads = 0
        self._samples = 0

    def _counters(self) -> dict[str, float] | None:
        tot: dict[str, float] = {}
        for p in self.pids:
            c = process_counters(p)
            if c is None:
                return None
            for k, v in c.items():
                tot[k] = tot.get(k, 0) + v
        return tot

    def start(self) -> Sampler:
        self._t0 = time.monotonic()
        self._proc0 = self._counters()
        self._host0 = host_counters()
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            rows = [r for p in self.pids for r in thread_rows(p)]
            if not rows:
                continue
            self._samples += 1
            self._threads += len(rows)
            for tid, name, state, wchan, sc in rows:
                self._states[state] += 1
                if state != "R":
                    self._wchan[wchan or "-"] += 1
                else:
                    self._r_by_tid[(tid, name)] += 1
                self._syscall[sc or "-"] += 1
                per = self._by_comm.setdefault(name, Counter())
                per["threads"] += 1
                per[f"state:{state}"] += 1
                if state != "R" and sc:
                    per[f"syscall:{sc}"] += 1
                if is_futex_wait(state, wchan, sc):
                    self._futex += 1

    def stop(self) -> Observation:
        self._stop.set()
        self._thread.join()
        t1 = time.monotonic()
        proc1 = self._counters()
        host1 = host_counters()
        obs = Observation(pid=self.pid, seconds=t1 - self._t0, samples=self._samples, pids=list(self.pids))
        n = max(1, self._samples)
        obs.threads_mean = self._threads / n
        obs.states = {k: v / n for k, v in self._states.items()}
        obs.futex_waiting = self._futex / n
        obs.io_blocked = self._states.get("D", 0) / n
        obs.top_wchan = [(k, v / n) for k, v in self._wchan.most_common(5)]
        obs.top_syscall = [(k, v / n) for k, v in self._syscall.most_common(5)]
        obs.by_comm = {name: {k: v / n for k, v in c.items()} for name, c in self._by_comm.items()}
        if self._r_by_tid:
            (tid, name), r = self._r_by_tid.most_common(1)[0]
            obs.top_thread_r, obs.top_thread = r / n, f"{name} (tid {tid})"
        secs = max(1e-6, obs.seconds)
        if self._proc0 and proc1:
            obs.cpu_cores = (proc1["cpu_s"] - self._proc0["cpu_s"]) / secs
            obs.majflt_per_s = (proc1["majflt"] - self._proc0["majflt"]) / secs
            for key in ("read_bytes", "write_bytes", "syscr"):
                setattr(obs, f"{key}_per_s", (proc1.get(key, 0) - self._proc0.get(key, 0)) / secs)
            run = proc1.get("run_ns", 0) - self._proc0.get("run_ns", 0)
            delay = proc1.get("run_delay_ns", 0) - self._proc0.get("run_delay_ns", 0)
            obs.runq_share = delay / (run + delay) if run + delay > 0 else 0.0
            obs.vcsw_per_s = (proc1.get("vcsw", 0) - self._proc0.get("vcsw", 0)) / secs
            obs.ivcsw_per_s = (proc1.get("ivcsw", 0) - self._proc0.get("ivcsw", 0)) / secs
            obs.rss_bytes = proc1.get("rss_bytes", 0)
        else:
            obs.exited = True
        total = max(1, host1["total"] - self._host0["total"])
        obs.host_busy = (host1["busy"] - self._host0["busy"]) / total
        obs.host_iowait = (host1["iowait"] - self._host0["iowait"]) / total
        obs.host_load1 = (self._host0["load1"], host1["load1"])
        if "disk_ticks_ms" in host1 and "disk_ticks_ms" in self._host0:
            obs.disk_util = min(1.0, (host1["disk_ticks_ms"] - self._host0["disk_ticks_ms"]) / 1000.0 / secs)
            obs.disk_iops = (host1["disk_ios"] - self._host0["disk_ios"]) / secs
        return obs
