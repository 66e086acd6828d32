"""`profiler stat`: a saved perf stat output (its table, old and new, or -x, CSV with or without -I)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from profiler.cli import main
from profiler.inputs import COUNTERS, detect, perfstat
from tests.conftest import SAMPLES

STAT = SAMPLES / "perf-stat"


@pytest.mark.parametrize("name,fmt", [("table-perf61.txt", perfstat.TABLE), ("table-field-report.txt", perfstat.TABLE),
                                      ("csv-no-interval.csv", perfstat.CSV), ("interval-hw-not-supported.csv", perfstat.CSV)])
def test_each_form_is_sniffed(name: str, fmt: object) -> None:
    assert detect(str(STAT / name), COUNTERS).format is fmt


def test_the_field_reports_table() -> None:
    src = detect(str(STAT / "table-field-report.txt"), COUNTERS)
    out = perfstat.read_source(src)
    assert out.elapsed == pytest.approx(570.655272624)
    tc = out.get("task-clock")
    assert tc is not None and tc.value == pytest.approx(101551.465078) and tc.unit == "msec"
    cs = out.get("context-switches")
    assert cs is not None and cs.value == 1_057_588
    assert [c.event for c in out.counters if c.status == "not supported"] == [
        "cycles", "stalled-cycles-frontend", "stalled-cycles-backend", "instructions", "branches", "branch-misses"]


def test_perf61_table_and_csv() -> None:
    out = perfstat.read_source(detect(str(STAT / "table-perf61.txt"), COUNTERS))
    assert out.target.startswith("process id") and out.elapsed is not None
    assert out.get("task-clock").unit == "msec" and out.get("major-faults").value == 2  # type: ignore[union-attr]
    csv = perfstat.read_source(detect(str(STAT / "csv-no-interval.csv"), COUNTERS))
    assert csv.intervals == 0 and csv.get("task-clock").value == pytest.approx(218.61)  # type: ignore[union-attr]
    iv = perfstat.read_source(detect(str(STAT / "interval-hw-not-supported.csv"), COUNTERS))
    rows = [ln.split(",") for ln in (STAT / "interval-hw-not-supported.csv").read_text().splitlines()
            if ",context-switches," in ln and "<" not in ln]
    assert iv.intervals > 1 and iv.get("context-switches").value == sum(float(r[1]) for r in rows)  # type: ignore[union-attr]


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stat", str(STAT / "table-field-report.txt")]) == 0
    out = capsys.readouterr().out
    assert "0.178 CPUs used on average" in out and "1,853 context switches per second: high" in out
    assert "6 counters not supported here" in out
    gz = tmp_path / "s.txt.gz"
    gz.write_bytes(gzip.compress((STAT / "table-perf61.txt").read_bytes()))
    assert main(["stat", str(gz), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["format"] == "perf stat table" and "cycles" in doc["not_supported"]
    assert main(["stat", str(SAMPLES / "README.md")]) == 7  # not a perf stat output: one line, exit 7
    assert "is not" in capsys.readouterr().err
