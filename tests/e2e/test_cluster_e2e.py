"""End to end: `profiler cluster` on namespaced hosts with their own sshd, real servers, real load (privileged).

Each host (tests/hosts.py) is a network + PID + mount namespace with its own sshd and no
profiler: /usr/local/bin, /work, /root, the repository and the venv are hidden, so the
capture code must be shipped over SSH and run under Debian's bare python3 (no psutil).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from profiler.bundle.cluster import load_cluster
from profiler.cli import main
from tests.hosts import Host, HostLab, host_lab  # noqa: F401 - the fixture

pytestmark = [pytest.mark.privileged, pytest.mark.slow]

CAPTURE = "8s"
# What a collector says when a busy host's buffers lost events: the bundle is partial, and a
# single-host capture exits 0 as perf does (docs/cli.md). Anything else in a reason is a fault.
LOSSES = re.compile(r"lost \d+ events|overrun|counted by perf stat|\d+ completions for \d+ issues")


def _ok_or_losses(status: str, reason: str | None) -> bool:
    """A node that came back whole: ok, or partial only by events lost on a busy host (its
    namespaced neighbours share one kernel and two CPUs with the rest of the suite)."""
    parts = [p for p in (reason or "").split("; ") if p]
    return status == "ok" or (status == "partial" and bool(parts) and all(LOSSES.search(p) for p in parts))


def _redis(h: Host) -> None:
    h.ssh(f"redis-server --bind {h.addr} --port 6379 --daemonize yes --save '' --appendonly no "
          f"--protected-mode no --dir /tmp --logfile /tmp/redis.log")


def _mariadb(h: Host) -> None:
    h.ssh("mariadb-install-db --no-defaults --datadir=/tmp/db --user=root --skip-test-db --skip-name-resolve "
          "> /tmp/install.log 2>&1", timeout=120)
    h.start_server(f"mariadbd --no-defaults --datadir=/tmp/db --user=root --bind-address={h.addr} --port=3306 "
                   f"--socket=/tmp/mysql.sock --skip-grant-tables --innodb-buffer-pool-size=32M --skip-log-bin --innodb-use-native-aio=0",
                   "/tmp/mariadb.log")


def _wait_port(h: Host, port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = h.inside(["ss", "-Hltn", f"sport = :{port}"])
        if f"{h.addr}:{port}" in r.stdout:
            return
        time.sleep(0.2)
    raise AssertionError(f"{h.name}: nothing listens on {port}")


def _cli(args: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(args)
    return code, out.getvalue()


def _leftovers(h: Host, servers: set[str]) -> list[str]:
    """What runs on the host besides its init, sshd and the servers the test started."""
    return [f"{comm} ({pid}): {cmd[:80]}" for pid, comm, cmd in h.processes()
            if comm not in servers | {"sshd", "sh", "cat", "tr"}]


def _our_instances(hosts: list[Host]) -> list[str]:
    """tracefs instances named after one of these hosts' PID namespaces (blockio's -ns<inode> suffix)."""
    tags = set()
    for h in hosts:
        if h.init_pid is not None:
            with contextlib.suppress(OSError):
                tags.add(f"-ns{os.stat(f'/proc/{h.init_pid}/ns/pid').st_ino}")
    with contextlib.suppress(OSError):
        return [n for n in os.listdir("/sys/kernel/tracing/instances") if any(n.endswith(t) for t in tags)]
    return []


def _no_workdir(h: Host) -> bool:
    r = h.inside(["/bin/sh", "-c", "ls -d /tmp/profiler-cluster.* 2>/dev/null || true"])
    return r.stdout.strip() == ""


def test_three_hosts_one_window_loaded_node_and_idle_peer(host_lab: HostLab, tmp_path: Path) -> None:  # noqa: F811
    kv1, kv2, sql1 = host_lab.add("kv1"), host_lab.add("kv2"), host_lab.add("sql1")
    # profiler is not installed on the hosts: neither the command nor the package
    for h in (kv1, kv2, sql1):
        r = h.ssh("command -v profiler; python3 -c 'import profiler' 2>&1; python3 -c 'import psutil' 2>&1", check=False)
        assert "/profiler" not in r.stdout and "No module named 'profiler'" in r.stdout, r.stdout
    _redis(kv1)
    _redis(kv2)
    _mariadb(sql1)
    # kv1's redis gets a quarter of a core: CPU-bound by its limit, however busy the shared machine is
    kv1.limit_cpu(kv1.pids_of("redis-server")[0], 0.25)
    for h, port in ((kv1, 6379), (kv2, 6379), (sql1, 3306)):
        _wait_port(h, port)
    out = tmp_path / "cap"
    t0 = time.monotonic()
    code, text = _cli([
        "cluster", "run", "--ssh-config", str(host_lab.ssh_config), "--connect-timeout", "3s",
        "--host", kv1.addr, "--role", "kv", "--pid", "redis-server",
        "--host", kv2.addr, "--role", "kv", "--pid", "redis-server",
        "--host", sql1.addr, "--role", "sql", "--pid", "mariadbd",
        "--collector", "perf-stat", "--collector", "procfs", "--collector", "cpu-stacks",
        "-d", CAPTURE, "-o", str(out), "--no-report", "--",
        # each call burns the server's one main thread in Lua while the client only waits: redis on kv1
        # is CPU-bound whatever else the shared host runs
        "redis-benchmark", "-h", kv1.addr, "-p", "6379", "-n", "100000000", "-c", "4", "-q",
        "eval", "local i = 0 while i < 20000 do i = i + 1 end return i", "0",
    ])
    took = time.monotonic() - t0
    assert code in (0, 130, 143), text  # the load is stopped at the end of the window
    m = load_cluster(out)
    assert m.status == "ok", m.reason
    assert [n.status for n in m.nodes] == ["ok", "ok", "ok"], [n.reason for n in m.nodes]
    for n in m.nodes:
        assert n.remote.shipped and n.remote.shipped_bytes > 10_000 and n.remote.profiler is None
        assert n.remote.psutil is False  # Debian's bare python3: the capture read /proc itself
        assert n.remote.left is None
        assert n.clock.uncertainty is not None and n.clock.uncertainty < 0.005
        assert n.clock.offset is not None and abs(n.clock.offset) < 0.05  # one kernel clock: the truth is 0
        assert n.start_skew is not None and 0 <= n.start_skew < 1.5
        assert (out / "nodes" / n.name / "manifest.json").is_file()
    skews = [n.start_skew for n in m.nodes if n.start_skew is not None]
    assert max(skews) - min(skews) < 0.5, skews  # one window: every node started within half a second
    print(f"\ncluster capture {took:.1f}s; start skew {[round(s * 1000) for s in skews]} ms; "
          f"clock ±{[round((n.clock.uncertainty or 0) * 1e6) for n in m.nodes]} us; "
          f"pulled {[n.pulled_bytes for n in m.nodes]} B in {[n.pull_seconds for n in m.nodes]} s")

    # nothing of ours left on any host: no agent, no perf, no work directory, no tracefs instance
    for h, servers in ((kv1, {"redis-server"}), (kv2, {"redis-server"}), (sql1, {"mariadbd"})):
        assert _leftovers(h, servers) == []
        assert _no_workdir(h)
    assert _our_instances([kv1, kv2, sql1]) == []

    code, text = _cli(["analyze", str(out)])
    assert code == 0, text
    assert (out / "report.html").is_file()
    for n in m.nodes:
        assert (out / "nodes" / n.name / "report.html").is_file()
    html = (out / "report.html").read_text()
    assert f'href="nodes/{m.nodes[0].name}/report.html"' in html
    code, text = _cli(["report", str(out), "--format", "json"])
    assert code == 0
    rep = json.loads(text)
    nodes = {n["name"]: n for n in rep["nodes"]}
    loaded, idle, sql = (nodes[f"{kv1.addr}-kv"], nodes[f"{kv2.addr}-kv"], nodes[f"{sql1.addr}-sql"])
    assert {k for k in loaded} >= {"host", "role", "targets", "verdict"}
    assert loaded["host"] == kv1.addr and loaded["role"] == "kv"
    assert loaded["targets"][0]["comm"] == "redis-server"
    assert loaded["verdict"]["category"] == "cpu", loaded["verdict"]["headline"]
    assert idle["verdict"]["category"] == "not_saturated", idle["verdict"]["headline"]
    assert sql["verdict"]["category"] == "not_saturated", sql["verdict"]["headline"]
    assert rep["verdict"]["limiting_tier"] == "kv" and rep["verdict"]["limiting_node"] == loaded["name"]
    imb = [i for i in rep["imbalances"] if i["role"] == "kv" and i["metric"] == "cpu_cores"]
    assert imb and imb[0]["busiest"] == loaded["name"] and imb[0]["idlest"] == idle["name"]
    assert "kv" in rep["flame_graphs"]  # the idle sql node may have no on-CPU sample at all


def test_host_down_and_sshd_dropping_leave_a_partial_bundle_and_nothing_running(host_lab: HostLab, tmp_path: Path) -> None:  # noqa: F811
    good, down, drop = host_lab.add("good"), host_lab.add("down"), host_lab.add("drop")
    _redis(good)
    _redis(drop)
    _wait_port(good, 6379)
    _wait_port(drop, 6379)
    down.remove()  # off the network: nothing answers at its address

    dropped: list[float] = []

    def drop_mid_capture() -> None:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            if any("profiler.pyz serve" in cmd for _pid, _comm, cmd in drop.processes()):
                time.sleep(4.0)  # the window is open by then (the other host's connect times out first)
                drop.drop_sshd()
                dropped.append(time.monotonic())
                return
            time.sleep(0.2)

    t = threading.Thread(target=drop_mid_capture, daemon=True)
    t.start()
    out = tmp_path / "cap"
    code, text = _cli([
        "cluster", "attach", "--ssh-config", str(host_lab.ssh_config), "--connect-timeout", "3s",
        "--host", good.addr, "--host", down.addr, "--host", drop.addr, "--role", "kv", "--pid", "redis-server",
        "--collector", "perf-stat", "--collector", "procfs", "--collector", "cpu-stacks", "--collector", "block-io",
        "-d", CAPTURE, "-o", str(out), "--no-report",
    ])
    t.join(30)
    assert dropped, "the test could not drop sshd mid-capture"
    assert code == 6, text  # partial, not failed: the good host's bundle is there
    m = load_cluster(out)
    by = {n.host: n for n in m.nodes}
    assert m.status == "partial"
    assert _ok_or_losses(by[good.addr].status, by[good.addr].reason), (by[good.addr].status, by[good.addr].reason)
    assert by[good.addr].dir == f"nodes/{good.addr}-kv"
    assert by[down.addr].status == "unreachable"
    assert "no SSH connection" in (by[down.addr].reason or "")
    assert by[down.addr].dir is None
    assert by[drop.addr].status == "lost", by[drop.addr].reason
    assert "dropped" in (by[drop.addr].reason or "")
    assert by[drop.addr].remote.left is not None  # its work directory: sshd is gone, nobody could remove it
    assert f"{down.addr}-kv: unreachable" in (m.reason or "") and f"{drop.addr}-kv: lost" in (m.reason or "")
    # the agent noticed its session died and ended itself: no agent, no perf, no tracefs instance
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and _leftovers(drop, {"redis-server"}):
        time.sleep(0.3)
    assert _leftovers(drop, {"redis-server"}) == []
    assert _leftovers(good, {"redis-server"}) == [] and _no_workdir(good)
    assert _our_instances([good, drop]) == []
    code, text = _cli(["analyze", str(out), "--no-html"])
    assert code == 0, text
    assert "unreachable" in text and "lost" in text


def test_ctrl_c_and_a_host_whose_perf_fails(host_lab: HostLab, tmp_path: Path) -> None:  # noqa: F811
    """Ctrl-C at the controller stops every node, pulls back what they have, and leaves nothing running;
    a host whose perf fails still gives its /proc evidence, marked partial with perf's own reason."""
    ok, broken = host_lab.add("ok"), host_lab.add("broken")
    for h in (ok, broken):
        _redis(h)
        _wait_port(h, 6379)
    fake = broken.dir / "perf"
    fake.write_text("#!/bin/sh\necho 'perf: simulated failure: cannot open events' >&2\nexit 1\n")
    fake.chmod(0o755)
    r = broken.inside(["mount", "--bind", "/mnt/perf", "/usr/bin/perf"])
    assert r.returncode == 0, r.stderr
    out = tmp_path / "cap"
    proc = subprocess.Popen(
        [sys.executable, "-m", "profiler", "cluster", "attach", "--ssh-config", str(host_lab.ssh_config),
         "--host", ok.addr, "--host", broken.addr, "--role", "kv", "--pid", "redis-server",
         "--collector", "perf-stat", "--collector", "procfs", "--collector", "cpu-stacks",
         "-d", "60s", "-o", str(out), "--no-report"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(c == "perf" for _p, c, _cmd in ok.processes()):
            time.sleep(0.2)
        time.sleep(2.0)
        proc.send_signal(signal.SIGINT)
        text, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    assert proc.returncode == 130, text
    assert "interrupted" in text
    m = load_cluster(out)
    by = {n.host: n for n in m.nodes}
    assert m.status == "partial" and "interrupted (Ctrl-C)" in (m.reason or "")
    assert by[ok.addr].status == "partial" and by[ok.addr].dir is not None
    assert "Ctrl-C" in (by[ok.addr].reason or "")
    assert by[broken.addr].status in ("partial", "failed") and by[broken.addr].dir is not None
    assert "simulated failure" in (by[broken.addr].reason or ""), by[broken.addr].reason
    assert (out / by[broken.addr].dir / "proc.jsonl.gz").is_file()  # its /proc evidence came back
    for h in (ok, broken):
        assert _leftovers(h, {"redis-server"}) == [] and _no_workdir(h)


def test_tiup_topology_two_instances_on_one_host(host_lab: HostLab, tmp_path: Path) -> None:  # noqa: F811
    """--topology: TiUP's layout (<deploy_dir>/<role>-<port>/bin/<server>), two tikv on one host told
    apart by their deploy directories, one node directory each."""
    a, b = host_lab.add("a"), host_lab.add("b")

    def server(h: Host, role: str, binary: str, port: int) -> None:
        d = f"/tmp/tidb-deploy/{role}-{port}"
        h.ssh(f"mkdir -p {d}/bin && cp /usr/bin/redis-server {d}/bin/{binary}")
        h.start_server(f"{d}/bin/{binary} --bind {h.addr} --port {port} --save '' --appendonly no", f"{d}/log")
        _wait_port(h, port)

    server(a, "tikv", "tikv-server", 20160)
    server(a, "tikv", "tikv-server", 20161)
    server(b, "pd", "pd-server", 2379)
    topo = tmp_path / "topology.yaml"
    topo.write_text(
        "global:\n  user: root\n  ssh_port: 22\n  deploy_dir: /tmp/tidb-deploy\n"
        f"pd_servers:\n  - host: {b.addr}\n"
        f"tikv_servers:\n  - host: {a.addr}\n    port: 20160\n  - host: {a.addr}\n    port: 20161\n"
        f"monitoring_servers:\n  - host: {b.addr}\n")
    out = tmp_path / "cap"
    code, text = _cli(["cluster", "attach", "--topology", str(topo), "--ssh-config", str(host_lab.ssh_config),
                       "--collector", "procfs", "-d", "2s", "-o", str(out)])
    assert code == 0, text
    m = load_cluster(out)
    assert m.status == "ok", m.reason
    by = {n.name: n for n in m.nodes}
    assert set(by) == {f"{b.addr}-pd", f"{a.addr}-tikv-20160", f"{a.addr}-tikv-20161"}
    pids = {name: [t["pid"] for t in n.resolved] for name, n in by.items()}
    assert all(len(p) == 1 for p in pids.values()), pids  # each instance found alone, by its deploy dir
    assert pids[f"{a.addr}-tikv-20160"] != pids[f"{a.addr}-tikv-20161"]
    for name in by:
        cmd = json.loads((out / "nodes" / name / "manifest.json").read_text())["targets"][0]["cmdline"]
        port = name.rsplit("-", 1)[1] if "tikv" in name else "2379"
        assert port in " ".join(cmd)
    assert "cluster verdict" in text  # the report ran at the end of the capture
    assert (out / "report.html").is_file()
