"""The table-lock MariaDB case: 32 readers behind one writer that keeps taking LOCK TABLES ... WRITE.

    sudo .venv/bin/python bench/table_lock.py [--backend auto|bcc|perf ...] [--seconds 20] [--keep DIR]

Starts its own MariaDB (bench/overhead.py's: temporary datadir, 127.0.0.1, random port), a
MyISAM (or --engine InnoDB) sysbench table, 32 sysbench oltp_point_select readers, and one
writer session that loops ``LOCK TABLES sbtest1 WRITE; DO SLEEP(HOLD); UNLOCK TABLES;
DO SLEEP(GAP)`` (--hold 0.3, --gap 0.02 by default; --hold 8 keeps them waiting seconds at a time): the readers spend most of their time queued on the table lock (confirmed
independently: SHOW PROCESSLIST's waiting sessions, Table_locks_waited). After a warm-up it runs
``profiler attach --pid mariadbd -d SECONDS`` with each backend asked for and prints, per
backend: what each collector lost (events, stacks, maps), the seconds of the window that have
off-CPU and syscall evidence for the server, and the verdict with its top evidence.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from overhead import mariadb, sysbench_argv, which  # noqa: E402

WRITER = "LOCK TABLES sbtest1 WRITE; DO SLEEP({hold}); UNLOCK TABLES; DO SLEEP({gap});\n"


def sql(sock: str, query: str) -> list[list[str]]:
    out = subprocess.run([which("mariadb", "mysql"), f"--socket={sock}", "-uroot", "-N", "-B", "-e", query],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    return [line.split("\t") for line in out.splitlines()]


def waiting_sessions(sock: str) -> int:
    rows = sql(sock, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE LIKE 'Waiting for table%'")
    return int(rows[0][0]) if rows else 0


def seconds_with(times: list[float], lo: float, hi: float) -> tuple[int, int]:
    """(whole seconds of [lo, hi) that hold at least one time, whole seconds in it)."""
    n = int(hi - lo)
    have = {int(t - lo) for t in times if lo <= t < lo + n}
    return len(have), n


def evidence(out: Path) -> dict[str, object]:
    m = json.loads((out / "manifest.json").read_text())
    recs = {c["name"]: c for c in m["collectors"]}
    lo = max(r.get("started") or 0 for r in recs.values() if r["name"] in ("offcpu-stacks", "syscalls"))
    hi = min(r.get("ended") or 1e18 for r in recs.values() if r["name"] in ("offcpu-stacks", "syscalls"))
    off_t: list[float] = []
    if (out / "offcpu.slots.jsonl.gz").exists():
        for line in gzip.open(out / "offcpu.slots.jsonl.gz", "rt"):
            x = json.loads(line)
            if x["kind"] == "slot" and any(r[5] > 0 for r in x["rows"]):
                off_t.append(float(x["t"]) + 1e-6)
    elif (out / "offcpu.csv.gz").exists():  # the perf backend: one row per off-CPU interval
        for row in csv.DictReader(gzip.open(out / "offcpu.csv.gz", "rt")):
            a, z = max(float(row["off"]), lo), min(float(row["on"]), hi)
            off_t.extend(lo + s + 1e-6 for s in range(int(a - lo), int(z - lo) + 1) if z > a)
    sys_t = [float(r["time"]) + 1e-6 for r in csv.DictReader((out / "syscalls.csv").read_text().splitlines())
             if int(r["count"]) > 0] if (out / "syscalls.csv").exists() else []
    lost = {name: {k: r["stats"].get(k) for k in ("events", "lost", "dropped", "missed_events", "lost_user_stacks",
                                                   "lost_kernel_stacks", "sampled_seconds") if k in r["stats"]}
            for name, r in recs.items() if name in ("offcpu-stacks", "syscalls", "futex-waits", "block-io")}
    rep = subprocess.run([sys.executable, "-m", "profiler", "report", str(out), "--format", "json"],
                         capture_output=True, text=True, timeout=600)
    verdict: dict[str, object] = {}
    if rep.returncode == 0:
        v = json.loads(rep.stdout).get("verdict") or {}
        verdict = {"category": v.get("category"), "score": v.get("score"), "headline": v.get("headline"),
                   "evidence": [f"{e.get('metric')}={e.get('value')}" for e in (v.get("evidence") or [])][:5]}
    return {"status": m["status"], "backend_used": m["options"].get("backend_used"),
            "off_cpu_seconds": seconds_with(off_t, lo, hi), "syscall_seconds": seconds_with(sys_t, lo, hi),
            "lost": lost, "verdict": verdict}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", action="append", help="backends to capture with, in order (default: auto, perf)")
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--engine", default="MyISAM")
    ap.add_argument("--readers", type=int, default=32)
    ap.add_argument("--hold", type=float, default=0.3, help="seconds the writer holds the lock each time")
    ap.add_argument("--gap", type=float, default=0.02, help="seconds between its locks")
    ap.add_argument("--keep", type=Path, help="keep the bundles here (DIR/<backend>)")
    args = ap.parse_args(argv)
    backends = args.backend or ["auto", "perf"]
    with tempfile.TemporaryDirectory(prefix="profiler-tablelock-") as tmp:
        work = Path(tmp)
        with mariadb(work) as (server, sock):
            subprocess.run(sysbench_argv(sock, 1, 0, 1, 10000, "prepare") + [f"--mysql-storage-engine={args.engine}"],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
            total = (args.seconds + 10) * len(backends) + 10
            readers = subprocess.Popen(sysbench_argv(sock, args.readers, total, 1, 10000, "run"),
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            writer = subprocess.Popen([which("mariadb", "mysql"), f"--socket={sock}", "-uroot", "sbtest"],
                                      stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            stop = threading.Event()

            def feed() -> None:
                assert writer.stdin is not None
                while not stop.is_set():
                    try:
                        writer.stdin.write(WRITER.format(hold=args.hold, gap=args.gap).encode() * 4)
                        writer.stdin.flush()
                    except OSError:
                        return
                    time.sleep(2.0 * (args.hold + args.gap))

            threading.Thread(target=feed, daemon=True).start()
            try:
                time.sleep(5)
                print(f"table_lock: mariadbd pid {server.pid}; sessions waiting for the table lock now: "
                      f"{waiting_sessions(sock)} of {args.readers}", flush=True)
                for b in backends:
                    out = (args.keep / b) if args.keep else work / f"cap-{b}"
                    load = open("/proc/loadavg").read().split()[0]
                    t = time.monotonic()
                    r = subprocess.run([sys.executable, "-m", "profiler", "attach", "--backend", b, "--pid",
                                        str(server.pid), "-d", f"{args.seconds}s", "-o", str(out), "--force",
                                        "--no-report"], capture_output=True, text=True, timeout=900)
                    print(f"\n== --backend {b} (exit {r.returncode}, {time.monotonic() - t:.1f}s, load {load})")
                    if r.returncode not in (0, 6):
                        print(r.stderr[-1500:])
                        continue
                    print(json.dumps(evidence(out), indent=1))
                    if not args.keep:
                        shutil.rmtree(out, ignore_errors=True)
                print(f"\ntable_lock: sessions waiting for the table lock at the end: {waiting_sessions(sock)}")
            finally:
                stop.set()
                for p in (readers, writer):
                    if p.poll() is None:
                        p.kill()
                    p.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
