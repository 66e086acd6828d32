"""Members read while a capture finishes (profiler/bundle/early.py) and the block IO view read
beside the others (analyzers/views): the analysis must come out exactly as a post-mortem one.

The bundle is a real capture: fio's direct reads and writes, the block-io, procfs and CPU
stack collectors, a few seconds. Needs root and tracefs (CI has them).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from profiler.analyzers.io import pairing, stats
from profiler.analyzers.views import read_views, start_early_reads
from profiler.analyzers.views.blockio import EARLY_IO

from profiler.bundle import Bundle, EarlyReads, members
from profiler.cli import main
from profiler.formats import blockevents
from profiler.usecases.report import analysis_of, render

pytestmark = [
    pytest.mark.privileged,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CI runs as root)"),
    pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed"),
    pytest.mark.skipif(not os.path.isdir("/sys/kernel/tracing/instances"), reason="tracefs is not mounted"),
]


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("early")
    data = root / "data"
    data.mkdir()
    fio = subprocess.Popen(["fio", "--name=early", f"--directory={data}", "--size=16M", "--rw=randrw", "--bs=4k",
                            "--direct=1", "--ioengine=psync", "--thread", "--time_based", "--runtime=15"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        out = root / "cap"
        rc = main(["attach", "--backend", "perf", "--pid", str(fio.pid), "--duration", "3s", "-o", str(out),
                   "--collector", "block-io", "--collector", "procfs", "--collector", "cpu-stacks", "--no-report"])
    finally:
        fio.kill()
        fio.wait()
    assert rc == 0
    assert Bundle.open(out).has(members.BLOCK_EVENTS)
    return out


def _start(early: EarlyReads, bundle_dir: Path) -> None:
    """What attach does when block-io stops: its record and the capture's manifest."""
    m = Bundle.open(bundle_dir).manifest
    rec = m.collector("block-io")
    assert rec is not None
    start_early_reads(early, rec, m)


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_an_early_read_is_taken_once_and_equals_reading_the_member(capture: Path) -> None:
    early = EarlyReads(capture)
    _start(early, capture)
    got = early.take(members.BLOCK_EVENTS, EARLY_IO)
    assert got is not None
    (window, res), log = got
    assert window == stats.io_window(Bundle.open(capture).manifest)  # what the analysis will check
    bio = res.block
    with Bundle.open(capture).open_binary(members.BLOCK_EVENTS, text=False) as fh:
        again = pairing.pair_member(fh)
    assert len(bio.ios) == len(again.ios) > 0
    assert bio.ios.tobytes() == again.ios.tobytes() and bio.comms == again.comms
    assert log.summary() is None  # an intact member tolerated nothing
    assert early.take(members.BLOCK_EVENTS, EARLY_IO) is None  # handed out once


def test_the_report_is_the_same_with_and_without_early_reads(capture: Path) -> None:
    early = EarlyReads(capture)
    _start(early, capture)
    early.wait()
    with_early = render(analysis_of(capture, early=early), "json")
    assert not early._reads  # the analysis took it (and did not read the member again)
    assert with_early == render(analysis_of(capture), "json")
    assert json.loads(with_early)["io"]["total"] > 0


def test_a_member_changed_after_its_early_read_is_read_again(capture: Path, tmp_path: Path) -> None:
    b = _copy(capture, tmp_path / "cap")
    early = EarlyReads(b)
    _start(early, b)
    early.wait()
    member = b / members.BLOCK_EVENTS
    data = member.read_bytes()
    member.write_bytes(data[: len(data) // 2])  # cut after the read: the early result is stale
    cut = json.loads(render(analysis_of(b, early=early), "json"))  # so the member is read as it is now
    assert not early._reads
    assert 0 < cut["io"]["total"] < json.loads(render(analysis_of(capture), "json"))["io"]["total"]


def test_a_failed_or_refused_early_read_leaves_the_analysis_to_read_the_member(capture: Path, tmp_path: Path) -> None:
    def broken(fh: object) -> object:
        raise ValueError("not today")

    early = EarlyReads(capture)
    assert early.start(members.BLOCK_EVENTS, EARLY_IO, broken)
    early.wait()
    assert early.take(members.BLOCK_EVENTS, EARLY_IO) is None
    b = _copy(capture, tmp_path / "cap")
    outside = tmp_path / "outside.bin"
    (b / members.BLOCK_EVENTS).rename(outside)
    (b / members.BLOCK_EVENTS).symlink_to(outside)
    assert not EarlyReads(b).start(members.BLOCK_EVENTS, EARLY_IO, pairing.pair_member)  # a link is no member


def test_reads_keep_their_order_when_block_io_is_read_aside(capture: Path, tmp_path: Path) -> None:
    """The block IO view is read in a thread, through its own read logs: they must land where a
    sequential read puts them (after procfs's, before the CPU stacks'), whichever thread
    ends first, so the reading warnings come out in the same order run to run."""
    b = _copy(capture, tmp_path / "cap")
    proc = b / members.PROC
    proc.write_bytes(gzip.compress(gzip.decompress(proc.read_bytes()))[:-20])  # cut mid-stream
    seen = []
    for _ in range(3):
        bundle = Bundle.open(b)
        v = read_views(bundle)
        order = [m for m in bundle.reads if m in (members.PROC, members.BLOCK_EVENTS, members.CPU_STACKS)]
        assert order == [members.PROC, members.BLOCK_EVENTS, members.CPU_STACKS]  # as read one after another
        assert v.io is not None and v.io.events is not None and len(v.io.events.t) > 0
        seen.append(v.warnings)
    assert seen[0] == seen[1] == seen[2]
    assert any(w.startswith(members.PROC) for w in seen[0])  # the cut member is said


def _rewrite_through_a_tap(member: Path, out: Path, tap: pairing.PairingTap) -> None:
    """Write a member's events again through the block writer, its tap listening: what the
    block-io collector does during a capture (the events come from the ring buffer there)."""
    with open(member, "rb") as fh, open(out, "wb") as dst:
        w = blockevents.Writer(dst, tap)
        mapped = 1
        for block in blockevents.iter_blocks(fh):
            for name in block.comms[mapped:]:
                w.comm_id(name)
            mapped = len(block.comms)
            ev = np.zeros(len(block), blockevents.RAW_DTYPE)
            for name in ("t", "dev", "rwbs", "kind", "sector", "nr", "bytes", "tid", "comm"):
                ev[name] = block.cols[name]
            w.write(ev)


def test_a_tap_pairs_exactly_what_reading_the_written_member_pairs(capture: Path, tmp_path: Path) -> None:
    tap = pairing.PairingTap()
    again = tmp_path / members.BLOCK_EVENTS
    _rewrite_through_a_tap(capture / members.BLOCK_EVENTS, again, tap)
    heard = tap.result()
    assert heard is not None and len(heard.ios) > 0
    with open(again, "rb") as fh:
        read = pairing.pair_member(fh)
    with open(capture / members.BLOCK_EVENTS, "rb") as fh:
        original = pairing.pair_member(fh)
    assert heard.ios.tobytes() == read.ios.tobytes() == original.ios.tobytes()
    assert heard.comms == read.comms and heard.counts == read.counts
    assert tap.result() is None  # handed out once


def test_a_tap_gives_up_past_its_limit_and_the_member_is_read_instead(capture: Path, tmp_path: Path) -> None:
    tap = pairing.PairingTap(limit=10)
    _rewrite_through_a_tap(capture / members.BLOCK_EVENTS, tmp_path / members.BLOCK_EVENTS, tap)
    assert tap.given_up == "more than 10 IOs" and tap.result() is None
    b = _copy(capture, tmp_path / "cap")
    early = EarlyReads(b)
    early.taps[members.BLOCK_EVENTS] = tap
    _start(early, b)  # falls back to reading the member
    assert render(analysis_of(b, early=early), "json") == render(analysis_of(b), "json")


def test_the_report_from_a_tap_is_the_post_mortem_report(capture: Path, tmp_path: Path) -> None:
    b = _copy(capture, tmp_path / "cap")
    tap = pairing.PairingTap()
    _rewrite_through_a_tap(capture / members.BLOCK_EVENTS, tmp_path / "heard.bin", tap)
    early = EarlyReads(b)
    early.taps[members.BLOCK_EVENTS] = tap
    _start(early, b)
    assert members.BLOCK_EVENTS not in early.taps and tap.pairer is None and tap.given_up is None  # its pairing was used
    assert render(analysis_of(b, early=early), "json") == render(analysis_of(b), "json")


def test_attach_report_equals_the_post_mortem_report(tmp_path: Path) -> None:
    """attach pairs the block events while it captures and analyzes them while the other
    collectors finish: the report.html it writes must be the one `profiler report` writes
    from the bundle afterwards, byte for byte."""
    data = tmp_path / "data"
    data.mkdir()
    fio = subprocess.Popen(["fio", "--name=early", f"--directory={data}", "--size=16M", "--rw=randrw", "--bs=4k",
                            "--direct=1", "--ioengine=libaio", "--iodepth=8", "--thread", "--time_based",
                            "--runtime=20"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        out = tmp_path / "cap"
        rc = main(["attach", "--backend", "perf", "--pid", str(fio.pid), "--duration", "4s", "-o", str(out)])
    finally:
        fio.kill()
        fio.wait()
    assert rc == 0
    again = tmp_path / "again.html"
    assert main(["report", str(out), "-o", str(again)]) == 0
    assert (out / "report.html").read_bytes() == again.read_bytes()
    assert json.loads(render(analysis_of(out), "json"))["io"]["total"] > 0
