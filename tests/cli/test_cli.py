"""CLI in-process: help with examples, one-line errors with distinct exit codes, no tracebacks."""

from __future__ import annotations

from pathlib import Path

import pytest

from profiler.bundle import VERSION
from profiler.cli import main

VERBS = ["doctor", "attach", "run", "analyze", "report", "flamegraph", "heatmap", "diff", "demo"]


def test_top_help_lists_every_verb(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for verb in VERBS:
        assert verb in out


@pytest.mark.parametrize("verb", VERBS)
def test_each_verb_has_examples(verb: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([verb, "--help"]) == 0
    out = capsys.readouterr().out
    assert "Examples" in out and f"profiler {verb}" in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("profiler ")


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("profiler: error: ")
    return err


def test_unknown_target_is_exit_3(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--pid", "no-such-process-xyz"]) == 3
    assert "no running process matches" in _one_line_error(capsys)


@pytest.mark.parametrize("pid", ["0", "-1", "4294967296"])
def test_bad_pid_is_exit_3(pid: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--pid", pid]) == 3
    _one_line_error(capsys)


def test_missing_bundle_is_exit_4(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path / "nope")]) == 4
    assert "no capture bundle" in _one_line_error(capsys)


def test_bundle_escaping_paths_is_exit_4(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "manifest.json").write_text(
        '{"schema": "profiler.bundle", "version": 1, "collectors": [{"name": "x", "files": ["../../etc/passwd"]}]}'
    )
    assert main(["report", str(tmp_path)]) == 4
    assert "outside the bundle" in _one_line_error(capsys)


def test_newer_bundle_is_exit_4(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "manifest.json").write_text(f'{{"schema": "profiler.bundle", "version": {VERSION + 1}}}')
    assert main(["report", str(tmp_path)]) == 4
    assert "newer profiler" in _one_line_error(capsys)


def test_unknown_report_format_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path), "--format", "pdf"]) == 2
    assert "unknown format" in _one_line_error(capsys)
