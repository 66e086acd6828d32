"""IO statistics: percentiles agree with numpy on the raw latencies; in-flight; the bundle entry point."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from profiler.analyzers.io import pairing as blockio
from profiler.analyzers.io import stats as iostats
from profiler.analyzers.views.blockio import io_from_bundle

from profiler.bundle import (
    OK,
    Bundle,
    BundleWriter,
    CollectorRecord,
    Manifest,
    TargetInfo,
    ThreadInfo,
)
from tests.conftest import ROOT

SAMPLES = ROOT / "samples" / "block"


def test_group_percentiles_agree_with_numpy() -> None:
    rng = np.random.default_rng(7)
    vals = rng.lognormal(-9, 1.5, 5000)
    groups = rng.integers(0, 37, 5000)
    groups[groups == 5] = 6  # an empty group
    r = iostats.group_percentiles(vals, groups, 40, qs=(50.0, 95.0, 99.0, 99.9))
    for g in range(40):
        v = vals[groups == g]
        if not len(v):
            assert np.isnan(r["p50"][g]) and r["count"][g] == 0
            continue
        for q in (50.0, 95.0, 99.0, 99.9):
            assert r[iostats._qname(q)][g] == pytest.approx(np.percentile(v, q), rel=1e-12, abs=0)
        assert r["max"][g] == v.max()
        assert r["count"][g] == len(v)
        assert r["mean"][g] == pytest.approx(v.mean(), rel=1e-12)


@pytest.mark.parametrize("name", ["merges.txt", "two-devices.txt", "flush-discard.txt", "perf-script.txt"])
def test_interval_and_overall_percentiles_agree_with_numpy(name: str) -> None:
    bio = blockio.read_block_trace(SAMPLES / name)
    ios = bio.ios
    a = iostats.analyze_io(bio, interval=0.01)
    lat = ios["latency"]
    for key, q in (("p50", 50), ("p95", 95), ("p99", 99)):
        assert a.overall["latency"][key] == pytest.approx(np.percentile(lat, q), rel=1e-12)
    assert a.overall["latency"]["max"] == lat.max()
    s = a.series
    idx = np.clip(((ios["t_complete"] - s.t0) // s.interval).astype(int), 0, len(s.ios) - 1)
    for i in range(len(s.ios)):
        v = lat[idx == i]
        assert s.ios[i] == len(v)
        if len(v):
            assert s.latency["p99"][i] == pytest.approx(np.percentile(v, 99), rel=1e-12)
            assert s.latency["p50"][i] == pytest.approx(np.percentile(v, 50), rel=1e-12)
    assert int(s.ios.sum()) == len(ios)
    # per op
    for op, m in iostats.split(bio, "op").items():
        assert a.by_op[op]["latency"]["p99"] == pytest.approx(np.percentile(lat[m], 99), rel=1e-12)
    assert sum(v["ios"] for v in a.by_op.values()) == len(ios)
    assert sum(v["ios"] for v in a.by_device.values()) == len(ios)
    assert sum(v["ios"] for v in a.by_issuer.values()) == len(ios)
    json.dumps(a.to_json(), allow_nan=False)


def test_in_flight_against_brute_force() -> None:
    bio = blockio.read_block_trace(SAMPLES / "two-devices.txt")
    ios = bio.ios
    s = iostats.io_series(ios, interval=0.005)
    edges = s.t0 + s.interval * np.arange(len(s.ios) + 1)
    grid = np.linspace(edges[0], edges[-1], 200001)[:-1] + (edges[-1] - edges[0]) / 400000
    level = ((ios["t_issue"][None, :] <= grid[:, None]) & (ios["t_complete"][None, :] > grid[:, None])).sum(axis=1)
    col = np.clip(((grid - s.t0) // s.interval).astype(int), 0, len(s.ios) - 1)
    for i in range(len(s.ios)):
        assert s.in_flight_mean[i] == pytest.approx(level[col == i].mean(), abs=0.05)
        assert s.in_flight_max[i] >= level[col == i].max()


def test_size_histogram() -> None:
    h = iostats.size_histogram(np.array([512, 4096, 4096, 5000, 0, 1 << 20]))
    assert h == [{"le": 0, "count": 1}, {"le": 512, "count": 1}, {"le": 4096, "count": 2}, {"le": 8192, "count": 1},
                 {"le": 1 << 20, "count": 1}]


def _bundle(tmp_path: Path, sample: str) -> Path:
    root = tmp_path / "cap"
    m = Manifest(status=OK)
    m.targets = [TargetInfo(pid=10670, comm="mariadbd", threads=[ThreadInfo(10670, "mariadbd"), ThreadInfo(10674, "mariadbd")])]
    w = BundleWriter(root, m)
    with w.open_member("block.trace.gz") as fh:
        fh.write((SAMPLES / sample).read_bytes())
    w.record(CollectorRecord(name="block-io", backend="tracefs", status=OK, files=["block.trace.gz"]))
    w.finish(OK)
    return root


def test_io_from_bundle(tmp_path: Path) -> None:
    root = _bundle(tmp_path, "perf-script.txt")
    a = io_from_bundle(Bundle.open(root))
    assert a is not None
    assert a.overall["ios"] == a.block.counts.paired > 0
    assert "target" in a.by_issuer and "kernel" in a.by_issuer
    doc = a.to_json()
    json.dumps(doc, allow_nan=False)
    assert doc["counts"]["paired"] == a.overall["ios"]


def test_io_from_bundle_without_block_trace(tmp_path: Path) -> None:
    w = BundleWriter(tmp_path / "cap", Manifest(status=OK))
    w.finish(OK)
    assert io_from_bundle(Bundle.open(tmp_path / "cap")) is None


def test_truncated_member_is_a_warning(tmp_path: Path) -> None:
    root = _bundle(tmp_path, "merges.txt")
    data = gzip.compress((SAMPLES / "merges.txt").read_bytes())
    (root / "block.trace.gz").write_bytes(data[: len(data) * 2 // 3])
    a = io_from_bundle(Bundle.open(root))
    assert a is not None and any("truncated" in w for w in a.warnings)
