"""This host's addresses without psutil (collectors/server/ports.proc_addresses): a cluster node's
bare python3 has no psutil, and TiUP binds every status port to the host's address, so without
them the server-status collector refused every node's status port as "not an address of this host"."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from profiler.collectors.server import ports


@pytest.mark.skipif(shutil.which("ip") is None, reason="iproute2's ip lists the addresses to compare with")
def test_proc_addresses_are_the_addresses_ip_lists() -> None:
    out = subprocess.run(["ip", "-o", "addr", "show"], capture_output=True, text=True, check=True).stdout
    listed = {line.split()[3].split("/")[0] for line in out.splitlines() if line.split()[2] in ("inet", "inet6")}
    assert listed and listed <= ports.proc_addresses()
    assert ports.reachable("http://" + next(a for a in sorted(listed) if "." in a) + ":10080", ports.local_addresses())[0]
