"""The off-CPU collector's change to kernel.task_delayacct is undone, whatever happens."""

from __future__ import annotations

from pathlib import Path

from profiler.collectors.base import CaptureContext, CaptureOptions, Target
from profiler.collectors.perf.offcpu import OffCpuCollector

from profiler.bundle import BundleWriter, Manifest


def _ctx(tmp_path: Path) -> CaptureContext:
    return CaptureContext(writer=BundleWriter(tmp_path / "cap", Manifest()),
                          targets=[Target(pid=1, comm="init")], options=CaptureOptions())


def test_delayacct_turned_on_for_the_capture_and_put_back(tmp_path: Path) -> None:
    knob = tmp_path / "task_delayacct"
    knob.write_text("0\n")
    col = OffCpuCollector(delayacct_path=str(knob))
    ctx = _ctx(tmp_path)
    col.prepare(ctx)
    assert knob.read_text().strip() == "1"
    assert col.rec.stats["task_delayacct"] == "turned on for the capture"
    col.cleanup(ctx)
    assert knob.read_text().strip() == "0"
    col.cleanup(ctx)  # twice is harmless
    assert knob.read_text().strip() == "0"


def test_delayacct_already_on_is_left_alone(tmp_path: Path) -> None:
    knob = tmp_path / "task_delayacct"
    knob.write_text("1\n")
    col = OffCpuCollector(delayacct_path=str(knob))
    ctx = _ctx(tmp_path)
    col.prepare(ctx)
    col.cleanup(ctx)
    assert knob.read_text().strip() == "1" and col.rec.stats["task_delayacct"] == "already on"


def test_delayacct_missing_knob_is_not_an_error(tmp_path: Path) -> None:
    col = OffCpuCollector(delayacct_path=str(tmp_path / "absent"))
    ctx = _ctx(tmp_path)
    col.prepare(ctx)
    col.cleanup(ctx)
    assert "task_delayacct" not in col.rec.stats
