"""What a real `profiler` process costs: its exit code, output, CPU seconds and peak memory,
read back from the kernel (wait4's rusage), never estimated.

A small process in between starts the CLI: Linux carries the high-water mark of the memory a
process had at exec into its peak (``ru_maxrss``), so a CLI forked straight from the test
process would report the size of pytest itself (every case read 576-667 MB in a long run).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

# Runs the command with stdout and stderr to the files given, kills it after the timeout,
# and prints its exit code, CPU seconds, peak RSS (KB) and whether it timed out, as JSON.
_MEASURE = """
import json, os, subprocess, sys, threading
timeout, out, err = float(sys.argv[1]), sys.argv[2], sys.argv[3]
with open(out, "wb") as o, open(err, "wb") as e:
    proc = subprocess.Popen(sys.argv[4:], stdout=o, stderr=e, stdin=subprocess.DEVNULL)
late = []
timer = threading.Timer(timeout, lambda: (late.append(1), proc.kill()))
timer.start()
_, status, usage = os.wait4(proc.pid, 0)
timer.cancel()
print(json.dumps({"code": os.waitstatus_to_exitcode(status), "cpu": usage.ru_utime + usage.ru_stime,
                  "rss_kb": usage.ru_maxrss, "timed_out": bool(late)}))
"""


@dataclass(frozen=True)
class Measured:
    code: int
    stdout: str
    stderr: str
    cpu_s: float
    rss_mb: float
    timed_out: bool = False


def run_profiler(args: list[str], cwd: Path | None = None, timeout: float = 600,
                 env: dict[str, str] | None = None, hang_fails: bool = True) -> Measured:
    """``python -m profiler ARGS`` as a grandchild of the test, in ``cwd`` (the test process's
    by default), with ``env`` (the test's by default). A run that outlives ``timeout`` seconds
    is killed, so a runaway cannot hang the suite, and fails the test; with ``hang_fails=False``
    it is returned with ``timed_out`` set (the hostile round counts a hang as one of its rows)."""
    import pytest

    with tempfile.TemporaryDirectory(prefix="measured-") as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        proc = subprocess.run([sys.executable, "-c", _MEASURE, str(timeout), str(out), str(err),
                               sys.executable, "-m", "profiler", *args],
                              capture_output=True, text=True, timeout=timeout + 60, cwd=cwd, env=env)
        if proc.returncode != 0:
            pytest.fail(f"the measuring process failed: {proc.stderr[-2000:]}")
        result = json.loads(proc.stdout)
        if result["timed_out"] and hang_fails:
            pytest.fail(f"profiler {' '.join(args[:3])} did not end within {timeout:g} s")
        return Measured(result["code"], out.read_text(errors="replace"), err.read_text(errors="replace"),
                        result["cpu"], result["rss_kb"] / 1024, bool(result["timed_out"]))
