"""The software counters' sampling thread on a full disk: the error is kept for the record, not raised in the thread."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from profiler.collectors.perf.perf_stat import KernelCounters


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this host")
def test_a_full_disk_ends_the_counting_with_a_reason(tmp_path: Path) -> None:
    raised: list[BaseException] = []
    old_hook = threading.excepthook
    threading.excepthook = lambda args: raised.append(args.exc_value)  # type: ignore[assignment]
    try:
        c = KernelCounters([os.getpid()], Path("/dev/full"), interval=0.01)
        t = threading.Thread(target=c.run, args=(time.monotonic(),))
        t.start()
        t.join(timeout=5)
    finally:
        threading.excepthook = old_hook
    assert not t.is_alive()
    assert raised == []
    assert c.errors and "No space left on device" in c.errors[0]
