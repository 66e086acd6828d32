"""Stacks out to other tools: `profiler flamegraph --format pprof|speedscope` on bundles, perf
script and pprof inputs. The pprof export reads back to the same stacks (our reader), `go tool
pprof -top` lists the same flat/cumulative figures as our folded stacks, speedscope's JSON
holds the same stacks; broken pprof inputs are one line and exit 7."""

from __future__ import annotations

import gzip
import json
import os
import re
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
CONVOY = SAMPLES / "perf" / "fsync-writer-and-lock-convoy"


def _folded(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, int]:
    capsys.readouterr()
    assert main(["flamegraph", *args, "--folded"]) == 0
    out: dict[str, int] = {}
    for line in capsys.readouterr().out.splitlines():
        stack, _, n = line.rpartition(" ")
        out[stack] = int(n)
    return out


def _read_back(path: Path, roots: tuple[str, ...] = ()) -> dict[str, int]:
    """Our reader's stacks of an export, rooted at the values of ``roots`` (labels): the thread
    and pool are labels of the samples, not frames."""
    p = parse_profile(gzip.decompress(path.read_bytes()))
    out: dict[str, int] = {}
    for frames, v in p.stacks(0, roots):
        key = ";".join(f.split("=", 1)[1] if i < len(roots) else f for i, f in enumerate(frames))
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
    # the folded stacks' root frames (the thread; the wait reason and pool) are the samples' labels
    assert _read_back(out, ("wait", "thread") if offcpu else ("thread",)) == folded
    kind = parse_profile(gzip.decompress(out.read_bytes())).sample_types[0]
    assert (kind.type, kind.unit) == (("offcpu", "microseconds") if offcpu else ("cpu", "nanoseconds"))
    ss = tmp_path / "x.speedscope.json"
    assert main(["flamegraph", str(PERF), *extra, "--format", "speedscope", "-o", str(ss)]) == 0
    doc = json.loads(ss.read_text())
    frames = [f["name"] for f in doc["shared"]["frames"]]
    assert doc["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    # one time-ordered profile per thread; together, the folded stacks without their roots
    strip = 2 if offcpu else 1
    back: dict[str, int] = {}
    for prof in doc["profiles"]:
        assert prof["type"] == "sampled" and prof["unit"] == ("microseconds" if offcpu else "nanoseconds")
        assert re.fullmatch(r".+ \(\d+\)", prof["name"]), prof["name"]  # "comm (tid)"
        for smp, w in zip(prof["samples"], prof["weights"], strict=True):
            k = ";".join(frames[i] for i in smp)
            back[k] = back.get(k, 0) + w
    want: dict[str, int] = {}
    for k, v in folded.items():
        rest = ";".join(k.split(";")[strip:]) or "[no stack]"
        want[rest] = want.get(rest, 0) + v
    assert back == want and len(doc["profiles"]) > 1


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


def test_speedscope_profiles_are_in_time_order_per_thread(tmp_path: Path) -> None:
    """Each thread's profile lists its samples in the order they were taken: checked against the
    perf script text's own order of that thread's samples."""
    ss = tmp_path / "t.speedscope.json"
    assert main(["flamegraph", str(PERF), "--format", "speedscope", "-o", str(ss)]) == 0
    doc = json.loads(ss.read_text())
    text = gzip.decompress((PERF / "cpu.perf.txt.gz").read_bytes()).decode()
    per: dict[str, list[float]] = {}
    for m in re.finditer(r"^(\S.*?)\s+(?:\d+/)?(\d+)\s+(?:\[\d+\]\s+)?(\d+\.\d+):\s+\d+\s+cpu-clock", text, re.M):
        per.setdefault(f"{m.group(1).strip()} ({m.group(2)})", []).append(float(m.group(3)))
    for prof in doc["profiles"]:
        assert len(prof["samples"]) == len(per[prof["name"]]), prof["name"]  # every sample of the thread
        assert per[prof["name"]] == sorted(per[prof["name"]])


def test_a_value_past_int64_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "big.folded"
    src.write_text(f"main;work {1 << 64}\n")
    capsys.readouterr()
    assert main(["flamegraph", str(src), "-o", str(tmp_path / "big.pb.gz")]) == 7
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not fit pprof's 64-bit integers" in err
    assert not (tmp_path / "big.pb.gz").exists()


@needs_go
def test_go_tool_pprof_lists_our_labels_duration_and_binaries(tmp_path: Path) -> None:
    out = tmp_path / "c.pb.gz"
    assert main(["flamegraph", str(CONVOY), "-o", str(out)]) == 0
    tags = subprocess.run([str(_go()), "tool", "pprof", "-tags", str(out)], capture_output=True, text=True,
                          timeout=120, check=True).stdout
    for key, value in (("thread", "spinner"), ("thread", "locker-0"), ("pool", "locker"), ("tid", "13014"),
                       ("pid", "12963"), ("target", "python3 (12963)")):
        assert re.search(rf"^ {key}: Total", tags, re.M) and re.search(rf"%\): {re.escape(value)}$", tags, re.M), (key, value)
    top = subprocess.run([str(_go()), "tool", "pprof", "-top", str(out)], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    manifest = json.loads((CONVOY / "manifest.json").read_text())
    assert f"Duration: {manifest['duration']:.0f}s" in top or re.search(r"Duration: [\d.]+s", top)
    raw = subprocess.run([str(_go()), "tool", "pprof", "-raw", str(out)], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert "PeriodType: cpu nanoseconds" in raw and "Mappings" in raw and "libpython3" in raw
    assert "python3" not in raw.split("Locations")[1].split("Mappings")[0].split()  # no thread-name root frame


@needs_go
def test_a_go_profile_with_labels_keeps_them_through_our_reader(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A Go program's pprof.Do labels (as TiDB's Top SQL digests ride its CPU samples): our reader
    groups by them and our export carries them, as go tool pprof -tags reads both files."""
    binary = gobuild.build(Path(__file__).resolve().parents[1] / "workloads" / "golabels" / "main.go", name="golabels")
    prof = tmp_path / "labels.pb.gz"
    subprocess.run([str(binary), "-o", str(prof), "-seconds", "1.5"], check=True, timeout=60)

    def tags(path: Path) -> str:
        return subprocess.run([str(_go()), "tool", "pprof", "-tags", str(path)], capture_output=True, text=True,
                              timeout=120, check=True).stdout

    theirs = tags(prof)
    assert "sql_digest" in theirs and ": aaa" in theirs
    p = parse_profile(gzip.decompress(prof.read_bytes()))
    assert {"sql_digest", "stmt"} <= set(p.label_keys())
    folded = _folded(capsys, str(prof), "--group-by", "sql_digest")
    roots = {k.split(";")[0] for k in folded}
    # the runtime's own work (GC, the profiler's writer) carries no label: "sql_digest unset"
    assert "sql_digest=aaa" in roots and roots <= {"sql_digest=aaa", "sql_digest=bbb", "sql_digest unset"}
    scan = sum(v for k, v in folded.items() if "main.scanRows" in k)
    assert scan and scan == sum(v for k, v in folded.items() if k.startswith("sql_digest=aaa;") and "main.scanRows" in k)
    out = tmp_path / "again.pb.gz"
    assert main(["flamegraph", str(prof), "-o", str(out)]) == 0
    assert tags(out) == theirs  # every label value with the same totals
