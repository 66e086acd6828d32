"""Hostile options and inputs of the capture verbs (issue 27): refused at the parser, in one line.

Numbers no clock, size or width can hold (NaN, infinities, 10^400, dates at the ends of the
calendar), host names ssh would take as options, and topology files that are no files: each is
exit 2 with one `profiler: error:` line, before anything is created (no bundle, no temporary
directory), never exit 70 and never a manifest no verb can read.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from profiler.cli import main
from tests.cli.test_hostile import one_error_line, run
from tests.conftest import ROOT


@pytest.fixture
def target() -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc  # type: ignore[misc]
    proc.kill()
    proc.wait()


@pytest.mark.parametrize("start", ["0001-01-01", "9999-12-31T23:59:59", "mono:nan", "mono:inf", "mono:1e400", "@inf",
                                   "@1e400", "@nan", "@-1", "+1e400s", "+99999999999h", "soon"])
def test_load_start_no_clock_holds_is_exit_2_before_any_capture(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                 target: subprocess.Popen[bytes], start: str) -> None:
    log = tmp_path / "load.log"
    log.write_text("[ 1s ] thds: 4 tps: 100.00\n")
    out = tmp_path / "cap"
    code, _, err = run(capsys, "attach", "--pid", str(target.pid), "-d", "1s", "-o", str(out), "--no-report",
                       "--load-log", str(log), "--load-start", start)
    assert code == 2 and "--load-start" in one_error_line(err), err
    assert not out.exists()


@pytest.mark.parametrize("args", [
    ["--from", "@nan"], ["--from", "@inf"], ["--to", "@1e400"], ["--from", "@-3"], ["--from", "9" * 400 + "s"],
    ["--min-width", "nan"], ["--min-width", "inf"],
])
def test_flamegraph_times_and_widths_no_number_holds_are_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                args: list[str]) -> None:
    from tests.cli.test_hostile import SCRIPT

    code, _, err = run(capsys, "flamegraph", str(SCRIPT), "-o", str(tmp_path / "f.svg"), *args)
    assert code == 2, err
    one_error_line(err)
    assert not (tmp_path / "f.svg").exists()


@pytest.mark.parametrize("opt", ["--step-sec", "--step-lat", "--min-lat", "--max-lat"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e400"])
def test_every_float_option_refuses_nan_and_infinities(tmp_path: Path, capsys: pytest.CaptureFixture[str], opt: str,
                                                       value: str) -> None:
    from tests.cli.test_hostile import PERF_BUNDLE

    code, _, err = run(capsys, "heatmap", str(PERF_BUNDLE), opt, value, "-o", str(tmp_path / "h.svg"))
    assert code == 2 and opt in one_error_line(err), err


@pytest.mark.parametrize("verb_args", [
    ["attach", "-d", "9" * 400 + "s"], ["attach", "-d", "400d"], ["attach", "-d", "367d"], ["attach", "-d", "9000h"],
    ["attach", "--interval", "9" * 400], ["attach", "--interval", "2h"], ["attach", "--status-interval", "nan"],
    ["attach", "--status-interval", "300000h"], ["attach", "-F", "0"],
    ["attach", "-F", "99999999999999999999"], ["run", "-d", "inf"],
    ["attach", "--status-url", "http://[::1"], ["attach", "--status-url", "http://127.0.0.1:99999"],
    ["attach", "--status-url", "http://127.0.0.1:0"], ["attach", "--status-url", "9999999999=http://127.0.0.1:80"],
])
def test_capture_numbers_out_of_range_are_exit_2_before_any_capture(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                    target: subprocess.Popen[bytes],
                                                                    verb_args: list[str]) -> None:
    out = tmp_path / "cap"
    tail = ["--", "true"] if verb_args[0] == "run" else []
    code, _, err = run(capsys, *verb_args, "--pid", str(target.pid), "-o", str(out), "--no-report", *tail)
    assert code == 2, err
    assert not out.exists()


def _pcl() -> set[str]:
    return {n for n in os.listdir("/tmp") if n.startswith("pcl-")}


@pytest.mark.parametrize("host", ["x@-oProxyCommand", "-oProxyCommand=touch /tmp/pwned", "x@-l", "-x", "a@b@c",
                                  "host name", "h;id", "$(id)", "[::1", "x@"])
def test_a_host_ssh_would_take_as_an_option_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                   host: str) -> None:
    before = _pcl()
    out = tmp_path / "cl"
    code, _, err = run(capsys, "cluster", "attach", "--host", host, "--role", "tikv", "--pid", "tikv", "-d", "1s",
                       "-o", str(out))
    assert code == 2 and "--host" in one_error_line(err), err
    assert not out.exists() and _pcl() <= before


@pytest.mark.parametrize("field", ["user", "ssh_user"])
def test_a_topology_user_ssh_would_take_as_an_option_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                field: str) -> None:
    topo = tmp_path / "t.yaml"
    if field == "user":
        topo.write_text("global: {user: '-oProxyCommand=id'}\ntikv_servers: [{host: 10.0.0.1}]\n")
    else:
        topo.write_text("tikv_servers: [{host: 10.0.0.1, ssh_user: '-oProxyCommand=id'}]\n")
    code, _, err = run(capsys, "cluster", "attach", "--topology", str(topo), "-d", "1s", "-o", str(tmp_path / "cl"))
    assert code == 2 and "not a user name" in one_error_line(err), err


def _rss_of(args: list[str], timeout: float = 120) -> tuple[int, float, str]:
    """Run the CLI as a grandchild and read its peak RSS from wait4 (MB): tests/cli/test_hostile_load.py."""
    from tests.cli.test_hostile_load import rss_and_err

    return rss_and_err(args, timeout)


@pytest.mark.parametrize("kind", ["nested", "dev-zero", "fifo", "17MB", "directory", "aliases", "not-utf8"])
def test_a_topology_that_is_no_topology_is_one_line_in_bounded_time_and_memory(tmp_path: Path, kind: str) -> None:
    topo = tmp_path / "t.yaml"
    if kind == "nested":
        topo.write_text("tikv_servers: " + "[" * 100_000 + "]" * 100_000 + "\n")
    elif kind == "dev-zero":
        topo = Path("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(topo)
    elif kind == "17MB":
        topo.write_text("tikv_servers:\n" + "".join(f"  - host: 10.0.{i // 250 % 250}.{i % 250}\n"
                                                    for i in range(800_000)))
    elif kind == "directory":
        topo = tmp_path
    elif kind == "aliases":
        topo.write_text("x: &h {host: 10.0.0.1}\ntikv_servers:\n" + "  - *h\n" * 100_000)
    else:
        topo.write_bytes(b"tikv_servers: [{host: \xff\xfe}]\n")
    code, rss, err = _rss_of(["cluster", "attach", "--topology", str(topo), "-d", "1s", "-o", str(tmp_path / "cl")],
                             timeout=90)
    assert code == 2, err
    assert len([ln for ln in err.splitlines() if ln.startswith("profiler: error:")]) == 1, err
    assert "Traceback" not in err and rss < 500, (rss, err)
    assert not (tmp_path / "cl").exists()


def test_a_good_topology_still_reads(tmp_path: Path) -> None:
    from profiler.cluster.topology import load_topology

    topo = tmp_path / "t.yaml"
    topo.write_text("global: {user: tidb, ssh_port: 22, deploy_dir: /tidb-deploy}\n"
                    "tikv_servers: [{host: 10.0.1.1, port: 20160}, {host: 10.0.1.1, port: 20161}]\n"
                    "tidb_servers: [{host: 10.0.1.7}]\n")
    nodes, notes = load_topology(topo)
    assert [n.name for n in nodes] == ["10.0.1.7-tidb", "10.0.1.1-tikv-20160", "10.0.1.1-tikv-20161"]
    assert all(n.user == "tidb" for n in nodes) and notes == []


def test_main_returns_2_not_70_for_a_bad_size(capsys: pytest.CaptureFixture[str]) -> None:
    for size in ("inf", "nan", "1e400", "99999999999999999999999T"):
        assert main(["cluster", "attach", "--host", "10.0.0.1", "--role", "tikv", "--pid", "tikv",
                     "--max-node-size", size, "-o", "/nonexistent/x"]) == 2
        one_error_line(capsys.readouterr().err)


@pytest.mark.parametrize("value", ["nan,1", "1,inf", "1e400,1", "-1,1", "0,5"])
def test_diff_throughput_that_is_no_rate_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str) -> None:
    tiny = str(ROOT / "samples" / "folded" / "tiny.folded")
    code, _, err = run(capsys, "diff", tiny, tiny, "--throughput", value, "-o", str(tmp_path / "d.svg"))
    assert code == 2 and "--throughput" in err, err
    assert not (tmp_path / "d.svg").exists()
