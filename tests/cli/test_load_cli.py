"""The load's CLI: one-line errors with their exit codes before anything runs (sweep, attach
--load-log/--load-start), and --load-start's forms."""

from __future__ import annotations

from pathlib import Path

import pytest

from profiler.capture.loadlog import parse_load_start
from profiler.cli import main


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("profiler: error: "), err
    return err[-1]


def test_sweep_needs_its_placeholder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "sw")
    assert main(["sweep", "--threads", "1,2", "--pid", "1", "-o", out, "--", "sysbench", "run"]) == 2
    assert "no {threads} placeholder" in _error(capsys)
    assert main(["sweep", "--param", "conc", "--threads", "1,2", "--pid", "1", "-o", out, "--",
                 "go-ycsb", "--threads", "{threads}"]) == 2
    assert "pass --param threads" in _error(capsys)
    assert not (tmp_path / "sw").exists()  # refused before anything ran


@pytest.mark.parametrize(("values", "why"), [("1,2,1", "lists a value twice"), (",", "wants a list of values"),
                                             ("1,$(reboot)", "use numbers or simple words")])
def test_sweep_values(values: str, why: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "--threads", values, "--pid", "1", "-o", str(tmp_path / "sw"), "--",
                 "sysbench", "--threads={threads}", "run"]) == 2
    assert why in _error(capsys)


def test_sweep_refuses_a_non_empty_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    assert main(["sweep", "--threads", "1,2", "--pid", "1", "-o", str(tmp_path), "--",
                 "sysbench", "--threads={threads}", "run"]) == 8
    assert "--force" in _error(capsys)
    assert main(["sweep", "--threads", "1,2", "--param", "not-a-name", "--pid", "1", "-o", str(tmp_path / "x"), "--",
                 "sysbench", "run"]) == 2


def test_attach_load_log_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "cap")
    assert main(["attach", "--pid", "1", "--load-log", str(tmp_path / "missing.log"), "-o", out]) == 7
    assert "no such file" in _error(capsys)
    assert main(["attach", "--pid", "1", "--load-start", "-5s", "-o", out]) == 2
    assert "--load-start goes with --load-log" in _error(capsys)
    log = tmp_path / "sb.log"
    log.write_text("")
    assert main(["attach", "--pid", "1", "--load-log", str(log), "--load-start", "yesterday", "-o", out]) == 2
    assert "cannot read --load-start 'yesterday'" in _error(capsys)
    assert not (tmp_path / "cap").exists()


def test_load_start_forms() -> None:
    wall, mono = 1795490500.0, 5000.0  # now, on both clocks
    assert parse_load_start("-30s", wall, mono).offset == -30.0  # type: ignore[union-attr]
    assert parse_load_start("+2m", wall, mono).offset == 120.0  # type: ignore[union-attr]
    assert parse_load_start("mono:123.5", wall, mono).monotonic == 123.5  # type: ignore[union-attr]
    assert parse_load_start("@1795490424.5", wall, mono).monotonic == pytest.approx(4924.5)  # type: ignore[union-attr]
    # an ISO time with an offset is absolute: 1795490424.5 is 2026-11-24T03:20:24.5Z
    iso = parse_load_start("2026-11-24T11:20:24.5+08:00", wall, mono)
    assert iso is not None and iso.monotonic == pytest.approx(4924.5)
    local = parse_load_start("2026-11-24 03:20:24.5", wall, mono)
    assert local is not None and local.monotonic is not None and local.text == "2026-11-24 03:20:24.5"
    assert parse_load_start(None) is None
    for bad in ("mono:x", "@x", "25:00", "soon"):
        with pytest.raises(Exception, match="load-start"):
            parse_load_start(bad)
