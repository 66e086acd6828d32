"""The demo workload (demo layer, a standalone script): a multi-threaded process with named thread pools and a known mix of waits.

Pools (thread names as /proc shows them, like a database server's):

- ``demo-cpu-N``: hash 1 MiB buffers (hashlib drops the GIL for large buffers, so these burn
  real CPU in parallel, in libcrypto);
- ``demo-io-N``: write 256 KiB and fsync, in a loop (blocked in D state on block IO);
- ``demo-lock-N``: take one shared lock and hold it for a few milliseconds (the others wait in
  futex: lock contention);
- ``demo-idle-N``: wait on a condition that is never signalled (idle workers, as in real pools).

Run: ``python -m profiler.demo.workload --duration 20 --dir /tmp/x``. It stops by itself after
``--duration`` seconds, on SIGTERM or SIGINT, and removes its files.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import hashlib
import os
import shutil
import signal
import tempfile
import threading
import time

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
PR_SET_NAME = 15


def name_thread(name: str) -> None:
    """Set the OS thread name (what /proc/TID/comm and perf show)."""
    _libc.prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)


def cpu_worker(stop: threading.Event) -> None:
    buf = os.urandom(1 << 20)
    while not stop.is_set():
        for _ in range(8):
            buf = hashlib.sha256(buf).digest() * (1 << 15)


def io_worker(stop: threading.Event, path: str) -> None:
    block = os.urandom(256 << 10)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        n = 0
        while not stop.is_set():
            os.pwrite(fd, block, (n % 64) * len(block))
            os.fsync(fd)
            n += 1
    finally:
        os.close(fd)


def lock_worker(stop: threading.Event, lock: threading.Lock) -> None:
    while not stop.is_set():
        with lock:
            time.sleep(0.004)  # hold the lock: the other lock workers queue behind it
        time.sleep(0.0005)


def idle_worker(stop: threading.Event) -> None:
    cond = threading.Condition()
    with cond:
        while not stop.is_set():
            cond.wait(0.5)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=60.0, help="seconds before stopping by itself")
    ap.add_argument("--dir", default=None, help="directory for the IO workers' files")
    ap.add_argument("--cpu", type=int, default=2)
    ap.add_argument("--io", type=int, default=2)
    ap.add_argument("--lock", type=int, default=4)
    ap.add_argument("--idle", type=int, default=2)
    args = ap.parse_args(argv)

    name_thread("demo-main")
    workdir = args.dir or tempfile.mkdtemp(prefix="profiler-demo-")
    own_dir = args.dir is None
    os.makedirs(workdir, exist_ok=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    lock = threading.Lock()

    def spawn(pool: str, i: int, fn, *fargs) -> threading.Thread:  # type: ignore[no-untyped-def]
        def run() -> None:
            name_thread(f"{pool}-{i}")
            fn(stop, *fargs)

        t = threading.Thread(target=run, name=f"{pool}-{i}", daemon=True)
        t.start()
        return t

    threads = []
    threads += [spawn("demo-cpu", i, cpu_worker) for i in range(args.cpu)]
    threads += [spawn("demo-io", i, io_worker, os.path.join(workdir, f"io-{i}.dat")) for i in range(args.io)]
    threads += [spawn("demo-lock", i, lock_worker, lock) for i in range(args.lock)]
    threads += [spawn("demo-idle", i, idle_worker) for i in range(args.idle)]
    print(f"demo workload pid {os.getpid()}: {len(threads)} threads, files in {workdir}", flush=True)
    try:
        stop.wait(args.duration)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=2)
        for i in range(args.io):
            try:
                os.unlink(os.path.join(workdir, f"io-{i}.dat"))
            except OSError:
                pass
        if own_dir:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
