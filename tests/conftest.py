"""Shared pytest fixtures: a guard against leftover child processes, and helpers to run the CLI."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"


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
