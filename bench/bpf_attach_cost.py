"""What attaching a BPF program to a tracepoint costs each event, outside the program's own time
(which the kernel's bpf_stats count, and bench/bcc_cost.py reports).

A program that returns 1 at once is attached to getppid's tracepoint, and a one-thread getppid
loop (C, built here with gcc) pinned to CPU 0 prints its own CPU time per call. Configurations,
interleaved round after round (medians printed):

- ``none``: nothing attached;
- ``classic-enabled``: a classic tracepoint program (syscalls:sys_enter_getppid) on a perf event
  opened on CPU 0 and enabled, as bcc and libbpf attach it: after the program returns 1 the
  kernel also submits the event to that perf event (on CPU 0), a record nobody reads;
- ``classic-disabled``: the same, its perf event left disabled (what collectors/bcc/bpfsys.py
  does): the program runs, no record is submitted;
- ``raw``: a raw tracepoint program on sys_enter (runs for every syscall of the host);
- ``raw-stats``: the same with the kernel's bpf_stats on (BPF_ENABLE_STATS, as bench/bcc_cost.py
  runs): what timing every run costs, and the run time it reports for a program that does
  nothing, to subtract from bench/bcc_cost.py's ns per run.

    sudo .venv/bin/python bench/bpf_attach_cost.py --rounds 7
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bcc_cost import enable_stats  # noqa: E402
from profiler.collectors.bcc import bpfsys  # noqa: E402

LOOP_C = r"""#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 2000000; struct timespec a, b;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
  for (long i = 0; i < n; i++) syscall(SYS_getppid);
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
  printf("%.1f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
  return 0;
}
"""
RETURN_1 = bytes.fromhex("b700000001000000") + bytes.fromhex("9500000000000000")  # r0 = 1; exit
TRACEFS = "/sys/kernel/tracing"


def attach(mode: str) -> list[int]:
    """The file descriptors holding a program attached as ``mode`` (closing them detaches it)."""
    if mode == "none":
        return []
    if mode in ("raw", "raw-stats"):
        stats = [enable_stats()] if mode == "raw-stats" else []
        prog = bpfsys.prog_load(bpfsys.PROG_RAW_TRACEPOINT, RETURN_1, "attach_cost")
        return [bpfsys.attach_raw_tracepoint(prog, "sys_enter"), prog, *stats]
    prog = bpfsys.prog_load(bpfsys.PROG_TRACEPOINT, RETURN_1, "attach_cost")
    tp_id = bpfsys.tracepoint_id(TRACEFS, "syscalls:sys_enter_getppid")
    if mode == "classic-disabled":
        return [bpfsys.attach_tracepoint(prog, tp_id), prog]
    # as bcc and libbpf attach: the event opened enabled (attr.disabled clear)
    attr = ctypes.create_string_buffer(112)
    struct.pack_into("<IIQQQ", attr, 0, 2, 112, tp_id, 1, 1 << 10)  # PERF_TYPE_TRACEPOINT, PERF_SAMPLE_RAW
    struct.pack_into("<I", attr, 48, 1)  # wakeup_events
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong]
    ev = int(libc.syscall(298 if os.uname().machine == "x86_64" else 241, ctypes.byref(attr), -1, 0, -1, 1 << 3))
    if ev < 0:
        raise SystemExit(f"bench: perf_event_open: {os.strerror(ctypes.get_errno())}")
    if libc.ioctl(ev, 0x40042408, prog) != 0 or libc.ioctl(ev, 0x2400, 0) != 0:  # SET_BPF, ENABLE
        raise SystemExit(f"bench: attaching: {os.strerror(ctypes.get_errno())}")
    return [ev, prog]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=2_000_000)
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("bench: run as root")
    modes = ["none", "classic-enabled", "classic-disabled", "raw", "raw-stats"]
    res: dict[str, list[float]] = {m: [] for m in modes}
    reported: list[float] = []  # raw-stats: the run time bpf_stats report per run of a program that does nothing
    with tempfile.TemporaryDirectory(prefix="profiler-attach-cost-") as tmp:
        src, exe = Path(tmp) / "loop.c", Path(tmp) / "loop"
        src.write_text(LOOP_C)
        subprocess.run([shutil.which("gcc") or "gcc", "-O2", "-o", str(exe), str(src)], check=True)
        for r in range(args.rounds):
            for mode in modes if r % 2 == 0 else modes[::-1]:
                fds = attach(mode)
                try:
                    out = subprocess.run(["taskset", "-c", "0", str(exe), str(args.calls)], capture_output=True,
                                         text=True, check=True).stdout
                    if mode == "raw-stats":
                        info = dict(ln.split(":", 1) for ln in Path(f"/proc/self/fdinfo/{fds[1]}").read_text()
                                    .splitlines() if ":" in ln)
                        reported.append(int(info["run_time_ns"]) / max(1, int(info["run_cnt"])))
                finally:
                    for fd in fds:
                        os.close(fd)
                res[mode].append(float(out))
    base = statistics.median(res["none"])
    print(f"getppid on CPU 0, CPU ns per call, medians of {args.rounds} (load {os.getloadavg()[0]:.1f}):")
    for mode, vals in res.items():
        med = statistics.median(vals)
        print(f"    {mode:17s} {med:7.1f} ns  (+{med - base:5.1f})  runs {' '.join(f'{v:.0f}' for v in vals)}")
    if reported:
        print(f"bpf_stats report {statistics.median(reported):.1f} ns per run of the program that does nothing")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
