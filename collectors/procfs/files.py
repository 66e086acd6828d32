"""Reading /proc and cgroup files for the procfs sampler (collectors layer): one reader per file kind.

The syscall number -> name table of the running kernel; the parsers of a thread's ``stat``,
``status`` and ``syscall``; the host's CPU, memory, pressure (PSI) and disk counters; every other
process's CPU time (who takes the CPU when a target waits for one); the block devices; a
target's cgroup v1 directories and their CPU, memory and blkio figures. The sampler that reads
them on a clock, and the per-thread files it keeps open, are procfs.py's.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from profiler.collectors.host import read_kv_ints, read_text

READ_SIZE = 4096  # bytes of one procfs file read

# --------------------------------------------------------------------------- syscall names


def _parse_unistd(text: str) -> dict[int, str]:
    out: dict[int, str] = {}
    for m in re.finditer(r"^#define\s+__NR_(\w+)\s+(\d+)\s*$", text, re.M):
        out[int(m.group(2))] = m.group(1)
    return out


def syscall_table() -> tuple[dict[int, str], str]:
    """The running kernel's syscall number -> name table, and where it came from.

    Tracefs names the syscall tracepoints but not their numbers, so the ladder is: the
    audit userspace's table (``ausyscall --dump``, generated from the kernel), else the
    kernel's UAPI header ``unistd_64.h`` (linux-libc-dev or the installed kernel headers).
    Returns ({}, "none") when neither exists: the analyzers then show numbers.
    """
    exe = shutil.which("ausyscall")
    if exe:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run([exe, "--dump"], capture_output=True, text=True, timeout=5).stdout
            table = {}
            for line in out.splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[0].isdigit():
                    table[int(parts[0])] = parts[1]
            if table:
                return table, "ausyscall"
    machine = os.uname().machine
    arch = {"x86_64": "x86_64", "aarch64": "aarch64"}.get(machine, machine)
    candidates = [f"/usr/include/{arch}-linux-gnu/asm/unistd_64.h", "/usr/include/asm/unistd_64.h"]
    candidates += sorted(glob.glob("/usr/src/linux-headers-*/arch/x86/include/generated/uapi/asm/unistd_64.h"))
    candidates += ["/usr/include/asm-generic/unistd.h"]
    for path in candidates:
        with contextlib.suppress(OSError):
            table = _parse_unistd(Path(path).read_text(errors="replace"))
            if len(table) > 50:
                return table, path
    return {}, "none"


# --------------------------------------------------------------------------- parsing helpers


def parse_stat(text: str) -> list[str] | None:
    """Fields of /proc/.../stat after the ``(comm)``; index 0 is field 3 (state).

    comm may hold spaces and parentheses, so split at the last ')'.
    """
    end = text.rfind(")")
    if end < 0:
        return None
    return text[end + 2:].split()


def parse_status_ctxt(text: str) -> tuple[int, int] | None:
    v = iv = None
    for line in text.splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            v = int(line.split()[1])
        elif line.startswith("nonvoluntary_ctxt_switches:"):
            iv = int(line.split()[1])
    if v is None or iv is None:
        return None
    return v, iv


def parse_syscall(text: str) -> int | None:
    """``/proc/TID/syscall``: 'running' -> None, '-1 ...' (not in a syscall) -> -1, 'N args' -> N."""
    word = text.split(" ", 1)[0].strip()
    if not word or word == "running":
        return None
    try:
        return int(word)
    except ValueError:
        return None


_CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice")
_MEM_KEYS = {
    "MemTotal": "total", "MemFree": "free", "MemAvailable": "available", "Cached": "cached",
    "Buffers": "buffers", "Dirty": "dirty", "Writeback": "writeback", "SwapTotal": "swap_total",
    "SwapFree": "swap_free",
}
_VM_KEYS = ("pgmajfault", "pswpin", "pswpout", "pgscan_direct", "pgsteal_direct", "pgscan_kswapd", "allocstall_normal")


def read_system(disks: list[str]) -> dict[str, Any]:
    rec: dict[str, Any] = {"kind": "system"}
    text = read_text("/proc/stat") or ""
    ncpu = 0
    for line in text.splitlines():
        if line.startswith("cpu "):
            vals = [int(v) for v in line.split()[1:]]
            rec["cpu"] = dict(zip(_CPU_FIELDS, vals, strict=False))
        elif line.startswith("cpu"):
            ncpu += 1
        elif line.startswith("procs_running"):
            rec["procs_running"] = int(line.split()[1])
        elif line.startswith("procs_blocked"):
            rec["procs_blocked"] = int(line.split()[1])
        elif line.startswith("ctxt "):
            rec["ctxt"] = int(line.split()[1])
    rec["ncpu"] = ncpu
    mem: dict[str, int] = {}
    for line in (read_text("/proc/meminfo") or "").splitlines():
        key, _, rest = line.partition(":")
        if key in _MEM_KEYS:
            with contextlib.suppress(ValueError, IndexError):
                mem[_MEM_KEYS[key]] = int(rest.split()[0]) * 1024
    if "swap_total" in mem and "swap_free" in mem:
        mem["swap_used"] = mem["swap_total"] - mem["swap_free"]
    rec["mem"] = mem
    vm = read_kv_ints("/proc/vmstat")
    rec["vm"] = {k: vm[k] for k in _VM_KEYS if k in vm}
    psi: dict[str, dict[str, float]] = {}
    for res in ("cpu", "io", "memory"):
        body = read_text(f"/proc/pressure/{res}")
        if body is None:
            continue
        d: dict[str, float] = {}
        for line in body.splitlines():
            parts = line.split()
            if not parts:
                continue
            for kv in parts[1:]:
                k, _, v = kv.partition("=")
                if k in ("avg10", "total"):
                    d[f"{parts[0]}_{k}"] = float(v) if k == "avg10" else int(v)
        psi[res] = d
    if psi:
        rec["psi"] = psi
    dd: dict[str, dict[str, int]] = {}
    for line in (read_text("/proc/diskstats") or "").splitlines():
        f = line.split()
        if len(f) < 14 or f[2] not in disks:
            continue
        n = [int(x) for x in f[3:14]]
        dd[f[2]] = {
            "reads": n[0], "read_sectors": n[2], "read_ms": n[3], "writes": n[4],
            "write_sectors": n[6], "write_ms": n[7], "in_flight": n[8], "io_ticks_ms": n[9],
            "time_in_queue_ms": n[10],
        }
    rec["disks"] = dd
    return rec


def read_cpu_times(exclude: set[int]) -> dict[int, tuple[int, str]]:
    """pid -> (utime+stime of the process and its reaped threads, in clock ticks; comm), every process."""
    out: dict[int, tuple[int, str]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for e in entries:
        if not e.isdigit() or int(e) in exclude:
            continue
        text = raw_read(f"/proc/{e}/stat", 1024)
        if not text:
            continue
        f = parse_stat(text)
        if not f or len(f) < 13:
            continue
        out[int(e)] = (int(f[11]) + int(f[12]), text[text.find("(") + 1:text.rfind(")")])
    return out


def block_devices() -> dict[str, str]:
    """'major:minor' -> name of every block device (/sys/class/block/*/dev): reports name a disk
    once (vda), whether a figure came from diskstats, a block trace or a cgroup throttle."""
    out: dict[str, str] = {}
    root = "/sys/class/block"
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        dev = read_text(f"{root}/{name}/dev")
        if dev:
            out[dev.strip()] = name
    return out


def whole_disks() -> list[str]:
    """Block devices worth sampling: whole disks that are not loop/ram devices."""
    out = []
    for d in sorted(os.listdir("/sys/block")) if os.path.isdir("/sys/block") else []:
        if d.startswith(("loop", "ram")):
            continue
        out.append(d)
    return out


def cgroup_dirs(pid: int) -> dict[str, str]:
    """controller -> directory holding the target's cgroup files (v1), or {'': dir} (v2)."""
    out: dict[str, str] = {}
    text = read_text(f"/proc/{pid}/cgroup") or ""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, ctrls, path = parts
        if not ctrls:
            d = "/sys/fs/cgroup" + path
            if os.path.isfile(os.path.join(d, "cgroup.controllers")) or os.path.isfile("/sys/fs/cgroup/cgroup.controllers"):
                out[""] = d
            continue
        for c in ctrls.split(","):
            for mount in (f"/sys/fs/cgroup/{c}", f"/sys/fs/cgroup/{ctrls}"):
                d = mount + path
                if os.path.isdir(d):
                    out[c] = d
                    break
    return out


def read_cgroup(dirs: dict[str, str]) -> dict[str, Any]:
    rec: dict[str, Any] = {}
    if "cpu" in dirs:
        st = read_kv_ints(os.path.join(dirs["cpu"], "cpu.stat"))
        if st:
            rec["cpu"] = {"nr_periods": st.get("nr_periods", 0), "nr_throttled": st.get("nr_throttled", 0),
                          "throttled_time_ns": st.get("throttled_time", 0)}
    if "cpuacct" in dirs:
        usage = read_text(os.path.join(dirs["cpuacct"], "cpuacct.usage"))
        if usage and usage.strip().isdigit():
            rec.setdefault("cpu", {})["usage_ns"] = int(usage)
    if "memory" in dirs:
        d = dirs["memory"]
        m: dict[str, Any] = {}
        for key, fname in (("usage", "memory.usage_in_bytes"), ("limit", "memory.limit_in_bytes"),
                           ("failcnt", "memory.failcnt"), ("max_usage", "memory.max_usage_in_bytes")):
            v = read_text(os.path.join(d, fname))
            if v and v.strip().isdigit():
                m[key] = int(v)
        st = read_kv_ints(os.path.join(d, "memory.stat"))
        for key in ("pgmajfault", "total_pgmajfault", "cache", "rss", "total_cache", "total_rss", "pgpgin"):
            if key in st:
                m[key] = st[key]
        if m:
            rec["memory"] = m
    if "blkio" in dirs:
        d = dirs["blkio"]
        b: dict[str, Any] = {}
        for key, fname in (("service_bytes", "blkio.throttle.io_service_bytes"), ("serviced", "blkio.throttle.io_serviced")):
            text = read_text(os.path.join(d, fname)) or ""
            totals: dict[str, int] = {}
            for line in text.splitlines():
                f = line.split()
                if len(f) == 3 and f[1] in ("Read", "Write") and f[2].isdigit():
                    totals[f[1].lower()] = totals.get(f[1].lower(), 0) + int(f[2])
            if totals:
                b[key] = totals
        if b:
            rec["blkio"] = b
    if "" in dirs:  # cgroup v2
        d = dirs[""]
        st = read_kv_ints(os.path.join(d, "cpu.stat"))
        if st:
            rec["cpu"] = {"nr_periods": st.get("nr_periods", 0), "nr_throttled": st.get("nr_throttled", 0),
                          "throttled_time_ns": st.get("throttled_usec", 0) * 1000, "usage_ns": st.get("usage_usec", 0) * 1000}
        m = {}
        cur = read_text(os.path.join(d, "memory.current"))
        if cur and cur.strip().isdigit():
            m["usage"] = int(cur)
        mx = read_text(os.path.join(d, "memory.max"))
        if mx and mx.strip().isdigit():
            m["limit"] = int(mx)
        ev = read_kv_ints(os.path.join(d, "memory.events"))
        if "max" in ev:
            m["failcnt"] = ev["max"]
        ms = read_kv_ints(os.path.join(d, "memory.stat"))
        if "pgmajfault" in ms:
            m["pgmajfault"] = ms["pgmajfault"]
        if m:
            rec["memory"] = m
    return rec


def kv_file_colon(path: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in (read_text(path) or "").splitlines():
        k, _, v = line.partition(":")
        with contextlib.suppress(ValueError):
            out[k.strip()] = int(v)
    return out


def int_or_none(text: str | None) -> int | None:
    try:
        return int((text or "").strip())
    except ValueError:
        return None


def raw_read(path: str, size: int = READ_SIZE) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, size).decode("ascii", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)
