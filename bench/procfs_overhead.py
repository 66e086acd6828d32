"""Benchmark: the procfs sampler's own cost, in % of one core, on a 100-thread process.

Starts a real 100-thread process (Python threads that sleep and wake, like an idle pool),
samples it at 20 Hz for a fixed window several times, and prints the sampler thread's CPU
time as a share of one core, plus bytes written per second. The machine is shared: the
median of the runs is what to read.

    .venv/bin/python bench/procfs_overhead.py [--threads 100] [--hz 20] [--seconds 10] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from profiler.collectors.procfs.sampler import Sampler

WORKER = """
import threading, time, sys
n = int(sys.argv[1])
def work(i):
    while True:
        time.sleep(0.01 + (i % 7) * 0.003)
for i in range(n):
    threading.Thread(target=work, args=(i,), daemon=True).start()
print("ready", flush=True)
time.sleep(3600)
"""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=100)
    ap.add_argument("--hz", type=float, default=20.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    proc = subprocess.Popen([sys.executable, "-c", WORKER, str(args.threads)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        pcts, rates = [], []
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory() as tmp:
                import gzip

                path = os.path.join(tmp, "proc.jsonl.gz")
                with gzip.open(path, "wb", compresslevel=6) as out:
                    s = Sampler([proc.pid], out, hz=args.hz)
                    s.write_host()
                    th = threading.Thread(target=s.run)
                    th.start()
                    time.sleep(args.seconds)
                    s.stop_event.set()
                    th.join()
                st = s.stats()
                pcts.append(st["overhead_pct_core"])
                rates.append(os.path.getsize(path) / args.seconds)
                print(f"run: {st['max_threads']} threads, {st['ticks']} ticks ({st['late_ticks']} late), "
                      f"{st['overhead_pct_core']:.2f}% of one core, {os.path.getsize(path) / args.seconds / 1024:.1f} KiB/s gz")
        print(f"median: {statistics.median(pcts):.2f}% of one core at {args.hz:g} Hz on {args.threads} threads; "
              f"{statistics.median(rates) / 1024:.1f} KiB/s written (shared machine)")
    finally:
        proc.kill()
        proc.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
