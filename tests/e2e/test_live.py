"""`attach --live` in a real terminal (tmux): the running verdict redrawn during the capture, and
Ctrl-C still writing the bundle and the report; the live model's pieces on their own."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from profiler.collectors.bcc.common import bcc_status
from profiler.collectors.bcc.oncpu import leaf

from profiler.bundle import members
from profiler.cli.live import render
from profiler.usecases.live import LiveModel, Wait, _Member, pools_of
from tests.conftest import TESTS

WORKLOAD = TESTS / "bcc" / "workload.py"


def test_a_redraw_shows_the_verdict_its_evidence_waits_functions_and_load() -> None:
    m = LiveModel(elapsed=12.3, window=10.0, backend="bcc", category="lock_contention", score=0.9,
                  confidence="high (0.90)", headline="x (pid 1) is slowed by lock contention",
                  evidence=[("futex_wait_share", 0.79, "of busy-thread time", "4 busy threads")],
                  waits=[Wait("lock (futex)", "worker", "Mutex::lock <- Table::get", 3.5)],
                  oncpu={"worker": [("crc32", 0.5), ("memcpy [k]", 0.25)]},
                  load="load: sysbench at 9s: 1,234/s, p95 3.10 ms")
    text = "\n".join(render(m, 120))
    assert "verdict: LOCK CONTENTION" in text and "12s into the capture" in text
    assert re.search(r"futex_wait_share\s+79%\s+4 busy threads", text)
    assert "3.50  worker" in text and "Mutex::lock <- Table::get" in text
    assert "crc32 50%, memcpy [k] 25%" in text and "1,234/s" in text
    bad = LiveModel(elapsed=1, window=10, backend="bcc", category="cpu", headline="evil\x1b[2Jname\x07")
    assert "\x1b" not in "\n".join(render(bad, 80)) and "\x07" not in "\n".join(render(bad, 80))


def test_the_live_buffers_keep_only_the_window_and_the_lines_that_define_the_rest() -> None:
    m = _Member(members.OFFCPU_SLOTS)
    m.hear(b'{"kind":"header","t0":1.0}\n{"kind":"stack","id":0,"frames":"a"}\n{"kind":"slot","t":5.0,"rows":[]}\n'
           b'{"kind":"slot","t":15.0,"rows"')
    m.hear(b':[]}\n')
    m.trim(10.0)
    kinds = [json.loads(line)["kind"] for line in m.data().splitlines()]
    assert kinds == ["header", "stack", "slot"] and b'"t":15.0' in m.data()
    s = _Member(members.SYSCALLS)
    s.hear(b"time,tid,comm,syscall,count,total_ns\n5.0,1,x,read,3,9\n12.0,1,x,read,4,9\n")
    s.trim(10.0)
    assert s.data().splitlines() == [b"time,tid,comm,syscall,count,total_ns", b"12.0,1,x,read,4,9"]


def test_on_cpu_samples_name_the_kernel_function_or_the_user_one_and_group_by_pool() -> None:
    assert leaf(["copy_page_[k]", "do_fault_[k]"], ["memcpy"]) == "copy_page [k]"
    assert leaf(["[unknown]_[k]"], ["crc32", "main"]) == "crc32"  # sampled in user space
    assert leaf([], []) == "[unknown]"
    got = pools_of({("grpc-1", "a"): 3, ("grpc-2", "a"): 1, ("grpc-2", "b"): 4, ("raftstore", "c"): 1})
    assert list(got) == ["grpc", "raftstore"] and got["grpc"] == [("a", 0.5), ("b", 0.5)]


def _tmux(sock: str, *args: str) -> str:
    return subprocess.run(["tmux", "-L", sock, *args], capture_output=True, text=True, timeout=30).stdout


@pytest.mark.privileged
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (apt-get install tmux)")
@pytest.mark.skipif(os.geteuid() != 0 or not bcc_status()[0], reason="needs root and the bcc backend")
def test_attach_live_redraws_in_a_terminal_and_ctrl_c_keeps_the_bundle_and_report(tmp_path: Path) -> None:
    work = subprocess.Popen([sys.executable, str(WORKLOAD), "contend", "4", "300"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    sock = f"profiler-live-{os.getpid()}"
    out = tmp_path / "cap"
    done = tmp_path / "exit"
    try:
        assert work.stdout is not None
        pid = int(work.stdout.readline().split()[1])
        cmd = f"{sys.executable} -m profiler attach --live --pid {pid} -d 120s --interval 1s -o {out}; echo $? > {done}"
        _tmux(sock, "new-session", "-d", "-x", "120", "-y", "40", cmd)
        frames: list[str] = []
        last = screen = ""
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            screen = _tmux(sock, "capture-pane", "-p")
            m = re.search(r"profiler --live: (\d+)s into the capture", screen)
            if m and (not frames or frames[-1] != m.group(1)):
                frames.append(m.group(1))
            if (len(frames) >= 3 and "verdict: LOCK CONTENTION" in screen
                    and re.search(r"\d+\.\d\d\s+python\s+lock \(futex\)", screen)
                    and re.search(r"python\s+\S.* \d+%", screen.split("on-CPU functions")[-1])):
                last = screen
                break
            time.sleep(0.5)
        assert last, f"no running verdict with its waits and functions redrawn in the terminal: {frames}\n{screen}"
        assert [int(f) for f in frames] == sorted(int(f) for f in set(frames))  # newer moments, one after the other
        assert last.count("profiler --live:") == 1  # redrawn in place, not scrolled
        _tmux(sock, "send-keys", "C-c")
        deadline = time.monotonic() + 120
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert done.exists(), _tmux(sock, "capture-pane", "-p")
        assert done.read_text().strip() == "130"
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True, timeout=30)
        work.kill()
        work.wait()
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "partial" and "interrupted" in (m["reason"] or "")
    assert (out / "report.html").is_file() and (out / "offcpu.slots.jsonl.gz").is_file()
