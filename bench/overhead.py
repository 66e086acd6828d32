"""What a capture costs a real server: sysbench against MariaDB, with and without profiler.

Starts its own MariaDB (a fresh datadir in a temporary directory, 127.0.0.1 on a random free
port, a unix socket beside it), prepares sysbench tables, then runs pairs back to back:
sysbench alone, then sysbench under ``profiler run --pid mariadbd`` with a given collector set
(every default collector, then each collector alone). The ratio of each pair is
``throughput with profiler / throughput alone``; the medians of those ratios are printed,
with the median throughputs and the server's CPU time per transaction. An "A/A (none)" pair
(two runs alone) measures the noise floor: a ratio is only meaningful beyond its spread. On a
shared host the figures are noisy: use several rounds.

Two cases (``--case``):
  point-select  oltp_point_select, 4 clients (the default): a CPU-bound server;
  dense         the event-dense case: oltp_update_non_index with 32 clients on 16 hot rows, a
                lock-heavy, context-switch-heavy server (row-lock waits, a switch and several
                syscalls per statement). Its context switches and syscalls per second are
                measured first (procfs and perf stat, outside the timed pairs) and printed.

    sudo python bench/overhead.py --rounds 3 --seconds 10
    sudo python bench/overhead.py --case dense --only "A/A (none)" --only all --rounds 5 --seconds 10
    sudo python bench/overhead.py --case dense --threads 64 --only "A/A (none)" --only all --rounds 5 --seconds 10

The default capture is --backend auto (the bcc backend where it runs); --backend perf for the
perf collectors. Per configuration it also prints the collectors' own CPU seconds per million
events the per-event collectors saw (syscalls, context switches, futex waits, block IOs).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def which(name: str, *alts: str) -> str:
    for n in (name, *alts):
        p = shutil.which(n) or (f"/usr/sbin/{n}" if os.path.exists(f"/usr/sbin/{n}") else None)
        if p:
            return p
    raise SystemExit(f"bench: {name} is not installed")


def _die_with_parent() -> None:  # runs in the child: never leave a server behind if the bench is killed
    import ctypes

    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


@contextlib.contextmanager
def mariadb(workdir: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A private MariaDB server for the benchmark; always stopped and its files removed."""
    datadir, sock = workdir / "data", workdir / "mysqld.sock"
    install = which("mariadb-install-db", "mysql_install_db")
    subprocess.run([install, "--no-defaults", f"--datadir={datadir}", "--user=root",
                    "--auth-root-authentication-method=normal", "--skip-test-db"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    port = free_port()
    server = subprocess.Popen(
        [which("mariadbd", "mysqld"), "--no-defaults", f"--datadir={datadir}", f"--socket={sock}",
         f"--port={port}", "--bind-address=127.0.0.1", "--user=root", "--skip-grant-tables",
         "--innodb-buffer-pool-size=256M", "--skip-log-bin", "--max-connections=200",
         f"--pid-file={workdir / 'mysqld.pid'}", f"--log-error={workdir / 'error.log'}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,  # a daemon of its own, as a real server is (own scheduler autogroup)
        preexec_fn=_die_with_parent)
    try:
        deadline = time.monotonic() + 60
        while not sock.exists():
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"bench: mariadbd did not start (see {workdir / 'error.log'})")
            time.sleep(0.2)
        subprocess.run([which("mariadb", "mysql"), f"--socket={sock}", "-uroot", "-e",
                        "CREATE DATABASE IF NOT EXISTS sbtest"], check=True)
        yield server, str(sock)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


CASES = {  # name -> (sysbench test, clients, tables, rows per table)
    "point-select": ("oltp_point_select", 4, 4, 20000),
    "dense": ("oltp_update_non_index", 32, 1, 16),
}


def sysbench_argv(sock: str, threads: int, seconds: int, tables: int, size: int, verb: str, rate: int = 0,
                  test: str = "oltp_point_select") -> list[str]:
    return [which("sysbench"), test, "--db-driver=mysql", f"--mysql-socket={sock}",
            "--mysql-user=root", "--mysql-db=sbtest", f"--tables={tables}", f"--table-size={size}",
            f"--threads={threads}", f"--time={seconds}", f"--rate={rate}", "--report-interval=0", verb]


_TPS = re.compile(r"transactions:\s+\d+\s+\(([\d.]+) per sec")


def parse_tps(text: str) -> float:
    m = _TPS.search(text)
    if not m:
        raise SystemExit(f"bench: cannot read sysbench output:\n{text[-2000:]}")
    return float(m.group(1))


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_alone(argv: list[str], pid: int) -> tuple[float, float]:
    """(transactions per second, server CPU seconds used)."""
    c0 = cpu_seconds(pid)
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    return parse_tps(out.stdout), cpu_seconds(pid) - c0


def switches(pid: int) -> int:
    """Context switches (voluntary and not) of every thread of a process so far."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{tid}/status") as fh:
            for line in fh:
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    total += int(line.split()[1])
    return total


def event_rates(argv: list[str], pid: int) -> tuple[float, float]:
    """(context switches/s of the server, syscalls/s of the whole host) during one run alone:
    the switches from /proc (free), the syscalls from a system-wide perf stat count."""
    s0, t0 = switches(pid), time.monotonic()
    load = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    stat = subprocess.run(["perf", "stat", "-a", "-x,", "-e", "raw_syscalls:sys_enter", "--", "sleep", "3"],
                          capture_output=True, text=True, check=False).stderr
    load.wait()
    cs = (switches(pid) - s0) / max(1e-9, time.monotonic() - t0)
    calls = next((float(f[0]) / 3 for f in (ln.split(",") for ln in stat.splitlines())
                  if len(f) > 2 and f[0].isdigit()), float("nan"))
    return cs, calls


def collector_cpu(manifest: dict) -> float:  # type: ignore[type-arg]
    """CPU seconds the collectors' own processes used during the capture (perf, readers, the sampler,
    the bcc helpers and their symbolizer)."""
    total = 0.0
    for c in manifest["collectors"]:
        st = c.get("stats") or {}
        for key in ("perf_cpu_seconds", "reader_cpu_seconds", "cpu_seconds", "helper_cpu_seconds",
                    "helper_parent_cpu_seconds", "symbolizer_cpu_seconds"):
            v = st.get(key)
            if isinstance(v, (int, float)):
                total += float(v)
    return total


def traced_events(manifest: dict) -> int:  # type: ignore[type-arg]
    """The events the per-event collectors saw (syscalls, context switches, futex waits, block IOs)."""
    total = 0
    for c in manifest["collectors"]:
        if c["name"] in ("syscalls", "offcpu-stacks", "futex-waits", "block-io"):
            st = c.get("stats") or {}
            v = st.get("events", st.get("syscalls", st.get("samples", 0)))
            total += int(v) if isinstance(v, (int, float)) else 0
    return total


def run_profiled(argv: list[str], pid: int, collectors: list[str], workdir: Path, tag: str,
                 backend: str = "auto") -> tuple[float, float, dict[str, str], float, int]:
    out = workdir / f"cap-{tag}"
    cmd = [sys.executable, "-m", "profiler", "run", "--backend", backend, "--pid", str(pid), "-o", str(out),
           "--force", "--no-report"]
    for c in collectors:
        cmd += ["--collector", c]
    c0 = cpu_seconds(pid)
    proc = subprocess.run(cmd + ["--"] + argv, capture_output=True, text=True, timeout=900)
    cpu = cpu_seconds(pid) - c0
    if proc.returncode != 0:
        raise SystemExit(f"bench: profiler run failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    tps = parse_tps((out / "load.log").read_text())
    manifest = json.loads((out / "manifest.json").read_text())
    states = {c["name"]: c["status"] for c in manifest["collectors"]}
    own = collector_cpu(manifest)
    events = traced_events(manifest)
    shutil.rmtree(out, ignore_errors=True)
    return tps, cpu, states, own, events


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", choices=sorted(CASES), default="point-select", help="the workload (see above)")
    ap.add_argument("--rounds", type=int, default=3, help="pairs per configuration (default 3)")
    ap.add_argument("--seconds", type=int, default=10, help="sysbench run length (default 10)")
    ap.add_argument("--threads", type=int, help="sysbench threads (default: the case's)")
    ap.add_argument("--rate", type=int, default=0,
                    help="fixed sysbench rate (transactions/s; 0 = as fast as it goes). With a fixed rate the "
                         "server's CPU per transaction is the robust figure on a shared host")
    ap.add_argument("--tables", type=int, help="default: the case's")
    ap.add_argument("--table-size", type=int, help="default: the case's")
    ap.add_argument("--backend", default="auto", help="profiler's --backend (default auto, the default capture's)")
    ap.add_argument("--only", action="append", default=None,
                    help="configurations to run: all, a collector name, \"all but NAME\", syscalls-trace, "
                         "offcpu-trace, \"A/A (none)\" (repeatable; default: A/A, all and each collector)")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("bench: run as root (perf and tracefs need it)")
    sys.path.insert(0, str(ROOT))
    from profiler.collectors.base import CaptureOptions
    from profiler.collectors.registry import default_collectors

    names = [c.name for c in default_collectors(CaptureOptions(backend=args.backend))]
    # "A/A" pairs two runs alone: its spread is the noise floor the other ratios must beat.
    # "all" is the default capture; the full traces (opt-in) run only when asked for with --only.
    configs: list[tuple[str, list[str]]] = [("A/A (none)", ["-"]), ("all", [])] + [(n, [n]) for n in names]
    full = {"syscalls-trace": "syscalls", "offcpu-trace": "offcpu-stacks"}  # alone, traced in full
    configs += [(n, [c, n]) for n, c in full.items() if args.only and n in args.only]
    # "all but X" (asked for with --only "all but X"): what X adds to the rest
    configs += [(f"all but {n}", [m for m in names if m != n]) for n in names
                if args.only and f"all but {n}" in args.only]
    if args.only:
        configs = [c for c in configs if c[0] in args.only]
    with tempfile.TemporaryDirectory(prefix="profiler-bench-") as tmp:
        work = Path(tmp)
        with mariadb(work) as (server, sock):
            test, threads, tables, size = CASES[args.case]
            base = dict(sock=sock, threads=args.threads or threads, tables=args.tables or tables,
                        size=args.table_size or size, test=test)
            subprocess.run(sysbench_argv(verb="prepare", seconds=1, **base), check=True,  # type: ignore[arg-type]
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            load = sysbench_argv(verb="run", seconds=args.seconds, rate=args.rate, **base)  # type: ignore[arg-type]
            run_alone(sysbench_argv(verb="run", seconds=3, **base), server.pid)  # type: ignore[arg-type]  # warm up
            cs, calls = event_rates(sysbench_argv(verb="run", seconds=5, **base), server.pid)  # type: ignore[arg-type]
            print(f"# case {args.case}: sysbench {test}, {base['threads']} clients, {base['tables']} table(s) of "
                  f"{base['size']} rows; alone: {cs:,.0f} server context switches/s, {calls:,.0f} syscalls/s on the host",
                  flush=True)
            results: dict[str, dict[str, list[float]]] = {
                c[0]: {"alone": [], "profiled": [], "ratio": [], "cpu_ratio": [], "own": [], "per_m": []}
                for c in configs}
            print(f"# backend {args.backend}; MariaDB {server.pid}, sysbench {test} {base['threads']} threads, "
                  f"{args.seconds}s runs, {args.rounds} rounds, host cpus {os.cpu_count()} (shared host: noisy)",
                  flush=True)
            for r in range(args.rounds):
                for name, cols in configs:
                    alone, cpu_a = run_alone(load, server.pid)
                    own, events = 0.0, 0
                    if cols == ["-"]:
                        prof, cpu_p = run_alone(load, server.pid)
                        states = {}
                    else:
                        prof, cpu_p, states, own, events = run_profiled(load, server.pid, cols, work, f"{name}-{r}",
                                                                        args.backend)
                    # server CPU microseconds per transaction, alone and profiled
                    us_a = 1e6 * cpu_a / max(1.0, alone * args.seconds)
                    us_p = 1e6 * cpu_p / max(1.0, prof * args.seconds)
                    res = results[name]
                    res["alone"].append(alone)
                    res["profiled"].append(prof)
                    res["ratio"].append(prof / alone)
                    res["cpu_ratio"].append(us_p / us_a if us_a else 1.0)
                    res["own"].append(100.0 * own / args.seconds)
                    if events:
                        res["per_m"].append(own / (events / 1e6))
                    bad = {k: v for k, v in states.items() if v not in ("ok", "skipped")}
                    print(f"round {r + 1} {name:14s} alone {alone:9.1f} tps {us_a:6.1f} us/tx  "
                          f"profiled {prof:9.1f} tps {us_p:6.1f} us/tx  tps ratio {prof / alone:.3f}  "
                          f"collectors {100.0 * own / args.seconds:5.1f}% of a CPU"
                          + (f", {own / (events / 1e6):.2f} CPU s per million events ({events:,})" if events else "")
                          + (f"  ({bad})" if bad else ""), flush=True)
    print()
    aa = results.get("A/A (none)", {})
    if aa.get("ratio"):
        print(f"noise floor (A/A): tps ratios {min(aa['ratio']):.3f}..{max(aa['ratio']):.3f}, "
              f"server CPU/tx ratios {min(aa['cpu_ratio']):.3f}..{max(aa['cpu_ratio']):.3f}")
    print(f"{'configuration':16s} {'alone tps':>10s} {'profiled tps':>13s} {'ratio of medians':>17s} {'tps ratio':>10s} "
          f"{'tps cost':>9s} {'server CPU/tx ratio':>20s} {'collectors CPU':>15s} {'CPU s/M events':>15s}")
    for name, res in results.items():
        if not res["ratio"]:
            continue
        ratio = statistics.median(res["ratio"])
        label = "default (all)" if name == "all" else name
        of_medians = statistics.median(res["profiled"]) / statistics.median(res["alone"])
        print(f"{label:16s} {statistics.median(res['alone']):10.1f} {statistics.median(res['profiled']):13.1f} "
              f"{of_medians:17.3f} {ratio:10.3f} {100 * (1 - ratio):8.1f}% {statistics.median(res['cpu_ratio']):20.3f} "
              f"{statistics.median(res['own']):13.1f} % "
              + (f"{statistics.median(res['per_m']):15.2f}" if res["per_m"] else f"{'-':>15s}"))
    print("(ratio of medians: median profiled tps / median alone tps; tps ratio: profiled/alone, median of pairs; "
          "server CPU/tx ratio: the server's own CPU per transaction, "
          "profiled/alone; collectors CPU: what the collectors' own processes used, % of one CPU, during the capture; "
          "CPU s/M events: those CPU seconds per million events the per-event collectors saw: syscalls, "
          "context switches, futex waits, block IOs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
