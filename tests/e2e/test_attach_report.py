"""End to end: `profiler attach` on a real process ends with the verdict and BUNDLE/report.html."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from profiler.cli import main
from tests.conftest import have_perf, is_root

pytestmark = [pytest.mark.privileged, pytest.mark.slow,
              pytest.mark.skipif(not (is_root() and have_perf()), reason="needs root and perf (CI has both)")]

LOCKS = r"""
import threading, time, ctypes, ctypes.util, sys
libc = ctypes.CDLL(ctypes.util.find_library("c"))
lock = threading.Lock()
def work(i):
    libc.prctl(15, f"locker-{i}".encode(), 0, 0, 0)
    end = time.monotonic() + float(sys.argv[1])
    while time.monotonic() < end:
        with lock:
            time.sleep(0.002)
ts = [threading.Thread(target=work, args=(i,)) for i in range(6)]
for t in ts: t.start()
print("ready", flush=True)
for t in ts: t.join()
"""


def test_attach_writes_the_report_and_prints_the_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    proc = subprocess.Popen([sys.executable, "-c", LOCKS, "30"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        time.sleep(0.5)
        out = tmp_path / "cap"
        rc = main(["attach", "--pid", str(proc.pid), "--duration", "4s", "-o", str(out)])
    finally:
        proc.kill()
        proc.wait()
    assert rc == 0
    text = capsys.readouterr().out
    assert "verdict: LOCK CONTENTION" in text, text
    html = (out / "report.html").read_text()
    assert "Lock contention" in html and "locker" in html
    assert main(["report", str(out), "--format", "json"]) == 0
