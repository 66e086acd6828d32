"""`profiler doctor` tells the truth about this host."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from profiler.collectors import host

from profiler.capture import doctor
from profiler.cli import main


def test_checks_have_status_and_fix() -> None:
    for c in doctor.host_checks():
        assert c.status in {"ok", "warn", "fail", "info"}
        if c.status == "fail":
            assert c.fix, f"{c.name} fails without saying how to fix it"


@pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed")
def test_hardware_counters_match_perf_itself() -> None:
    # Ask perf directly and compare with what doctor says.
    proc = subprocess.run(["perf", "stat", "-x,", "-e", "cycles", "--", "true"], capture_output=True, text=True)
    supported = "<not supported>" not in proc.stderr and proc.returncode == 0
    check = next(c for c in doctor.host_checks() if c.name == "hardware counters")
    assert (check.status == "ok") == supported


def test_tracepoints_match_tracefs() -> None:
    tfs = host.tracefs_path()
    checks = {c.name: c for c in doctor.host_checks()}
    for event, _ in doctor.TRACEPOINTS:
        group, name = event.split(":")
        present = bool(tfs) and os.path.isdir(f"{tfs}/events/{group}/{name}")
        assert (checks[event].status == "ok") == present


def test_kprobes_reported_as_tracefs_shows() -> None:
    check = next(c for c in doctor.host_checks() if c.name == "kprobes")
    tfs = host.tracefs_path()
    assert (check.status == "ok") == bool(tfs and os.path.exists(f"{tfs}/kprobe_events"))


def test_json_output(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["doctor", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == (5 if data["failed"] else 0)
    assert {c["name"] for c in data["checks"]} >= {"perf", "tracefs", "hardware counters", "kprobes"}


def test_target_checks_on_a_child(capsys: pytest.CaptureFixture[str]) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        main(["doctor", "--pid", str(proc.pid)])
        out = capsys.readouterr().out
        assert f"-- pid {proc.pid}" in out and "cpu limit" in out and "memory limit" in out
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("runuser") is None, reason="needs root to switch to nobody")
def test_as_non_root_user() -> None:
    exe = os.path.join(os.path.dirname(sys.executable), "profiler")
    proc = subprocess.run(["runuser", "-u", "nobody", "--", exe, "doctor"], capture_output=True, text=True, timeout=60)
    assert "Traceback" not in proc.stderr
    assert "uid 65534" in proc.stdout
    if host.tracefs_path():
        assert "only root can read it" in proc.stdout and "-> run profiler as root (sudo)" in proc.stdout
