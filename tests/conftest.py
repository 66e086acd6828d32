"""Shared pytest fixtures: a guard against leftover child processes, every report checked against
the shipped JSON Schema, and helpers to run the CLI."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"  # its data/, golden/, workloads/ and helpers, whichever tier a test is in
SAMPLES = ROOT / "samples"


@pytest.fixture(autouse=True)
def reports_follow_the_schema(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[None]:
    """Every report a test makes (``Analysis.to_dict``: the JSON report, the HTML report's data)
    must validate against profiler/schemas/report.schema.json. Checked where it is made and again
    at the end of the test, so a caller that swallows errors (attach's report step) still fails;
    and the reports child processes wrote into the test's tmp_path are read back and checked."""
    from profiler.analyzers.analysis import Analysis

    from tests.report_schema import files_problems, problems

    original = Analysis.to_dict
    bad: list[str] = []

    def checked(self: Analysis) -> dict[str, Any]:
        out = original(self)
        found = problems(out)
        if found:
            bad.extend(f"{self.bundle}: {p}" for p in found)
            raise AssertionError("the report breaks the schema: " + "; ".join(found[:5]))
        return out

    monkeypatch.setattr(Analysis, "to_dict", checked)
    yield
    tmp = request.node.funcargs.get("tmp_path") if hasattr(request.node, "funcargs") else None
    if isinstance(tmp, Path) and tmp.is_dir():
        bad.extend(files_problems(tmp))
    if bad:
        pytest.fail("reports break profiler/schemas/report.schema.json:\n  " + "\n  ".join(bad[:20]))


@pytest.fixture(autouse=True)
def no_leftover_children() -> Iterator[None]:
    """Fail any test that leaves a child process of this test run behind."""
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    yield
    deadline = time.monotonic() + 3.0
    while True:
        left = [p for p in me.children(recursive=True) if p.pid not in before]
        left = [p for p in left if _alive(p)]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    if left:
        desc = ", ".join(f"{_name(p)} (pid {p.pid})" for p in left)
        for p in left:
            try:
                p.kill()
            except psutil.Error:
                pass
        pytest.fail(f"test left child processes behind: {desc}")


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _name(p: psutil.Process) -> str:
    try:
        return p.name()
    except psutil.Error:
        return "?"


def is_root() -> bool:
    return os.geteuid() == 0


def have_perf() -> bool:
    return shutil.which("perf") is not None


requires_root = pytest.mark.skipif(not is_root(), reason="needs root (CI runs as root)")
requires_perf = pytest.mark.skipif(not have_perf(), reason="perf is not installed")
TRACEFS = "/sys/kernel/tracing"
requires_tracefs = pytest.mark.skipif(not os.path.isdir(f"{TRACEFS}/instances"), reason="tracefs is not mounted")
# A module of real captures as root: ``pytestmark = LIVE_CAPTURE``
LIVE_CAPTURE = [pytest.mark.privileged, requires_root, requires_perf, requires_tracefs]
