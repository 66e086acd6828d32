"""End to end: `cluster attach` killed by SIGTERM, SIGHUP or SIGINT at a random point of a real capture (privileged).

The controller takes each of them as Ctrl-C: every node is told to stop, finishes its bundle
(partial, the signal named), the bundles are pulled back, the cluster bundle is marked partial
and the exit code is the shell's (128 + the signal). On the namespaced hosts (tests/hosts.py)
nothing is left running, no working directory and no tracefs instance of theirs. The point is
random; its seed is in every failure message.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from profiler.bundle import Bundle
from profiler.bundle.cluster import load_cluster
from tests.e2e.test_cluster_e2e import _leftovers, _no_workdir, _our_instances, _redis, _wait_port
from tests.hosts import HostLab, host_lab  # noqa: F401 - the fixture

pytestmark = [pytest.mark.privileged, pytest.mark.slow]

SIGNALS = {"SIGTERM": signal.SIGTERM, "SIGHUP": signal.SIGHUP, "SIGINT": signal.SIGINT}


@pytest.mark.parametrize("name", sorted(SIGNALS))
def test_cluster_attach_killed_at_a_random_point_keeps_partial_bundles_and_leaves_nothing(
        host_lab: HostLab, tmp_path: Path, name: str) -> None:  # noqa: F811
    sig, seed = SIGNALS[name], time.time_ns()
    rng = random.Random(seed)
    h = host_lab.add("kv")
    _redis(h)
    _wait_port(h, 6379)
    out = tmp_path / "cap"
    proc = subprocess.Popen(
        [sys.executable, "-m", "profiler", "cluster", "attach", "--ssh-config", str(host_lab.ssh_config),
         "--host", h.addr, "--role", "kv", "--pid", "redis-server", "--collector", "perf-stat", "--collector",
         "procfs", "--collector", "cpu-stacks", "--collector", "block-io", "-d", "60s", "-o", str(out), "--no-report"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not any(c == "perf" for _p, c, _cmd in h.processes()):
            assert proc.poll() is None and time.monotonic() < deadline, f"seed {seed}: the capture never started"
            time.sleep(0.2)
        time.sleep(rng.uniform(0.0, 4.0))
        proc.send_signal(sig)
        text, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    told = "Ctrl-C" if sig == signal.SIGINT else name
    why = f"seed {seed}, {name}: {text[-800:]}"
    assert proc.returncode == 128 + sig, why
    assert "Traceback" not in text and f"interrupted ({told})" in text, why
    m = load_cluster(out)
    assert m.status == "partial" and f"interrupted ({told})" in (m.reason or ""), (m.status, m.reason, why)
    node = m.nodes[0]
    assert node.status == "partial" and node.dir is not None and told in (node.reason or ""), (node, why)
    b = Bundle.open(out / node.dir)
    assert b.manifest.status == "partial" and all(r.status != "running" for r in b.manifest.collectors), why
    cpu = b.manifest.collector("cpu-stacks")
    assert cpu is not None and cpu.files and b.has(cpu.files[0]), why
    time.sleep(0.5)
    assert _leftovers(h, {"redis-server"}) == [], why
    assert _no_workdir(h) and _our_instances([h]) == [], why
