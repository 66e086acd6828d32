"""Stacks by time bucket (analyzers/stacks/ranges.py): what the report's range flame graphs merge."""

from __future__ import annotations

import json

from profiler.analyzers.stacks import ranges


def _merge(rs: ranges.RangeStacks, b0: int, b1: int) -> dict[str, int]:
    """What the page does for buckets [b0, b1): leaf counts back to folded stacks."""
    out: dict[str, int] = {}
    for b, node, c in rs.entries:
        if b0 <= b < b1:
            names = []
            while node > 0:
                names.append(rs.frames[rs.frame[node]])
                node = rs.parent[node]
            key = ";".join(reversed(names))
            out[key] = out.get(key, 0) + c
    return out


def test_samples_by_bucket_merge_back_to_the_range() -> None:
    samples = [(10.0 + i * 0.01, "a;b;c" if i % 3 else "a;d") for i in range(300)]  # 3 s of samples
    rs = ranges.from_samples(samples, 10.0, 13.0)
    assert rs is not None and rs.bucket == ranges.FIRST_BUCKET and rs.total == 300
    whole = _merge(rs, 0, rs.nbuckets)
    assert whole == {"a;b;c": 200, "a;d": 100}
    part = _merge(rs, 10, 20)  # 1.0 s to 2.0 s
    expect = {}
    for t, s in samples:
        if 11.0 <= t < 12.0 - 1e-9:
            expect[s] = expect.get(s, 0) + 1
    assert part == expect
    assert rs.parent[0] == -1 and all(p < i for i, p in enumerate(rs.parent) if i)  # parents first


def test_unknown_runs_fold_into_one_frame() -> None:
    assert ranges.fold_unknown_runs("a;[unknown];[unknown];[unknown];b") == ("a;[unknown];b", 3)
    assert ranges.fold_unknown_runs("a;b") == ("a;b", 0)
    rs = ranges.from_samples([(0.0, "fio;[unknown];[unknown];[unknown];[unknown];f"), (0.5, "fio;g")], 0.0, 1.0)
    assert rs is not None and "[unknown]" in rs.frames
    assert rs.unknown_share == 0.5 and rs.unknown_deep == 0.5
    assert set(_merge(rs, 0, rs.nbuckets)) == {"fio;[unknown];f", "fio;g"}


def test_size_is_bounded() -> None:
    # 20 minutes at 1 kHz, each sample its own stack: buckets widen and rare stacks are cut
    samples = [(i / 1000, f"p;s{i % 20000};leaf{i % 7}") for i in range(1_200_000)]
    rs = ranges.from_samples(samples, 0.0, 1200.0)
    assert rs is not None
    assert rs.nbuckets <= ranges.MAX_BUCKETS and len(rs.entries) <= ranges.MAX_ENTRIES
    assert rs.cut and "rare stacks" in rs.cut[0]
    assert sum(c for _, _, c in rs.entries) == 1_200_000  # nothing dropped, only merged
    assert len(json.dumps(rs.to_json())) < 2_500_000


def test_intervals_split_across_buckets() -> None:
    rs = ranges.from_intervals([(1.05, 1.35, "lock;t;futex_wait"), (2.0, 2.1, "io;t;fsync")], 1.0, 3.0)
    assert rs is not None and rs.unit == "us"
    got = _merge(rs, 0, rs.nbuckets)
    assert got == {"lock;t;futex_wait": 300_000, "io;t;fsync": 100_000}
    assert _merge(rs, 1, 2) == {"lock;t;futex_wait": 100_000}  # 1.1 s to 1.2 s


def test_totals_have_no_times() -> None:
    rs = ranges.from_totals({"lock;t;a": 5, "lock;t;b": 7}, "us")
    assert rs is not None and not rs.timed and rs.nbuckets == 1 and rs.total == 12
