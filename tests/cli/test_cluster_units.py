"""The cluster engine's parts without a network: topology, clock offsets, pull-back checks, the cluster
manifest, the shipped zipapp under a bare python3, ssh's argv, and the cluster analysis on recorded bundles."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from profiler.bundle.cluster import (
    ClusterManifest,
    NodeRecord,
    check_node_dir,
    load_cluster,
    node_name,
    parse_cluster_manifest,
    write_cluster_manifest,
)
from profiler.cli import main
from profiler.cluster import clock, pull, topology, zipapp
from profiler.cluster.ssh import SshHost, SshOptions
from profiler.errors import BundleError, UsageError
from tests.conftest import ROOT

SAMPLES = ROOT / "samples"
BARE_PYTHON = "/usr/bin/python3"

TIUP = """
global:
  user: "tidb"
  ssh_port: 2222
  deploy_dir: "/tidb-deploy"
monitored:
  node_exporter_port: 9100
pd_servers:
  - host: 10.0.1.4
tidb_servers:
  - host: 10.0.1.7
    port: 4000
    status_port: 10080
tikv_servers:
  - host: 10.0.1.1
    port: 20160
    status_port: 20180
  - host: 10.0.1.1
    port: 20161
    status_port: 20181
    ssh_port: 22
  - host: 10.0.1.2
grafana_servers:
  - host: 10.0.1.9
"""


# --------------------------------------------------------------------------- topology


def test_tiup_topology_gives_one_node_per_instance() -> None:
    import yaml

    nodes, notes = topology.from_topology(yaml.safe_load(TIUP))
    names = [n.name for n in nodes]
    assert names == ["10.0.1.4-pd", "10.0.1.7-tidb", "10.0.1.1-tikv-20160", "10.0.1.1-tikv-20161", "10.0.1.2-tikv"]
    pd, tidb, kv1, kv2, kv3 = nodes
    assert pd.user == "tidb" and pd.port == 2222 and pd.targets[0].query == "pd-server"
    assert tidb.status_port == 10080 and tidb.targets[0].query == "tidb-server"
    # two tikv on one host: each narrowed to its own deploy directory (TiUP's default layout)
    assert kv1.targets[0].deploy_dir == "/tidb-deploy/tikv-20160" and kv2.targets[0].deploy_dir == "/tidb-deploy/tikv-20161"
    assert kv2.port == 22  # the instance's ssh_port wins over global
    assert any(n.startswith("grafana_servers") for n in notes)


@pytest.mark.parametrize("text, why", [
    ("[1, 2]", "expected a mapping"),
    ("tikv_servers: [{port: 1}]", "has no host"),
    ("tikv_servers: [{host: '-oProxyCommand=x'}]", "not a host name"),
    ("global: {ssh_port: 70000}\ntikv_servers: [{host: a}]", "port number"),
    ("grafana_servers: [{host: a}]", "names no pd_servers"),
])
def test_bad_topologies_are_one_line_usage_errors(text: str, why: str) -> None:
    import yaml

    with pytest.raises(UsageError, match=why):
        topology.from_topology(yaml.safe_load(text))


def test_host_flags_pair_by_position_or_apply_to_all() -> None:
    nodes = topology.from_flags(["tidb@10.0.0.1:2200", "10.0.0.2", "[fe80::1]:22"], ["tikv"], ["tikv-server,1234"])
    assert [(n.user, n.host, n.port, n.role) for n in nodes] == [
        ("tidb", "10.0.0.1", 2200, "tikv"), (None, "10.0.0.2", None, "tikv"), (None, "fe80::1", 22, "tikv")]
    assert [t.query for t in nodes[0].targets] == ["tikv-server", "1234"]
    with pytest.raises(UsageError, match="one --role per --host"):
        topology.from_flags(["a", "b", "c"], ["x", "y"], ["p"])
    with pytest.raises(UsageError, match=r"\[USER@\]HOST"):
        topology.from_flags(["-oProxyCommand=sh"], ["r"], ["p"])
    assert node_name("fe80::1", "tikv") == "fe80_1-tikv"


# --------------------------------------------------------------------------- clock


def test_clock_offset_keeps_the_shortest_round_trip() -> None:
    samples = [clock.Sample(sent=100.0, remote=105.2, received=100.2),  # rtt 0.2
               clock.Sample(sent=101.0, remote=106.0101, received=101.002),  # rtt 0.002: the best
               clock.Sample(sent=102.0, remote=107.5, received=101.9)]  # the clock went back: ignored
    est = clock.estimate(samples)
    assert est is not None
    assert est.offset == pytest.approx(5.0091, abs=1e-6)
    assert est.uncertainty == pytest.approx(0.001) and est.samples == 2
    assert clock.estimate([]) is None


# --------------------------------------------------------------------------- pull-back


def _tar(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    buf.seek(0)
    return buf


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    return info


def test_pull_refuses_what_would_leave_the_node_directory(tmp_path: Path) -> None:
    stream = _tar([
        (_member("manifest.json"), b"{}"),
        (_member("../escape.txt"), b"x"),
        (_member("/etc/evil"), b"x"),
        (_member("nested/../../up"), b"x"),
        (_member("link", tarfile.SYMTYPE, "/etc/passwd"), None),
        (_member("hard", tarfile.LNKTYPE, "manifest.json"), None),
        (_member("dev", tarfile.CHRTYPE), None),
        (_member("a/b/c/d/e/too-deep"), b"x"),
        (_member("big.bin"), b"y" * 2000),
        (_member("sub/ok.csv"), b"1,2\n"),
    ])
    dest = tmp_path / "nodes" / "n1"
    dest.parent.mkdir()
    res = pull.extract(stream, dest, max_total=10_000, max_file=1000)
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == ["manifest.json", "sub/ok.csv"]
    assert res.files == 2 and res.error is None
    whys = " ".join(res.refused)
    for word in ("leaves the bundle", "absolute path", "not a regular file", "too deep", "limit per file"):
        assert word in whys
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "up").exists()


def test_pull_stops_at_the_node_limit_and_keeps_a_cut_stream(tmp_path: Path) -> None:
    stream = _tar([(_member(f"f{i}"), b"z" * 600) for i in range(5)])
    res = pull.extract(stream, tmp_path / "n", max_total=1500, max_file=1000)
    assert res.files == 2 and res.bytes == 1200 and sum("limit for the node" in r for r in res.refused) == 3
    data = _tar([(_member("a"), b"1" * 5000)]).getvalue()
    res = pull.extract(io.BytesIO(data[:2048]), tmp_path / "cut", max_total=10**6, max_file=10**6)
    assert res.error is not None  # a cut stream says so


# --------------------------------------------------------------------------- manifest


def test_cluster_manifest_round_trips_and_refuses_paths_out_of_nodes(tmp_path: Path) -> None:
    m = ClusterManifest(nodes=[NodeRecord(name="h-kv", host="h", role="kv", dir="nodes/h-kv", status="ok")])
    write_cluster_manifest(tmp_path, m)
    back = load_cluster(tmp_path)
    assert back.nodes[0].dir == "nodes/h-kv" and back.nodes[0].clock.offset is None
    for bad in ("../x", "nodes/../x", "nodes/a/b", "/etc", "nodes/.."):
        with pytest.raises(BundleError):
            check_node_dir(bad)
    data = json.loads(m.to_json())
    data["nodes"][0]["dir"] = "nodes/../../etc"
    with pytest.raises(BundleError, match="outside nodes/"):
        parse_cluster_manifest(json.dumps(data))
    data["version"] = 99
    with pytest.raises(BundleError, match="newer profiler"):
        parse_cluster_manifest(json.dumps(data))


def test_analyze_refuses_a_node_directory_outside_the_bundle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = ClusterManifest(nodes=[NodeRecord(name="h-kv", host="h", role="kv", dir="nodes/h-kv", status="ok")])
    (tmp_path / "nodes").mkdir()
    (tmp_path / "nodes" / "h-kv").symlink_to(SAMPLES / "idle-not-saturated")
    write_cluster_manifest(tmp_path, m)
    code = main(["analyze", str(tmp_path), "--no-html"])
    err = capsys.readouterr().err
    assert code != 0 and "outside the cluster bundle" in err and "Traceback" not in err


# --------------------------------------------------------------------------- what is shipped


def test_zipapp_holds_only_the_capture_path() -> None:
    names = [n for n, _ in zipapp.files()]
    assert "profiler/cluster/agent.py" in names and "profiler/capture/session.py" in names
    assert not [n for n in names if n.startswith(("profiler/analyzers", "profiler/renderers", "profiler/cli",
                                                    "profiler/usecases", "profiler/templates"))]
    assert zipapp.build() == zipapp.build()  # deterministic


@pytest.mark.skipif(not Path(BARE_PYTHON).exists(), reason="needs Debian's /usr/bin/python3")
def test_zipapp_runs_under_a_bare_python3_without_third_party_modules(tmp_path: Path) -> None:
    pyz = tmp_path / "profiler.pyz"
    pyz.write_bytes(zipapp.build())
    # -I -S: no site-packages at all, as on a host with nothing but python3
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import profiler.cluster.agent as a; a._import_everything(); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'numpy', 'typer', 'jinja2', 'psutil', 'yaml', 'click'}))")
    r = subprocess.run([BARE_PYTHON, "-I", "-S", "-c", code, str(pyz)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


@pytest.mark.skipif(not Path(BARE_PYTHON).exists(), reason="needs Debian's /usr/bin/python3")
def test_agent_captures_without_psutil_and_ends_when_its_input_closes(tmp_path: Path) -> None:
    """The agent under a bare python3: resolve a target by name from /proc, capture with the procfs
    collector (no root needed), report done; then stdin closes and it exits on its own."""
    pyz = tmp_path / "profiler.pyz"
    pyz.write_bytes(zipapp.build())
    work = tmp_path / "w"
    work.mkdir()
    target = subprocess.Popen(["sleep", "30"])
    agent = subprocess.Popen([BARE_PYTHON, "-I", "-S", "-u", str(pyz), "serve", "--workdir", str(work)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert agent.stdin is not None and agent.stdout is not None
        hello = json.loads(agent.stdout.readline())
        assert hello["event"] == "hello" and hello["psutil"] is False
        agent.stdin.write(json.dumps({"op": "capture", "targets": [{"query": str(target.pid)}],
                                      "start_at": time.time() + 0.3, "duration": 1.0, "collectors": ["procfs"]}) + "\n")
        agent.stdin.flush()
        events = {}
        for line in agent.stdout:
            ev = json.loads(line)
            events[ev["event"]] = ev
            if ev["event"] == "done":
                break
        assert events["targets"]["targets"][0]["comm"] == "sleep"
        assert events["done"]["status"] == "ok", events["done"]
        assert events["started"]["wall"] >= events["done"]["ended_wall"] - 5
        agent.stdin.close()  # the SSH session is gone
        assert agent.wait(10) == 0
        r = subprocess.run([BARE_PYTHON, "-I", "-S", str(pyz), "pack", str(work / "bundle")], capture_output=True, timeout=30)
        with tarfile.open(fileobj=io.BytesIO(r.stdout)) as tar:
            assert "manifest.json" in tar.getnames()
    finally:
        for p in (agent, target):
            if p.poll() is None:
                p.kill()
            p.wait(5)


# --------------------------------------------------------------------------- ssh


def test_ssh_checks_host_keys_and_never_asks_for_a_password(tmp_path: Path) -> None:
    h = SshHost("10.0.0.1", user="tidb", port=2222, control_dir=tmp_path,
                options=SshOptions(config=tmp_path / "cfg", known_hosts=tmp_path / "kh"))
    argv = h.argv(command="echo hi")
    text = " ".join(argv)
    for opt in ("StrictHostKeyChecking=yes", "BatchMode=yes", "PasswordAuthentication=no",
                "PreferredAuthentications=publickey", "ForwardAgent=no", f"UserKnownHostsFile={tmp_path / 'kh'}"):
        assert opt in text
    assert argv[-2:] == ["10.0.0.1", "echo hi"] and argv[1:3] == ["-F", str(tmp_path / "cfg")]
    assert "-M" not in argv  # -M after ControlMaster=yes would mean "ask"
    with pytest.raises(UsageError):
        SshHost("-oProxyCommand=x")


# --------------------------------------------------------------------------- the analysis, on recorded bundles


def _cluster_of(tmp_path: Path, nodes: list[tuple[str, str, str | None, str]]) -> Path:
    """A cluster bundle made of sample bundles: (host, role, sample or None, status)."""
    root = tmp_path / "cluster"
    (root / "nodes").mkdir(parents=True)
    m = ClusterManifest(status="partial", created="2026-01-01T00:00:00+0000")
    for host, role, sample, status in nodes:
        name = node_name(host, role)
        rec = NodeRecord(name=name, host=host, role=role, targets=["x"], status=status,
                         reason=None if sample else "no SSH connection: Connection timed out")
        if sample is not None:
            shutil.copytree(SAMPLES / sample, root / "nodes" / name)
            with contextlib.suppress(FileNotFoundError):
                (root / "nodes" / name / "report.html").unlink()
            if sample == "cpu-bound-stress-ng":  # recorded stacks for its on-CPU flame graph (a Rust server's)
                with gzip.open(root / "nodes" / name / "cpu.perf.txt.gz", "wb") as fh:
                    fh.write((SAMPLES / "perf-script" / "rust-legacy.txt").read_bytes())
            rec.dir = f"nodes/{name}"
            rec.clock.offset, rec.clock.uncertainty, rec.start_skew = 0.0012, 0.0001, 0.05
        m.nodes.append(rec)
    write_cluster_manifest(root, m)
    return root


def test_cluster_report_names_the_limiting_tier_the_loaded_node_and_the_idle_peer(tmp_path: Path) -> None:
    root = _cluster_of(tmp_path, [("10.0.0.1", "tikv", "cpu-bound-stress-ng", "ok"),
                                  ("10.0.0.2", "tikv", "idle-not-saturated", "ok"),
                                  ("10.0.0.3", "pd", "idle-not-saturated", "ok"),
                                  ("10.0.0.4", "tidb", None, "unreachable")])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["analyze", str(root)]) == 0
    text = out.getvalue()
    assert "limiting tier: tikv" in text and "unreachable" in text
    html = (root / "report.html").read_text()
    assert 'href="nodes/10.0.0.1-tikv/report.html"' in html and (root / "nodes/10.0.0.1-tikv/report.html").is_file()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["report", str(root), "--format", "json"]) == 0
    rep = json.loads(out.getvalue())
    assert rep["schema"] == "profiler.cluster-report"
    by = {n["name"]: n for n in rep["nodes"]}
    assert set(by["10.0.0.1-tikv"]) >= {"host", "role", "targets", "verdict"}
    assert by["10.0.0.1-tikv"]["verdict"]["category"] == "cpu"
    assert by["10.0.0.2-tikv"]["verdict"]["category"] == "not_saturated"
    assert by["10.0.0.4-tidb"]["verdict"] is None and by["10.0.0.4-tidb"]["status"] == "unreachable"
    assert rep["verdict"]["limiting_tier"] == "tikv" and rep["verdict"]["limiting_node"] == "10.0.0.1-tikv"
    imb = [i for i in rep["imbalances"] if i["metric"] == "cpu_cores"]
    assert imb[0]["busiest"] == "10.0.0.1-tikv" and imb[0]["idlest"] == "10.0.0.2-tikv"
    assert rep["flame_graphs"] == ["tikv"]  # only the tikv node has stacks
    assert "On-CPU flame graph per role" in html and html.count('<iframe class="artifact"') == 1
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["report", str(root), "--format", "md"]) == 0
    assert "| 10.0.0.4-tidb | tidb | unreachable |" in out.getvalue()


def test_cluster_verbs_refuse_bad_options(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["cluster", "attach", "--host", "a", "-o", str(tmp_path / "x")]) != 0
    assert "--role and --pid" in capsys.readouterr().err
    assert main(["cluster", "attach", "--host", "a", "--host", "b", "--role", "r", "--pid", "p", "--pid", "q",
                 "--pid", "z", "-o", str(tmp_path / "x")]) != 0
    assert "one --pid per --host" in capsys.readouterr().err
    bad = tmp_path / "t.yaml"
    bad.write_text("tikv_servers: [oops")
    assert main(["cluster", "attach", "--topology", str(bad), "-o", str(tmp_path / "x")]) != 0
    assert "not valid YAML" in capsys.readouterr().err
    assert main(["cluster", "run", "--host", "a", "--role", "r", "--pid", "p"]) != 0
    assert "no load command" in capsys.readouterr().err


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__]))
