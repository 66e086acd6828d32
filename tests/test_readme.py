"""Every example command in README.md runs as written (issue 19: the README can never drift).

Examples are the lines of ```sh blocks and the ``$ `` lines of transcript blocks. Each block runs
in a fresh directory holding a `samples` link to the repository's samples (the README's
commands are run from a checkout), with the venv's `profiler` first on PATH; `sudo` is dropped
(the tests run as root: blocks that need root, perf or live targets are `privileged`). The live
targets the examples name are started here, real processes: a tikv-server (the TiKV-shaped
workload), fio writing with fsync, a redis-server on port 16379, an etcd on 127.0.0.1:23791, and a private mariadbd where
sysbench looks by default (/run/mysqld/mysqld.sock, user sbtest, database sbtest, prepared). Each command must exit 0,
print something when the README shows its output, and write the file it names with -o.
`bash install.sh ...` lines are what CI itself runs (.ci/run): checked there, not run twice.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from tests.conftest import ROOT, have_perf, is_root
from tests.report_schema import files_problems, validate

README = ROOT / "README.md"
# a row of attach's collector table, as the README shows it: "  server-status  ok      files..."
_ROW = re.compile(r"^  ([a-z][a-z-]+)\s+(ok|partial|skipped|failed)(?:\s|$)")
VENV_BIN = Path(sys.executable).parent
_PRIVILEGED = re.compile(r"(^|[|&]\s*)(sudo |perf |profiler (attach|run|demo|doctor)\b)")


@dataclass
class Example:
    command: str
    shows_output: bool = False
    collectors: dict[str, str] = field(default_factory=dict)  # the collector table rows it shows: name -> status


@dataclass
class Block:
    line: int  # where it starts in README.md
    examples: list[Example] = field(default_factory=list)

    @property
    def privileged(self) -> bool:
        return any(_PRIVILEGED.search(e.command) for e in self.examples)

    @property
    def id(self) -> str:
        return f"L{self.line}:" + re.sub(r"\W+", "-", self.examples[0].command)[:40]


def _strip_comment(cmd: str) -> str:
    # a comment is "  # ..." after the command (none of the commands holds a '#' of its own)
    return re.split(r"\s{2,}#\s", cmd, maxsplit=1)[0].rstrip()


def blocks() -> list[Block]:
    out: list[Block] = []
    lines = README.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        lang, start = m.group(1), i + 1
        j = start
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        body = lines[start:j]
        b = Block(line=start)
        for k, ln in enumerate(body):
            if lang == "sh":
                if ln.strip() and not ln.lstrip().startswith("#"):
                    b.examples.append(Example(_strip_comment(ln)))
            elif ln.startswith("$ "):
                nxt = body[k + 1] if k + 1 < len(body) else ""
                shown = []
                for later in body[k + 1:]:
                    if later.startswith("$ "):
                        break
                    shown.append(later)
                rows = dict(m.groups() for m in map(_ROW.match, shown) if m)
                b.examples.append(Example(_strip_comment(ln[2:]), shows_output=bool(nxt) and not nxt.startswith("$ ")
                                          and nxt.strip() != "...", collectors=rows))
        if b.examples:
            out.append(b)
        i = j + 1
    return out


BLOCKS = blocks()


def test_the_readme_has_examples() -> None:
    commands = [e.command for b in BLOCKS for e in b.examples]
    assert len(commands) >= 30
    for verb in ("doctor", "attach", "run", "analyze", "report", "flamegraph", "heatmap", "diff", "stat", "demo"):
        assert any(c.split()[:2] == ["profiler", verb] or f"profiler {verb} " in c for c in commands), verb


def test_install_lines_are_what_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    for e in (e for b in BLOCKS for e in b.examples if e.command.startswith("bash install.sh")):
        for part in e.command.split("&&"):
            part = part.strip()
            if part.startswith("bash install.sh --dev"):
                assert "bash install.sh --dev" in ci
            elif part.startswith(".venv/bin/python -m pytest"):
                assert ".venv/bin/python -m pytest -q" in ci
            elif part.startswith("bash install.sh"):
                assert (ROOT / "install.sh").is_file()
            else:  # what follows the install (profiler demo) runs below like any example
                assert part == "profiler demo", part


# ---------------------------------------------------------------------------------------------
# the live targets the examples name


def _spawn(argv: list[str], **kw: object) -> subprocess.Popen[bytes]:
    # its own session: fio forks its job, and the job must go with it (_stop kills the group)
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, **kw)  # type: ignore[call-overload]


def _stop(p: subprocess.Popen[bytes]) -> None:
    try:  # fio's job may leave its parent's process group: its descendants by name, then the group
        kids = psutil.Process(p.pid).children(recursive=True)
    except psutil.Error:
        kids = []
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, signal.SIGKILL)
    for k in kids:
        with contextlib.suppress(psutil.Error):
            k.kill()
    p.wait()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """tikv-server (TiKV-shaped), fio writing with fsync, redis-server on 16379, etcd on 23791."""
    if not (is_root() and have_perf()):
        pytest.skip("the live examples need root and perf (CI runs as root)")
    for tool in ("etcd", "fio", "redis-server", "redis-benchmark", "mariadbd", "mariadb-install-db", "mariadb", "sysbench"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (install.sh --dev installs it)")
    d = tmp_path_factory.mktemp("world")
    procs = [
        _spawn([sys.executable, str(ROOT / "tests" / "workloads" / "tikv_shaped.py"), "--duration", "900"]),
        _spawn(["fio", "--name=readme", f"--filename={d / 'fio.dat'}", "--size=16M", "--rw=randwrite", "--bs=4k",
                "--fsync=1", "--ioengine=psync", "--rate_iops=200", "--time_based", "--runtime=900"]),
        _spawn(["redis-server", "--port", "16379", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", str(d)]),
        _spawn(["etcd", "--name", "readme", "--data-dir", str(d / "etcd"), "--enable-pprof",
                "--listen-client-urls", "http://127.0.0.1:23791", "--advertise-client-urls", "http://127.0.0.1:23791",
                "--listen-peer-urls", "http://127.0.0.1:23801", "--initial-advertise-peer-urls", "http://127.0.0.1:23801",
                "--initial-cluster", "readme=http://127.0.0.1:23801"]),
    ]
    try:
        procs.append(_mariadb(d))
    except BaseException:  # pytest.fail is not an Exception: the started targets must not outlive it
        for p in procs:
            _stop(p)
        raise
    time.sleep(2)
    dead = [p.args for p in procs if p.poll() is not None]
    if dead:
        for p in procs:
            _stop(p)
        pytest.fail(f"could not start the README's targets: {dead} (are ports 16379, 23791 and 23801 free?)")
    yield d
    for p in procs:
        _stop(p)
    SOCKET.unlink(missing_ok=True)  # our mariadbd's, killed: no stale socket for the next run


SOCKET = Path("/run/mysqld/mysqld.sock")


def _socket_answers(path: Path) -> bool:
    """A socket file left by a MariaDB that died is not a server: only one that accepts counts."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        s.close()


def _mariadb(d: Path) -> subprocess.Popen[bytes]:
    """A private mariadbd (its own datadir) on sysbench's defaults: the default socket and port
    3306, user sbtest without a password, database sbtest with sysbench's table prepared."""
    if SOCKET.exists() and _socket_answers(SOCKET):
        pytest.fail(f"{SOCKET} exists: another MariaDB/MySQL runs here; the README's sysbench examples need its place")
    data = d / "mariadb"
    subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=root",
                    "--auth-root-authentication-method=normal", "--skip-test-db"],
                   check=True, capture_output=True, timeout=180)
    SOCKET.parent.mkdir(parents=True, exist_ok=True)
    p = _spawn([shutil.which("mariadbd") or "/usr/sbin/mariadbd", "--no-defaults", f"--datadir={data}",
                f"--socket={SOCKET}", "--port=3306", "--bind-address=127.0.0.1", "--user=root",
                f"--pid-file={d / 'mariadbd.pid'}", f"--log-error={d / 'mariadb.err'}", "--skip-log-bin",
                "--innodb-buffer-pool-size=128M", "--innodb-use-native-aio=0", "--max-connections=200"])
    sql = ["mariadb", f"--socket={SOCKET}", "-uroot", "-e"]
    deadline = time.monotonic() + 90
    while subprocess.run([*sql, "SELECT 1"], capture_output=True).returncode != 0:
        if p.poll() is not None or time.monotonic() > deadline:
            _stop(p)
            pytest.fail(f"mariadbd did not start: {(d / 'mariadb.err').read_text(errors='replace')[-500:]}")
        time.sleep(0.3)
    subprocess.run([*sql, "CREATE DATABASE sbtest; CREATE USER 'sbtest'@'localhost'; "
                    "GRANT ALL ON sbtest.* TO 'sbtest'@'localhost';"], check=True, capture_output=True)
    subprocess.run(["sysbench", "oltp_point_select", "prepare"], check=True, capture_output=True, timeout=300)
    return p


def _run_block(block: Block, cwd: Path) -> None:
    (cwd / "samples").symlink_to(ROOT / "samples")
    env = dict(os.environ, PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}", PYTHONPATH=str(ROOT),
               COLUMNS="120")
    env.pop("FORCE_COLOR", None)
    for e in block.examples:
        cmd = e.command
        if cmd.startswith("bash install.sh"):
            parts = [p.strip() for p in cmd.split("&&")[1:] if not p.strip().startswith(".venv/bin/python -m pytest")]
            if not parts:
                continue
            cmd = " && ".join(parts)
        cmd = re.sub(r"(^|\|\s*)sudo ", r"\1", cmd)
        proc = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"README line {block.line}: `{e.command}` exited {proc.returncode}:\n" \
                                     f"{proc.stdout[-1500:]}\n{proc.stderr[-1500:]}"
        if e.shows_output:
            assert (proc.stdout + proc.stderr).strip(), f"`{e.command}` printed nothing; the README shows output"
        got = dict(m.groups() for m in map(_ROW.match, proc.stdout.splitlines()) if m)
        for name, status in e.collectors.items():  # the table the README shows is the one it prints
            assert got.get(name) == status, f"README line {block.line}: `{e.command}` shows {name} {status}, " \
                                            f"printed {got.get(name, 'no such row')}:\n{proc.stdout[-1500:]}"
        for out in re.findall(r"(?:^|\s)-o\s+(\S+)", cmd):
            assert (cwd / out).exists(), f"`{e.command}` did not write {out}"
        if re.search(r"profiler report .*(--json|--format json)(\s|$)", cmd) and "|" not in cmd:
            validate(json.loads(proc.stdout))
    # the reports the examples wrote (made in child processes, out of conftest's reach) follow the
    # shipped schema too (conftest checks tmp_path again at the end of the test)
    bad = files_problems(cwd)
    assert not bad, "the README's reports break the schema:\n  " + "\n  ".join(bad[:20])


@pytest.mark.parametrize("block", [b for b in BLOCKS if not b.privileged], ids=lambda b: b.id)
def test_readme_block(block: Block, tmp_path: Path) -> None:
    _run_block(block, tmp_path)


@pytest.mark.privileged
@pytest.mark.parametrize("block", [b for b in BLOCKS if b.privileged], ids=lambda b: b.id)
def test_readme_block_as_root(block: Block, world: Path, tmp_path: Path) -> None:
    _run_block(block, tmp_path)
