"""End to end: `profiler attach` / `profiler run` (perf backend) on real workloads this test starts, and the robustness cases.

Needs root, perf and tracefs (CI has them). Each test bounds its workload in time and stops it by pid;
afterwards no perf process that names the bundle may be left, no tracefs instance of ours, and
kernel.task_delayacct must be back to what it was.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from profiler.collectors.base import CaptureOptions
from profiler.collectors.perf.offcpu import OffCpuCollector

from profiler.bundle import Bundle
from profiler.capture.session import Session
from profiler.capture.targets import target_from_pid
from profiler.cli import main
from profiler.formats import blockevents
from tests.conftest import LIVE_CAPTURE, TRACEFS

pytestmark = LIVE_CAPTURE


def _helpers_naming(path: Path) -> list[str]:
    """Processes whose command line mentions the bundle directory (perf -o ...): must be none."""
    left = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(p.info.get("cmdline") or [])
        if str(path) in cmd and p.pid != os.getpid():
            with contextlib.suppress(psutil.Error):
                if p.status() != psutil.STATUS_ZOMBIE:
                    left.append(f"{p.pid}: {cmd}")
    return left


def _instances_of(pid: int) -> list[str]:
    return [n for n in os.listdir(f"{TRACEFS}/instances") if n.startswith(f"profiler-{pid}-")]


@pytest.fixture
def clean_state(tmp_path: Path) -> Iterator[Path]:
    """Checks, after the test, that the capture left nothing running and restored what it changed."""
    yield tmp_path
    deadline = time.monotonic() + 5
    while _helpers_naming(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _helpers_naming(tmp_path)
    for line in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(line.split(":")[0]), signal.SIGKILL)
    assert not left, f"helpers left running: {left}"
    assert not _instances_of(os.getpid()), "tracefs instance left behind"
    # kernel.task_delayacct: other captures on a shared host toggle it too, so its restore is
    # checked in tests/unit/test_collectors_offcpu.py against a file of the test's own.


@contextlib.contextmanager
def workload(argv: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        yield proc
    finally:
        proc.kill()
        proc.wait()


def fio(directory: Path, seconds: int) -> list[str]:
    return ["fio", "--name=e2e", f"--directory={directory}", "--size=16M", "--rw=randrw", "--bs=4k",
            "--direct=1", "--ioengine=psync", "--thread", "--time_based", f"--runtime={seconds}"]


def _first_time(text_lines: list[str], pattern: str) -> float:
    rx = re.compile(pattern)
    for line in text_lines:
        m = rx.search(line)
        if m:
            return float(m.group(1))
    raise AssertionError(f"no timestamp matching {pattern!r}")


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed")
def test_attach_fio_every_collector_ok_on_one_timeline(clean_state: Path) -> None:
    out = clean_state / "cap"
    data = clean_state / "data"
    data.mkdir()
    with workload(fio(data, 12)) as proc:
        time.sleep(0.5)
        # fio forks its job process: attach to the whole family, as `--pid fio` would
        pids = [proc.pid] + [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        args = [a for pid in pids for a in ("--pid", str(pid))]
        rc = main(["attach", "--backend", "perf", *args, "--duration", "3s", "-o", str(out), "--no-report"])
    assert rc == 0
    b = Bundle.open(out)
    m = b.manifest
    by = {r.name: r for r in m.collectors}
    for name in ("perf-stat", "cpu-stacks", "offcpu-stacks", "block-io", "syscalls"):
        assert by[name].status == "ok", (name, by[name].reason)
        for f in by[name].files:
            assert b.path(f).stat().st_size > 0, f
    assert m.status == "ok", m.reason
    start, end = m.clock.monotonic_start, m.ended
    assert end is not None and end - start >= 3

    def within(t: float, what: str) -> None:
        assert start - 1 <= t <= end + 1, f"{what} time {t} outside the capture [{start}, {end}]"

    cpu = list(b.iter_lines("cpu.perf.txt.gz"))
    within(_first_time(cpu, r"\]\s+(\d+\.\d+):"), "cpu-clock sample")
    off = list(b.iter_lines("offcpu.perf.txt.gz"))
    within(_first_time(off, r"\]\s+(\d+\.\d+):.*sched:sched_switch"), "sched_switch")
    assert any("prev_state=D" in line for line in off)  # fio's direct IO waits
    with open(b.path("block.events.bin"), "rb") as fh:
        blocks = list(blockevents.iter_blocks(fh))
    first = [blk.cols["t"][blk.cols["kind"] == blockevents.COMPLETE] for blk in blocks]
    within(float(next(t for t in first if len(t))[0]) / 1e9, "block completion")
    assert by["block-io"].stats["target_issues"] > 0  # fio's own reads and writes
    sys_rows = list(b.iter_lines("syscalls.csv"))
    assert sys_rows[0] == "time,tid,comm,syscall,count,total_ns"
    within(float(sys_rows[1].split(",")[0]), "syscall interval")
    assert {"pread64", "pwrite64"} & {r.split(",")[3] for r in sys_rows[1:]}
    stat = b.read_text("stat.csv")
    assert "task-clock" in stat and "context-switches" in stat
    within(by["perf-stat"].started + float(stat.splitlines()[-1].split(",")[0]), "perf stat interval")
    assert by["perf-stat"].stats["not_supported"] is not None
    intervals = list(b.iter_lines("offcpu.csv.gz"))
    assert intervals[0] == "tid,comm,off,on,state" and len(intervals) > 1
    rj = clean_state / "r.json"
    assert main(["report", str(out), "--format", "json", "-o", str(rj)]) == 0
    io = json.loads(rj.read_text())["io"]  # the verdict names the member it paired the IOs from
    assert io is not None and io["source"] == "block.events.bin" and io["total"] > 0


def test_target_exiting_mid_capture_ends_it_partial(clean_state: Path) -> None:
    out = clean_state / "cap"
    # long enough to be sampled after a slow start on a loaded host (attach imports the analysis
    # and probes every collector before perf starts: 1.5 s left nothing to sample once at load 15)
    code = "import time\nt=time.time()\nwhile time.time()-t<4: pass\n"
    with workload([sys.executable, "-c", code]) as proc:
        t0 = time.monotonic()
        rc = main(["attach", "--backend", "perf", "--pid", str(proc.pid), "--duration", "60s", "-o", str(out), "--no-report"])
        took = time.monotonic() - t0
    assert rc == 6 and took < 30  # partial, as docs/cli.md says: the bundle is kept
    m = Bundle.open(out).manifest
    assert m.status == "partial" and "target exited" in (m.reason or "")
    assert m.targets[0].exited is not None
    cpu = m.collector("cpu-stacks")
    assert cpu is not None and cpu.status in ("ok", "partial") and cpu.stats.get("samples", 0) > 0


def _spawn_attach(out: Path, pid: int, duration: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "profiler", "attach", "--backend", "perf", "--pid", str(pid), "--duration", duration,
         "-o", str(out), "--no-report"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )


def _wait_running(out: Path, names: set[str], timeout: float = 20) -> None:
    """Until the manifest says these collectors run."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            m = Bundle.open(out).manifest
            running = {r.name for r in m.collectors if r.status == "running"}
            if names <= running:
                time.sleep(1.0)
                return
        time.sleep(0.1)
    raise AssertionError(f"collectors {names} never started")


def test_ctrl_c_keeps_a_partial_bundle_and_restores_state(clean_state: Path) -> None:
    out = clean_state / "cap"
    with workload(["stress-ng", "--cpu", "1", "--timeout", "30", "-q"] if shutil.which("stress-ng")
                  else [sys.executable, "-c", "while True: pass"]) as proc:
        attach = _spawn_attach(out, proc.pid, "60s")
        try:
            _wait_running(out, {"cpu-stacks", "block-io", "offcpu-stacks"})
            attach.send_signal(signal.SIGINT)
            _, err = attach.communicate(timeout=60)
        finally:
            if attach.poll() is None:
                attach.kill()
                attach.wait()
    assert attach.returncode == 130, err
    assert b"interrupted" in err and b"Traceback" not in err
    m = Bundle.open(out).manifest
    assert m.status == "partial" and "interrupted" in (m.reason or "")
    cpu = m.collector("cpu-stacks")
    assert cpu is not None and cpu.files and cpu.ended is not None
    assert not _instances_of(attach.pid)


def test_perf_killed_mid_capture_marks_that_collector_partial(clean_state: Path) -> None:
    out = clean_state / "cap"
    with workload([sys.executable, "-c", "import time\nwhile True: time.sleep(0.001)"]) as proc:
        attach = _spawn_attach(out, proc.pid, "6s")
        try:
            _wait_running(out, {"cpu-stacks"})
            victims = [c for c in psutil.Process(attach.pid).children()
                       if "cpu-clock" in " ".join(c.cmdline())]
            assert victims, "no perf record for cpu-stacks among the profiler's children"
            victims[0].kill()
            _, err = attach.communicate(timeout=60)
        finally:
            if attach.poll() is None:
                attach.kill()
                attach.wait()
    assert attach.returncode == 6, err  # partial by a fault (docs/cli.md): kept, and one line says why
    assert err.count(b"profiler: error: the capture is partial") == 1
    m = Bundle.open(out).manifest
    cpu = m.collector("cpu-stacks")
    assert cpu is not None and cpu.status in ("partial", "failed") and "SIGKILL" in (cpu.reason or "")
    stat = m.collector("perf-stat")
    assert stat is not None and stat.status == "ok"
    assert m.status == "partial"


def test_perf_missing_skips_perf_collectors_but_tracefs_still_captures(clean_state: Path) -> None:
    out = clean_state / "cap"
    empty = clean_state / "bin"
    empty.mkdir()
    env = dict(os.environ, PATH=str(empty))
    with workload([sys.executable, "-c", "import time\nwhile True: time.sleep(0.01)"]) as proc:
        attach = _spawn_attach(out, proc.pid, "2s", env=env)
        _, err = attach.communicate(timeout=60)
    assert attach.returncode == 6, err  # partial by a fault (docs/cli.md): kept, and one line says why
    assert err.count(b"profiler: error: the capture is partial") == 1
    m = Bundle.open(out).manifest
    for name in ("cpu-stacks", "offcpu-stacks", "syscalls"):
        rec = m.collector(name)
        assert rec is not None and rec.status == "skipped" and "perf not found" in (rec.reason or ""), name
    stat = m.collector("perf-stat")  # its software counters come from /proc: no perf needed
    assert stat is not None and stat.status == "ok" and stat.stats["rows"] > 0
    assert stat.stats["not_supported"] == ["cache-misses", "cycles", "instructions"]
    blk = m.collector("block-io")
    assert blk is not None and blk.status == "ok" and "counted" not in blk.stats
    assert m.status == "partial" and "perf not found" in (m.reason or "")


def test_disk_full_keeps_a_readable_partial_bundle(clean_state: Path) -> None:
    mnt = clean_state / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", str(mnt)]).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here")
    try:
        out = mnt / "cap"
        code = "import os,time\nt=time.time()\nwhile time.time()-t<20: os.getppid(); time.sleep(0.00005)\n"
        with workload([sys.executable, "-c", code]) as proc:
            rc = main(["attach", "--backend", "perf", "--pid", str(proc.pid), "--duration", "4s", "-o", str(out), "--no-report"])
        assert rc == 6  # partial: what fitted is kept, and the final manifest says why
        b = Bundle.open(out)
        assert b.manifest.status == "partial", b.manifest.reason
        # our own words ("no space left ...") or perf's, when the disk filled before it started
        assert "no space left" in (b.manifest.reason or "").lower(), b.manifest.reason
        assert b.manifest.ended is not None  # the final manifest, not one left from mid-capture
        assert not (out / ".space-reserve").exists()
    finally:
        subprocess.run(["umount", "-l", str(mnt)])


def test_run_wraps_a_load_and_passes_its_exit_code(clean_state: Path) -> None:
    out = clean_state / "cap"
    load = [sys.executable, "-c", "import sys,time; print('tps: 42'); time.sleep(1.5); sys.exit(4)"]
    with workload([sys.executable, "-c", "import time\nwhile True: time.sleep(0.01)"]) as proc:
        # the load's plumbing is under test here, not the system-wide collectors a busy host can upset
        rc = main(["run", "--backend", "perf", "--pid", str(proc.pid), "-o", str(out), "--no-report",
                   "--collector", "perf-stat", "--collector", "cpu-stacks", "--"] + load)
    assert rc == 4
    b = Bundle.open(out)
    assert b.manifest.load is not None and b.manifest.load.exit_code == 4
    assert "tps: 42" in b.read_text("load.log")
    assert b.manifest.status == "ok", b.manifest.reason
    assert b.manifest.options["stop_reason"] == "the load command exited"
    with gzip.open(out / "cpu.perf.txt.gz", "rt") as fh:
        fh.read()


@pytest.mark.skipif(shutil.which("unshare") is None, reason="unshare is not installed")
def test_container_target_gets_symbols_through_its_own_root(clean_state: Path) -> None:
    """A target whose binary exists only in its own mount namespace (as in a container)."""
    mnt = clean_state / "ns-only"
    mnt.mkdir()
    py = os.path.realpath(sys.executable)  # the interpreter binary itself, not the venv's symlink
    loop = "import time\nt=time.time()\nwhile time.time()-t<12: sum(range(1000))\n"
    script = (f"mount -t tmpfs none {mnt} && cp {py} {mnt}/py && exec {mnt}/py -c '{loop}'")
    proc = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", script])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{proc.pid}/exe").endswith("/py"):
                    break
            time.sleep(0.1)
        assert not (mnt / "py").exists()  # invisible from here: only the target's root has it
        out = clean_state / "cap"
        rc = main(["attach", "--backend", "perf", "--pid", str(proc.pid), "--duration", "3s", "-o", str(out), "--no-report",
                   "--collector", "cpu-stacks"])
    finally:
        proc.kill()
        proc.wait()
    assert rc == 0
    b = Bundle.open(out)
    assert b.manifest.targets[0].container is True
    frames = [ln for ln in b.iter_lines("cpu.perf.txt.gz") if ln.startswith("\t") and f"({mnt}/py)" in ln]
    assert frames, "no frame in the namespaced binary"
    assert any("[unknown]" not in ln for ln in frames), "no symbol resolved through /proc/PID/root"


def test_block_io_removes_instances_left_by_a_killed_profiler(clean_state: Path) -> None:
    dead = next(p for p in range(4_000_000, 3_000_000, -1) if not os.path.exists(f"/proc/{p}"))
    stale = Path(TRACEFS) / "instances" / f"profiler-{dead}-1"
    stale.mkdir()
    try:
        out = clean_state / "cap"
        with workload([sys.executable, "-c", "import time\nwhile True: time.sleep(0.05)"]) as proc:
            rc = main(["attach", "--backend", "perf", "--pid", str(proc.pid), "--duration", "1s", "-o", str(out), "--no-report",
                       "--collector", "block-io"])
        assert rc == 0
        assert not stale.exists()
    finally:
        with contextlib.suppress(OSError):
            stale.rmdir()


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv is not installed")
def test_permission_denied_skips_with_the_reason(clean_state: Path) -> None:
    """An unprivileged user: perf and tracefs collectors are skipped, saying why; the bundle is kept."""
    nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    shared = Path(tempfile.mkdtemp(prefix="profiler-collect-e2e-"))  # reachable by nobody, unlike tmp_path
    os.chmod(shared, 0o777)
    out = shared / "cap"
    target = subprocess.Popen(nobody + [sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.3)
        proc = subprocess.run(nobody + [sys.executable, "-m", "profiler", "attach", "--backend", "perf",
                                        "--pid", str(target.pid), "--duration", "1s", "-o", str(out), "--no-report"],
                              capture_output=True, text=True, timeout=60)
    finally:
        target.kill()
        target.wait()
    try:
        assert proc.returncode in (0, 6), proc.stderr
        assert "Traceback" not in proc.stderr
        m = Bundle.open(out).manifest
    finally:
        shutil.rmtree(shared, ignore_errors=True)
    for name in ("cpu-stacks", "offcpu-stacks", "syscalls", "block-io"):
        rec = m.collector(name)
        assert rec is not None and rec.status == "skipped" and "permission denied" in (rec.reason or ""), (name, rec)
    stat = m.collector("perf-stat")  # the kernel's accounting of one's own process needs no privilege
    assert stat is not None and stat.status == "ok", stat
    assert m.status in ("partial", "failed") and "permission denied" in (m.reason or "")


def test_perf_data_bound_stops_a_collector_early_with_a_valid_file(clean_state: Path) -> None:
    """perf record -a writes every process's mmaps and comms before its first sample (327 KB for
    132 processes here): a bound below that stopped perf before the target had switched once, and
    the test failed on a loaded host (load 17-34: 0 samples). The bound sits above that preamble
    (4 KB a process, 2.5 KB measured), so the target's own switches are what reach it."""
    col = OffCpuCollector()
    processes = sum(1 for d in Path("/proc").iterdir() if d.name.isdigit())
    col.max_bytes = (1 << 20) + processes * (4 << 10)
    switcher = ("import threading, time\n"
                "def f():\n    while True: time.sleep(0.0001)\n"
                "for _ in range(3): threading.Thread(target=f, daemon=True).start()\nf()")
    with workload([sys.executable, "-c", switcher]) as proc:
        Session([target_from_pid(proc.pid)], clean_state / "cap", CaptureOptions(duration=8), [col]).run()
    b = Bundle.open(clean_state / "cap")
    rec = b.manifest.collector("offcpu-stacks")
    assert rec is not None and rec.status == "partial" and "stopped early" in (rec.reason or "")
    assert rec.stats["samples"] > 0 and rec.stats["stopped_early"] is True
    assert any("sched:sched_switch" in ln for ln in b.iter_lines("offcpu.perf.txt.gz"))


def test_ctrl_c_during_run_stops_the_load_too(clean_state: Path) -> None:
    out = clean_state / "cap"
    marker = f"load-{os.getpid()}-{time.monotonic_ns()}"
    with workload([sys.executable, "-c", "import time\nwhile True: time.sleep(0.05)"]) as proc:
        run = subprocess.Popen(
            [sys.executable, "-m", "profiler", "run", "--backend", "perf", "--pid", str(proc.pid), "-o", str(out),
             "--no-report", "--collector", "perf-stat", "--", sys.executable, "-c",
             f"import time  # {marker}\ntime.sleep(60)"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            _wait_running(out, {"perf-stat"})
            run.send_signal(signal.SIGINT)
            _, err = run.communicate(timeout=60)
        finally:
            if run.poll() is None:
                run.kill()
                run.wait()
    assert run.returncode == 130, err
    left = [p.pid for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info.get("cmdline") or [])]
    assert not left, f"the load outlived the capture: {left}"
    m = Bundle.open(out).manifest
    assert m.status == "partial" and m.load is not None and m.load.exit_code is not None
