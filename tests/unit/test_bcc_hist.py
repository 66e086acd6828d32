"""analyzers/io/histograms.py: the bcc backend's in-kernel block IO histograms read back into percentiles and heatmaps."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from profiler.analyzers.io import histograms as bh
from profiler.analyzers.views.blockio import read_block_hist

from profiler.bundle import BundleWriter, ClockInfo, Manifest
from tests.conftest import ROOT

SAMPLES = ROOT / "samples" / "bcc"
FULL = SAMPLES / "block-hist-fsync-contend.jsonl.gz"
TRUNCATED = SAMPLES / "block-hist-truncated.jsonl.gz"
GOLDEN = SAMPLES / "block-hist-fsync-contend.summary.json"


def bundle_with(tmp_path: Path, sample: Path):
    w = BundleWriter(tmp_path / "cap", Manifest(clock=ClockInfo.now()))
    shutil.copy(sample, w.path(bh.MEMBER))
    w.finish("ok")
    from profiler.bundle import Bundle

    return Bundle.open(tmp_path / "cap")


def test_buckets_cover_every_value_once_and_are_at_most_one_sixteenth_wide():
    values = [0, 1, 15, 16, 17, 31, 32, 33, 1000, 4095, 4096, 123456, 10**9, 2**40 - 1, 2**40, 2**41]
    values += [int(x) for x in np.random.default_rng(7).lognormal(10, 3, 2000)]
    for v in values:
        b = bh.bucket_of(v)
        lo, hi = bh.bucket_bounds(b)
        if v < 2**41:
            assert lo <= v < hi, (v, b, lo, hi)
        if v >= 16 and v < 2**41:
            assert (hi - lo) / lo <= 1 / 16
    # consecutive buckets tile the number line
    for b in range(0, 600):
        assert bh.bucket_bounds(b)[1] == bh.bucket_bounds(b + 1)[0]


def test_values_past_the_top_exponent_land_in_the_last_bucket():
    top = bh.bucket_of(2**41 - 1)
    assert top == bh.bucket_of(2**45) == bh.bucket_of(10**15)
    assert bh.bucket_of(2**40) < top


@pytest.mark.parametrize("q", [50, 90, 99, 99.9])
def test_percentiles_from_buckets_agree_with_exact_percentiles(q):
    rng = np.random.default_rng(1)
    lat = (rng.lognormal(mean=11, sigma=1.0, size=20000)).astype(np.int64)  # ~60 us median
    buckets: dict[int, int] = {}
    for v in lat:
        b = bh.bucket_of(int(v))
        buckets[b] = buckets.get(b, 0) + 1
    got = bh.quantile_ns(buckets, q, max_ns=int(lat.max()))
    exact = float(np.percentile(lat, q))
    assert got == pytest.approx(exact, rel=0.03)


def test_empty_histogram_has_no_percentiles():
    assert bh.quantile_ns({}, 50) is None


def test_real_capture_summary_matches_golden(tmp_path):
    b = bundle_with(tmp_path, FULL)
    h = read_block_hist(b)
    assert h is not None and h.complete and not b.warnings
    got = {
        "summary": [vars(s) for s in bh.latency_summary(h)],
        "slots": len(h.slots),
        "counters": h.counters,
        "devices": h.devices,
        "target_share": round(bh.target_share(h) or 0, 4),
        "top_issuer": bh.issuers(h, 1)[0]["comm"],
    }
    if not GOLDEN.exists():  # first run writes the golden file; review it and commit
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(GOLDEN.read_text())
    assert json.loads(json.dumps(got)) == want
    # every slot's histogram accounts for its count
    for s in h.slots:
        assert sum(s.buckets.values()) == s.count


def test_heatmaps_keep_every_io(tmp_path):
    h = read_block_hist(bundle_with(tmp_path, FULL))
    assert h is not None
    per_slot = {}
    for s in h.slots:
        if s.dev == "254:0" and s.op == "W":
            per_slot[s.t] = per_slot.get(s.t, 0) + s.count
    for scale, kw in (("log2", {}), ("fine", {}), ("linear", {"row_us": 100.0, "max_us": 2000.0})):
        hm = bh.heatmap(h, dev="254:0", op="W", scale=scale, **kw)
        cols = [sum(row[c] for row in hm.counts) for c in range(len(hm.times))]
        assert cols == [per_slot[t] for t in hm.times], scale
        assert all(lo < hi for lo, hi in hm.rows_us)
        assert [r[0] for r in hm.rows_us] == sorted(r[0] for r in hm.rows_us)
    with pytest.raises(ValueError):
        bh.heatmap(h, scale="linear")


def test_rate_series_is_per_slot(tmp_path):
    h = read_block_hist(bundle_with(tmp_path, FULL))
    assert h is not None
    rates = bh.rate_series(h, dev="254:0")
    assert len(rates) == len({s.t for s in h.slots if s.dev == "254:0"})
    total = sum(r["iops"] * (r["end"] - r["t"]) for r in rates)
    assert total == pytest.approx(sum(s.count for s in h.slots if s.dev == "254:0"))


def test_truncated_capture_reads_up_to_the_cut_with_a_warning(tmp_path):
    b = bundle_with(tmp_path, TRUNCATED)
    h = read_block_hist(b)
    assert h is not None and not h.complete
    assert h.slots, "the slots before the cut are kept"
    assert any("cut off" in w or "truncated" in w for w in b.warnings)


def test_missing_member_means_no_bcc_histograms(tmp_path):
    w = BundleWriter(tmp_path / "cap", Manifest(clock=ClockInfo.now()))
    w.finish("ok")
    from profiler.bundle import Bundle

    assert read_block_hist(Bundle.open(tmp_path / "cap")) is None


def test_foreign_file_is_refused():
    with pytest.raises(ValueError):
        bh.parse_block_hist(['{"kind": "header", "format": "something-else"}'])
    with pytest.raises(ValueError):
        bh.parse_block_hist(['{"kind": "slot"}'])


def test_io_summary_has_the_verdicts_fields(tmp_path):
    h = read_block_hist(bundle_with(tmp_path, FULL))
    assert h is not None
    s = bh.io_summary(h)
    assert s["total"] == sum(x.count for x in h.slots)
    assert {"dev", "op", "count", "iops", "bytes", "p50_ms", "p95_ms", "p99_ms", "max_ms", "target_share"} <= set(s["groups"][0])
    for g in s["groups"]:
        assert g["p50_ms"] <= g["p95_ms"] <= g["p99_ms"] <= g["max_ms"] + 1e-9
    by_comm: dict[str, int] = {}
    for t in h.tasks:  # issuers are summed by thread name (all of mariadbd's threads together)
        by_comm[t["comm"]] = by_comm.get(t["comm"], 0) + t["count"]
    assert s["top_issuers"][0][0] == max(by_comm, key=lambda c: by_comm[c])
    assert sum(share for _, share in s["top_issuers"]) <= 1.0 + 1e-9
    assert 0.0 <= s["target_share"] <= 1.0
    assert s["p50_ms"] is not None and s["p50_ms"] <= s["p99_ms"]
