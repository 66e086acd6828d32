"""A stop signal after the capture ended (a second Ctrl-C while the summary or the report is
written) names the signal and the kept bundle, as a stop during the capture does."""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from profiler.bundle import Bundle
from profiler.capture.session import CaptureResult
from profiler.cli import _capture, _on_stop_signal
from profiler.errors import Interrupted

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "cpu-bound-stress-ng"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_the_summary_is_written_names_itself_and_the_bundle(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sig: int) -> None:
    out = tmp_path / "cap"
    shutil.copytree(SAMPLE, out)
    result = CaptureResult(manifest=Bundle.open(out).manifest, output=out)
    shown: list[str] = []

    def summary_then_signal(m: object, where: Path) -> None:
        shown.append(str(where))
        os.kill(os.getpid(), sig)  # the real signal, taken by the CLI's own handler
        time.sleep(5)  # the handler raises before this ends

    old = {s: signal.signal(s, _on_stop_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    monkeypatch.setattr(_capture, "show_summary", summary_then_signal)
    try:
        with pytest.raises(Interrupted) as err:
            _capture.finish(result, out, True, None)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    name = "Ctrl-C" if sig == signal.SIGINT else "SIGTERM"
    assert shown == [str(out)]
    assert err.value.signum == sig and err.value.exit_code == 128 + sig
    said = str(err.value)
    assert said.startswith(f"interrupted ({name}) after the capture"), said
    assert f"the bundle in {out}/ was kept" in said and f"profiler report {out}" in said, said
    assert not (out / "report.html").exists()  # the report never started
