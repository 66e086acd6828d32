"""End to end: `attach` and `run` killed by SIGTERM, SIGHUP or SIGINT at a random point of a real capture (privileged).

Whatever signal ends a capture (Ctrl-C, `timeout`, systemd, `kubectl delete`, a closed terminal),
the bundle is finished as `partial` with what was captured and the signal named, the exit code
is the shell's (128 + the signal), and nothing is left: no perf or other helper process (each
one the profiler started is watched while it runs), no load, no tracefs instance. The point
is random (the seed is in every failure message); a second signal during the stop cannot cut
it short; with the bcc backend no BPF program of the capture stays loaded. (`cluster attach` is killed
the same way in tests/e2e/test_cluster_signals_e2e.py.)
"""

from __future__ import annotations

import contextlib
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

SIGNALS = {"SIGTERM": signal.SIGTERM, "SIGHUP": signal.SIGHUP, "SIGINT": signal.SIGINT}


@contextlib.contextmanager
def target() -> Iterator[subprocess.Popen[bytes]]:
    """A small process that wakes often (stacks, switches, syscalls to capture)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.002)"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _descendants(pid: int, seen: dict[int, float]) -> None:
    """Note every process below ``pid`` now (pid -> start time, so a reused pid is not mistaken)."""
    with contextlib.suppress(psutil.Error):
        for c in psutil.Process(pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                seen.setdefault(c.pid, c.create_time())


def _bpf_programs(pids: list[int], progs: set[int]) -> None:
    """Note the BPF programs these processes hold (their fds' ``prog_id``)."""
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fdinfo"):
                with contextlib.suppress(OSError), open(f"/proc/{pid}/fdinfo/{fd}") as fh:
                    for line in fh:
                        if line.startswith("prog_id:"):
                            progs.add(int(line.split()[1]))


def _loaded_programs() -> set[int]:
    r = subprocess.run(["bpftool", "prog", "show"], capture_output=True, text=True, timeout=30)
    return {int(line.split(":")[0]) for line in r.stdout.splitlines() if line[:1].isdigit()}


def _still_running(seen: dict[int, float]) -> list[str]:
    left = []
    for pid, created in seen.items():
        with contextlib.suppress(psutil.Error):
            p = psutil.Process(pid)
            if p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE:
                left.append(f"{pid} {' '.join(p.cmdline())[:120]}")
    return left


def _running(out: Path) -> set[str]:
    """The collectors the manifest says run, and "load" once the load command was started."""
    with contextlib.suppress(Exception):
        m = Bundle.open(out).manifest
        return {r.name for r in m.collectors if r.status == "running"} | ({"load"} if m.load is not None else set())
    return set()


def _capture_killed(argv: list[str], out: Path, sig: int, seed: int, *, again: bool = False,
                    want: frozenset[str] = frozenset({"cpu-stacks", "offcpu-stacks", "block-io"}),
                    progs: set[int] | None = None) -> tuple[int, str, dict[int, float], int]:
    """Start the verb, wait until its collectors run, sleep a random while, send ``sig`` (and once
    more shortly after with ``again``); the exit code, stderr, every process it had started, its pid."""
    rng = random.Random(seed)
    proc = subprocess.Popen([sys.executable, "-m", "profiler", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    seen: dict[int, float] = {}
    try:
        deadline = time.monotonic() + 60
        while not want <= _running(out):
            assert proc.poll() is None and time.monotonic() < deadline, f"seed {seed}: the capture never started"
            _descendants(proc.pid, seen)
            time.sleep(0.05)
        until = time.monotonic() + rng.uniform(0.0, 3.0)
        while True:
            _descendants(proc.pid, seen)
            if progs is not None:
                _bpf_programs([proc.pid, *seen], progs)
            if time.monotonic() >= until:
                break
            time.sleep(0.05)
        proc.send_signal(sig)
        if again:
            time.sleep(rng.uniform(0.05, 0.5))
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err.decode(errors="replace"), seen, proc.pid


def _instances_of(pid: int) -> list[str]:
    return [n for n in os.listdir(f"{TRACEFS}/instances") if n.startswith(f"profiler-{pid}-")]


def _check(out: Path, rc: int, err: str, seen: dict[int, float], sig: int, seed: int, pid: int) -> None:
    name = "Ctrl-C" if sig == signal.SIGINT else signal.Signals(sig).name
    why = f"seed {seed}, {name}: {err[-600:]}"
    assert rc == 128 + sig, why
    assert "Traceback" not in err and "internal error" not in err, why
    assert f"interrupted ({name})" in err, why
    b = Bundle.open(out)
    m = b.manifest
    assert m.status == "partial" and (m.reason or "").startswith(f"interrupted ({name})"), (m.status, m.reason, why)
    assert m.ended is not None, why
    cpu = m.collector("cpu-stacks")
    assert cpu is not None and cpu.status in ("ok", "partial") and cpu.files, (cpu, why)
    for rec in m.collectors:
        assert rec.status != "running", (rec.name, why)
        for f in rec.files:
            assert b.has(f), (f, why)
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp") or p.name.startswith(".")], why
    time.sleep(0.2)
    assert _still_running(seen) == [], why
    assert _instances_of(pid) == [], why
    # the bundle is readable: its report can be made
    rep = subprocess.run([sys.executable, "-m", "profiler", "report", str(out), "--format", "json"],
                         capture_output=True, text=True, timeout=300)
    assert rep.returncode == 0 and '"schema": "profiler.report"' in rep.stdout, (rep.stderr[-400:], why)


@pytest.mark.parametrize("name", sorted(SIGNALS))
def test_attach_killed_at_a_random_point_keeps_a_partial_bundle_and_leaves_nothing(tmp_path: Path, name: str) -> None:
    sig, seed = SIGNALS[name], time.time_ns()
    out = tmp_path / "cap"
    with target() as t:
        rc, err, seen, pid = _capture_killed(["attach", "--pid", str(t.pid), "-d", "60s", "-o", str(out),
                                              "--no-report"], out, sig, seed)
    _check(out, rc, err, seen, sig, seed, pid)


@pytest.mark.parametrize("name", sorted(SIGNALS))
def test_run_killed_at_a_random_point_stops_the_load_and_keeps_its_log(tmp_path: Path, name: str) -> None:
    sig, seed = SIGNALS[name], time.time_ns()
    out = tmp_path / "cap"
    marker = f"load-{os.getpid()}-{seed}"
    load = [sys.executable, "-u", "-c", f"import time  # {marker}\nwhile True:\n    print('tick', flush=True)\n    time.sleep(0.1)"]
    with target() as t:
        rc, err, seen, pid = _capture_killed(["run", "--pid", str(t.pid), "-o", str(out), "--no-report", "--", *load],
                                             out, sig, seed, want=frozenset({"cpu-stacks", "load"}))
    _check(out, rc, err, seen, sig, seed, pid)
    left = [p.pid for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info.get("cmdline") or [])]
    assert not left, f"seed {seed}: the load outlived the capture: {left}"
    m = Bundle.open(out).manifest
    assert m.load is not None and m.load.exit_code is not None and m.load.ended is not None
    assert "tick" in (out / "load.log").read_text()


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT"])
def test_a_second_signal_during_the_stop_does_not_cut_it(tmp_path: Path, name: str) -> None:
    sig, seed = SIGNALS[name], time.time_ns()
    out = tmp_path / "cap"
    with target() as t:
        rc, err, seen, pid = _capture_killed(["attach", "--pid", str(t.pid), "-d", "60s", "-o", str(out)],
                                             out, sig, seed, again=True)
    _check(out, rc, err, seen, sig, seed, pid)
    if sig == signal.SIGTERM:  # asked to end: the bundle counts, the report can be made later
        assert "the report was not written (SIGTERM)" in err


def test_instances_of_killed_captures_go_and_live_ones_stay(tmp_path: Path) -> None:
    """A later capture removes the tracefs instances a killed one left (its process is gone, or its
    pid now names another process) and never one whose owner still runs: others capture beside us."""
    from profiler.collectors.tracefs import instance

    root = Path(TRACEFS) / "instances"
    dead = next(p for p in range(4_000_000, 3_000_000, -1) if not os.path.exists(f"/proc/{p}"))
    me = os.getpid()
    mine = instance.start_ticks(me)
    tag = instance._pidns_tag()
    ns = f"-ns{tag}" if tag else ""
    made = {
        "gone": root / f"profiler-{dead}-s123-1{ns}",  # its process is gone
        "old-format gone": root / f"profiler-{dead}-2{ns}",  # an older version's name
        "pid reused": root / f"profiler-{me}-s{(mine or 0) + 1}-3{ns}",  # our pid, another start time
        "alive": root / f"profiler-{me}-s{mine}-4{ns}",  # this test process: alive
        "old-format alive": root / f"profiler-1-5{ns}",  # pid 1 runs
    }
    try:
        for p in made.values():
            p.mkdir()
        gone = set(instance.remove_stale_instances(TRACEFS))
        assert {made["gone"].name, made["old-format gone"].name, made["pid reused"].name} <= gone
        assert made["alive"].is_dir() and made["old-format alive"].is_dir()
        assert not gone & {made["alive"].name, made["old-format alive"].name}
    finally:
        for p in made.values():
            with contextlib.suppress(OSError):
                p.rmdir()


def _bcc_usable() -> str | None:
    if shutil.which("bpftool") is None:
        return "bpftool is not installed"
    from profiler.collectors.bcc.common import bcc_status

    ok, reason, _fix = bcc_status()
    return None if ok else reason


@pytest.mark.parametrize("name", ["SIGTERM", "SIGHUP"])
def test_attach_with_bcc_killed_leaves_no_bpf_program(tmp_path: Path, name: str) -> None:
    """The bcc backend's programs are the profiler's own (held by its file descriptors): after a
    SIGTERM or SIGHUP at a random point none of them is loaded any more."""
    why = _bcc_usable()
    if why:
        pytest.skip(f"the bcc backend cannot run here: {why}")
    sig, seed = SIGNALS[name], time.time_ns()
    out = tmp_path / "cap"
    progs: set[int] = set()
    with target() as t:
        rc, err, seen, pid = _capture_killed(["attach", "--backend", "bcc", "--pid", str(t.pid), "-d", "60s", "-o",
                                              str(out), "--no-report"], out, sig, seed,
                                             want=frozenset({"cpu-stacks", "offcpu-stacks", "syscalls"}), progs=progs)
    _check(out, rc, err, seen, sig, seed, pid)
    assert progs, f"seed {seed}: no BPF program seen in the capture: this test could not see a leftover"
    assert not progs & _loaded_programs(), f"seed {seed}: BPF programs left loaded: {sorted(progs & _loaded_programs())}"
