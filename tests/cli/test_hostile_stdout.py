"""Standard output that cannot be written (issue 27): one line and exit 9, never exit 70.

`> /dev/full` (a full disk) and `>&-` (descriptor 1 closed by the shell) under every verb that
prints its result: stat and `heatmap --json` were exit 70 (OSError), `report` to a closed
stdout was exit 70 (AttributeError on None). A pipe closed early (`| head`) stays quiet, exit 0;
a verb that writes only files does not mind a closed stdout.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

SAMPLES = ROOT / "samples"
BUNDLE = str(SAMPLES / "perf" / "fio-fsync-and-python-locks")
PRINTING = {
    "stat": ["stat", str(SAMPLES / "perf-stat" / "table-perf61.txt")],
    "heatmap --json": ["heatmap", str(SAMPLES / "block" / "merges.txt"), "--json"],
    "report text": ["report", BUNDLE],
    "report md": ["report", BUNDLE, "--format", "md"],
    "flamegraph --folded": ["flamegraph", str(SAMPLES / "folded" / "tiny.folded"), "--folded"],
    "analyze --no-html": ["analyze", BUNDLE, "--no-html"],
}


def _run(args: list[str], redirect: str) -> subprocess.CompletedProcess[str]:
    cmd = " ".join(f"'{a}'" for a in [sys.executable, "-m", "profiler", *args])
    return subprocess.run(["sh", "-c", f"{cmd} {redirect}"], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("redirect", ["> /dev/full", ">&-"])
@pytest.mark.parametrize("verb", sorted(PRINTING))
def test_stdout_that_cannot_be_written_is_one_line_exit_9(verb: str, redirect: str) -> None:
    r = _run(PRINTING[verb], redirect)
    assert r.returncode == 9, r.stderr[-600:]
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("profiler: error:")]
    assert len(lines) == 1 and "standard output" in lines[0], r.stderr[-600:]
    assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr


def test_a_pipe_closed_early_is_quiet_and_a_closed_stdout_does_not_stop_a_file_output(tmp_path: Path) -> None:
    r = _run(["report", BUNDLE, "--format", "json"], "| head -c 10 > /dev/null; exit ${PIPESTATUS:-0}")
    assert "Traceback" not in r.stderr and "error" not in r.stderr, r.stderr[-600:]
    out = f"{tmp_path}/f.svg"
    r = _run(["flamegraph", str(SAMPLES / "folded" / "tiny.folded"), "-o", out], ">&-")
    assert r.returncode == 0, r.stderr[-600:]
