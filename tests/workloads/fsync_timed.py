"""Writers that time their own fsyncs (test workload).

Each of ``--threads`` threads loops: compute for ``--spin`` seconds, write 4 KiB to its own file
and fsync. After each fsync it appends ``<CLOCK_MONOTONIC> <cumulative seconds inside fsync>`` to
``--log`` with its thread number appended (``LOG.0``, ``LOG.1``...): the workload's own account of
its IO wait, to check delay accounting against (tests/e2e/test_verdict_blkio.py).
"""

from __future__ import annotations

import argparse
import os
import threading
import time


def writer(path: str, log_path: str, spin: float, end: float) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    inside = 0.0
    with open(log_path, "a", buffering=1) as log:
        while time.monotonic() < end:
            stop = time.monotonic() + spin
            while time.monotonic() < stop:
                pass
            t0 = time.monotonic()
            os.write(fd, b"x" * 4096)
            os.fsync(fd)
            t1 = time.monotonic()
            inside += t1 - t0
            log.write(f"{t1:.6f} {inside:.6f}\n")
    os.close(fd)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--file", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--spin", type=float, default=0.05)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--duration", type=float, default=60.0)
    a = ap.parse_args()
    end = time.monotonic() + a.duration
    ts = [threading.Thread(target=writer, args=(f"{a.file}.{i}", f"{a.log}.{i}", a.spin, end))
          for i in range(a.threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


if __name__ == "__main__":
    main()
