"""Runtimes of targets and Go stacks: the build info and function table we read from Go binaries
agree with Go's own tools (`go version -m`, `go tool nm`, `go tool addr2line`) on the Go workload
built in three ways (plain; stripped; PIE, -trimpath and stripped) and on Debian's etcd; perf's
stacks of a stripped Go target come out named; bundles from before runtimes were recorded load."""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from profiler.collectors.runtime import detect as runtime
from profiler.collectors.runtime import gosym

from profiler.bundle import VERSION, Bundle, parse_manifest
from profiler.cli import main
from profiler.formats import golang
from profiler.formats.elf import Elf
from tests.conftest import SAMPLES
from tests.workloads import gobuild
from tests.workloads.goservers import Etcd, GoWorkload, children

pytestmark = pytest.mark.skipif(gobuild.go() is None, reason="go is not installed")

# (build flags, binary name): the ways users build Go servers that change what perf sees
VARIANTS = {
    "plain": ((), "goworkload"),
    "stripped": (("-ldflags=-s -w",), "goworkload-stripped"),
    "pie-trimpath-stripped": (("-buildmode=pie", "-trimpath", "-ldflags=-s -w"), "goworkload-pie"),
}


@pytest.fixture(scope="module")
def binaries() -> dict[str, Path]:
    return {k: gobuild.build(flags=flags, name=name) for k, (flags, name) in VARIANTS.items()}


def _go() -> str:
    go = gobuild.go()
    assert go is not None
    return go


def go_version_m(exe: Path | str) -> tuple[str, dict[str, str]]:
    """`go version -m`: (go version, build settings) as Go itself reads them."""
    out = subprocess.run([_go(), "version", "-m", str(exe)], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    first, *lines = out.splitlines()
    settings = {}
    for line in lines:
        parts = line.strip().split("\t")
        if parts[0] == "build" and len(parts) > 1:
            k, _, v = parts[1].partition("=")
            settings[k] = v
    return first.split(": ", 1)[1].strip(), settings


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_build_info_matches_go_version_m(variant: str, binaries: dict[str, Path]) -> None:
    exe = binaries[variant]
    version, settings = go_version_m(exe)
    with Elf(exe) as elf:
        info = runtime.from_elf(elf)
    assert info.name == "go" and info.version == version and info.frame_pointers is True
    for k, v in settings.items():
        assert info.build[k] == v[: runtime.MAX_VALUE], k
    assert info.binary["stripped"] is (variant != "plain")
    assert info.binary["type"] == ("pie" if "pie" in variant else "executable")
    assert ("-trimpath" in info.build) is ("trimpath" in variant)
    assert ("gopclntab" in info.symbols) is (variant != "plain")


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_function_table_names_what_go_tool_addr2line_names(variant: str, binaries: dict[str, Path]) -> None:
    """Every function `go tool nm` lists in the plain build is found at its address; in the stripped
    builds, 400 addresses spread over the text are named as `go tool addr2line` names them."""
    with Elf(binaries[variant]) as elf:
        table = golang.functable(elf)
    assert table is not None and table.format == "1.20" and len(table) > 1000
    if variant == "plain":
        nm = subprocess.run([_go(), "tool", "nm", "-size", str(binaries[variant])], capture_output=True, text=True,
                            check=True, timeout=120).stdout
        rows = [ln.split(None, 3) for ln in nm.splitlines()]  # .symtab calls assembly functions NAME.abi0
        funcs = [(int(r[0], 16), r[3].removesuffix(".abi0")) for r in rows
                 if len(r) == 4 and r[2] == "T" and not r[3].startswith(("_cgo", "x_cgo", "_rt0", "crosscall", "__"))]
        assert len(funcs) > 1000
        missing = [n for a, n in funcs if (table.lookup(a) or ("", 0))[0] != n]
        assert len(missing) < 0.01 * len(funcs), missing[:10]
        return
    # function entries: go tool addr2line names the innermost inlined function at a pc, and an entry
    # is never inlined code
    addrs = table.starts[:: max(1, len(table) // 400)]
    out = subprocess.run([_go(), "tool", "addr2line", str(binaries[variant])], input="".join(f"{a:#x}\n" for a in addrs),
                         capture_output=True, text=True, check=True, timeout=120).stdout.splitlines()
    theirs = out[0::2]
    ours = [(table.lookup(a) or ("?", 0))[0] for a in addrs]
    assert len(theirs) == len(ours)
    agree = sum(a == b for a, b in zip(ours, theirs, strict=True))
    assert agree >= 0.99 * len(ours), [(a, b) for a, b in zip(ours, theirs, strict=True) if a != b][:10]


def test_etcd_build_info_and_functions() -> None:
    """Debian's etcd: built with Go 1.19 (the 1.18 table format), stripped, GOPATH mode (no module)."""
    if Etcd.missing():
        pytest.skip(Etcd.missing() or "")
    exe = shutil.which("etcd")
    assert exe is not None
    version, settings = go_version_m(exe)
    with Elf(exe) as elf:
        info = runtime.from_elf(elf)
        table = golang.functable(elf)
        text = elf.section(".text")
    assert info.name == "go" and info.version == version and info.binary["stripped"] is True
    assert all(info.build[k] == v[: runtime.MAX_VALUE] for k, v in settings.items())
    assert table is not None and text is not None
    # etcd is linked externally (cgo): C code comes first in .text and Go's functions start at
    # runtime.text, which the table's header records. `go tool addr2line` on a stripped binary
    # assumes Go starts at .text, so it is asked about the addresses shifted by the difference.
    shift = table.starts[0] - text.addr
    assert shift > 0
    addrs = table.starts[:: max(1, len(table) // 300)]
    out = subprocess.run([_go(), "tool", "addr2line", exe], input="".join(f"{a - shift:#x}\n" for a in addrs),
                         capture_output=True, text=True, check=True, timeout=120).stdout.splitlines()[0::2]
    ours = [(table.lookup(a) or ("?", 0))[0] for a in addrs]
    assert sum(a == b for a, b in zip(ours, out, strict=True)) >= 0.99 * len(ours)


def test_other_runtimes_from_the_binary() -> None:
    """C++ (links libstdc++), C, and Rust when rustc is here to build a program."""
    cases = {"mariadbd": "c++", "redis-server": "c", "fio": "c"}
    seen = 0
    for prog, want in cases.items():
        exe = shutil.which(prog) or shutil.which(prog, path="/usr/sbin")
        if exe is None:
            continue
        with Elf(exe) as elf:
            info = runtime.from_elf(elf)
            needed = elf.needed()
        assert info.name == want, (prog, info)
        assert any(n.startswith("libstdc++") for n in needed) is (want == "c++")
        seen += 1
    assert seen, "none of mariadbd, redis-server, fio is installed"


def test_rust_from_comment_or_library_paths(tmp_path: Path) -> None:
    rustc = shutil.which("rustc") or shutil.which("rustc", path=os.path.expanduser("~/.cargo/bin"))
    if rustc is None:
        pytest.skip("rustc is not installed")
    src = tmp_path / "hello.rs"
    src.write_text('fn main() { let v: Vec<u32> = std::env::args().map(|a| a.len() as u32).collect(); '
                   'println!("{}", v[7]); }\n')
    exe = tmp_path / "hello"
    subprocess.run([rustc, "-O", "-o", str(exe), str(src)], check=True, capture_output=True, timeout=300)
    version = subprocess.run([rustc, "--version"], capture_output=True, text=True, check=True).stdout.split()[1]
    with Elf(exe) as elf:
        info = runtime.from_elf(elf)
    assert info.name == "rust" and info.version == f"rustc {version}"
    if shutil.which("strip"):  # without .comment, the standard library's paths still tell
        subprocess.run(["strip", "-R", ".comment", str(exe)], check=True, timeout=60)
        with Elf(exe) as elf:
            assert not elf.comment() and runtime.from_elf(elf).name == "rust"


def test_not_elf_is_unknown(tmp_path: Path) -> None:
    f = tmp_path / "script"
    f.write_bytes(b"#!/bin/sh\necho hi\n")
    from profiler.formats.elf import ElfError

    with pytest.raises(ElfError, match="not an ELF"):
        Elf(f)
    cut = tmp_path / "cut"
    cut.write_bytes(Path(shutil.which("true") or "/bin/true").read_bytes()[:200])  # the header, not the sections
    with pytest.raises(ElfError, match="cut short"), Elf(cut) as elf:
        _ = elf.sections
    assert runtime.detect(2**22 + 12345) is None  # no such process


# --------------------------------------------------------------------------- perf script rewriting


def _table() -> golang.FuncTable:
    return golang.FuncTable(starts=[0x401000, 0x401100], ends=[0x401100, 0x401180],
                            names=["main.work", "sync.(*Mutex).Lock"], format="1.20")


def test_rewriter_names_only_the_go_binarys_unknown_frames_across_chunks() -> None:
    syms = gosym.GoSymbols("/srv/app", _table(), [(0x1000, 0x1000, 0x401000)])
    text = (b"app 12/13 1.0: 1 cpu-clock:\n"
            b"\t            1010 [unknown] (/srv/app)\n"
            b"\t            1105 [unknown] (/srv/app)\n"
            b"\t            1f00 [unknown] (/srv/app)\n"
            b"\t            1010 [unknown] (/srv/app2)\n"
            b"\t    7f0000001000 __libc_start_main+0x80 (/usr/lib/libc.so.6)\n\n")
    for cut in (0, 7, 40, 75, len(text) - 1):
        out = io.BytesIO()
        r = gosym.Rewriter(out, {"/srv/app": syms})
        r.write(text[:cut])
        r.write(text[cut:])
        r.flush()
        got = out.getvalue().decode()
        assert "1010 main.work+0x10 (/srv/app)\n" in got
        assert "1105 sync.(*Mutex).Lock+0x5 (/srv/app)\n" in got
        assert "1f00 [unknown] (/srv/app)\n" in got  # past the last function: left alone, counted
        assert "1010 [unknown] (/srv/app2)" in got and "__libc_start_main+0x80" in got
        assert r.stats() == {"go_frames_named": 2, "go_frames_unnamed": 1}
        assert got.count("\n") == text.count(b"\n")


# --------------------------------------------------------------------------- bundles


def test_a_v1_bundle_loads_with_runtimes_unknown() -> None:
    raw = json.loads((SAMPLES / "cpu-bound-stress-ng" / "manifest.json").read_text())
    assert raw["version"] == 1 and "runtime_info" not in raw["targets"][0]
    b = Bundle.open(SAMPLES / "cpu-bound-stress-ng")
    assert b.manifest.version == VERSION and b.manifest.targets[0].runtime_info is None
    m = parse_manifest(json.dumps({"schema": "profiler.bundle", "version": VERSION, "targets": [
        {"pid": 1, "comm": "x", "runtime": "go", "runtime_info": {"name": "go", "version": "go1.21.0",
                                                                   "build": {"-trimpath": "true"}}}]}))
    info = m.targets[0].runtime_info
    assert info is not None and info.version == "go1.21.0" and info.build == {"-trimpath": "true"}


# --------------------------------------------------------------------------- end to end


def _folded_cpu(bundle: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, int]:
    assert main(["flamegraph", str(bundle), "--folded"]) == 0
    out: dict[str, int] = {}
    for line in capsys.readouterr().out.splitlines():
        stack, _, n = line.rpartition(" ")
        out[stack] = int(n)
    return out


@pytest.fixture
def kids(tmp_path: Path) -> Iterator[object]:
    with children(tmp_path) as c:
        yield c


@pytest.mark.parametrize("variant", ["stripped", "pie-trimpath-stripped"])
@pytest.mark.privileged
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("perf") is None, reason="needs root and perf")
def test_attach_names_go_frames_of_stripped_binaries(variant: str, binaries: dict[str, Path], tmp_path: Path,
                                                    kids: object, capsys: pytest.CaptureFixture[str]) -> None:
    w = GoWorkload("cpu", "-workers", "2", exe=binaries[variant])
    pid = w.start(kids.spawn)  # type: ignore[attr-defined]
    bundle = tmp_path / "cap"
    assert main(["attach", "--pid", str(pid), "--duration", "3s", "-o", str(bundle), "--no-report",
                 "--collector", "cpu-stacks"]) == 0
    capsys.readouterr()
    m = Bundle.open(bundle).manifest
    info = m.targets[0].runtime_info
    assert m.targets[0].runtime == "go" and info is not None and info.binary["stripped"] is True
    rec = m.collector("cpu-stacks")
    assert rec is not None and rec.stats["go_frames_named"] > 0
    folded = _folded_cpu(bundle, capsys)
    total = sum(folded.values())
    burn = sum(n for s, n in folded.items() if "main.burnCPU" in s.split(";"))
    assert burn > 0.5 * total, (burn, total)
    # the stacks run from the goroutine's start to the leaf: runtime.goexit at the root of burnCPU's
    assert any(s.split(";")[1:3] == ["runtime.goexit", "main.burnCPU"] for s in folded if "main.burnCPU" in s)
    unknown = sum(n for s, n in folded.items() if "[goworkload" in s or "[unknown]" in s.split(";")[-1])
    assert unknown < 0.05 * total


@pytest.mark.privileged
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("perf") is None, reason="needs root and perf")
def test_attach_names_etcds_frames_under_load(tmp_path: Path, kids: object, capsys: pytest.CaptureFixture[str]) -> None:
    if Etcd.missing():
        pytest.skip(Etcd.missing() or "")
    etcd = Etcd(tmp_path / "etcd")
    pid = etcd.start(kids.spawn)  # type: ignore[attr-defined]
    GoWorkload("etcdload", "-endpoint", etcd.url, "-workers", "4", "-rate", "0").start(kids.spawn)  # type: ignore[attr-defined]
    bundle = tmp_path / "cap"
    assert main(["attach", "--pid", str(pid), "--duration", "4s", "-o", str(bundle), "--no-report",
                 "--collector", "cpu-stacks"]) == 0
    capsys.readouterr()
    m = Bundle.open(bundle).manifest
    info = m.targets[0].runtime_info
    assert info is not None and info.name == "go" and info.version == go_version_m(shutil.which("etcd") or "")[0]
    folded = _folded_cpu(bundle, capsys)
    total = sum(folded.values())
    frames = [f for s in folded for f in s.split(";")]
    assert any(f.startswith("go.etcd.io/etcd/") for f in frames)
    etcd_own = sum(n for s, n in folded.items() if any(f.startswith(("go.etcd.io/", "runtime.", "google.golang.org/"))
                                                          for f in s.split(";")))
    assert etcd_own > 0.5 * total, (etcd_own, total)
    with gzip.open(bundle / "cpu.perf.txt.gz", "rt") as fh:
        text = fh.read()
    assert len(re.findall(r"\[unknown\] \(/usr/bin/etcd\)", text)) < 0.02 * text.count("(/usr/bin/etcd)")
