"""Run the bcc collectors against one pid into a bundle, as the capture session would (test helper).

    python driver.py PID OUT SECONDS [COLLECTOR ...]

Prints "attached" once every collector has started; Ctrl-C (SIGINT) stops early and marks
the bundle partial; exit code 0, or 130 after SIGINT. Used by the no-leftover tests to kill
a real capturing process at a chosen moment.
"""

from __future__ import annotations

import signal
import sys
import threading

from profiler.collectors.base import CaptureContext, CaptureOptions
from profiler.collectors.bcc.blockio import BccBlockIO
from profiler.collectors.bcc.futex import BccFutex
from profiler.collectors.bcc.offcpu import BccOffCpu
from profiler.collectors.bcc.syscalls import BccSyscalls

from profiler.bundle import OK, PARTIAL, BundleWriter, ClockInfo, Manifest
from profiler.capture.targets import target_from_pid

ALL = {"block-io": BccBlockIO, "syscalls": BccSyscalls, "offcpu-stacks": BccOffCpu, "futex-waits": BccFutex}


def main(argv: list[str]) -> int:
    pid, out, seconds = int(argv[0]), argv[1], float(argv[2])
    names = argv[3:] or list(ALL)
    stop = threading.Event()
    interrupted = []

    def on_sigint(signum: int, frame: object) -> None:
        interrupted.append(signum)
        stop.set()

    signal.signal(signal.SIGINT, on_sigint)
    writer = BundleWriter(out, Manifest(clock=ClockInfo.now(), duration=seconds))
    ctx = CaptureContext(writer=writer, targets=[target_from_pid(pid)], options=CaptureOptions(interval=0.5))
    collectors = [ALL[n]() for n in names]
    for c in collectors:
        c.start(ctx)
    for c in collectors:
        c.wait_attached(60)
    print("attached", flush=True)
    stop.wait(seconds)
    for c in collectors:
        c.stop(ctx)
    writer.finish(PARTIAL if interrupted else OK, "interrupted (Ctrl-C)" if interrupted else None)
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
