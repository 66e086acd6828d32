"""A target's resource limits from its cgroup (collectors layer): CPU quota, memory limit, blkio
throttles and cpuset, the same keys for cgroup v1 and v2, for the manifest (``TargetInfo.cgroup``),
doctor and the verdict's limits (docs/containers.md names the keys).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from profiler.collectors.host import (
    UNLIMITED,
    cgroup_paths,
    cgroup_version,
    read_int,
    read_kv_ints,
    read_text,
)


def _v1_dir(controller: str, path: str) -> Path | None:
    for mount in (f"/sys/fs/cgroup/{controller}", "/sys/fs/cgroup/" + controller.replace(",", "")):
        d = Path(mount) / path.lstrip("/")
        if d.is_dir():
            return d
    # combined mounts such as cpu,cpuacct
    for d in Path("/sys/fs/cgroup").glob(f"*{controller}*"):
        cand = d / path.lstrip("/")
        if cand.is_dir():
            return cand
    return None


def target_cgroup(pid: int) -> dict[str, Any]:
    """The target's resource limits: CPU quota, memory limit, blkio throttles, cpuset.

    The same keys for cgroup v1 and v2: ``cpu_quota_us``/``cpu_period_us`` (-1: no quota),
    ``memory_limit_bytes`` (None: none), ``blkio_throttle`` (read_bps, write_bps, read_iops,
    write_iops -> {"MAJ:MIN": limit}; v2's io.max says the same), ``cpuset`` (the cgroup's
    cpuset as written, "0-1") and ``cpuset_cpus`` (the CPUs it leaves the target, effective).
    """
    paths = cgroup_paths(pid)
    info: dict[str, Any] = {"version": cgroup_version(), "path": paths}
    if info["version"] == 2:
        d = Path("/sys/fs/cgroup") / paths.get("", "/").lstrip("/")
        cpu_max = (read_text(d / "cpu.max") or "max 100000").split()
        info["cpu_quota_us"] = -1 if cpu_max[0] == "max" else int(cpu_max[0])
        info["cpu_period_us"] = int(cpu_max[1]) if len(cpu_max) > 1 else 100000
        mem = read_text(d / "memory.max")
        info["memory_limit_bytes"] = None if mem is None or mem == "max" else int(mem)
        info["io_max"] = read_text(d / "io.max") or ""
        info["blkio_throttle"] = io_max_throttle(info["io_max"])
        _cpuset(info, read_text(d / "cpuset.cpus"), read_text(d / "cpuset.cpus.effective"))
        return info
    cpu = _v1_dir("cpu", paths.get("cpu", paths.get("cpu,cpuacct", "/")))
    if cpu is not None:
        info["cpu_quota_us"] = read_int(cpu / "cpu.cfs_quota_us")
        info["cpu_period_us"] = read_int(cpu / "cpu.cfs_period_us")
    mem_dir = _v1_dir("memory", paths.get("memory", "/"))
    if mem_dir is not None:
        limit = read_int(mem_dir / "memory.limit_in_bytes")
        info["memory_limit_bytes"] = None if limit is None or limit >= UNLIMITED else limit
    blk = _v1_dir("blkio", paths.get("blkio", "/"))
    if blk is not None:
        throttle = {}
        for kind in ("read_bps", "write_bps", "read_iops", "write_iops"):
            vals = read_kv_ints(blk / f"blkio.throttle.{kind}_device")
            if vals:
                throttle[kind] = vals
        info["blkio_throttle"] = throttle
    cs = _v1_dir("cpuset", paths.get("cpuset", "/"))
    if cs is not None:
        _cpuset(info, read_text(cs / "cpuset.cpus"), read_text(cs / "cpuset.effective_cpus"))
    return info


def _cpuset(info: dict[str, Any], cpus: str | None, effective: str | None) -> None:
    if cpus is not None:
        info["cpuset"] = cpus
    eff = parse_cpu_list(effective if effective else cpus)
    if eff:
        info["cpuset_cpus"] = eff


def parse_cpu_list(text: str | None, limit: int = 1 << 16) -> list[int]:
    """A kernel CPU list (``0-3,6``) -> [0, 1, 2, 3, 6]; empty when it is empty or malformed."""
    out: list[int] = []
    for part in (text or "").strip().split(","):
        lo, _, hi = part.strip().partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            return []
        a, b = int(lo), int(hi or lo)
        if b < a or b >= limit:
            return []
        out.extend(range(a, b + 1))
    return sorted(set(out))


_IO_MAX_KEYS = {"rbps": "read_bps", "wbps": "write_bps", "riops": "read_iops", "wiops": "write_iops"}


def io_max_throttle(text: str) -> dict[str, dict[str, int]]:
    """cgroup v2 ``io.max`` (``254:0 rbps=1048576 wbps=max riops=max wiops=200``) as v1's
    blkio throttles: {"read_bps": {"254:0": 1048576}, "write_iops": {"254:0": 200}}."""
    out: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        dev, *pairs = line.split()
        for pair in pairs:
            key, _, val = pair.partition("=")
            if key in _IO_MAX_KEYS and val.isdigit():
                out.setdefault(_IO_MAX_KEYS[key], {})[dev] = int(val)
    return out


def cpu_quota_cores(cg: dict[str, Any]) -> float | None:
    """A cgroup CPU quota in cores (None when unlimited)."""
    q, p = cg.get("cpu_quota_us"), cg.get("cpu_period_us")
    if isinstance(q, int) and isinstance(p, int) and q > 0 and p > 0:
        return q / p
    return None
