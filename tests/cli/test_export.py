"""Stacks out to other tools: `profiler flamegraph --format pprof|speedscope` on bundles, perf
script and pprof inputs. The pprof export reads back to the same stacks (our reader), `go tool
pprof -top` lists the same flat/cumulative figures as our folded stacks, speedscope's JSON
holds the same stacks; broken pprof inputs are one line and exit 7."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from profiler.analyzers.stacks.export import StackProfile

from profiler.cli import main
from profiler.inputs.pprof import parse_profile
from profiler.renderers import pprof_out, speedscope
from profiler.renderers.registry import EXPORTS
from tests.cli.test_inputs_pprof import folded_top, go_top
from tests.conftest import SAMPLES
from tests.workloads import gobuild
from tests.workloads.goservers import GoWorkload, children, get

PERF = SAMPLES / "perf" / "fio-fsync-and-python-locks"


def _folded(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, int]:
    capsys.readouterr()
    assert main(["flamegraph", *args, "--folded"]) == 0
    out: dict[str, int] = {}
    for line in capsys.readouterr().out.splitlines():
        stack, _, n = line.rpartition(" ")
        out[stack] = int(n)
    return out


def _read_back(path: Path) -> dict[str, int]:
    p = parse_profile(gzip.decompress(path.read_bytes()))
    out: dict[str, int] = {}
    for frames, v in p.stacks(0):
        key = ";".join(frames)
        out[key] = out.get(key, 0) + v
    return out


def test_the_registry_picks_exports_by_format_and_extension() -> None:
    assert EXPORTS.pick(StackProfile, "pprof") is pprof_out.WRITER
    assert EXPORTS.pick(StackProfile, None, "out.pb.gz") is pprof_out.WRITER
    assert EXPORTS.pick(StackProfile, None, "out.speedscope.json") is speedscope.WRITER


def test_encoding_is_deterministic_and_reads_back() -> None:
    prof = StackProfile({"main;a;b": 30, "main;a": 10, "main;c;b": 5}, "cpu", "nanoseconds", "x", period=10_000_000)
    data = pprof_out.WRITER.render(prof)
    assert data == pprof_out.WRITER.render(prof)  # mtime 0: same stacks, same bytes
    p = parse_profile(gzip.decompress(data))
    assert [str(t) for t in p.sample_types] == ["cpu/nanoseconds"] and p.period == 10_000_000
    assert dict((";".join(f), v) for f, v in p.stacks(0)) == prof.counts


@pytest.mark.parametrize("offcpu", [False, True])
def test_bundle_export_reads_back_to_the_folded_stacks(offcpu: bool, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    extra = ["--offcpu"] if offcpu else []
    folded = _folded(capsys, str(PERF), *extra)
    out = tmp_path / "x.pb.gz"
    assert main(["flamegraph", str(PERF), *extra, "-o", str(out)]) == 0
    assert _read_back(out) == folded
    kind = parse_profile(gzip.decompress(out.read_bytes())).sample_types[0]
    assert (kind.type, kind.unit) == (("offcpu", "microseconds") if offcpu else ("cpu", "nanoseconds"))
    ss = tmp_path / "x.speedscope.json"
    assert main(["flamegraph", str(PERF), *extra, "--format", "speedscope", "-o", str(ss)]) == 0
    doc = json.loads(ss.read_text())
    frames = [f["name"] for f in doc["shared"]["frames"]]
    prof = doc["profiles"][0]
    assert doc["$schema"] == "https://www.speedscope.app/file-format-schema.json" and prof["type"] == "sampled"
    assert prof["unit"] == ("microseconds" if offcpu else "nanoseconds")
    back = {";".join(frames[i] for i in s): w for s, w in zip(prof["samples"], prof["weights"], strict=True)}
    assert back == folded and prof["endValue"] == sum(folded.values())


def test_refuses_existing_output_and_unknown_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "x.pb.gz"
    out.write_bytes(b"keep")
    assert main(["flamegraph", str(PERF), "-o", str(out)]) == 8 and out.read_bytes() == b"keep"
    assert main(["flamegraph", str(PERF), "--format", "jpeg"]) == 2
    assert "use svg, folded, pprof, speedscope" in capsys.readouterr().err


def test_broken_pprof_inputs_are_one_line_exit_7(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = gzip.compress(pprof_out.encode(StackProfile({"main;a": 3}, "cpu", "nanoseconds")))
    cases = {
        "truncated.pb.gz": good[: len(good) // 2],
        "not-gzip.pb.gz": b"\x1f\x8b\x08\x00" + b"this is not deflate data" * 20,
        "not-pprof.pb": b"\x0a\x10" + b"\xff" * 4,  # a sample type that runs past the end
        "cut-inside.pb": pprof_out.encode(StackProfile({"main;a": 3}, "cpu", "nanoseconds"))[:-3],
    }
    capsys.readouterr()
    for name, data in cases.items():
        f = tmp_path / name
        f.write_bytes(data)
        assert main(["flamegraph", str(f)]) == 7, name
        assert main(["flamegraph", str(f), "--format", "pprof", "-o", str(tmp_path / f"{name}.out.pb.gz")]) == 7
        err = capsys.readouterr().err
        assert err.count("\n") == 2 and "Traceback" not in err and err.startswith("profiler: error:"), err


# --------------------------------------------------------------------------- go tool pprof reads ours


needs_go = pytest.mark.skipif(gobuild.go() is None, reason="go is not installed")


def _go() -> Path:
    go = gobuild.go()
    assert go is not None
    return Path(go)


def _same_top(ours: dict[str, tuple[int, int]], theirs: dict[str, tuple[int, int]], n: int = 8,
              unit_ns: int = 1) -> None:
    top = sorted(theirs, key=lambda f: (-theirs[f][0], -theirs[f][1], f))[:n]
    assert theirs[top[0]][0] > 0
    for f in top:
        assert (ours[f][0] * unit_ns, ours[f][1] * unit_ns) == theirs[f], f


@needs_go
@pytest.mark.parametrize("offcpu", [False, True])
def test_go_tool_pprof_top_of_our_export_is_our_flame_graphs(offcpu: bool, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    extra = ["--offcpu"] if offcpu else []
    ours = folded_top("\n".join(f"{k} {v}" for k, v in _folded(capsys, str(PERF), *extra).items()))
    out = tmp_path / "x.pb.gz"
    assert main(["flamegraph", str(PERF), *extra, "-o", str(out)]) == 0
    theirs = go_top(_go(), out)  # -unit=ns: our microseconds come back in nanoseconds
    _same_top(ours, theirs, unit_ns=1000 if offcpu else 1)


@pytest.fixture
def kids(tmp_path: Path) -> Iterator[object]:
    with children(tmp_path) as c:
        yield c


@needs_go
@pytest.mark.privileged
@pytest.mark.skipif(os.geteuid() != 0, reason="the go tool's cache under /root")
def test_a_live_go_profile_round_trips_through_our_export(tmp_path: Path, kids: object,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Go's /debug/pprof/profile -> our flame graph (same top as go tool pprof -top of it) -> our
    pprof export (same top again)."""
    w = GoWorkload("cpu", "-workers", "2")
    w.start(kids.spawn)  # type: ignore[attr-defined]
    live = tmp_path / "live.pb.gz"
    live.write_bytes(get(f"{w.url}/debug/pprof/profile?seconds=2", timeout=60))
    theirs = go_top(_go(), live)
    ours = folded_top("\n".join(f"{k} {v}" for k, v in _folded(capsys, str(live)).items()))
    _same_top(ours, theirs)
    assert ours["main.burnCPU"][1] > 0
    again = tmp_path / "again.pb.gz"
    assert main(["flamegraph", str(live), "-o", str(again)]) == 0
    _same_top(ours, go_top(_go(), again))
    got = subprocess.run([str(_go()), "tool", "pprof", "-raw", str(again)], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert "cpu/nanoseconds" in got or "Sample types" in got
