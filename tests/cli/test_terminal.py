"""The terminal: colour and tables on a terminal, plain text in a pipe (the same words), progress
bars with a rate and the time left on stderr when it is a terminal, nothing for progress in a pipe."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from profiler.cli import main
from tests.conftest import SAMPLES

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
STAT = SAMPLES / "perf-stat" / "interval-hw-not-supported.csv"


def run_on_pty(argv: list[str], *, stdout_tty: bool, stderr_tty: bool, timeout: float = 120) -> tuple[str, str]:
    """Run the CLI with stdout and/or stderr on a pseudo-terminal (what a person sees)."""
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    env.update(COLUMNS="160", TERM="xterm-256color")
    proc = subprocess.Popen([sys.executable, "-m", "profiler", *argv], stdin=subprocess.DEVNULL,
                            stdout=slave if stdout_tty else subprocess.PIPE,
                            stderr=slave if stderr_tty else subprocess.PIPE, env=env)
    os.close(slave)
    tty_out = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r, _, _ = select.select([master], [], [], 0.2)
        if r:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            tty_out += chunk
        elif proc.poll() is not None:
            break
    piped = (proc.stdout or proc.stderr).read() if (proc.stdout or proc.stderr) else b""  # type: ignore[union-attr]
    proc.wait(timeout)
    os.close(master)
    assert proc.returncode == 0, (tty_out + piped).decode(errors="replace")[-2000:]
    text = tty_out.decode(errors="replace")
    other = piped.decode(errors="replace")
    return (text, other) if stdout_tty else (other, text)


def _words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z][\w:-]+", ANSI.sub("", text).replace("\r", " "))


def test_a_pipe_gets_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stat", str(STAT)]) == 0
    out = capsys.readouterr().out
    assert not ANSI.search(out)
    assert "task-clock" in out and "not supported" in out and "CPUs used on average" in out


@pytest.mark.parametrize("argv", [["stat", str(STAT)], ["analyze", str(SAMPLES / "io-fsync-fio"), "--no-html"]])
def test_a_terminal_gets_colour_with_the_same_words(argv: list[str]) -> None:
    on_tty, _ = run_on_pty(argv, stdout_tty=True, stderr_tty=False)
    piped = subprocess.run([sys.executable, "-m", "profiler", *argv], capture_output=True, text=True, timeout=120).stdout
    assert ANSI.search(on_tty), "no colour on a terminal"
    assert not ANSI.search(piped)
    assert set(_words(piped)) <= set(_words(on_tty)) | {"capturing"}


def test_progress_bars_on_a_terminal_only(tmp_path: Path) -> None:
    # about 60 MB of real perf script text: long enough to draw a bar
    one = (SAMPLES / "perf-script" / "mariadb-sysbench.txt").read_bytes()
    big = tmp_path / "big.perf.txt"
    with open(big, "wb") as fh:
        while fh.tell() < 60_000_000:
            fh.write(one)
    out_svg = tmp_path / "g.svg"
    _, err = run_on_pty(["flamegraph", str(big), "-o", str(out_svg)], stdout_tty=False, stderr_tty=True)
    plain = ANSI.sub("", err)
    assert "folding" in plain and "MB/s" in plain and "of" in plain  # task, rate, share of the total
    assert out_svg.stat().st_size > 0
    proc = subprocess.run([sys.executable, "-m", "profiler", "flamegraph", str(big), "-o", str(tmp_path / "h.svg")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "folding" not in proc.stderr and "wrote" in proc.stderr

