"""The pprof reader: wire-format edge cases on profiles encoded here, and real profiles fetched from
a Go program's net/http/pprof, checked against `go tool pprof -top` on the same files."""

from __future__ import annotations

import gzip
import io
import re
import subprocess
import sys
import urllib.request
import xml.dom.minidom
from collections.abc import Iterator
from pathlib import Path

import pytest

from profiler.cli import main
from profiler.errors import InputError
from profiler.inputs import detect, pprof
from profiler.inputs.streams import HEAD_SIZE
from profiler.usecases.flamegraph import STACK_READERS
from tests.workloads import gobuild

PARKED = 12  # goroutines the workload parks in main.parkForever


# --------------------------------------------------------------------------- a small encoder


def varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def num(field: int, v: int) -> bytes:
    return varint(field << 3) + varint(v)


def blob(field: int, data: bytes) -> bytes:
    return varint(field << 3 | 2) + varint(len(data)) + data


def packed(field: int, values: list[int]) -> bytes:
    return blob(field, b"".join(varint(v) for v in values))


def profile_bytes(padding: int = 0) -> bytes:
    """Two sample types; main -> work (with parse inlined into it) -> leaf; packed and unpacked ids.
    ``padding`` more (unused) strings make it larger."""
    strings = ["", "samples", "count", "cpu", "nanoseconds", "main.main", "main.work", "main.parse", "main.leaf",
               "/usr/bin/app", "cpu"] + [f"unused.function{i}" for i in range(padding)]
    out = bytearray()
    out += blob(1, num(1, 1) + num(2, 2)) + blob(1, num(1, 3) + num(2, 4))
    # samples: leaf first; location 2 holds work with parse inlined into it
    out += blob(2, packed(1, [3, 2, 1]) + packed(2, [2, 20_000_000]))
    out += blob(2, num(1, 2) + num(1, 1) + num(2, 1) + num(2, 10_000_000))  # unpacked
    out += blob(2, packed(1, [4, 1]) + packed(2, [1, 5]))
    out += blob(2, packed(1, [1]) + packed(2, [0, 0]))  # zero: left out
    out += blob(3, num(1, 1) + num(5, 9))
    out += blob(4, num(1, 1) + num(2, 1) + blob(4, num(1, 1)))
    out += blob(4, num(1, 2) + num(2, 1) + blob(4, num(1, 3)) + blob(4, num(1, 2)))
    out += blob(4, num(1, 3) + num(2, 1) + blob(4, num(1, 4)))
    out += blob(4, num(1, 4) + num(2, 1))  # not symbolized
    for fid, name in ((1, 5), (2, 6), (3, 7), (4, 8)):
        out += blob(5, num(1, fid) + num(2, name))
    for s in strings:
        out += blob(6, s.encode())
    out += num(10, 2_000_000_000) + blob(11, num(1, 3) + num(2, 4)) + num(12, 10_000_000)
    out += num(99, 7)  # a field from a later version of the format: skipped
    return bytes(out)


def test_decodes_stacks_inlining_and_both_repeated_encodings() -> None:
    p = pprof.parse_profile(profile_bytes())
    assert [str(t) for t in p.sample_types] == ["samples/count", "cpu/nanoseconds"]
    assert p.index() == 1 and p.index("samples") == 0  # the last type by default, as go tool pprof
    assert p.period == 10_000_000 and p.duration_nanos == 2_000_000_000 and str(p.period_type) == "cpu/nanoseconds"
    got = dict(p.stacks(1))
    assert got == {
        ("main.main", "main.work", "main.parse", "main.leaf"): 20_000_000,
        ("main.main", "main.work", "main.parse"): 10_000_000,
        ("main.main", "[app]"): 5,
    }
    with pytest.raises(InputError, match="no sample type 'alloc'.*samples, cpu"):
        p.index("alloc")


def test_sniffing_takes_profiles_not_text(tmp_path: Path) -> None:
    raw = profile_bytes()
    assert pprof.sniff(raw)
    # a whole file cut short still opens with its sample types: taken as a (truncated) profile, so
    # that reading it says "truncated" rather than "not a format we read"; two fields are too few
    assert pprof.sniff(raw[:50]) and not pprof.sniff(raw[:9])
    big = profile_bytes(padding=8000)
    assert len(big) > HEAD_SIZE and pprof.sniff(big[:HEAD_SIZE])  # the head of a longer file
    for text in (b"a;b 12\n", b"2\n", b"mariadbd 10451/10460 [001] 12345.678901: 1 cpu-clock:\n", b"\n  x\n"):
        assert not pprof.sniff(text)
    f = tmp_path / "cpu.pb.gz"
    f.write_bytes(gzip.compress(raw))
    src = detect(str(f), tuple(STACK_READERS))
    assert src.format is pprof.FORMAT and src.compressed


def test_flamegraph_of_an_encoded_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "p.pb"
    f.write_bytes(profile_bytes())
    assert main(["flamegraph", str(f), "--folded"]) == 0
    assert capsys.readouterr().out == (
        "main.main;[app] 5\nmain.main;main.work;main.parse 10000000\nmain.main;main.work;main.parse;main.leaf 20000000\n"
    )
    assert main(["flamegraph", str(f), "--folded", "--event", "samples"]) == 0
    assert "main.leaf 2\n" in capsys.readouterr().out
    assert main(["flamegraph", str(f), "--from", "1s"]) == 2
    assert main(["flamegraph", str(f), "--offcpu"]) == 2
    assert main(["flamegraph", str(f), "--event", "alloc"]) == 7
    cut = tmp_path / "cut.pb.gz"
    cut.write_bytes(gzip.compress(profile_bytes())[:-30])
    assert main(["flamegraph", str(cut)]) == 7
    bad = tmp_path / "bad.pb"
    bad.write_bytes(profile_bytes() + blob(1, num(1, 500)))  # a sample type named past the string table
    assert main(["flamegraph", str(bad)]) == 7
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("profiler: error:") == 5


# --------------------------------------------------------------------------- real profiles from Go


@pytest.fixture(scope="module")
def go_profiles(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """Build the workload, run it, fetch a 2 s CPU profile and a goroutine profile from it."""
    go = gobuild.go()
    if go is None:
        pytest.skip("go is not installed")
    d = tmp_path_factory.mktemp("pprof")
    exe = gobuild.build()
    proc = subprocess.Popen([str(exe), "-mode", "pprof", "-parked", str(PARKED)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        addr = proc.stdout.readline().decode().strip()
        base = f"http://{addr}/debug/pprof"
        files = {"cpu": d / "cpu.pb.gz", "goroutine": d / "goroutine.pb.gz"}
        with urllib.request.urlopen(f"{base}/profile?seconds=2", timeout=60) as r:
            files["cpu"].write_bytes(r.read())
        with urllib.request.urlopen(f"{base}/goroutine", timeout=60) as r:
            files["goroutine"].write_bytes(r.read())
        files["go"] = Path(go)
        yield files
    finally:
        assert proc.stdin is not None
        proc.stdin.close()  # the workload exits when its stdin closes
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


_TOP = re.compile(r"^\s*(\S+)\s+\S+%\s+\S+%\s+(\S+)\s+\S+%\s+(.+?)(?: \(inline\))?\s*$")


def go_top(go: Path, profile: Path) -> dict[str, tuple[int, int]]:
    """`go tool pprof -top` of every function: name -> (flat, cum), nanoseconds or counts."""
    out = subprocess.run([str(go), "tool", "pprof", "-top", "-nodecount=100000", "-nodefraction=0",
                          "-edgefraction=0", "-unit=ns", str(profile)], capture_output=True, text=True, timeout=120,
                         check=True).stdout
    rows: dict[str, tuple[int, int]] = {}
    for line in out.splitlines():
        m = _TOP.match(line)
        if m and m.group(1) != "flat":
            flat, cum = (int(x.removesuffix("ns") or 0) for x in (m.group(1), m.group(2)))
            rows[m.group(3)] = (flat, cum)
    return rows


def folded_top(folded: str) -> dict[str, tuple[int, int]]:
    """The same from folded stacks: flat = as the leaf, cum = anywhere in the stack (once per stack)."""
    flat: dict[str, int] = {}
    cum: dict[str, int] = {}
    for line in folded.splitlines():
        stack, _, n = line.rpartition(" ")
        frames = stack.split(";")
        flat[frames[-1]] = flat.get(frames[-1], 0) + int(n)
        for f in set(frames):
            cum[f] = cum.get(f, 0) + int(n)
    return {f: (flat.get(f, 0), c) for f, c in cum.items()}


@pytest.mark.privileged
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["cpu", "goroutine"])
def test_top_functions_match_go_tool_pprof(kind: str, go_profiles: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["flamegraph", str(go_profiles[kind]), "--folded"]) == 0
    ours = folded_top(capsys.readouterr().out)
    theirs = go_top(go_profiles["go"], go_profiles[kind])
    top = sorted(theirs, key=lambda f: (-theirs[f][0], -theirs[f][1], f))[:8]
    assert theirs[top[0]][0] > 0
    for f in top:
        assert ours.get(f) == theirs[f], f
    if kind == "cpu":
        assert ours["main.countPrimes"][1] > 0 and ours["main.hashLoop"][1] > 0
    else:
        assert ours["main.parkForever"] == theirs["main.parkForever"] == (0, PARKED)


@pytest.mark.privileged
@pytest.mark.slow
def test_flamegraph_and_diff_draw_go_profiles(go_profiles: dict[str, Path], tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    svg = tmp_path / "cpu.svg"
    assert main(["flamegraph", str(go_profiles["cpu"]), "-o", str(svg)]) == 0
    text = svg.read_text()
    xml.dom.minidom.parseString(text.encode())
    assert "main.countPrimes" in text and "cpu/nanoseconds" in text and " ms" in text
    assert "of cpu/nanoseconds" in capsys.readouterr().err
    # the same profile piped on stdin, as `curl .../profile | profiler flamegraph -`
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(go_profiles["cpu"].read_bytes())))
    assert main(["flamegraph", "-", "--folded"]) == 0
    piped = capsys.readouterr().out
    assert main(["flamegraph", str(go_profiles["cpu"]), "--folded"]) == 0
    assert capsys.readouterr().out == piped
    assert main(["flamegraph", str(go_profiles["goroutine"])]) == 0
    assert "goroutines" in capsys.readouterr().out
    assert main(["diff", str(go_profiles["cpu"]), str(go_profiles["cpu"]), "--folded"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines and all(ln.split(" ")[-1] == ln.split(" ")[-2] for ln in lines)
