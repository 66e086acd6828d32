"""End to end: real podman containers as targets (`attach --container`, `--pid` naming a container).

Each test builds its image from this host's own binaries (tests/containers.py: no registry), runs a
real program inside under a limit, captures it by the container's name or id, and checks what the
bundle and the verdict say against what the runtime and the kernel say on their own (podman
inspect, the container's cgroup files): the limits, the binary that exists only inside the
container named in the stacks, the category. Needs root, perf, tracefs and podman.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from profiler.collectors import containers as ctr

from profiler.bundle import Bundle
from profiler.cli import main
from tests import containers as lab_mod
from tests.workloads import gobuild

pytestmark = [
    pytest.mark.privileged,
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CI runs as root)"),
    pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed"),
    pytest.mark.skipif(lab_mod.why_not() is not None, reason=lab_mod.why_not() or ""),
]

APP = "/srv/app/goworkload-ctr"  # a path that exists only inside the image


@pytest.fixture
def lab() -> Iterator[tuple[lab_mod.Lab, str]]:
    """The lab and an image holding the Go workload at APP."""
    try:
        binary = gobuild.build()
    except (FileNotFoundError, RuntimeError) as exc:
        pytest.skip(f"the Go workload cannot be built: {exc}")
    lab = lab_mod.Lab()
    try:
        yield lab, lab.image({APP: binary})
    finally:
        lab.close()


def _cgroup_v1(cid_path: str, controller: str) -> Path:
    return Path("/sys/fs/cgroup") / controller / cid_path.lstrip("/")


def _root_disk() -> tuple[str, str] | None:
    """(/dev/NAME, MAJ:MIN) of the disk holding /, for a blkio limit; None when it is not a plain disk."""
    dev = os.stat("/").st_dev
    majmin = f"{os.major(dev)}:{os.minor(dev)}"
    for name in os.listdir("/sys/block"):
        if Path(f"/sys/block/{name}/dev").read_text().strip() == majmin and os.path.exists(f"/dev/{name}"):
            return f"/dev/{name}", majmin
    return None


def _report(out: Path) -> dict:
    rj = out.parent / f"{out.name}.json"
    assert main(["report", str(out), "--format", "json", "-o", str(rj), "--force"]) == 0
    return json.loads(rj.read_text())


def test_container_pinned_by_cpuset(lab: tuple[lab_mod.Lab, str], tmp_path: Path) -> None:
    """Two goroutines burning CPU with GOMAXPROCS=2 in a container pinned to CPU 0: they want two
    cores and may use one."""
    lab_, image = lab
    r = lab_.run(image, [APP, "-mode", "cpu", "-workers", "2", "-stdin-exit=false"],
                cpuset="0", env={"GOMAXPROCS": "2"}, lifetime=120)
    assert lab_.inspect(r.id, "{{.HostConfig.CpusetCpus}}") == "0"  # the runtime's own account
    assert not os.path.exists(APP)
    out = tmp_path / "cap"
    rc = main(["attach", "--container", r.name, "-d", "6s", "-o", str(out), "--no-report",
               "--collector", "procfs", "--collector", "cpu-stacks", "--collector", "offcpu-stacks"])
    assert rc == 0
    m = Bundle.open(out).manifest
    assert [t.pid for t in m.targets] == [r.pid]
    t = m.targets[0]
    ci = t.container_info
    assert ci is not None and ci.runtime == "podman" and ci.id == r.id and ci.name == r.name
    assert ci.image and ci.image.startswith("localhost/profiler-test-")
    assert t.cgroup.get("cpuset") == "0" and t.cgroup.get("cpuset_cpus") == [0] and t.cpus_allowed == [0]
    assert (_cgroup_v1(ci.cgroup, "cpuset") / "cpuset.cpus").read_text().strip() == "0"
    # symbols of a binary that exists only in the container's root filesystem
    frames = [ln for ln in Bundle.open(out).iter_lines("cpu.perf.txt.gz") if ln.startswith("\t") and f"({APP})" in ln]
    assert any("main.burnCPU" in ln for ln in frames), frames[:5]
    rep = _report(out)
    v = rep["verdict"]
    assert v["category"] == "cpu", v["headline"]
    notes = " ".join(e["note"] for e in v["evidence"])
    assert "(pinned to CPU 0 by cpuset)" in notes, notes
    # it wants two cores and may use one: the pin is the sub-cause, whoever else runs on CPU 0
    assert f"is CPU-bound: pinned to CPU 0 by cpuset (podman container {r.name}): wants " in v["headline"], v["headline"]
    assert "of the 1 it may use" in v["headline"]


def test_container_under_a_cpu_quota_found_by_id_prefix(lab: tuple[lab_mod.Lab, str], tmp_path: Path) -> None:
    """The same program under --cpus 0.2 (a CFS quota of 20 ms per 100 ms), named by `--pid ID-PREFIX`."""
    lab_, image = lab
    disk = _root_disk()
    r = lab_.run(image, [APP, "-mode", "cpu", "-workers", "2", "-stdin-exit=false"],
                 cpus=0.2, env={"GOMAXPROCS": "2"}, lifetime=120, memory="256m",
                 extra=["--device-write-bps", f"{disk[0]}:1mb"] if disk else [])
    assert lab_.inspect(r.id, "{{.HostConfig.NanoCpus}}") == "200000000"
    cg = ctr.process_ref(r.pid)
    assert cg is not None and cg.id == r.id
    stat = _cgroup_v1(cg.path, "cpu") / "cpu.stat"
    before = {k: int(v) for k, v in (ln.split() for ln in stat.read_text().splitlines())}
    out = tmp_path / "cap"
    rc = main(["attach", "--pid", r.id[:10], "-d", "6s", "-o", str(out), "--no-report",
               "--collector", "procfs", "--collector", "cpu-stacks"])
    assert rc == 0
    after = {k: int(v) for k, v in (ln.split() for ln in stat.read_text().splitlines())}
    throttled = (after["nr_throttled"] - before["nr_throttled"]) / max(1, after["nr_periods"] - before["nr_periods"])
    m = Bundle.open(out).manifest
    t = m.targets[0]
    assert t.container_info is not None and t.container_info.id == r.id
    assert t.cgroup.get("cpu_quota_us") == 20000 and t.cgroup.get("cpu_period_us") == 100000
    # the other limits, as the runtime set them
    assert t.cgroup.get("memory_limit_bytes") == int(lab_.inspect(r.id, "{{.HostConfig.Memory}}")) == 256 << 20
    if disk:
        assert t.cgroup.get("blkio_throttle") == {"write_bps": {disk[1]: 1 << 20}}
    rep = _report(out)
    v = rep["verdict"]
    assert v["category"] == "cpu", v["headline"]
    notes = " ".join(e["note"] for e in v["evidence"])
    assert "cgroup CPU quota 0.20 cores" in notes, notes
    assert f"podman container {r.name}" in v["headline"], v["headline"]
    throttled_words, capped_words = "cgroup CPU quota: throttled in", "held to 0.20 cores by its cgroup CPU quota"
    assert throttled_words in v["headline"] or capped_words in v["headline"], v["headline"]
    # the kernel's own account decides which, away from the rule's threshold (20% of periods)
    if throttled >= 0.5:
        assert throttled_words in v["headline"], (throttled, v["headline"])
    elif throttled < 0.05:  # a busy host gave it less than its quota: the quota still caps what it wants
        assert capped_words in v["headline"], (throttled, v["headline"])


def test_unknown_container_is_one_line_with_what_runs(lab: tuple[lab_mod.Lab, str], tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    lab_, image = lab
    r = lab_.run(image, [APP, "-mode", "idle", "-workers", "1", "-stdin-exit=false"], lifetime=60)
    time.sleep(0.3)
    rc = main(["attach", "--container", "no-such-container-here", "-d", "1s", "-o", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert rc == 3, err
    assert "no running container matches 'no-such-container-here'" in err and "running: " in err
    assert r.name in err or ", ..." in err  # the running ones are named (the first six)
    assert not (tmp_path / "x").exists()
    lab_.podman("stop", "-t", "0", r.id)
    rc = main(["attach", "--container", r.name, "-d", "1s", "-o", str(tmp_path / "y")])
    err = capsys.readouterr().err
    assert rc == 3 and f"container {r.name} (podman {r.id[:12]}) is not running" in err, err


@pytest.mark.skipif(lab_mod.docker_why_not() is not None, reason=lab_mod.docker_why_not() or "")
def test_docker_container_pinned_by_cpuset_found_by_name(tmp_path: Path) -> None:
    """Seed 001's setup with docker itself: a private dockerd, the Go workload in a container pinned
    by --cpuset-cpus 0, named from dockerd's own state (its --data-root, config.v2.json)."""
    try:
        binary = gobuild.build()
    except (FileNotFoundError, RuntimeError) as exc:
        pytest.skip(f"the Go workload cannot be built: {exc}")
    lab = lab_mod.DockerLab()
    try:
        r = lab.run(lab.image({APP: binary}), [APP, "-mode", "cpu", "-workers", "2", "-stdin-exit=false"],
                    cpuset="0", env={"GOMAXPROCS": "2"})
        assert lab.inspect(r.id, "{{.HostConfig.CpusetCpus}}") == "0"
        out = tmp_path / "cap"
        rc = main(["attach", "--container", r.name, "-d", "6s", "-o", str(out), "--no-report",
                   "--collector", "procfs", "--collector", "cpu-stacks", "--collector", "offcpu-stacks"])
        assert rc == 0
        t = Bundle.open(out).manifest.targets[0]
        ci = t.container_info
        assert ci is not None and (ci.runtime, ci.id, ci.name) == ("docker", r.id, r.name)
        assert ci.state is not None and ci.state.endswith(f"/containers/{r.id}/config.v2.json")
        assert ci.cgroup == f"/docker/{r.id}" and t.cgroup.get("cpuset_cpus") == [0]
        frames = [ln for ln in Bundle.open(out).iter_lines("cpu.perf.txt.gz") if f"({APP})" in ln]
        assert any("main.burnCPU" in ln for ln in frames), frames[:5]
        v = _report(out)["verdict"]
        assert v["category"] == "cpu", v["headline"]
        assert f"pinned to CPU 0 by cpuset (docker container {r.name}): wants " in v["headline"], v["headline"]
    finally:
        lab.close()
