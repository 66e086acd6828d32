"""Per-event cost of the perf commands the collectors run, on a micro workload this script builds and starts.

Two workloads in C (compiled here with gcc into a temporary directory): ``syscall``, one thread
calling getppid in a loop (the cost per syscall), and ``pp``, two threads ping-ponging through
futexes (each round: two context switches and about four syscalls). Each run waits 1 s (the perf
command attaches), works for ``--seconds`` and prints its own CPU time per operation
(getrusage: the target's user+system time, not wall-clock throughput, which is noisy on a
shared host). Configurations run interleaved, round after round; the medians and the extra
nanoseconds per operation against "none" are printed.

    sudo python bench/micro_events.py --rounds 3 --seconds 4 [--only sys-record --only sys-record-off]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

WORKLOAD_C = r'''// Micro workload for collector overhead: "syscall" = one thread calling getppid in a loop;
// default = two threads ping-ponging through futexes (2 context switches + ~4 syscalls per round).
// Runs SECONDS (argv[2], default 5), then prints "ops cpu_ns_per_op" (CPU from getrusage: own threads).
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <time.h>
static _Atomic int turn = 0;
static volatile sig_atomic_t done = 0;
static long ops = 0;
static void alarm_h(int s) { (void)s; done = 1; }
static void fwait(int v) { while (atomic_load(&turn) == v && !done) { struct timespec ts = {0, 50000000}; syscall(SYS_futex, &turn, FUTEX_WAIT_PRIVATE, v, &ts, 0, 0); } }
static void fwake(void) { syscall(SYS_futex, &turn, FUTEX_WAKE_PRIVATE, 1, 0, 0, 0); }
static void *b(void *a) { while (!done) { fwait(0); atomic_store(&turn, 0); fwake(); } return a; }
int main(int argc, char **argv) {
  int secs = argc > 2 ? atoi(argv[2]) : 5;
  if (argc > 3) sleep(atoi(argv[3]));  // time for a collector to attach
  signal(SIGALRM, alarm_h); alarm(secs);
  if (argc > 1 && !strcmp(argv[1], "syscall")) { while (!done) { syscall(SYS_getppid); ops++; } }
  else {
    pthread_t t; pthread_create(&t, 0, b, 0);
    while (!done) { atomic_store(&turn, 1); fwake(); fwait(1); ops++; }
    atomic_store(&turn, 0); fwake(); pthread_join(t, 0);
  }
  struct rusage ru; getrusage(RUSAGE_SELF, &ru);
  double ns = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e9 + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e3;
  printf("%ld %.1f\n", ops, ns / ops);
  return 0;
}
'''

SYSCALL_LIST = ",".join(f"syscalls:sys_enter_{n}" for n in (
    "futex epoll_wait read write pread64 pwrite64 fsync fdatasync io_uring_enter sendto recvfrom sendmsg recvmsg "
    "nanosleep").split())


def configs(d: Path) -> dict[str, list[list[str]] | None]:
    """Each configuration: the perf commands run together on the workload. ``{pid}`` is the
    workload's pid, ``{tids}`` a tracepoint filter range over its threads (pid..pid+7: its two
    threads are created right after it starts); ``{ctl}`` a control fifo of the command's own,
    held open with nothing written (events stay off, as in a duty cycle's gaps). A command with
    ``-a`` runs system-wide; the others get ``-p {pid}``."""
    def rec(*a: str) -> list[str]:
        return ["perf", "record", *a, "-k", "CLOCK_MONOTONIC", "-N", "-B", "-o", "{out}"]

    ctl = ["-D", "-1", "--control", "fifo:{ctl}"]
    stat = ["perf", "stat", "-I", "1000", "-x", ",", "-o", "{out}", "-e"]
    sw = "task-clock,context-switches,cpu-migrations,page-faults,major-faults,cycles,instructions,cache-misses"
    off_a = ["-a", "-e", "sched:sched_switch/call-graph=fp/", "--filter", "prev_pid >= {pid} && prev_pid <= {pid7}",
             "-e", "sched:sched_switch/call-graph=no/", "--filter", "next_pid >= {pid} && next_pid <= {pid7}"]
    sys_a = ["-a", "-e", "raw_syscalls:sys_enter,raw_syscalls:sys_exit", "--filter",
             "common_pid >= {pid} && common_pid <= {pid7}", "-m", "1024"]
    old_default = [stat + [sw], stat + ["raw_syscalls:sys_enter"],
                   rec("-e", "cpu-clock", "-F", "99", "--call-graph", "fp", "--sample-cpu"),
                   rec("-e", "sched:sched_switch", "--call-graph", "fp", "--switch-events", *ctl),
                   rec("-e", "raw_syscalls:sys_enter,raw_syscalls:sys_exit", "-m", "1024", *ctl)]
    return {
        "none": None,
        "perf-stat (default events)": [stat + [sw]],
        "perf-stat task-clock only": [stat + ["task-clock"]],
        "syscall rate (counting)": [stat + ["raw_syscalls:sys_enter"]],
        "syscall rate -a filtered": [["perf", "stat", "-a", "-I", "1000", "-x", ",", "-o", "{out}", "-e",
                                      "raw_syscalls:sys_enter", "--filter", "common_pid >= {pid} && common_pid <= {pid7}"]],
        "14 syscalls counted": [stat + [SYSCALL_LIST]],
        "syscall trace (full)": [rec("-e", "raw_syscalls:sys_enter,raw_syscalls:sys_exit", "-m", "1024")],
        "syscall trace (off)": [rec("-e", "raw_syscalls:sys_enter,raw_syscalls:sys_exit", "-m", "1024", *ctl)],
        "syscall trace -a (full)": [rec(*sys_a)],
        "syscall trace -a (off)": [rec(*sys_a, *ctl)],
        "offcpu trace (full)": [rec("-e", "sched:sched_switch", "--call-graph", "fp", "--switch-events", "--sample-cpu")],
        "offcpu no stacks": [rec("-e", "sched:sched_switch", "--switch-events", "--sample-cpu")],
        "offcpu trace (off)": [rec("-e", "sched:sched_switch", "--call-graph", "fp", "--switch-events", *ctl)],
        "offcpu -a filtered (full)": [rec(*off_a)],
        "offcpu -a filtered (off)": [rec(*off_a, *ctl)],
        "cpu-stacks 99 Hz": [rec("-e", "cpu-clock", "-F", "99", "--call-graph", "fp", "--sample-cpu")],
        "cpu-stacks -a 99 Hz": [rec("-a", "-e", "cpu-clock", "-F", "99", "--call-graph", "fp", "--sample-cpu")],
        "old default set": old_default,
    }


def _sub(arg: str, subs: dict[str, str]) -> str:
    for k, v in subs.items():
        arg = arg.replace(k, v)
    return arg


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=4)
    ap.add_argument("--workload", action="append", choices=["syscall", "pp"], default=None)
    ap.add_argument("--only", action="append", default=None, help="configuration names (repeatable)")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("bench: run as root (tracepoints need it)")
    if shutil.which("gcc") is None or shutil.which("perf") is None:
        raise SystemExit("bench: needs gcc and perf")
    wls = args.workload or ["syscall", "pp"]
    res: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="profiler-bench-micro-") as tmp:
        d = Path(tmp)
        (d / "w.c").write_text(WORKLOAD_C)
        subprocess.run(["gcc", "-O2", "-pthread", "-o", str(d / "w"), str(d / "w.c")], check=True)
        cfg = configs(d)
        if args.only:
            cfg = {k: v for k, v in cfg.items() if k == "none" or k in args.only}
        print(f"# host cpus {os.cpu_count()} (shared host: noisy); {args.rounds} rounds of {args.seconds}s", flush=True)
        for r in range(args.rounds):
            for wl in wls:
                for name, cmd_set in cfg.items():
                    w = subprocess.Popen([str(d / "w"), wl, str(args.seconds), "1"], stdout=subprocess.PIPE, text=True)
                    procs: list[subprocess.Popen[bytes]] = []
                    fds: list[int] = []
                    try:
                        for i, cmd in enumerate(cmd_set or []):
                            fifo = d / f"ctl{i}"
                            if not fifo.exists():
                                os.mkfifo(fifo)
                            subs = {"{pid}": str(w.pid), "{pid7}": str(w.pid + 7), "{ctl}": str(fifo),
                                    "{out}": str(d / f"out{i}")}
                            argv = [_sub(a, subs) for a in cmd] + ([] if "-a" in cmd else ["-p", str(w.pid)])
                            procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                            if any("--control" == a for a in cmd):
                                fds.append(os.open(fifo, os.O_RDWR))  # held open, nothing written: events stay off
                        out = w.communicate(timeout=args.seconds + 30)[0].split()
                    finally:
                        if w.poll() is None:
                            w.kill()
                            w.wait()
                        for p in procs:
                            p.send_signal(signal.SIGINT)
                            p.wait()
                        for fd in fds:
                            os.close(fd)
                    ns = float(out[1])
                    res.setdefault((wl, name), []).append(ns)
                    print(f"round {r + 1} {wl:8s} {name:28s} {ns:9.1f} ns/op", flush=True)
    print()
    for wl in wls:
        base = statistics.median(res[(wl, "none")])
        for name in cfg:
            v = res[(wl, name)]
            m = statistics.median(v)
            print(f"{wl:8s} {name:28s} median {m:9.1f} ns/op  ratio {m / base:6.3f}  extra {m - base:+8.1f} ns/op  "
                  f"(runs {', '.join(f'{x:.0f}' for x in v)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
