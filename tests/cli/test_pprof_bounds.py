"""The pprof reader's bounds (issue 27): small hostile profiles cost little, say what they are,
and never forge output. Each profile is encoded here; each run is a real `profiler` process
whose peak memory is read back from the kernel (wait4's rusage), not estimated."""

from __future__ import annotations

import gzip
import random
from pathlib import Path

import pytest

from profiler.inputs import pprof
from tests.cli.test_inputs_pprof import blob, num, packed, varint
from tests.measure import run_profiler

MB = 1 << 20


def _profile(samples: bytes, locations: bytes, functions: bytes, strings: list[str]) -> bytes:
    out = bytearray(blob(1, num(1, 1) + num(2, 2)))  # cpu/nanoseconds
    out += samples + locations + functions
    for s in ["", "cpu", "nanoseconds", *strings]:
        out += blob(6, s.encode())
    return gzip.compress(bytes(out))


def _loc(lid: int, fid: int, lines: int = 1) -> bytes:
    return blob(4, num(1, lid) + b"".join(blob(4, num(1, fid)) for _ in range(lines)))


def _fn(fid: int, name_index: int) -> bytes:
    return blob(5, num(1, fid) + num(2, name_index))


def _run(tmp_path: Path, *args: str) -> tuple[int, str, str, float, float]:
    """profiler in its own process: (exit code, stdout, stderr, CPU seconds, peak RSS in MB)."""
    m = run_profiler(list(args), cwd=tmp_path, timeout=300)
    return m.code, m.stdout, m.stderr, m.cpu_s, m.rss_mb


def test_a_runaway_varint_is_one_line_and_fast(tmp_path: Path) -> None:
    """A packed value of 1 MB of continuation bytes (1 KB gzipped): it took 51 CPU s, quadratic."""
    s = blob(2, packed(1, [1]) + blob(2, b"\xff" * MB + b"\x01"))
    f = tmp_path / "varint.pb.gz"
    f.write_bytes(_profile(s, _loc(1, 1), _fn(1, 3), ["main.f"]))
    assert f.stat().st_size < 2000
    code, out, err, cpu, rss = _run(tmp_path, "flamegraph", str(f), "--folded")
    assert code == 7 and err.count("\n") == 1 and "longer than 10 bytes" in err, err
    assert cpu < 10 and out == ""


def test_a_value_past_64_bits_is_one_line(tmp_path: Path) -> None:
    s = blob(2, packed(1, [1]) + varint(2 << 3) + b"\xff" * 160 + b"\x01")  # a value above 2^1024
    f = tmp_path / "big.pb.gz"
    f.write_bytes(_profile(s, _loc(1, 1), _fn(1, 3), ["main.f"]))
    code, _, err, _, _ = _run(tmp_path, "flamegraph", str(f), "-o", "x.svg")
    assert code == 7 and err.count("\n") == 1 and "not a valid pprof profile" in err
    assert not (tmp_path / "x.svg").exists()


def test_one_location_named_thousands_of_times_is_cut_and_said(tmp_path: Path) -> None:
    """15 KB that took 3.8 GB: one 3,000-line location, named 3,000 times by one sample."""
    s = blob(2, packed(1, [1] * 3000) + packed(2, [5]))
    f = tmp_path / "deep.pb.gz"
    f.write_bytes(_profile(s, _loc(1, 1, lines=3000), _fn(1, 3), ["main.f"]))
    code, out, err, _, rss = _run(tmp_path, "flamegraph", str(f), "--folded")
    assert code == 0 and rss < 500, (err, rss)
    assert "deeper than 1,024 frames" in err
    stack, _, n = out.strip().rpartition(" ")
    frames = stack.split(";")
    assert n == "5" and len(frames) == pprof.MAX_FRAMES and frames[0] == pprof.CUT_FRAME
    code, _, err, _, rss = _run(tmp_path, "flamegraph", str(f), "-o", "deep.svg")
    assert code == 0 and rss < 500 and (tmp_path / "deep.svg").stat().st_size < 2 * MB


def test_stacks_that_expand_past_the_bound_are_refused_in_one_line(tmp_path: Path) -> None:
    """Samples naming one 300-line location 1..1,500 times, under a 2,000-character name: 12 KB
    gzipped, billions of characters once written out."""
    s = b"".join(blob(2, packed(1, [1] * k) + packed(2, [1])) for k in range(1, 1500))
    f = tmp_path / "growing.pb.gz"
    f.write_bytes(_profile(s, _loc(1, 1, lines=300), _fn(1, 3), ["x" * 2000]))
    assert f.stat().st_size < 100_000
    code, _, err, _, rss = _run(tmp_path, "flamegraph", str(f), "--folded")
    assert code == 7 and err.count("\n") == 1 and "expand to more than" in err and rss < 500


def test_thousands_of_deep_distinct_stacks_draw_a_bounded_graph(tmp_path: Path) -> None:
    """3,000 distinct 1,024-frame stacks (76 KB gzipped): every stack wide enough to draw whole,
    3 million frames; the graph keeps at most flame.MAX_NODES and says what it left out."""
    rnd = random.Random(1)
    funcs = b"".join(_fn(i, 2 + i) for i in range(1, 60))
    locs = b"".join(_loc(i, i, lines=40) for i in range(1, 60))
    s = b"".join(blob(2, packed(1, [rnd.randint(1, 59) for _ in range(30)]) + packed(2, [rnd.randint(1, 100)]))
                 for _ in range(3000))
    f = tmp_path / "wide.pb.gz"
    f.write_bytes(_profile(s, locs, funcs, [f"pkg.function_{i}" for i in range(1, 60)]))
    code, _, err, _, rss = _run(tmp_path, "flamegraph", str(f), "-o", "wide.svg")
    assert code == 0 and rss < 500, (err, rss)
    svg = (tmp_path / "wide.svg").read_text()
    assert svg.count("<g data-i=") <= 100_001 and "left out" in svg


def test_negative_values_are_said_not_dropped(tmp_path: Path) -> None:
    s = blob(2, packed(1, [1]) + packed(2, [-5])) + blob(2, packed(1, [1]) + packed(2, [7]))
    f = tmp_path / "neg.pb.gz"
    f.write_bytes(_profile(s, _loc(1, 1), _fn(1, 3), ["main.f"]))
    code, out, err, _, _ = _run(tmp_path, "flamegraph", str(f), "--folded")
    assert code == 0 and out == "main.f 2\n"
    assert "1 sample with negative values" in err


def test_a_newline_in_a_name_cannot_forge_a_stack(tmp_path: Path) -> None:
    locs = _loc(1, 1) + _loc(2, 2)
    funcs = _fn(1, 3) + _fn(2, 4)
    s = blob(2, packed(1, [1, 2]) + packed(2, [3]))
    f = tmp_path / "nl.pb.gz"
    f.write_bytes(_profile(s, locs, funcs, ["main.g\nmain.evil 99999999\nx", "main.root"]))
    code, out, err, _, _ = _run(tmp_path, "flamegraph", str(f), "--folded")
    assert code == 0, err
    assert out == "main.root;main.g\\nmain.evil 99999999\\nx 3\n"


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_min_width_must_be_a_finite_number(value: str, tmp_path: Path) -> None:
    s = blob(2, packed(1, [1]) + packed(2, [3]))
    f = tmp_path / "ok.pb.gz"
    f.write_bytes(_profile(s, _loc(1, 1), _fn(1, 3), ["main.f"]))
    code, _, err, _, _ = _run(tmp_path, "flamegraph", str(f), "--min-width", value, "-o", "x.svg")
    assert code == 2 and err.count("\n") == 1 and not (tmp_path / "x.svg").exists(), err


def test_labels_are_read_and_group_the_stacks() -> None:
    """Sample labels (Go's pprof.Do, TiDB's Top SQL digests), string and numeric."""
    strings = ["", "cpu", "nanoseconds", "main.f", "main.g", "sql_digest", "abc", "def", "bytes", "size"]
    out = bytearray(blob(1, num(1, 1) + num(2, 2)))
    label = lambda k, v: blob(3, num(1, k) + num(2, v))  # noqa: E731
    out += blob(2, packed(1, [1]) + packed(2, [10]) + label(5, 6))
    out += blob(2, packed(1, [2, 1]) + packed(2, [4]) + label(5, 7) + blob(3, num(1, 9) + num(3, 4096) + num(4, 8)))
    out += blob(2, packed(1, [2]) + packed(2, [1]))
    out += _loc(1, 1) + _loc(2, 2) + _fn(1, 3) + _fn(2, 4)
    for s in strings:
        out += blob(6, s.encode())
    p = pprof.parse_profile(bytes(out))
    assert p.label_keys() == ["size", "sql_digest"]
    assert dict(p.stacks(0, group_by=("sql_digest",))) == {
        ("sql_digest=abc", "main.f"): 10, ("sql_digest=def", "main.f", "main.g"): 4, ("sql_digest unset", "main.g"): 1}
    assert [lab for _, _, lab in p.samples_with_labels(0)][1] == (("size", "4096 bytes"), ("sql_digest", "def"))
