"""Inputs users have (issue 19): native biosnoop output (with and without -Q), a bcc bundle in
`heatmap`, a gzipped perf.data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from profiler.cli import main
from profiler.inputs import biosnoop, detect
from profiler.usecases.heatmap import LATENCY_READERS
from tests.conftest import SAMPLES, requires_perf

BIOSNOOP = SAMPLES / "biosnoop"


def test_biosnoop_is_sniffed_and_read_by_its_header() -> None:
    for name, queued in (("biosnoop.txt", False), ("biosnoop-Q.txt", True)):
        src = detect(str(BIOSNOOP / name), tuple(LATENCY_READERS))
        assert src.format is biosnoop.FORMAT
        b = biosnoop.read_source(src)
        assert len(b.t) == 1000 and b.skipped_lines == 0
        assert (b.queue is not None) == queued
        assert set(b.op) <= {"R", "W"} and b.op.count("W") > 500 and set(b.disk) == {"vda"} and "fio" in b.comm
        assert 0 < float(b.lat.min()) and float(b.lat.max()) < 1.0  # seconds
    lines = (BIOSNOOP / "biosnoop.txt").read_text().splitlines()
    first = lines[1].split()
    b = biosnoop.parse_biosnoop(lines[:2])
    assert b.t[0] == float(first[0]) and b.lat[0] == pytest.approx(float(first[-1]) / 1000)


def test_biosnoop_odd_lines() -> None:
    text = [
        "Tracing block device I/O... Hit Ctrl-C to end.",
        "TIME(s)     COMM           PID     DISK      T SECTOR     BYTES   LAT(ms)",
        "0.000000    Web Content    4242    nvme0n1   R 123456     4096       1.25",
        "0.001000    PID 7 is odd   7       sda       W 8          512        0.50",
        "0.0020",  # a cut last line
    ]
    b = biosnoop.parse_biosnoop(text)
    assert b.comm == ["Web Content", "PID 7 is odd"] and b.disk == ["nvme0n1", "sda"] and list(b.pid) == [4242, 7]
    assert b.skipped_lines == 2
    newer = ["TIME(s)     PID    COMM           DISK      T SECTOR     BYTES   LAT(ms)",
             "1.500000    99     kworker/u4:2   vda       W 100        8192       2.00"]
    b = biosnoop.parse_biosnoop(newer)
    assert b.comm == ["kworker/u4:2"] and list(b.pid) == [99] and b.t[0] == 1.5


@pytest.mark.parametrize("by", ["none", "op", "device", "comm"])
def test_heatmap_of_biosnoop(by: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "io.json"
    assert main(["heatmap", str(BIOSNOOP / "biosnoop-Q.txt"), "--by", by, "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["source"] == "biosnoop" and doc["totals"]["ios"] == 1000
    assert sum(sum(map(sum, p["counts"])) + p["above_max"] + p["below_min"] + p["after_max_col"]
               for p in doc["panels"]) == 1000
    assert main(["heatmap", str(BIOSNOOP / "biosnoop.txt"), "-o", str(tmp_path / "io.svg")]) == 0
    assert (tmp_path / "io.svg").read_text().startswith("<?xml") or "<svg" in (tmp_path / "io.svg").read_text()[:500]


def test_heatmap_of_biosnoop_refuses_issuer(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["heatmap", str(BIOSNOOP / "biosnoop.txt"), "--by", "issuer", "--json"]) == 2
    assert "--by issuer needs a capture bundle" in capsys.readouterr().err


@pytest.mark.parametrize("sample", ["io-fsync-fio", "lock-contend-python"])
def test_heatmap_of_a_bcc_bundle(sample: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "io.svg"
    assert main(["heatmap", str(SAMPLES / "bcc" / sample), "-o", str(out)]) == 0
    assert "bcc histograms" in out.read_text()
    assert main(["heatmap", str(SAMPLES / "bcc" / sample), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["source"] == "bcc histograms" and doc["totals"]["ios"] > 0


@requires_perf
def test_flamegraph_and_heatmap_of_a_gzipped_perf_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gz = SAMPLES / "block" / "loop-fio.perf.data.gz"
    assert main(["heatmap", str(gz), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["totals"]["paired"] == 1302  # the same IOs as the plain file (samples/block/loop-fio.perf.golden.json)
