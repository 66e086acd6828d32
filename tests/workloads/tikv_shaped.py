"""A TiKV-shaped process for tests: tikv-server's process name and pool thread names, one pool saturated.

Not TiKV: a real multi-threaded process whose threads are named as TiKV's are in /proc
(``grpc-server-N``, ``raftstore-0-N``, ``apply-N``, ``unified-read-po``, ``sched-worker-po``,
``rocksdb:lowN``), so the verdict's pool rules and TiKV knob mapping run on live data. The
``raftstore`` pool (one thread, as store-pool-size=1) hashes without pause (hashlib releases
the GIL, so it is real CPU); gRPC threads wait in epoll, apply threads tick lightly, the rest
wait on a condition that never comes, like idle workers.

    python tests/workloads/tikv_shaped.py --duration 60
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import hashlib
import os
import select
import threading
import time

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def name_thread(name: str) -> None:
    _libc.prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME


def busy(name: str, stop: threading.Event) -> None:
    name_thread(name)
    buf = os.urandom(1 << 20)
    while not stop.is_set():
        buf = hashlib.sha256(buf).digest() * (1 << 15)


def grpc(name: str, stop: threading.Event) -> None:
    name_thread(name)
    ep = select.epoll()
    while not stop.is_set():
        ep.poll(0.5)


def light(name: str, stop: threading.Event) -> None:
    name_thread(name)
    buf = os.urandom(1 << 16)
    while not stop.is_set():
        hashlib.sha256(buf).digest()
        time.sleep(0.005)


def idle(name: str, stop: threading.Event, cond: threading.Condition) -> None:
    name_thread(name)
    with cond:
        while not stop.is_set():
            cond.wait(0.5)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--raftstore", type=int, default=1)
    args = ap.parse_args()
    name_thread("tikv-server")
    stop = threading.Event()
    cond = threading.Condition()
    threads = [threading.Thread(target=busy, args=(f"raftstore-0-{i}", stop), daemon=True) for i in range(args.raftstore)]
    threads += [threading.Thread(target=grpc, args=(f"grpc-server-{i}", stop), daemon=True) for i in range(4)]
    threads += [threading.Thread(target=light, args=(f"apply-{i}", stop), daemon=True) for i in range(2)]
    threads += [threading.Thread(target=idle, args=(n, stop, cond), daemon=True)
                for n in ["unified-read-po"] * 4 + ["sched-worker-po"] * 2 + ["rocksdb:low0", "rocksdb:low1", "rocksdb:high0"]]
    for t in threads:
        t.start()
    print("ready", flush=True)
    try:
        time.sleep(args.duration)
    except KeyboardInterrupt:
        pass
    stop.set()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
