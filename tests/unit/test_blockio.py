"""Block event parsing and issue/completion pairing on real traces in samples/block/."""

from __future__ import annotations

import gzip
import io
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from profiler.analyzers.io import pairing as blockio

from profiler.inputs import blocktrace
from profiler.inputs.blocktrace import COMPLETE, ISSUE, MERGE, REQUEUE
from profiler.inputs.perfdata_blocks import PerfDataUnsupported
from profiler.inputs.streams import iter_chunks
from tests.conftest import ROOT

SAMPLES = ROOT / "samples" / "block"
TRACES = sorted(p.name for p in SAMPLES.glob("*.txt") if not p.name.startswith("pairs"))


def _ref_pairs(path: Path) -> tuple[set[tuple[float, float, int, int]], int]:
    """An independent, deliberately plain pairing: dict per (dev, sector), the latest issue wins,
    a requeue cancels it, flushes pair on the device, 0-sector non-flush completions are set aside."""
    rx = re.compile(
        r"\s(\d+\.\d+):\s+(?:block:)?block_rq_(issue|complete|requeue|merge):\s+(\d+),(\d+)\s+(\S+)\s+(?:\d+\s+)?\(.*?\)\s+(\d+)\s+\+\s+(\d+)"
    )
    open_: dict[tuple[str, int], float] = {}
    pairs = set()
    unpaired_c = 0
    for line in path.read_text().splitlines():
        m = rx.search(line)
        if not m:
            continue
        t, ev, maj, mi, rwbs, sector, nr = m.groups()
        dev = f"{maj},{mi}"
        op = rwbs[1] if len(rwbs) > 1 and rwbs[0] == "F" and rwbs[1] in "WDEFRN" else rwbs[0]
        flush = op == "F" and nr == "0"
        key = (dev, -1 if flush else int(sector))
        if ev == "merge":
            continue
        if ev == "issue":
            open_[key] = float(t)
        elif ev == "requeue":
            open_.pop(key, None)
        else:
            if nr == "0" and not flush:
                continue
            if key in open_:
                ti = open_.pop(key)
                pairs.add((round(ti, 6), round(float(t), 6), int(maj), -1 if flush else int(sector)))
            else:
                unpaired_c += 1
    return pairs, unpaired_c


@pytest.mark.parametrize("name", TRACES)
def test_pairing_matches_plain_reference(name: str) -> None:
    bio = blockio.read_block_trace(SAMPLES / name)
    ref, ref_uc = _ref_pairs(SAMPLES / name)
    ours = {
        (round(float(r["t_issue"]), 6), round(float(r["t_complete"]), 6), int(r["dev"]) >> 20,
         -1 if r["op"] == blocktrace.OP_FLUSH and r["bytes"] == 0 else int(r["sector"]))
        for r in bio.ios
    }
    assert ours == ref
    assert bio.counts.unpaired_completions == ref_uc
    assert len(bio.ios) == bio.counts.paired > 0


@pytest.mark.parametrize("name", TRACES)
def test_every_event_is_accounted_for(name: str) -> None:
    c = blockio.read_block_trace(SAMPLES / name).counts
    assert c.completions == c.paired + c.unpaired_completions + c.dataless_completions
    assert c.issues == c.paired + c.superseded + c.in_flight_at_end + c.requeued_issues
    assert c.unpaired_issues == c.superseded + c.in_flight_at_end
    assert c.events == c.issues + c.completions + c.requeues + c.merges
    assert c.skipped_lines == 0


@pytest.mark.parametrize("name", TRACES)
def test_counts_match_golden(name: str) -> None:
    bio = blockio.read_block_trace(SAMPLES / name)
    golden = json.loads((SAMPLES / (name[:-4] + ".golden.json")).read_text())
    got = {"counts": bio.counts.to_json(), "comms": bio.comms,
           "latency_sum_us": round(float(bio.ios["latency"].sum()) * 1e6, 3)}
    assert got == golden


@pytest.mark.parametrize("name", TRACES)
def test_fast_parser_agrees_with_regex_path(name: str) -> None:
    ev = blocktrace.read_events(SAMPLES / name)
    comms = blocktrace.CommTable()
    rows = []
    for line in (SAMPLES / name).read_bytes().splitlines():
        rec = blocktrace.parse_line(line, comms)
        if rec is not None:
            rows.append(rec)
    ref = np.zeros(len(rows), blocktrace.EVENT_DTYPE)
    for i, r in enumerate(rows):
        ref[i] = r  # parse_line returns the fields in EVENT_DTYPE's order (parse_chunk stores it as is)
    assert len(ev) == len(ref)
    for f in blocktrace.EVENT_DTYPE.names:
        if f == "comm":
            continue
        if f == "t":
            np.testing.assert_allclose(ev[f], ref[f], rtol=0, atol=1e-9)
        else:
            assert np.array_equal(ev[f], ref[f]), f


@pytest.mark.parametrize("chunk", [97, 4096])
def test_chunk_boundaries_do_not_matter(chunk: int) -> None:
    data = (SAMPLES / "requeue.txt").read_bytes()
    whole = blockio.parse_block_text(data)
    p = blockio.BlockPairer()
    for part in iter_chunks(io.BytesIO(data), size=chunk):
        p.feed(part)
    pieces = p.finish()
    assert np.array_equal(whole.ios, pieces.ios)
    assert whole.counts == pieces.counts


def test_gzip_input_reads_the_same(tmp_path: Path) -> None:
    gz = tmp_path / "block.trace.gz"
    gz.write_bytes(gzip.compress((SAMPLES / "merges.txt").read_bytes()))
    a = blockio.read_block_trace(gz)
    b = blockio.read_block_trace(SAMPLES / "merges.txt")
    assert np.array_equal(a.ios, b.ios)


def test_truncated_gzip_keeps_what_was_read(tmp_path: Path) -> None:
    data = gzip.compress((SAMPLES / "cut-off-edges.txt").read_bytes())
    gz = tmp_path / "cut.gz"
    gz.write_bytes(data[: len(data) // 2])
    bio = blockio.read_block_trace(gz)
    assert bio.warnings and "truncated" in bio.warnings[0]


def test_requeue_pairs_with_the_reissue() -> None:
    bio = blockio.read_block_trace(SAMPLES / "requeue.txt")
    assert bio.counts.requeues > 0 and bio.counts.requeued_issues > 0
    # "254,0 RA () 26384424 + 1424": issued 502.570901, requeued, reissued 502.578425, completed 502.579210
    row = bio.ios[bio.ios["sector"] == 26384424]
    assert len(row) == 1
    assert row["t_issue"][0] == pytest.approx(502.578425)
    assert row["latency"][0] == pytest.approx(502.579210 - 502.578425)


def test_merges_are_counted_not_paired() -> None:
    bio = blockio.read_block_trace(SAMPLES / "merges.txt")
    assert bio.counts.merges > 0
    kinds = blocktrace.read_events(SAMPLES / "merges.txt")["kind"]
    assert int(np.count_nonzero(kinds == MERGE)) == bio.counts.merges


def test_flush_and_discard_pair() -> None:
    bio = blockio.read_block_trace(SAMPLES / "flush-discard.txt")
    ops = set(bio.ios["op"].tolist())
    assert blocktrace.OP_FLUSH in ops and blocktrace.OP_DISCARD in ops
    fl = bio.ios[bio.ios["op"] == blocktrace.OP_FLUSH]
    assert (fl["bytes"] == 0).all() and (fl["latency"] > 0).all()
    assert (fl["sector"] == np.uint64(0xFFFFFFFFFFFFFFFF)).all()


def test_two_devices_do_not_cross_pair() -> None:
    bio = blockio.read_block_trace(SAMPLES / "two-devices.txt")
    assert {blocktrace.dev_name(int(d)) for d in np.unique(bio.ios["dev"])} == {"7:0", "254:0"}
    lines = (
        "fio-1 [000] ..... 10.000000: block_rq_issue: 7,0 R 4096 () 800 + 8 [fio]\n"
        "fio-1 [000] ..... 10.000010: block_rq_issue: 254,0 R 4096 () 800 + 8 [loop0]\n"
        "<idle>-0 [000] ..s.. 10.000300: block_rq_complete: 254,0 R () 800 + 8 [0]\n"
        "<idle>-0 [000] ..s.. 10.000400: block_rq_complete: 7,0 R () 800 + 8 [0]\n"
    )
    b = blockio.parse_block_text(lines)
    by_dev = {blocktrace.dev_name(int(r["dev"])): float(r["latency"]) for r in b.ios}
    assert by_dev == pytest.approx({"7:0": 0.0004, "254:0": 0.00029})


def test_cut_off_edges() -> None:
    c = blockio.read_block_trace(SAMPLES / "cut-off-edges.txt").counts
    assert c.unpaired_completions > 0  # their issue came before the slice
    assert c.in_flight_at_end > 0  # their completion came after it


def test_lost_events_are_reported() -> None:
    bio = blockio.read_block_trace(SAMPLES / "lost-events.txt")
    text = (SAMPLES / "lost-events.txt").read_text()
    assert bio.counts.lost_events == sum(int(x) for x in re.findall(r"\[LOST (\d+) EVENTS\]", text)) > 0
    assert any("lost" in w for w in bio.warnings)


def test_lost_completions_are_said_where_no_lost_record_says_so() -> None:
    """perf record -a of fio while a CPU idled: completions dropped without a [LOST] record."""
    bio = blockio.read_block_trace(SAMPLES / "idle-drops.txt")
    assert bio.counts.lost_events == 0 and bio.counts.issues == 298 and bio.counts.completions == 2
    assert any("296 of 298 issued IOs have no completion" in w for w in bio.warnings), bio.warnings
    # a real trace's in-flight edge and requeued readahead are not taken for lost completions
    for name in TRACES:
        if name != "idle-drops.txt":
            assert not any("no completion" in w for w in blockio.read_block_trace(SAMPLES / name).warnings), name


def test_perf_script_format_and_issuers() -> None:
    bio = blockio.read_block_trace(SAMPLES / "perf-script.txt")
    assert bio.counts.paired > 0
    assert "mariadbd" in bio.comms and "kworker/1:1H" in bio.comms
    cls = bio.issuer_classes(target_comms=["mariadbd"])
    names = bio.comm_of(bio.ios["comm"])
    assert set(cls[names == "mariadbd"]) == {"target"}
    assert set(cls[names == "kworker/1:1H"]) == {"kernel"}
    assert (bio.ios["tid"] > 0).all()


def test_odd_payload_goes_through_the_regex_path() -> None:
    # a passthrough request prints its command bytes inside the parentheses
    lines = (
        "  sg_inq-77   [001] .....   20.000100: block_rq_issue: 8,0 R 96 (12 00 00 00 60 00) 0 + 0 be,0,4 [sg_inq]\n"
        "  <idle>-0    [001] ..s..   20.000900: block_rq_complete: 8,0 R (12 00 00 00 60 00) 0 + 0 be,0,4 [0]\n"
        "  fio-78      [000] .....   20.001000: block_rq_issue: 8,0 WFS 4096 () 2048 + 8 be,0,4 [fio]\n"
        "  <idle>-0    [000] ..s..   20.001500: block_rq_complete: 8,0 WFS () 2048 + 8 be,0,4 [0]\n"
        "# a comment line, and a line of another event:\n"
        "  fio-78      [000] .....   20.001600: sched_switch: prev_comm=fio\n"
    )
    ev = blockio.parse_block_chunks([lines.encode()])
    assert ev.counts.events == 4 and ev.counts.skipped_lines == 0
    fua = ev.ios[ev.ios["sector"] == 2048]
    assert len(fua) == 1 and fua["flags"][0] & blocktrace.FLAG_FUA and fua["flags"][0] & blocktrace.FLAG_SYNC
    assert blocktrace.op_name(int(fua["op"][0]), int(fua["flags"][0]), with_flags=True) == "write+sync+fua"


def test_event_kinds_are_read() -> None:
    ev = blocktrace.read_events(SAMPLES / "merges.txt")
    assert {ISSUE, COMPLETE, REQUEUE, MERGE} == set(np.unique(ev["kind"]).tolist())


def test_empty_and_foreign_input() -> None:
    assert blockio.parse_block_text("").counts.events == 0
    b = blockio.parse_block_text("hello\nworld\n")
    assert b.counts.events == 0 and len(b.ios) == 0


def test_io_record_is_compact() -> None:
    assert blockio.IO_DTYPE.itemsize == 48


def test_huge_sectors_take_the_general_sort() -> None:
    big = (1 << 41) + 12345
    lines = (
        f"fio-1 [000] ..... 10.000000: block_rq_issue: 259,0 R 4096 () {big} + 8 [fio]\n"
        f"fio-1 [000] ..... 10.000010: block_rq_issue: 259,0 R 4096 () {big + 8} + 8 [fio]\n"
        f"<idle>-0 [000] ..s.. 10.000300: block_rq_complete: 259,0 R () {big + 8} + 8 [0]\n"
        f"<idle>-0 [000] ..s.. 10.000400: block_rq_complete: 259,0 R () {big} + 8 [0]\n"
    )
    b = blockio.parse_block_text(lines)
    assert b.counts.paired == 2
    assert sorted(zip(b.ios["sector"].tolist(), np.round(b.ios["latency"], 6).tolist(), strict=True)) == [
        (big, 0.0004), (big + 8, 0.00029)]


def test_perf_script_without_cpu_column() -> None:
    lines = (
        "        mariadbd 10674   529.856766:    block:block_rq_issue: 254,0 WS 4096 () 27656648 + 8 0x2,0,4 [mariadbd]\n"
        " kworker/1:1H-kb    44   529.863889: block:block_rq_complete: 254,0 WS () 27656648 + 8 0x2,0,4 [0]\n"
    )
    b = blockio.parse_block_text(lines)
    assert b.counts.paired == 1 and int(b.ios["tid"][0]) == 10674


def _perf_data(tmp_path: Path) -> Path:
    path = tmp_path / "loop-fio.perf.data"
    path.write_bytes(gzip.decompress((SAMPLES / "loop-fio.perf.data.gz").read_bytes()))
    return path


def test_perf_data_read_directly(tmp_path: Path) -> None:
    bio = blockio.read_perf_data(_perf_data(tmp_path))
    golden = json.loads((SAMPLES / "loop-fio.perf.golden.json").read_text())
    got = {"counts": bio.counts.to_json(), "comms": bio.comms,
           "latency_sum_us": round(float(bio.ios["latency"].sum()) * 1e6, 3)}
    assert got == golden
    assert {blocktrace.dev_name(int(d)) for d in np.unique(bio.ios["dev"])} == {"7:0"}
    assert (np.diff(bio.ios["t_complete"]) >= 0).all()


@pytest.mark.skipif(not shutil.which("perf"), reason="perf is not installed")
def test_perf_data_direct_read_matches_perf_script(tmp_path: Path) -> None:
    path = _perf_data(tmp_path)
    text = subprocess.run(["perf", "script", "-i", str(path)], capture_output=True, check=True).stdout
    via_text = blockio.parse_block_text(text)
    direct = blockio.read_perf_data(path)
    assert direct.counts == via_text.counts
    for f in ("sector", "dev", "bytes", "op", "flags", "tid"):
        assert np.array_equal(direct.ios[f], via_text.ios[f]), f
    # perf script prints microseconds; the file holds nanoseconds
    assert np.abs(direct.ios["t_complete"] - via_text.ios["t_complete"]).max() < 1e-6
    assert sorted(direct.comms) == sorted(via_text.comms)


def test_not_every_perf_data_is_read_directly(tmp_path: Path) -> None:
    bad = tmp_path / "x.data"
    bad.write_bytes(b"PERFILE2" + b"\0" * 200)
    with pytest.raises(PerfDataUnsupported):
        blockio.read_perf_data(bad)
