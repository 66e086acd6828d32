"""A stop signal outside the capture loop (issue 27): whatever code it lands in, it is the signal.

Ctrl-C, SIGTERM and SIGHUP during the analysis, an import or typer's own handling end the verb
with 128 + the signal's number and one line. Tolerant code (`except Exception` around one
artifact, so a broken member cannot sink the report) once took the signal for a broken
artifact and wrote the report anyway (exit 0); a signal landing in a class body came out as
RuntimeError, exit 70; typer turned a SIGTERM into exit 130.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from profiler.analyzers import analysis

from tests.cli.test_hostile import bundle, run


def _signal_self(sig: int) -> None:
    os.kill(os.getpid(), sig)
    time.sleep(1)  # the handler runs at the next bytecode
    raise AssertionError("the signal was not delivered")


def _in_a_class_body(sig: int) -> None:
    class Sends:
        def __set_name__(self, owner: type, name: str) -> None:
            _signal_self(sig)

    type("Owner", (), {"x": Sends()})  # Python 3.11 wraps what __set_name__ raises in RuntimeError


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
@pytest.mark.parametrize("where", ["tolerant", "class body"])
def test_a_signal_during_the_analysis_is_its_exit_code_not_a_broken_artifact(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, sig: int,
        where: str) -> None:
    cap = bundle(tmp_path)
    hit = _signal_self if where == "tolerant" else _in_a_class_body

    def build(_v: Any) -> None:
        hit(sig)

    name, member, collector, _ = analysis._BUILDERS[0]
    monkeypatch.setattr(analysis, "_BUILDERS", ((name, member, collector, build), *analysis._BUILDERS[1:]))
    old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        code, _out, err = run(capsys, "analyze", str(cap))
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    assert code == 128 + sig, err
    assert len([ln for ln in err.splitlines() if ln.startswith("profiler:")]) == 1, err
    if where == "tolerant":  # the analysis stops where the signal landed
        assert not (cap / "report.html").exists()
