"""A small real workload for the bcc backend's end-to-end tests (test helper, not a test).

    python workload.py getppid N    wait for a line on stdin, make exactly N getppid calls,
                                    print "done", then wait for stdin to close
    python workload.py contend T S  T threads fight over one lock for S seconds, each holding it
                                    for ~0.2 ms with a sleep inside (futex waits), and doing
                                    small fdatasync'd writes to a temp file (block IO, D state)
    python workload.py sleepers T D S  T threads each sleeping D seconds at a time, for S seconds

Prints "ready <pid>" once it is set up, so the test can attach before the work starts.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time


def getppid(n: int) -> None:
    print(f"ready {os.getpid()}", flush=True)
    sys.stdin.readline()
    for _ in range(n):
        os.getppid()
    print("done", flush=True)
    sys.stdin.read()


def contend(threads: int, seconds: float) -> None:
    lock = threading.Lock()
    stop = threading.Event()
    fd, path = tempfile.mkstemp(prefix="profiler-bcc-workload-", dir="/var/tmp")
    os.unlink(path)  # the open fd keeps it; nothing is left behind if the test kills us
    print(f"ready {os.getpid()}", flush=True)

    def worker(i: int) -> None:
        buf = os.urandom(4096)
        n = 0
        while not stop.is_set():
            with lock:
                time.sleep(0.0002)
                os.getppid()
            if i == 0 and n % 5 == 0:
                os.pwrite(fd, buf, (n % 256) * 4096)
                os.fdatasync(fd)
            n += 1

    ts = [threading.Thread(target=worker, args=(i,), name=f"worker-{i}") for i in range(threads)]
    for t in ts:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in ts:
        t.join()
    os.close(fd)
    print("done", flush=True)


def sleepers(threads: int, each: float, seconds: float) -> None:
    stop = threading.Event()
    print(f"ready {os.getpid()}", flush=True)

    def worker() -> None:
        while not stop.is_set():
            time.sleep(each)

    ts = [threading.Thread(target=worker, name=f"sleeper-{i}") for i in range(threads)]
    for t in ts:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in ts:
        t.join()
    print("done", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "getppid":
        getppid(int(sys.argv[2]))
    elif sys.argv[1] == "sleepers":
        sleepers(int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]))
    else:
        contend(int(sys.argv[2]), float(sys.argv[3]))
