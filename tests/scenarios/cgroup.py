"""cgroup v1 groups that give a scenario its known cause (test layer).

One `Group` is one name made in several v1 controllers (cpu, memory, blkio). A workload
joins it from its own pre-exec hook (so every thread and child it makes is inside from the
first instruction); the runner reads the group's counters as independent evidence and
destroys it at the end: tasks still inside are killed (they are ours: the name is unique),
moved out to the root group, then the directory is removed.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
DISK = "254:0"  # vda, the only disk of the host this suite is written for


def available(controllers: tuple[str, ...] = ("cpu", "memory", "blkio")) -> str | None:
    """None when cgroup v1 controllers can be used here, else why not."""
    if os.geteuid() != 0:
        return "not root: cgroups and perf need root"
    for c in controllers:
        if not (ROOT / c / "cgroup.procs").exists():
            return f"cgroup v1 controller {c} is not mounted at {ROOT / c}"
    return None


def disk_devno(path: str = "/tmp") -> str:
    """'major:minor' of the whole disk holding path (throttles apply to whole disks)."""
    st = os.stat(path)
    major, minor = os.major(st.st_dev), os.minor(st.st_dev)
    if major == 0:
        raise RuntimeError(f"{path} is not on a block device (tmpfs/overlay): blkio throttles cannot apply")
    sys_dev = Path(f"/sys/dev/block/{major}:{minor}")
    if (sys_dev / "partition").exists():
        dev = (sys_dev / ".." / "dev").resolve().read_text().strip()
        return dev
    return f"{major}:{minor}"


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _kv(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out


def _blkio_sum(text: str, devno: str) -> dict[str, int]:
    """blkio.throttle.io_serviced-style text -> {'Read': n, 'Write': n, ...} for one device."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == devno and parts[2].isdigit():
            out[parts[1]] = int(parts[2])
    return out


@dataclass
class Group:
    """One cgroup name in several v1 controllers."""

    name: str
    controllers: tuple[str, ...] = ("cpu", "memory", "blkio")
    devno: str = DISK
    settings: dict[str, str] = field(default_factory=dict)
    created: list[Path] = field(default_factory=list)

    def path(self, controller: str) -> Path:
        return ROOT / controller / self.name

    def create(self) -> Group:
        for c in self.controllers:
            p = self.path(c)
            p.mkdir(exist_ok=False)
            self.created.append(p)
        return self

    def write(self, controller: str, file: str, value: str | int) -> None:
        (self.path(controller) / file).write_text(f"{value}\n")
        self.settings[f"{controller}/{file}"] = str(value)

    # -- causes ---------------------------------------------------------------------------
    def cpu_limit(self, cores: float, period_us: int = 100_000) -> None:
        """CFS bandwidth: at most `cores` CPUs' worth of time per period."""
        self.write("cpu", "cpu.cfs_period_us", period_us)
        self.write("cpu", "cpu.cfs_quota_us", max(1000, int(cores * period_us)))

    def memory_limit(self, nbytes: int) -> None:
        self.write("memory", "memory.limit_in_bytes", nbytes)

    def blkio_limit(self, **limits: int) -> None:
        """blkio_limit(read_iops=100, write_bps=1<<20) on this group's disk."""
        for key, value in limits.items():
            self.write("blkio", f"blkio.throttle.{key}_device", f"{self.devno} {value}")

    # -- membership -----------------------------------------------------------------------
    def join_self(self) -> None:
        """Move the calling process into every controller (a subprocess pre-exec hook)."""
        for c in self.controllers:
            with open(self.path(c) / "cgroup.procs", "w") as fh:
                fh.write("0\n")

    def pids(self) -> set[int]:
        out: set[int] = set()
        for c in self.controllers:
            for line in _read(self.path(c) / "cgroup.procs").split():
                if line.isdigit():
                    out.add(int(line))
        return out

    # -- evidence -------------------------------------------------------------------------
    def stats(self) -> dict[str, int]:
        """Flat counters, all cumulative: cpu.*, memory.*, blkio.*."""
        out: dict[str, int] = {}
        if "cpu" in self.controllers:
            for k, v in _kv(_read(self.path("cpu") / "cpu.stat")).items():
                out[f"cpu.{k}"] = v
        if "cpuacct" in self.controllers:
            t = _read(self.path("cpuacct") / "cpuacct.usage").strip()
            if t.isdigit():
                out["cpuacct.usage_ns"] = int(t)
        if "memory" in self.controllers:
            m = self.path("memory")
            for f in ("usage_in_bytes", "max_usage_in_bytes", "limit_in_bytes", "failcnt"):
                t = _read(m / f"memory.{f}").strip()
                if t.isdigit():
                    out[f"memory.{f}"] = int(t)
            st = _kv(_read(m / "memory.stat"))
            for k in ("pgmajfault", "pgfault", "cache", "rss", "workingset_refault_file", "pgpgin"):
                if k in st:
                    out[f"memory.stat.{k}"] = st[k]
            oom = _kv(_read(m / "memory.oom_control"))
            if "oom_kill" in oom:
                out["memory.oom_kill"] = oom["oom_kill"]
        if "blkio" in self.controllers:
            b = self.path("blkio")
            for f, tag in (("blkio.throttle.io_serviced", "ios"), ("blkio.throttle.io_service_bytes", "bytes")):
                for op, v in _blkio_sum(_read(b / f), self.devno).items():
                    out[f"blkio.{tag}.{op.lower()}"] = v
        return out

    # -- teardown -------------------------------------------------------------------------
    def destroy(self, timeout: float = 10.0) -> list[str]:
        """Kill what is left inside, move it out, rmdir. Returns problems (empty: clean)."""
        problems: list[str] = []
        left = self.pids()
        for pid in left:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout
        for p in reversed(self.created):
            controller = p.parent.name
            while True:
                for task in _read(p / "cgroup.procs").split():
                    try:
                        (ROOT / controller / "cgroup.procs").write_text(task + "\n")
                    except OSError:
                        pass  # exited meanwhile, or a zombie: rmdir waits for it
                try:
                    p.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if time.monotonic() > deadline:
                        problems.append(f"cannot remove {p}: {exc}")
                        break
                    time.sleep(0.1)
        self.created = [p for p in self.created if p.exists()]
        return problems


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Counter deltas (gauges such as usage and limit keep their `after` value)."""
    gauges = ("memory.usage_in_bytes", "memory.max_usage_in_bytes", "memory.limit_in_bytes")
    out = {}
    for k, v in after.items():
        out[k] = v if k in gauges else v - before.get(k, 0)
    return out
