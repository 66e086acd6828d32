"""perf stat -I -x, parsing on real output (samples/perf-stat/) and on each documented line variant."""

from __future__ import annotations

import pytest
from profiler.analyzers.series import perfstat

from tests.conftest import SAMPLES


def test_real_interval_output_with_unsupported_counters() -> None:
    lines = (SAMPLES / "perf-stat" / "interval-hw-not-supported.csv").read_text().splitlines()
    ps = perfstat.parse(lines)
    assert ps.unsupported == ["cache-misses", "cycles", "instructions"]
    t, v = ps.events["task-clock"]
    assert len(t) >= 2 and all(x > 0 for x in v)
    assert ps.units["task-clock"] == "msec"
    assert ps.rate("context-switches") is not None and ps.rate("context-switches") > 0
    assert ps.bad_lines == 0


def test_line_variants() -> None:
    lines = [
        "# started on Sat Nov 21 06:29:18 2026",
        "",
        "     1.001,<not counted>,msec,task-clock,0,100.00,,",
        "     1.001,<not supported>,,cycles,0,100.00,,",
        "     2.002,500.0,msec,task-clock,500000000,100.00,0.500,CPUs utilized",
        "     2.002,CPU0,10,,context-switches,1,100.00,,",  # per-cpu column
        "     2.002,CPU1,15,,context-switches,1,100.00,,",
        "garbage",
    ]
    ps = perfstat.parse(lines)
    assert ps.not_counted == {"task-clock": 1}
    assert ps.unsupported == ["cycles"]
    assert list(ps.events["task-clock"][1]) == [0.0, 500.0]
    assert list(ps.events["context-switches"][1]) == [25.0]
    assert ps.bad_lines == 1
    assert ps.total("task-clock") == pytest.approx(500.0)
