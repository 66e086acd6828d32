"""A host whose tracefs is not mounted (a fresh VM, a container's host): as root, doctor and attach
mount it, as perf does, say so, and every collector the host supports runs; without root, doctor
and the collectors give the same reason and fix. Each test unmounts tracefs in a private mount
namespace of its own (unshare -m), so the host's own mount is never touched."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, have_perf, is_root

PROFILER = [sys.executable, "-m", "profiler"]
UNSHARE = shutil.which("unshare")
SETPRIV = shutil.which("setpriv")

pytestmark = [
    pytest.mark.privileged,
    pytest.mark.skipif(not is_root(), reason="needs root (CI runs as root)"),
    pytest.mark.skipif(UNSHARE is None, reason="unshare (util-linux) is not installed"),
]

# unmount every tracefs and debugfs in the new namespace, then run the command
_FRESH = ("grep -E ' (tracefs|debugfs) ' /proc/mounts | cut -d' ' -f2 | sort -r | "
          "while read m; do umount \"$m\" || exit 9; done; "
          "if grep -qE ' (tracefs|debugfs) ' /proc/mounts; then exit 9; fi; exec \"$@\"")


def fresh(argv: list[str], timeout: float = 180, user: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run argv in a private mount namespace where tracefs is not mounted (as ``user`` if given)."""
    run = argv if user is None else [str(SETPRIV), f"--reuid={user}", f"--regid={user}", "--clear-groups", *argv]
    proc = subprocess.run([str(UNSHARE), "-m", "--propagation", "private", "sh", "-c", _FRESH, "sh", *run],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert proc.returncode != 9, "could not unmount tracefs in the new namespace"
    return proc


def _host_supports() -> dict[str, str]:
    """doctor's view in our own namespace (tracefs mounted): which checks pass."""
    proc = subprocess.run([*PROFILER, "doctor", "--json"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    return {c["name"]: c["status"] for c in json.loads(proc.stdout)["checks"]}


def test_doctor_as_root_mounts_tracefs_and_says_so() -> None:
    proc = fresh([*PROFILER, "doctor", "--json"])
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert checks["tracefs"]["status"] == "ok"
    assert "was not mounted: mounted it at /sys/kernel/tracing" in checks["tracefs"]["detail"]
    supported = _host_supports()
    for name in ("sched:sched_switch", "block:block_rq_issue", "raw_syscalls:sys_enter"):
        assert checks[name]["status"] == supported[name], checks[name]
    assert " tracefs " in Path("/proc/mounts").read_text()  # ours is untouched


@pytest.mark.skipif(not have_perf(), reason="perf is not installed")
def test_attach_as_root_on_a_host_without_tracefs_runs_every_collector(tmp_path: Path) -> None:
    """The perf path (``--backend perf``): with ``auto``, the default, bcc takes over three of these
    collectors and adds futex-waits; that path is the test below."""
    supported = _host_supports()
    needed = ("perf", "sched:sched_switch", "block:block_rq_issue", "block:block_rq_complete",
              "raw_syscalls:sys_enter", "raw_syscalls:sys_exit")
    if any(supported.get(n) != "ok" for n in needed):
        pytest.skip(f"this host cannot run every perf collector even with tracefs: {supported}")
    workload = _fsync_workload(tmp_path / "io")
    try:
        time.sleep(0.5)
        out = tmp_path / "cap"
        proc = fresh([*PROFILER, "attach", "--pid", str(workload.pid), "-d", "3s", "-o", str(out), "--no-report",
                      "--backend", "perf"])
    finally:
        workload.kill()
        workload.wait()
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "tracefs was not mounted: mounted it at /sys/kernel/tracing (as perf does)" in proc.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    status = {c["name"]: (c["status"], c.get("reason")) for c in manifest["collectors"]}
    perf_collectors = {"perf-stat", "procfs", "cpu-stacks", "offcpu-stacks", "block-io", "syscalls"}
    assert set(status) == perf_collectors | {"server-status"}
    assert all(status[n][0] == "ok" for n in perf_collectors), status
    # the workload serves no HTTP status port: skipped for that reason, never for tracefs
    assert status["server-status"][0] == "skipped" and "status port" in (status["server-status"][1] or ""), status


def _fsync_workload(path: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", f"""
import os, threading, time
def spin():
    while True: sum(range(1000))
threading.Thread(target=spin, daemon=True).start()
f = open({str(path)!r}, "wb")
end = time.monotonic() + 60
while time.monotonic() < end:
    f.write(b"x" * 4096); f.flush(); os.fsync(f.fileno()); time.sleep(0.002)
"""])


def test_attach_with_bcc_on_a_host_without_tracefs_mounts_it_first(tmp_path: Path) -> None:
    """--backend bcc asks bcc's own check first: that check mounts tracefs too (it once refused with
    "tracefs is not mounted" though root could mount it), and the session still says it was mounted."""
    from profiler.collectors.bcc.common import bcc_status

    ok, why, _fix = bcc_status()
    if not ok:
        pytest.skip(f"bcc does not work on this host even with tracefs: {why}")
    workload = _fsync_workload(tmp_path / "io")
    try:
        time.sleep(0.5)
        out = tmp_path / "cap"
        proc = fresh([*PROFILER, "attach", "--pid", str(workload.pid), "-d", "3s", "-o", str(out), "--no-report",
                      "--backend", "bcc"], timeout=300)
    finally:
        workload.kill()
        workload.wait()
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "tracefs was not mounted: mounted it at /sys/kernel/tracing (as perf does)" in proc.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    status = {c["name"]: (c["status"], c.get("backend"), c.get("reason")) for c in manifest["collectors"]}
    bcc = {n for n, (_s, backend, _r) in status.items() if backend == "bcc"}
    assert {"offcpu-stacks", "block-io", "syscalls"} <= bcc, status
    # partial is a counted loss (stacks the kernel dropped), never a missing tracefs
    assert all(status[n][0] in ("ok", "partial") for n in bcc), status
    assert not any("tracefs" in (r or "") for _s, _b, r in status.values()), status


@pytest.mark.skipif(SETPRIV is None, reason="setpriv (util-linux) is not installed")
def test_without_root_doctor_and_the_collectors_give_one_reason_and_fix() -> None:
    script = """
import json
from profiler.capture import doctor
from profiler.collectors import host
from profiler.collectors.tracefs.blockio import BlockIOCollector
checks = {c.name: c for c in doctor.host_checks()}
ok, why, fix = host.tracepoint_status("block:block_rq_issue")
probe = BlockIOCollector().probe(None)
print(json.dumps({"doctor": [checks["block:block_rq_issue"].detail, checks["block:block_rq_issue"].fix],
                  "status": [why, fix], "probe": [probe.reason, probe.fix]}))
"""
    proc = fresh([sys.executable, "-c", script], user="65534")
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout)
    why, fix = got["status"]
    assert "tracefs is not mounted" in why and "run profiler as root" in fix
    assert got["probe"] == [why, fix]  # the collector says what doctor says
    assert got["doctor"][0].startswith(why) and got["doctor"][1] == fix
