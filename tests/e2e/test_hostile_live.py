"""End to end: live faults an operator or the host throws at a capture (issue 27, privileged).

The target exits during the capture or is a zombie or a kernel thread; perf is missing from
PATH; tracefs is not mounted (or something else is mounted where it goes); the output is on a
full or read-only file system (a small tmpfs this test mounts and removes); the output
directory is removed under the capture; the load leaves a daemon holding its output pipe or
ignores SIGTERM; a signal arrives while the capture starts or while the report is written.
Each ends in bounded time with one error line and its documented exit code (docs/cli.md), no
traceback, nothing written outside the output, and what was captured kept and marked partial.
Mounts live in a private mount namespace (unshare) of the test's own: nothing is changed for
the other captures on the host.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from profiler.bundle import Bundle
from tests.conftest import LIVE_CAPTURE, TRACEFS

pytestmark = LIVE_CAPTURE

PROFILER = [sys.executable, "-m", "profiler"]


@contextlib.contextmanager
def sleeper(code: str = "import time\nwhile True: time.sleep(0.002)") -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def cli(args: list[str], timeout: float = 120, env: dict[str, str] | None = None,
        prefix: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([*(prefix or []), *PROFILER, *args], capture_output=True, text=True, errors="replace",
                       timeout=timeout, env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr[-1500:]
    return r


def one_line(r: subprocess.CompletedProcess[str]) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("profiler: error:")]
    assert len(lines) == 1, r.stderr[-1500:]
    return lines[0]


def partial(out: Path) -> str:
    """The reason of a readable, partial bundle whose collectors all ended."""
    m = Bundle.open(out).manifest
    assert m.status == "partial", (m.status, m.reason)
    assert all(rec.status != "running" for rec in m.collectors), [(r.name, r.status) for r in m.collectors]
    return m.reason or ""


def no_instances(pid: int) -> None:
    assert not [n for n in os.listdir(f"{TRACEFS}/instances") if n.startswith(f"profiler-{pid}-")]


# --------------------------------------------------------------------------- targets


def running(out: Path) -> set[str]:
    with contextlib.suppress(Exception):
        return {r.name for r in Bundle.open(out).manifest.collectors if r.status == "running"}
    return set()


def started(proc: subprocess.Popen[str], out: Path, want: str = "cpu-stacks") -> None:
    deadline = time.monotonic() + 90
    while want not in running(out):
        assert proc.poll() is None and time.monotonic() < deadline, "the capture never started"
        time.sleep(0.05)


def finish(proc: subprocess.Popen[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    r = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    assert "Traceback" not in err and "internal error" not in err, err[-1500:]
    return r


def start(args: list[str], **kw: object) -> subprocess.Popen[str]:
    return subprocess.Popen([*PROFILER, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            errors="replace", stdin=subprocess.DEVNULL, **kw)  # type: ignore[call-overload]


def test_a_target_exiting_during_the_capture_is_exit_6_with_a_partial_bundle(tmp_path: Path) -> None:
    out, stop = tmp_path / "b", tmp_path / "stop"
    with sleeper(f"import os, time\nwhile not os.path.exists({str(stop)!r}): time.sleep(0.002)") as t:
        proc = start(["attach", "--pid", str(t.pid), "-d", "30s", "-o", str(out)])
        started(proc, out)
        time.sleep(1)
        stop.touch()
        r = finish(proc)
    assert r.returncode == 6, r.stderr[-800:]
    assert "exit" in one_line(r)
    assert "exit" in partial(out)
    assert (out / "report.html").is_file()


def test_a_zombie_target_is_one_line_exit_3(tmp_path: Path) -> None:
    code = "import os, time\npid = os.fork()\nif pid == 0: os._exit(0)\nprint(pid, flush=True)\ntime.sleep(60)"
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        zombie = int(parent.stdout.readline())  # type: ignore[union-attr]
        time.sleep(0.3)
        assert psutil.Process(zombie).status() == psutil.STATUS_ZOMBIE
        out = tmp_path / "b"
        r = cli(["attach", "--pid", str(zombie), "-d", "2s", "-o", str(out)])
        assert r.returncode == 3, r.stderr[-800:]
        one_line(r)
        r = cli(["doctor", "--pid", str(zombie)])
        assert r.returncode in (0, 3, 5), r.stderr[-800:]
    finally:
        parent.kill()
        parent.wait()


def test_a_kernel_thread_is_captured_like_any_target(tmp_path: Path) -> None:
    """A kernel thread has no executable, maps or user stacks; its kernel side is captured."""
    kthread = next(p.pid for p in psutil.process_iter(["name"]) if p.info["name"] == "kthreadd")
    out = tmp_path / "b"
    r = cli(["attach", "--pid", str(kthread), "-d", "2s", "-o", str(out)])
    assert r.returncode == 0, r.stderr[-800:]
    assert (out / "report.html").is_file() and Bundle.open(out).manifest.targets[0].pid == kthread


# --------------------------------------------------------------------------- the host


def test_perf_missing_from_path_keeps_what_the_other_collectors_captured(tmp_path: Path) -> None:
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    out = tmp_path / "b"
    with sleeper() as t:
        r = cli(["attach", "--pid", str(t.pid), "-d", "2s", "-o", str(out), "--backend", "perf"],
                env={"PATH": str(bin_)})
    assert r.returncode == 6, r.stderr[-800:]
    assert "perf" in one_line(r)
    assert "perf" in partial(out)
    assert Bundle.open(out).has("proc.jsonl.gz")


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
@pytest.mark.parametrize("what", ["unmounted", "a tmpfs in its place"])
def test_tracefs_missing_or_replaced_is_not_written_through(tmp_path: Path, what: str) -> None:
    """In a private mount namespace: tracefs unmounted (the profiler mounts it, as perf does), or
    a read-only tmpfs where it goes (no instance can be made: block IO is left out, said)."""
    out = tmp_path / "b"
    fix = (f"umount {TRACEFS} 2>/dev/null; umount /sys/kernel/debug/tracing 2>/dev/null; "
           + ("" if what == "unmounted" else f"mount -t tmpfs -o ro,size=64k profiler-test-{os.getpid()} {TRACEFS}; "))
    with sleeper() as t:
        r = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                            f"{fix}exec \"$@\"", "sh", *PROFILER, "attach", "--pid", str(t.pid), "-d", "2s", "-o",
                            str(out), "--backend", "perf"], capture_output=True, text=True, timeout=180)
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr[-1500:]
    assert r.returncode in (0, 6), r.stderr[-800:]
    if r.returncode == 6:
        one_line(r)
        partial(out)
    assert (out / "report.html").is_file()


@contextlib.contextmanager
def tmpfs(path: Path, size: str, ro: bool = False) -> Iterator[Path]:
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}" + (",ro" if ro else ""),
                    f"profiler-test-{os.getpid()}", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)
        path.rmdir()


@pytest.mark.skipif(shutil.which("mount") is None, reason="needs mount(8)")
def test_a_full_output_disk_keeps_what_fits_and_says_so(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "full", "400k") as mnt, sleeper() as t:
        out = mnt / "b"
        r = cli(["attach", "--pid", str(t.pid), "-d", "4s", "-o", str(out), "--backend", "perf"])
        assert r.returncode in (6, 9), r.stderr[-800:]
        assert "No space left" in one_line(r) or "space" in one_line(r)
        if r.returncode == 6:
            partial(out)
        no_instances(os.getpid())


@pytest.mark.skipif(shutil.which("mount") is None, reason="needs mount(8)")
def test_a_read_only_output_disk_is_exit_9_before_any_capture(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "ro", "64k", ro=True) as mnt, sleeper() as t:
        t0 = time.monotonic()
        r = cli(["attach", "--pid", str(t.pid), "-d", "20s", "-o", str(mnt / "b")])
        assert r.returncode == 9, r.stderr[-800:]
        assert "Read-only" in one_line(r)
        assert time.monotonic() - t0 < 15


def test_the_output_directory_removed_under_the_capture_is_one_line(tmp_path: Path) -> None:
    out = tmp_path / "b"
    with sleeper() as t:
        proc = start(["attach", "--pid", str(t.pid), "-d", "30s", "-o", str(out), "--backend", "perf"])
        started(proc, out)
        time.sleep(0.5)
        shutil.rmtree(out, ignore_errors=True)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        r = finish(proc)
    assert r.returncode in (6, 9, 130), r.stderr[-800:]
    one_line(r)
    assert sorted(os.listdir(tmp_path)) in (["b"], [])


# --------------------------------------------------------------------------- the load


def test_a_load_leaving_a_daemon_on_its_output_ends_the_capture_when_it_exits(tmp_path: Path) -> None:
    out = tmp_path / "b"
    marker = f"daemon-{os.getpid()}-{time.time_ns()}"
    load = ["sh", "-c", f"(exec -a {marker} sleep 60 &) ; echo started; exit 3"]
    try:
        with sleeper() as t:
            t0 = time.monotonic()
            r = cli(["run", "--pid", str(t.pid), "-d", "40s", "-o", str(out), "--no-report", "--", *load],
                    timeout=120)
            took = time.monotonic() - t0
        assert r.returncode == 3, r.stderr[-800:]
        assert took < 30, took
        assert "started" in (out / "load.log").read_text()
    finally:
        for p in psutil.process_iter(["cmdline"]):
            if marker in " ".join(p.info.get("cmdline") or []):
                p.kill()


def test_a_load_ignoring_sigterm_is_stopped_in_bounded_time(tmp_path: Path) -> None:
    out = tmp_path / "b"
    load = [sys.executable, "-c", "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "signal.signal(signal.SIGINT, signal.SIG_IGN)\nprint('up', flush=True)\ntime.sleep(120)"]
    with sleeper() as t:
        t0 = time.monotonic()
        r = cli(["run", "--pid", str(t.pid), "-d", "3s", "-o", str(out), "--no-report", "--", *load], timeout=150)
        took = time.monotonic() - t0
    assert took < 60, took
    assert r.returncode != 70 and (out / "manifest.json").is_file(), r.stderr[-800:]
    m = Bundle.open(out).manifest
    assert m.load is not None and m.load.ended is not None


def test_a_load_that_cannot_start_is_exit_6(tmp_path: Path) -> None:
    with sleeper() as t:
        r = cli(["run", "--pid", str(t.pid), "-d", "3s", "-o", str(tmp_path / "b"), "--",
                 str(tmp_path / "no-such-load")])
    assert r.returncode == 6, r.stderr[-800:]
    one_line(r)


# --------------------------------------------------------------------------- signals at the edges


def handles(pid: int, sig: int) -> bool:
    """Whether the process has its own handler for ``sig`` (SigCgt in /proc/PID/status)."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_while_the_capture_starts_is_its_exit_code_and_leaves_nothing(tmp_path: Path,
                                                                               sig: signal.Signals) -> None:
    """From the moment the profiler's handlers are in place (before that it is Python starting up),
    through the target's resolution, the probes and the collectors' start."""
    seed = time.time_ns()
    out = tmp_path / "b"
    with sleeper() as t:
        proc = start(["attach", "--pid", str(t.pid), "-d", "30s", "-o", str(out)], start_new_session=True)
        deadline = time.monotonic() + 60
        while not handles(proc.pid, signal.SIGTERM):  # Python itself takes SIGINT from its start
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.005)
        time.sleep(random.Random(seed).uniform(0.0, 2.0))
        proc.send_signal(sig)
        r = finish(proc)
        time.sleep(0.3)
        left = [c.pid for c in psutil.process_iter(["ppid"]) if c.info["ppid"] == proc.pid]
    why = f"seed {seed}: {r.stderr[-800:]}"
    assert r.returncode == 128 + sig, why
    assert not left, why
    no_instances(proc.pid)
    if (out / "manifest.json").exists():
        partial(out)
    else:
        assert not out.exists() or not os.listdir(out), why


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_the_report_is_written_keeps_the_bundle(tmp_path: Path, sig: signal.Signals) -> None:
    out = tmp_path / "b"
    with sleeper() as t:
        proc = start(["attach", "--pid", str(t.pid), "-d", "2s", "-o", str(out)])
        deadline = time.monotonic() + 120
        while True:  # the capture has ended: the manifest is final, the report is being made
            with contextlib.suppress(Exception):
                if Bundle.open(out).manifest.ended is not None:
                    break
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        proc.send_signal(sig)
        r = finish(proc)
    assert r.returncode in (0, 128 + sig), r.stderr[-800:]
    m = Bundle.open(out).manifest
    assert m.status in ("ok", "partial") and all(rec.status != "running" for rec in m.collectors)
    assert not [p for p in out.iterdir() if p.name.startswith(".") or p.name.endswith(".tmp")]
    rep = cli(["report", str(out), "--format", "json"])
    assert rep.returncode == 0 and json.loads(rep.stdout)["schema"] == "profiler.report"


def test_a_load_printing_one_endless_line_is_copied_with_flat_memory(tmp_path: Path) -> None:
    """300 MB without a newline: copied as it comes, never held as one line."""
    from tests.measure import run_profiler

    out = tmp_path / "b"
    load = [sys.executable, "-c", "import sys\nw = sys.stdout.buffer.write\nfor _ in range(300): w(b'x' * (1 << 20))"]
    with sleeper() as t:
        m = run_profiler(["run", "--pid", str(t.pid), "--collector", "procfs", "-d", "60s", "-o", str(out),
                          "--no-report", "--", *load], timeout=300)
    assert m.code == 0, m.stderr[-800:]
    assert m.rss_mb < 200, m.rss_mb
    assert (out / "load.log").stat().st_size == 300 << 20


def test_a_load_log_truncated_under_the_capture_does_not_hold_it(tmp_path: Path) -> None:
    """Log rotation (copytruncate) during the capture: the file shrinks under the follower."""
    log = tmp_path / "load.log"
    out = tmp_path / "b"
    log.write_text("[ 1s ] thds: 4 tps: 100.00 qps: 2000.00 lat (ms,95%): 5.00 err/s: 0.00\n" * 1000)
    with sleeper() as t:
        proc = start(["attach", "--pid", str(t.pid), "--collector", "procfs", "-d", "3s", "-o", str(out),
                      "--no-report", "--load-log", str(log)])
        started(proc, out, "procfs")
        log.write_text("[ 2s ] thds: 4 tps: 90.00 qps: 1800.00 lat (ms,95%): 6.00 err/s: 0.00\n")
        r = finish(proc, timeout=90)
    assert r.returncode in (0, 6), r.stderr[-800:]
    if r.returncode:
        one_line(r)
    assert Bundle.open(out).manifest.ended is not None


def test_a_target_naming_its_threads_with_escapes_and_markup_reaches_no_report_raw(tmp_path: Path) -> None:
    """Thread names are the target's to choose (15 bytes): escape sequences, a newline, HTML."""
    code = ("import threading, time\n"
            "def spin(name):\n"
            "    open(f'/proc/self/task/{threading.get_native_id()}/comm', 'wb').write(name)\n"
            "    while True: sum(range(1000)); time.sleep(0.001)\n"
            "for n in (b'\\x1b[2J\\x1b]0;x\\x07', b'a\\nprofiler: e', b'<b>x</b>|*y*'):\n"
            "    threading.Thread(target=spin, args=(n,), daemon=True).start()\n"
            "time.sleep(120)\n")
    out = tmp_path / "b"
    with sleeper(code) as t:
        time.sleep(0.5)
        r = cli(["attach", "--pid", str(t.pid), "-d", "2s", "-o", str(out), "--backend", "perf"])
    assert r.returncode == 0, r.stderr[-800:]
    assert "\x1b" not in r.stdout + r.stderr
    md = cli(["report", str(out), "--format", "md"])
    assert md.returncode == 0 and "\x1b" not in md.stdout and "<b>" not in md.stdout
    text = cli(["report", str(out)])
    assert text.returncode == 0 and "\x1b" not in text.stdout
    assert "\nprofiler: e" not in text.stdout + md.stdout
    html = (out / "report.html").read_text()
    assert "<b>x</b>" not in html and "\\u003cb\\u003ex" in html  # there, as data
