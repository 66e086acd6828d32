"""What a capture costs per event, measured where it is spent: the BPF programs' own time per run
(the kernel's bpf_stats) and each collector process's CPU, under the event-dense MariaDB.

Starts the private MariaDB of bench/overhead.py (``--case dense``: 32 sysbench clients updating
16 rows, ``--threads`` to change), keeps sysbench running, and attaches ``profiler attach`` to
the server once per configuration and round (``--config NAME=ARGS``, interleaved). While each
capture runs it reads, from the capture's own processes only (other captures on the host are
left out):

- every BPF program's ``run_cnt`` and ``run_time_ns`` from /proc/PID/fdinfo of the helpers that
  hold them (bpf_stats are switched on with BPF_ENABLE_STATS for the bench's lifetime: the
  kernel switches them off when the bench exits, whatever the sysctl says);
- the CPU time of every process of the capture (the profiler, perf, the bcc helpers) over the
  middle of the capture (from 2 s after every collector attached to 0.5 s before the stop), so
  start-up and the stop are not in it.

These figures are the capture's own cost, robust to other load on the host (unlike throughput).
bpf_stats time each run with two clock reads: they report about 40 ns per run of a program that
does nothing, and add 70-105 ns to each run while on (bench/bpf_attach_cost.py, ``raw-stats``);
subtract the 40 ns from the ns per run below for what a program costs when nothing times it.
Prints per configuration: runs/s and ns per run of each program, its CPU share of the host,
each process's CPU share of one CPU, and the events the manifest counted.

    sudo .venv/bin/python bench/bcc_cost.py --rounds 3 --seconds 8
    sudo .venv/bin/python bench/bcc_cost.py --config default= --config perf="--backend perf"
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from overhead import CASES, mariadb, sysbench_argv  # noqa: E402

_TICK = os.sysconf("SC_CLK_TCK")
BPF_ENABLE_STATS = 32


def enable_stats() -> int:
    """bpf(BPF_ENABLE_STATS, BPF_STATS_RUN_TIME): an fd; the kernel times programs while it is open."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    attr = ctypes.create_string_buffer(16)  # u32 type = 0 (BPF_STATS_RUN_TIME)
    fd = int(libc.syscall(321, BPF_ENABLE_STATS, ctypes.byref(attr), 16))
    if fd < 0:
        raise SystemExit(f"bench: BPF_ENABLE_STATS failed: {os.strerror(ctypes.get_errno())}")
    return fd


def tree(root: int) -> list[int]:
    """root and every process below it."""
    kids: dict[int, list[int]] = defaultdict(list)
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            with open(f"/proc/{d}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            kids[ppid].append(int(d))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def proc_cpu(pid: int) -> tuple[str, float] | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            text = fh.read()
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read().split(b"\0")
    except OSError:
        return None
    f = text.rsplit(")", 1)[1].split()
    comm = text.split("(", 1)[1].rsplit(")", 1)[0]
    args = [a.decode(errors="replace") for a in cmd if a]
    if len(args) > 2 and args[1] == "-m":
        comm = args[2].rsplit(".", 1)[-1]  # profiler, helper, symbols
    return comm, (int(f[11]) + int(f[12])) / _TICK


def prog_stats(pids: list[int]) -> dict[int, tuple[str, int, int]]:
    """prog id -> (name, run_cnt, run_time_ns) of the BPF programs these processes hold."""
    out: dict[int, tuple[str, int, int]] = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fdinfo"):
                with contextlib.suppress(OSError):
                    info = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
                    if "prog_id:" not in info or "run_cnt:" not in info:
                        continue
                    kv = dict(ln.split(":", 1) for ln in info.splitlines() if ":" in ln)
                    pid_ = int(kv["prog_id"])
                    out[pid_] = (_prog_name(pid_), int(kv["run_cnt"]), int(kv["run_time_ns"]))
    return out


_NAMES: dict[int, str] = {}


def _prog_name(prog_id: int) -> str:
    if prog_id in _NAMES:
        return _NAMES[prog_id]
    p = subprocess.run(["bpftool", "prog", "show", "id", str(prog_id), "--json"], capture_output=True, text=True)
    name = str(prog_id)
    with contextlib.suppress(ValueError):
        name = str(json.loads(p.stdout).get("name", prog_id))
    _NAMES[prog_id] = name
    return name


def capture(server: int, extra: list[str], seconds: float, out: Path) -> dict[str, object]:
    cmd = [sys.executable, "-m", "profiler", "attach", "--pid", str(server), "-d", f"{seconds}s", "-o", str(out),
           "--force", "--no-report", *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    # wait for the capture to settle: its manifest says every collector started
    t_launch = time.monotonic()
    manifest = out / "manifest.json"
    while proc.poll() is None:
        with contextlib.suppress(OSError, ValueError):
            m = json.loads(manifest.read_text())
            if m.get("collectors") and all(c.get("started") or c.get("status") != "running" for c in m["collectors"]):
                break
        time.sleep(0.1)
    started = time.monotonic()
    time.sleep(2.0)
    t_a = time.monotonic()
    pids = tree(proc.pid)
    cpu_a = {p: c for p in pids if (c := proc_cpu(p))}
    bpf_a = prog_stats(pids)
    end = started + seconds - 0.5 - (started - t_launch)  # the duration counts from the session's start
    time.sleep(max(1.0, end - time.monotonic()))
    t_b = time.monotonic()
    pids_b = tree(proc.pid)
    cpu_b = {p: c for p in pids_b if (c := proc_cpu(p))}
    bpf_b = prog_stats(pids_b)
    _out, err = proc.communicate(timeout=300)
    dt = t_b - t_a
    cpu: dict[str, float] = defaultdict(float)
    for p, (name, c) in cpu_b.items():
        cpu[name] += (c - cpu_a.get(p, (name, 0.0))[1]) / dt
    progs: dict[str, tuple[float, float]] = {}
    for pid_, (name, cnt, ns) in bpf_b.items():
        _n, cnt0, ns0 = bpf_a.get(pid_, (name, 0, 0))
        runs = (cnt - cnt0) / dt
        per = (ns - ns0) / max(1, cnt - cnt0)
        r0, _ = progs.get(name, (0.0, 0.0))
        progs[name] = (r0 + runs, per)
    stats: dict[str, object] = {}
    with contextlib.suppress(OSError, ValueError):
        m = json.loads(manifest.read_text())
        stats = {c["name"]: {k: v for k, v in (c.get("stats") or {}).items()
                             if k in ("events", "syscalls", "windows_traced", "traced_share", "stacks_sampled",
                                       "stack_every_max")}
                 for c in m["collectors"]}
    if proc.returncode not in (0, 6):
        print(f"bench: attach failed ({proc.returncode}): {err.strip()[-300:]}", flush=True)
    return {"cpu": dict(cpu), "progs": progs, "window": dt, "stats": stats}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", choices=sorted(CASES), default="dense")
    ap.add_argument("--threads", type=int, help="sysbench clients (default: the case's)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=8.0, help="each capture's duration (default 8)")
    ap.add_argument("--config", action="append",
                    help="NAME=ARGS: a configuration, ARGS added to profiler attach (default: default= and "
                         "perf=--backend perf)")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("bench: run as root")
    configs = [(c.split("=", 1)[0], shlex.split(c.split("=", 1)[1] if "=" in c else "")) for c in
               (args.config or ["default=", "perf=--backend perf"])]
    stats_fd = enable_stats()
    results: dict[str, list[dict[str, object]]] = {n: [] for n, _ in configs}
    loads: list[float] = []
    try:
        with tempfile.TemporaryDirectory(prefix="profiler-bcc-cost-") as tmp, mariadb(Path(tmp)) as (server, sock):
            test, threads, tables, size = CASES[args.case]
            base = dict(sock=sock, threads=args.threads or threads, tables=tables, size=size, test=test)
            subprocess.run(sysbench_argv(verb="prepare", seconds=1, **base), check=True,  # type: ignore[arg-type]
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            total = int(len(configs) * args.rounds * (args.seconds + 15) + 60)
            load = subprocess.Popen(sysbench_argv(verb="run", seconds=total, **base),  # type: ignore[arg-type]
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                time.sleep(4)
                for r in range(args.rounds):
                    for name, extra in (configs if r % 2 == 0 else configs[::-1]):
                        loads.append(os.getloadavg()[0])
                        res = capture(server.pid, extra, args.seconds, Path(tmp) / f"cap-{name}-{r}")
                        results[name].append(res)
                        progs = res["progs"]
                        assert isinstance(progs, dict)
                        kernel = sum(runs * per for runs, per in progs.values()) / 1e9
                        cpu = res["cpu"]
                        assert isinstance(cpu, dict)
                        print(f"round {r + 1} {name:10s} load {loads[-1]:5.1f}: programs {100 * kernel:5.1f}% of a CPU  "
                              f"processes {100 * sum(cpu.values()):5.1f}% of a CPU  "
                              + "  ".join(f"{k} {100 * v:.1f}%" for k, v in sorted(cpu.items())), flush=True)
                        shutil.rmtree(Path(tmp) / f"cap-{name}-{r}", ignore_errors=True)
            finally:
                load.kill()
                load.wait()
    finally:
        os.close(stats_fd)
    print(f"\nload average (1 min) at the captures: {min(loads):.1f}-{max(loads):.1f}; host CPUs {os.cpu_count()}")
    for name, runs in results.items():
        if not runs:
            continue
        print(f"\n{name} ({' '.join(dict(configs)[name]) or 'the default capture'}): medians of {len(runs)}")
        progs: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for r in runs:
            for k, v in r["progs"].items():  # type: ignore[attr-defined]
                progs[k].append(v)
        kernel = 0.0
        for k, vals in sorted(progs.items()):
            runs_s = statistics.median(v[0] for v in vals)
            per = statistics.median(v[1] for v in vals)
            kernel += runs_s * per / 1e9
            print(f"    {k:18s} {runs_s:10,.0f} runs/s {per:7.0f} ns/run  {100 * runs_s * per / 1e9:5.2f}% of a CPU")
        print(f"    programs in all: {100 * kernel:.2f}% of a CPU ({100 * kernel / (os.cpu_count() or 1):.2f}% of the host)")
        procs: dict[str, list[float]] = defaultdict(list)
        for r in runs:
            for k, v in r["cpu"].items():  # type: ignore[attr-defined]
                procs[k].append(v)
        for k, vals in sorted(procs.items()):
            print(f"    process {k:18s} {100 * statistics.median(vals):5.1f}% of a CPU")
        tot = statistics.median(sum(r["cpu"].values()) for r in runs)  # type: ignore[attr-defined]
        print(f"    processes in all: {100 * tot:.1f}% of a CPU")
        print(f"    manifest (last run): {json.dumps(runs[-1]['stats'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
