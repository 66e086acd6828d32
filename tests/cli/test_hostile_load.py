"""A load that prints without end (issue 27): its output is streamed into the bundle with flat memory.

`profiler run` copies the load's output into load.log a read at a time and writes each line's
arrival time to load.times.csv.gz as it comes (it kept a tuple per line: 10M lines took 2.6 GB);
the analysis keeps the times of the report lines only. Peak memory is measured on child
processes (wait4), never by timing.
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from profiler.bundle import Bundle, members
from tests.measure import run_profiler


@pytest.fixture
def target() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield proc
    proc.kill()
    proc.wait()


def _rss(args: list[str], timeout: float = 600) -> tuple[int, float]:
    """Exit code and peak RSS (MB) of the CLI, measured by tests/measure.py."""
    code, rss, _err = rss_and_err(args, timeout)
    return code, rss


def rss_and_err(args: list[str], timeout: float = 600) -> tuple[int, float, str]:
    m = run_profiler(args, timeout=timeout)
    return m.code, m.rss_mb, m.stderr


LINES = 1_500_000
LOAD = ("import sys\nw = sys.stdout.write\n"
        f"for i in range({LINES}):\n"
        "    w(f'[ {i}s ] thds: 4 tps: 100.00 qps: 2000.00 lat (ms,95%): 5.00\\n' if i % 100000 == 0 else f'row {i}\\n')\n")


def test_a_load_printing_millions_of_lines_is_copied_with_flat_memory(tmp_path: Path,
                                                                     target: subprocess.Popen[bytes]) -> None:
    out = tmp_path / "cap"
    code, rss = _rss(["run", "--pid", str(target.pid), "--collector", "procfs", "-o", str(out), "--no-report", "--",
                      sys.executable, "-c", LOAD])
    assert code == 0 and rss < 150, rss  # a tuple a line kept ~550 MB for 2M lines
    b = Bundle.open(out)
    assert b.manifest.load is not None and b.manifest.load.times == members.LOAD_TIMES
    with open(out / members.LOAD_LOG, "rb") as fh:
        assert sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b"")) == LINES
    with gzip.open(out / members.LOAD_TIMES, "rb") as fh:
        header = fh.readline()
        rows = sum(1 for _ in fh)
    assert header == b"line,t\n" and rows == LINES  # one time per line, none lost
    # the analysis keeps only the report lines' times: flat memory however long the log
    code, rss = _rss(["analyze", str(out), "--no-html"])
    assert code == 0 and rss < 300, rss


def test_a_load_log_written_faster_than_it_is_read_does_not_hold_the_capture(tmp_path: Path,
                                                                              target: subprocess.Popen[bytes]) -> None:
    """attach --load-log on a file a writer fills as fast as it can: what it held at the start is
    copied, the rest followed; the capture starts and ends on time, memory flat (a regression
    guard: the copy of what the file held stops at its size when the capture started)."""
    log = tmp_path / "load.log"
    log.write_bytes(b"[ 1s ] thds: 4 tps: 100.00 qps: 2000.00 lat (ms,95%): 5.00\n" * 100_000)
    with open(log, "ab") as fh:  # as fast as it can, but bounded: 64 MiB (an unbounded yes fills a disk in seconds)
        writer = subprocess.Popen(["sh", "-c", "yes 'a line of a load that never stops' | head -c 64M"], stdout=fh)
    try:
        t0 = time.monotonic()
        code, rss = _rss(["attach", "--pid", str(target.pid), "--collector", "procfs", "-d", "2s", "-o",
                          str(tmp_path / "cap"), "--no-report", "--load-log", str(log)], timeout=50)
        took = time.monotonic() - t0
    finally:
        writer.kill()
        writer.wait()
    assert code == 0 and rss < 150 and took < 40, (code, rss, took)
    m = Bundle.open(tmp_path / "cap").manifest
    assert m.load is not None and (tmp_path / "cap" / members.LOAD_LOG).stat().st_size >= 100_000 * 60


@pytest.mark.parametrize("what", ["fifo", "/dev/zero", "directory"])
def test_a_load_log_that_is_no_file_is_one_line(tmp_path: Path, target: subprocess.Popen[bytes],
                                                capsys: pytest.CaptureFixture[str], what: str) -> None:
    from profiler.cli import main
    from tests.cli.test_hostile import one_error_line

    log = {"fifo": tmp_path / "fifo", "/dev/zero": Path("/dev/zero"), "directory": tmp_path}[what]
    if what == "fifo":
        os.mkfifo(log)
    code = main(["attach", "--pid", str(target.pid), "-d", "1s", "-o", str(tmp_path / "cap"), "--no-report",
                 "--load-log", str(log)])
    assert code == 7 and "regular file" in one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "cap").exists()
