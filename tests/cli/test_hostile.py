"""Hand-made hostile inputs through the post-mortem verbs, one test per finding of issue 18.

Bundles come from other machines and are analyzed as root: nothing in one may make a verb
write outside its outputs, crash (exit 70), hang, drop readable evidence silently, or eat the
host's memory. Inputs are built here from the real samples, damaged the way the attacker and
the fuzzer of issue 18 damaged them. Peak memory is measured on a child process (os.wait4),
never by timing.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import shutil
import subprocess
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from profiler.analyzers.stacks.folding import FoldOptions, collapse_text

from profiler.cli import main
from tests.conftest import ROOT, is_root
from tests.measure import run_profiler

SAMPLES = ROOT / "samples"
PERF_BUNDLE = SAMPLES / "perf" / "fio-fsync-and-python-locks"
BCC_BUNDLE = SAMPLES / "bcc" / "io-fsync-fio"
SCRIPT = SAMPLES / "perf-script" / "mariadb-sysbench.txt"
BLOCK = SAMPLES / "block" / "merges.txt"
VERBS = ("analyze", "report", "flamegraph", "heatmap", "diff")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "internal error" not in err, err
    return code, out, err


def bundle(tmp_path: Path, src: Path = PERF_BUNDLE, name: str = "cap") -> Path:
    dst = tmp_path / name
    shutil.copytree(src, dst)
    with contextlib.suppress(FileNotFoundError):
        (dst / "report.html").unlink()
    return dst


def verb_args(verb: str, target: Path) -> list[str]:
    """The verb run on one input (diff compares it with itself)."""
    return [verb, str(target)] + ([str(target)] if verb == "diff" else [])


def one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("profiler: error:")]
    assert len(lines) == 1, err
    return lines[0]


# --------------------------------------------------------------------------- files overwritten


@pytest.mark.parametrize("force", [False, True])
def test_report_html_symlink_in_a_bundle_is_replaced_never_followed(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                    force: bool) -> None:
    victim = tmp_path / "passwd"
    victim.write_text("root:x:0:0:root:/root:/bin/bash\n")
    cap = bundle(tmp_path)
    (cap / "report.html").symlink_to(victim)
    code, out, err = run(capsys, "analyze", str(cap), *(["--force"] if force else []))
    assert code == 0
    assert victim.read_text() == "root:x:0:0:root:/root:/bin/bash\n"
    assert not (cap / "report.html").is_symlink() and "<html" in (cap / "report.html").read_text()[:200]
    assert "was a symbolic link to" in err and f"report: {cap / 'report.html'}" in out


def test_report_html_fifo_in_a_bundle_does_not_hang(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cap = bundle(tmp_path)
    os.mkfifo(cap / "report.html")  # opening it for writing would wait forever for a reader
    code, _, err = run(capsys, "analyze", str(cap))
    assert code == 0 and (cap / "report.html").is_file() and "device or pipe" in err


@pytest.mark.parametrize("verb", VERBS)
def test_output_symlink_needs_force_and_then_only_the_link_is_replaced(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                       verb: str) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    out = tmp_path / ("out.md" if verb == "report" else "out.html" if verb == "analyze" else "out.svg")
    out.symlink_to(victim)
    target = bundle(tmp_path) if verb in ("analyze", "report") else SCRIPT if verb != "heatmap" else BLOCK
    code, _, err = run(capsys, *verb_args(verb, target), "-o", str(out))
    assert code == 8 and "symbolic link" in one_error_line(err) and victim.read_text() == "keep"
    code, _, err = run(capsys, *verb_args(verb, target), "-o", str(out), "--force")
    assert code == 0, err
    assert victim.read_text() == "keep" and not out.is_symlink() and out.stat().st_size > 100
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # no temporary left


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize("where", ["/dev/null", "/dev/stdout", "-"])
def test_devices_and_stdout_are_written_by_every_verb(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      verb: str, where: str) -> None:
    target = bundle(tmp_path) if verb in ("analyze", "report") else SCRIPT if verb != "heatmap" else BLOCK
    code, out, err = run(capsys, *verb_args(verb, target), "-o", where)
    assert code == 0, err
    if where == "/dev/null":
        assert "<svg" not in out and "<html" not in out.lower()
    else:
        assert out.lstrip().startswith(("<", "profiler:", "##")), out[:80]


@pytest.mark.parametrize("verb", VERBS)
def test_ordinary_os_errors_on_output_are_exit_9(tmp_path: Path, capsys: pytest.CaptureFixture[str], verb: str) -> None:
    target = bundle(tmp_path) if verb in ("analyze", "report") else SCRIPT if verb != "heatmap" else BLOCK
    for where, why in ((tmp_path / "no" / "such" / "x.txt", "no such directory"), (tmp_path, "is a directory"),
                       (Path("/dev/full"), "no space left")):
        code, _, err = run(capsys, *verb_args(verb, target), "-o", str(where), "--force")
        assert code == 9 and why in one_error_line(err), (where, err)


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A read-only file system (root mounts a small tmpfs and remounts it ro; skipped otherwise:
    root writes through permission bits)."""
    if not is_root() or shutil.which("mount") is None:
        pytest.skip("needs root to mount a read-only tmpfs (CI runs as root)")
    mnt = tmp_path / "ro"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        shutil.copytree(PERF_BUNDLE, mnt / "cap")
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True, capture_output=True)
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_read_only_bundle_analyze_prints_the_verdict_then_exit_9(read_only_dir: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "analyze", str(read_only_dir / "cap"))
    assert code == 9 and "verdict:" in out and "Read-only file system" in one_error_line(err)
    code, _, err = run(capsys, "report", str(read_only_dir / "cap"), "-o", str(read_only_dir / "r.md"))
    assert code == 9 and "Read-only" in one_error_line(err)
    code, out, _ = run(capsys, "analyze", str(read_only_dir / "cap"), "--no-html")
    assert code == 0 and "verdict:" in out


# --------------------------------------------------------------------------- evidence dropped silently


def _damage(kind: str, data: bytes) -> bytes:
    if kind == "cut":
        return data[: len(data) * 2 // 3]
    if kind == "bad-crc":
        b = bytearray(data)
        b[-8] ^= 0xFF
        return bytes(b)
    if kind == "trailing-garbage":
        return data + b"this is no gzip member\x00\xff" * 10
    if kind == "bad-crc-then-cut":
        b = bytearray(data)
        b[-8] ^= 0xFF
        return bytes(b[:-3])
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["cut", "bad-crc", "trailing-garbage", "bad-crc-then-cut"])
def test_damaged_block_trace_is_read_and_said(tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    cap = bundle(tmp_path)
    gz = (PERF_BUNDLE / "block.trace.gz").read_bytes()
    (cap / "block.trace.gz").write_bytes(_damage(kind, gz))
    # the reference: a clean member holding exactly what zlib inflates from the damaged one
    try:
        readable = zlib.decompressobj(31).decompress(_damage(kind, gz))
    except zlib.error:  # zlib gives nothing for a bad CRC; every byte inflated cleanly before it
        readable = gzip.decompress(gz)
    assert readable.count(b"block_rq_complete") > 100
    ref = bundle(tmp_path, name="ref")
    (ref / "block.trace.gz").write_bytes(gzip.compress(readable))
    want = json.loads(run(capsys, "report", str(ref), "--format", "json")[1])["io"]
    code, out, err = run(capsys, "report", str(cap), "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["io"] is not None and doc["io"]["groups"], "hundreds of readable lines, no IO section"
    assert doc["io"] == want  # every readable IO, the ones in the chunk at the cut included
    said = [w for w in doc["warnings"] if w.startswith("block.trace.gz:")]
    assert said and said[0] in err  # in the JSON and on the terminal
    assert doc["reading"]["block.trace.gz"]["damage"]
    assert any(said[0] in r for h in doc["health"] if h["collector"] == "block-io" for r in h["reading"])
    code, out, _ = run(capsys, "report", str(cap))
    assert code == 0 and "warning: block.trace.gz:" in out


def test_gzipped_perf_script_cut_keeps_the_chunk_at_the_cut(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = SCRIPT.read_bytes() * 300
    gz = gzip.compress(text)
    cut = gz[: len(gz) // 2]
    (tmp_path / "cut.gz").write_bytes(cut)
    # the reference: what zlib inflates from the same bytes, folded without any gzip layer
    prefix = zlib.decompressobj(31).decompress(cut).decode("utf-8", "replace")
    expected = collapse_text(prefix, FoldOptions())
    code, out, err = run(capsys, "flamegraph", str(tmp_path / "cut.gz"), "--folded")
    assert code == 0 and "truncated" in err
    got = {ln.rsplit(" ", 1)[0]: int(ln.rsplit(" ", 1)[1]) for ln in out.splitlines()}
    assert got == expected and sum(got.values()) > 0


@pytest.mark.parametrize("kind", ["bad-crc", "trailing-garbage"])
def test_gzipped_perf_script_damaged_at_the_end_gives_everything(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                 kind: str) -> None:
    (tmp_path / "x.gz").write_bytes(_damage(kind, gzip.compress(SCRIPT.read_bytes())))
    code, out, err = run(capsys, "flamegraph", str(tmp_path / "x.gz"), "--folded")
    assert code == 0 and out == (SAMPLES / "perf-script" / "mariadb-sysbench.folded").read_text()
    assert ("CRC" if kind == "bad-crc" else "trailing garbage") in err


@pytest.mark.parametrize("member", ["cpu.perf.txt.gz", "offcpu.perf.txt.gz", "proc.jsonl.gz", "offcpu.csv.gz"])
def test_every_cut_member_is_named_in_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str], member: str) -> None:
    cap = bundle(tmp_path)
    gz = (cap / member).read_bytes()
    (cap / member).write_bytes(gz[: len(gz) // 2])
    code, out, _ = run(capsys, "report", str(cap), "--format", "json")
    doc = json.loads(out)
    assert code == 0 and any(w.startswith(f"{member}: truncated") for w in doc["warnings"])


# --------------------------------------------------------------------------- exit 70 from bad lines


BLOCK_LINES = {
    "corrupt-separator": "             fio-14590   [001] .....   930.808151: block_rq_issue: 254;0 WS 4096 () 29252848 + 8 be,0,4 [fio]",
    "huge-sector": "             fio-14590   [001] .....   930.808151: block_rq_issue: 254,0 WS 4096 () 99999999999999999999999 + 8 be,0,4 [fio]",
    "huge-bytes": "             fio-14590   [001] .....   930.808151: block_rq_issue: 254,0 WS 99999999999999 () 29252848 + 8 be,0,4 [fio]",
    "huge-count": "             fio-14590   [001] .....   930.808151: block_rq_issue: 254,0 WS 4096 () 29252848 + 99999999999 be,0,4 [fio]",
    "huge-major": "             fio-14590   [001] .....   930.808151: block_rq_issue: 99999999,0 WS 4096 () 29252848 + 8 be,0,4 [fio]",
    "no-payload": "             fio-14590   [001] .....   930.808151: block_rq_issue:",
    # read, with its issuer's tid unknown (-1): no field of it is needed to pair
    "huge-tid": "    fio-99999999999999999999   [001] .....   930.808151: block_rq_issue: 254,0 WS 4096 () 29252848 + 8 be,0,4 [fio]",
}


@pytest.mark.parametrize("name", sorted(BLOCK_LINES))
def test_one_bad_line_in_a_block_trace_is_skipped_and_counted(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              name: str) -> None:
    good = BLOCK.read_text().splitlines()
    text = "\n".join(good[:10] + [BLOCK_LINES[name]] + good[10:]) + "\n"
    (tmp_path / "t.txt").write_text(text)
    code, out, err = run(capsys, "heatmap", str(tmp_path / "t.txt"), "--json")
    assert code == 0
    ref = json.loads(run(capsys, "heatmap", str(BLOCK), "--json")[1])
    assert json.loads(out)["totals"]["paired"] >= ref["totals"]["paired"] - 1
    cap = bundle(tmp_path)
    (cap / "block.trace.gz").write_bytes(gzip.compress(text.encode()))
    code, out, _ = run(capsys, "report", str(cap), "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["io"] is not None
    if name != "huge-tid":
        assert doc["reading"]["block.trace.gz"]["skipped_lines"] == {"block event lines that could not be read": 1}


def test_a_trace_of_only_merges_is_no_crash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    merges = [ln for ln in BLOCK.read_text().splitlines() if "block_rq_merge" in ln]
    assert merges
    (tmp_path / "m.txt").write_text("\n".join(merges) + "\n")
    code, _, err = run(capsys, "heatmap", str(tmp_path / "m.txt"))
    assert code == 7 and "no issue/completion pairs" in one_error_line(err)
    cap = bundle(tmp_path)
    (cap / "block.trace.gz").write_bytes(gzip.compress(("\n".join(merges) + "\n").encode()))
    assert run(capsys, "report", str(cap), "--format", "json")[0] == 0


def test_truncated_perf_data_in_heatmap_is_no_crash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = gzip.decompress((SAMPLES / "block" / "loop-fio.perf.data.gz").read_bytes())
    for cut in (50, 200, len(data) // 3, len(data) - 100):
        p = tmp_path / f"cut{cut}.perf.data"
        p.write_bytes(data[:cut])
        code, _, err = run(capsys, "heatmap", str(p), "--json")
        assert code in (0, 5, 7), (cut, err)  # read up to the cut, perf missing, or nothing left
        if code:
            one_error_line(err)


MANIFESTS = {
    "stats-a-string": lambda m: m["collectors"][0].__setitem__("stats", "x"),
    "host-null": lambda m: m.__setitem__("host", None),
    "cpus-two": lambda m: m["host"].__setitem__("cpus", "two"),
    "deep-nesting": lambda m: m["options"].__setitem__("x", json.loads("[" * 500 + "]" * 500)),
    "negative-pid": lambda m: m["targets"][0].__setitem__("pid", -1),
    "targets-an-object": lambda m: m.__setitem__("targets", {"pid": 1}),
    "interval-zero": lambda m: m["options"].__setitem__("interval", 0),
    "bool-for-int": lambda m: m["host"].__setitem__("memory_bytes", True),
}


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize("case", sorted(MANIFESTS) + ["5000-digit-integer", "nan"])
def test_bad_manifest_is_exit_4_with_the_field_named(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      verb: str, case: str) -> None:
    cap = bundle(tmp_path)
    m = json.loads((cap / "manifest.json").read_text())
    if case in MANIFESTS:
        MANIFESTS[case](m)
        text = json.dumps(m)
    else:
        text = json.dumps(m).replace('"cpus": 2', '"cpus": ' + ("9" * 5000 if case != "nan" else "NaN"))
    (cap / "manifest.json").write_text(text)
    code, _, err = run(capsys, *verb_args(verb, cap))
    line = one_error_line(err)
    assert code == 4 and "manifest field " in line or "nests" in line, line


# --------------------------------------------------------------------------- memory from tiny inputs


def _peak_rss_mb(args: list[str], timeout: float = 120) -> tuple[int, float]:
    """The CLI's exit code and peak resident memory (MiB), measured by tests/measure.py."""
    m = run_profiler(args, timeout=timeout)
    assert "Traceback" not in m.stderr and "internal error" not in m.stderr, m.stderr
    return m.code, m.rss_mb


FAR = """           mandb-11308   [001] .....   502.553079: block_rq_issue: 254,0 RM 4096 () 23435232 + 8 be,0,4 [mandb]
          <idle>-0       [001] ..s1.   502.553500: block_rq_complete: 254,0 RM () 23435232 + 8 be,0,4 [0]
           mandb-11308   [001] .....   {t}.553079: block_rq_issue: 254,0 RM 4096 () 23435240 + 8 be,0,4 [mandb]
          <idle>-0       [001] ..s1.   {t}.553500: block_rq_complete: 254,0 RM () 23435240 + 8 be,0,4 [0]
"""


@pytest.mark.parametrize("seconds", [10**7, 10**9])
def test_two_ios_far_apart_take_little_memory(tmp_path: Path, seconds: int) -> None:
    text = FAR.format(t=502 + seconds)
    (tmp_path / "far.txt").write_text(text)
    code, rss = _peak_rss_mb(["heatmap", str(tmp_path / "far.txt"), "-o", str(tmp_path / "far.svg")])
    assert code == 0 and rss < 300, rss
    # CPU samples as far apart: the sub-second heatmap gets wider columns and says so
    cpu = (f"a 1/1 [000] 100.000000: 1 cpu-clock:\n\tffff f (/x)\n\n"
           f"a 1/1 [000] {100 + seconds}.500000: 1 cpu-clock:\n\tffff f (/x)\n\n")
    (tmp_path / "cpu.txt").write_text(cpu)
    code, rss = _peak_rss_mb(["heatmap", "--cpu", str(tmp_path / "cpu.txt"), "-o", str(tmp_path / "cpu.svg")])
    assert code == 0 and rss < 300, rss
    assert "s wide (at most 7,200 columns)" in (tmp_path / "cpu.svg").read_text()


def test_a_bundle_with_ios_far_apart_takes_little_memory(tmp_path: Path) -> None:
    cap = bundle(tmp_path)
    (cap / "block.trace.gz").write_bytes(gzip.compress(FAR.format(t=502 + 10**9).encode()))
    code, rss = _peak_rss_mb(["report", str(cap), "--format", "json"])
    assert code == 0 and rss < 300, rss


def _gzip_bomb(path: Path, content: bytes, total: int) -> None:
    """``total`` bytes of ``content`` repeated, as gzip members of 64 MiB each (~4 MB for 4 GiB)."""
    member = gzip.compress(content * ((64 << 20) // len(content)), 9)
    with open(path, "wb") as fh:
        for _ in range(total // (64 << 20)):
            fh.write(member)


def test_gzip_bomb_in_a_bundle_member_keeps_memory_flat(tmp_path: Path) -> None:
    cap = bundle(tmp_path)
    # 4 GiB each, in ~4 MB: zeros (no line end at all), newlines (blank lines), short text lines
    for member, content in (("cpu.perf.txt.gz", b"\0"), ("proc.jsonl.gz", b"\n"), ("block.trace.gz", b"x 1\n")):
        _gzip_bomb(cap / member, content, 4 << 30)
        assert (cap / member).stat().st_size < 16 << 20
    code, rss = _peak_rss_mb(["report", str(cap), "--format", "json"])
    assert code == 0 and rss < 400, rss
    code, rss = _peak_rss_mb(["flamegraph", str(cap / "cpu.perf.txt.gz"), "--folded"])
    assert code == 7 and rss < 200, rss  # nothing left after the bomb: an error, in flat memory


def test_a_line_longer_than_16_mib_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "long.txt").write_bytes(b"a" * (17 << 20))
    code, _, err = run(capsys, "flamegraph", str(tmp_path / "long.txt"))
    assert code == 7 and "longer than 16 MiB" in one_error_line(err)


# --------------------------------------------------------------------------- inputs refused that should work


@pytest.mark.parametrize("verb", ["flamegraph", "heatmap", "diff"])
def test_named_pipes_are_read(tmp_path: Path, capsys: pytest.CaptureFixture[str], verb: str) -> None:
    src = BLOCK if verb == "heatmap" else SCRIPT
    fifos = []
    for i in range(2 if verb == "diff" else 1):
        f = tmp_path / f"pipe{i}"
        os.mkfifo(f)
        fifos.append(f)

    def feed(f: Path) -> None:
        with open(f, "wb") as fh:
            fh.write(src.read_bytes())

    threads = [threading.Thread(target=feed, args=(f,), daemon=True) for f in fifos]
    for t in threads:
        t.start()
    code, out, err = run(capsys, verb, *map(str, fifos), "-o", str(tmp_path / "out.svg"))
    for t in threads:
        t.join(10)
    assert code == 0, err


def test_folded_file_whose_first_line_is_over_64_kib(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    frames = "".join(f"\t{0x400000 + i:x} deep_function_number_{i} (/usr/bin/deep)\n" for i in range(20_000))
    (tmp_path / "deep.txt").write_text(f"deep 1/1 [000] 1.000000: 1 cpu-clock:\n{frames}\n"
                                       f"deep 1/1 [000] 1.100000: 1 cpu-clock:\n\t401000 shallow (/usr/bin/deep)\n\n")
    code, folded, _ = run(capsys, "flamegraph", str(tmp_path / "deep.txt"), "--folded", "-o", "-")
    first = folded.splitlines()[0]
    assert code == 0 and len(first) > 64 << 10
    (tmp_path / "deep.folded").write_text(folded)
    code, again, err = run(capsys, "flamegraph", str(tmp_path / "deep.folded"), "--folded")
    assert code == 0 and again == folded, err
    (tmp_path / "deep.folded.gz").write_bytes(gzip.compress(folded.encode()))
    assert run(capsys, "flamegraph", str(tmp_path / "deep.folded.gz"), "--folded")[1] == folded
    # and drawn: a stack 20,000 frames deep is built in time linear in its depth
    code, _, err = run(capsys, "flamegraph", str(tmp_path / "deep.folded"), "-o", str(tmp_path / "deep.svg"))
    assert code == 0 and "20,003 frames drawn" in err, err  # root, comm, 20,000 frames, the shallow one


def test_one_bad_line_in_a_folded_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = (SAMPLES / "folded" / "tiny.folded").read_text().splitlines()
    (tmp_path / "one-bad.folded").write_text("\n".join(good[:1] + ["this line is no stack"] + good[1:]) + "\n")
    code, out, err = run(capsys, "flamegraph", str(tmp_path / "one-bad.folded"), "--folded")
    assert code == 0 and "1 skipped" in err
    assert sorted(out.splitlines()) == sorted(ln for ln in good if ln.strip())


def test_crlf_perf_script_folds_like_lf(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "crlf.txt").write_bytes(SCRIPT.read_bytes().replace(b"\n", b"\r\n"))
    code, out, _ = run(capsys, "flamegraph", str(tmp_path / "crlf.txt"), "--folded")
    assert code == 0 and out == (SAMPLES / "perf-script" / "mariadb-sysbench.folded").read_text()


@pytest.mark.parametrize("text", ["", "# ========\n# captured on: x\n# ========\n#\n", "\n\n"])
def test_empty_perf_script_folds_to_nothing_like_inferno(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         text: str) -> None:
    (tmp_path / "empty.txt").write_text(text)
    code, out, err = run(capsys, "flamegraph", str(tmp_path / "empty.txt"), "--folded")
    assert code == 0 and out == "" and err == ""
    code, _, err = run(capsys, "flamegraph", str(tmp_path / "empty.txt"))  # a graph of nothing: an error
    assert code == 7 and "no samples" in one_error_line(err)


# --------------------------------------------------------------------------- escapes

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def test_terminal_output_strips_sequences_markdown_escapes_html(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cap = bundle(tmp_path)
    m = json.loads((cap / "manifest.json").read_text())
    m["targets"][0]["comm"] = "\x1b]52;c;cHduZWQ=\x07<script>alert(1)</script>"
    m["host"]["hostname"] = "h\x1b[2J<img src=x onerror=alert(1)>"
    (cap / "manifest.json").write_text(json.dumps(m))
    lines = gzip.decompress((cap / "proc.jsonl.gz").read_bytes()).decode().splitlines()
    recs = [json.loads(ln) for ln in lines]
    for r in recs:
        if r.get("kind") == "thread":
            r["comm"] = "\x1b]0;owned\x07" + r["comm"][:6] + "\x9b31m"
    (cap / "proc.jsonl.gz").write_bytes(gzip.compress(("\n".join(map(json.dumps, recs)) + "\n").encode()))
    stacks = gzip.decompress((cap / "cpu.perf.txt.gz").read_bytes()).decode()
    stacks = stacks.replace(" (/usr/bin/fio)", "<img src=x onerror=alert(2)>\x1b[31m (/usr/bin/fio)")
    (cap / "cpu.perf.txt.gz").write_bytes(gzip.compress(stacks.encode()))
    code, out, err = run(capsys, "analyze", str(cap))
    assert code == 0 and not _CONTROL.search(out + err)
    code, md, _ = run(capsys, "report", str(cap), "--format", "md")
    assert code == 0 and not _CONTROL.search(md)
    assert "<script" not in md and "<img" not in md and "&lt;script&gt;" in md
    code, _, err = run(capsys, "flamegraph", str(tmp_path / "\x1b]0;x\x07missing.txt"))
    assert code == 7 and not _CONTROL.search(err)


# --------------------------------------------------------------------------- one exit code per problem


@pytest.mark.parametrize("verb", VERBS)
def test_a_directory_without_a_manifest_is_4_everywhere(tmp_path: Path, capsys: pytest.CaptureFixture[str], verb: str) -> None:
    (tmp_path / "notabundle").mkdir()
    (tmp_path / "notabundle" / "x.txt").write_text("hello")
    code, _, err = run(capsys, *verb_args(verb, tmp_path / "notabundle"))
    assert code == 4, err
    one_error_line(err)


@pytest.mark.parametrize("verb", ["flamegraph", "heatmap", "diff"])
def test_a_bundle_without_the_member_a_verb_reads_is_4(tmp_path: Path, capsys: pytest.CaptureFixture[str], verb: str) -> None:
    cap = bundle(tmp_path)
    (cap / ("block.trace.gz" if verb == "heatmap" else "cpu.perf.txt.gz")).unlink()
    code, _, err = run(capsys, *verb_args(verb, cap))
    assert code == 4 and "holds no" in one_error_line(err)


def test_a_member_that_is_a_directory_or_a_pipe_is_no_member(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cap = bundle(tmp_path)
    (cap / "cpu.perf.txt.gz").unlink()
    (cap / "cpu.perf.txt.gz").mkdir()
    (cap / "block.trace.gz").unlink()
    os.mkfifo(cap / "block.trace.gz")  # reading it would wait forever
    code, out, _ = run(capsys, "report", str(cap), "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["io"] is None
    assert run(capsys, "heatmap", str(cap))[0] == 4


# --------------------------------------------------------------------------- inputs main gained since (issue 18 follow-up)

BIOSNOOP = SAMPLES / "biosnoop" / "biosnoop.txt"
STAT_TABLE = SAMPLES / "perf-stat" / "table-perf61.txt"
STAT_CSV = SAMPLES / "perf-stat" / "csv-no-interval.csv"
CONVOY = SAMPLES / "perf" / "fsync-writer-and-lock-convoy"


@pytest.mark.parametrize("bad", ["99999999999999999999999", "inf", "nan", "-5", "1" * 5000])
@pytest.mark.parametrize("column", [0, 2, 6, 7])  # TIME(s), PID, BYTES, LAT(ms)
def test_biosnoop_lines_with_numbers_no_io_has_are_skipped_and_counted(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                       bad: str, column: int) -> None:
    lines = BIOSNOOP.read_text().splitlines()
    fields = lines[1].split()
    fields[column] = bad
    lines[1] = " ".join(fields)
    (tmp_path / "b.txt").write_text("\n".join(lines) + "\n")
    code, out, err = run(capsys, "heatmap", str(tmp_path / "b.txt"), "--json", "--by", "comm")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["totals"]["ios"] == len(lines) - 2  # the header and the damaged line
    assert "lines that are not IOs: 1 skipped" in err and doc["warnings"]


@pytest.mark.parametrize("src", [STAT_TABLE, STAT_CSV])
@pytest.mark.parametrize("bad", ["9" * 400, "1" * 5000, "99999999999999999999999", "1.2.3"])
def test_perf_stat_values_no_counter_has_are_skipped_and_counted(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                 src: Path, bad: str) -> None:
    text = src.read_text()
    first = re.search(r"^\s*(\d[\d,.]*)", text.split("\n", 3)[3] if src.suffix == ".txt" else text, re.M)
    assert first is not None
    (tmp_path / src.name).write_text(text.replace(first.group(1), bad, 1))
    code, out, err = run(capsys, "stat", str(tmp_path / src.name), "--json")
    assert code == 0, err
    doc = json.loads(out)  # no NaN or Infinity in it
    assert doc["counters"] and "1 skipped" in " ".join(doc["warnings"]) and "warning" in err
    code, out, err = run(capsys, "stat", str(tmp_path / src.name))
    assert code == 0 and out


def test_perf_stat_names_lose_terminal_escapes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = STAT_CSV.read_text().replace("context-switches", "cs\x1b]0;pwned\x07\x1b[2J", 1)
    (tmp_path / "s.csv").write_text(text)
    code, out, err = run(capsys, "stat", str(tmp_path / "s.csv"))
    assert code == 0 and "\x1b" not in out and "\x07" not in out
    code, out, _ = run(capsys, "stat", str(tmp_path / "s.csv"), "--json")
    assert code == 0 and "cs\x1b]0;pwned\x07\x1b[2J" in [c["event"] for c in json.loads(out)["counters"]]  # data kept


def test_offcpu_switches_with_5000_digit_ids_are_skipped_and_counted(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    cap = bundle(tmp_path, CONVOY)
    text = gzip.decompress((cap / "offcpu.perf.txt.gz").read_bytes()).decode()
    text = re.sub(r"^(\s*\S+\s+)(\d+)/(\d+)", lambda m: m.group(1) + "9" * 5000 + "/" + m.group(3), text, count=3,
                  flags=re.M)
    (cap / "offcpu.perf.txt.gz").write_bytes(gzip.compress(text.encode()))
    code, out, err = run(capsys, "report", str(cap), "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["reading"]["offcpu.perf.txt.gz"]["skipped_lines"] == {"samples whose header could not be read": 3}
    code, out, err = run(capsys, "flamegraph", str(cap), "--offcpu", "--folded")
    assert code == 0 and len(out.splitlines()) > 50 and "3 skipped" in err


def test_a_cut_gzipped_perf_data_is_read_to_the_cut_and_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = (SAMPLES / "block" / "loop-fio.perf.data.gz").read_bytes()
    (tmp_path / "cut.perf.data.gz").write_bytes(data[:5000])
    for verb in (["flamegraph"], ["heatmap"], ["heatmap", "--cpu"]):
        code, _, err = run(capsys, *verb, str(tmp_path / "cut.perf.data.gz"), "-o", str(tmp_path / "o.svg"))
        line = one_error_line(err)
        assert code == 7 and "cut.perf.data.gz" in line and "cut off" in line and "profiler-unpacked" not in line
    bomb = tmp_path / "bomb.perf.data.gz"  # PERFILE2 then zeros: stopped at the ratio limit, not a disk filled
    bomb.write_bytes(gzip.compress(b"PERFILE2" + bytes(64 << 20)))
    code, _, err = run(capsys, "flamegraph", str(bomb), "-o", str(tmp_path / "o.svg"))
    assert code == 7 and ("bomb" in err or "ratio" in err), err


@pytest.mark.parametrize("rec", [
    {"kind": "top", "t": 1.0, "dt": "abc", "procs": []},
    {"kind": "top", "t": 1.0, "dt": 1.0, "procs": 5},
    {"kind": "top", "t": 1.0, "dt": 1.0, "procs": [[1, "x", "inf"], ["1" * 50, "y", 1], [2, None, 3], "zz", [3]]},
    {"kind": "host", "t": 1.0, "block_devices": ["vda"], "clk_tck": 100},
    {"kind": "host", "t": 1.0, "block_devices": "vda"},
])
def test_procfs_records_of_the_wrong_shape_are_bad_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         rec: dict[str, object]) -> None:
    cap = bundle(tmp_path, CONVOY)
    lines = gzip.decompress((cap / "proc.jsonl.gz").read_bytes()).decode().splitlines()
    lines.insert(0 if rec["kind"] == "host" else 5, json.dumps(rec))
    (cap / "proc.jsonl.gz").write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    code, out, err = run(capsys, "report", str(cap), "--format", "json")
    assert code == 0, err
    json.loads(out)


@pytest.mark.parametrize("ext", [".pb.gz", ".speedscope.json"])
def test_stack_exports_never_write_through_a_symbolic_link(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           ext: str) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    out = tmp_path / f"out{ext}"
    out.symlink_to(victim)
    code, _, err = run(capsys, "flamegraph", str(SCRIPT), "-o", str(out))
    assert code == 8 and "symbolic link" in one_error_line(err)
    code, _, err = run(capsys, "flamegraph", str(SCRIPT), "-o", str(out), "--force")
    assert code == 0 and victim.read_text() == "keep" and not out.is_symlink() and out.stat().st_size > 100
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    code, _, err = run(capsys, "flamegraph", str(SCRIPT), "-o", str(tmp_path / "missing" / f"x{ext}"))
    assert code == 9 and "missing" in one_error_line(err)


def test_stat_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "empty.txt").write_text("")
    for target, want in ((tmp_path / "dir", 4), (tmp_path / "nothing", 7), (tmp_path / "empty.txt", 7), (CONVOY, 7),
                         (STAT_TABLE, 0)):
        code, _, err = run(capsys, "stat", str(target))
        assert code == want, (target, err)
        if want:
            one_error_line(err)


# --------------------------------------------------------------------------- server-status members

def _server_bundle(tmp_path: Path, edit: Callable[[Path, list[dict[str, Any]]], None]) -> Path:
    from tests import server_status_seed

    d = server_status_seed.make(tmp_path / "srv")
    index = [json.loads(ln) for ln in (d / "server-status.jsonl").read_text().splitlines()]
    edit(d, index)
    (d / "server-status.jsonl").write_text("".join(json.dumps(r) + "\n" for r in index))
    return d


def _a_profile(index: list[dict[str, Any]], suffix: str = "cpu-window.pb.gz") -> dict[str, Any]:
    return next(r for r in index if str(r.get("member") or "").endswith(suffix))


def _link_out(d: Path, index: list[dict[str, Any]]) -> None:
    (d / _a_profile(index)["member"]).unlink()
    (d / _a_profile(index)["member"]).symlink_to("/etc/passwd")


@pytest.mark.parametrize("what,edit,warned", [
    ("times that are not numbers", lambda d, ix: _a_profile(ix).update(t0="two"), "times that are not numbers"),
    ("a member outside the bundle", lambda d, ix: _a_profile(ix).update(member="../../../etc/passwd"), "unsafe file"),
    ("a member linked out of the bundle", _link_out, "unsafe file"),
    ("escapes in a failed request", lambda d, ix: ix[-1].update(url="http://x/\x1b]0;pwn\x07", detail="\x1b[2J<b>"),
     "requests failed"),
    ("pids of every type", lambda d, ix: [r.update(pid=p) for r, p in zip(ix, [10**30, "1", None, True, -1] * 9, strict=False)],
     ""),
])
def test_server_status_index_damage_is_one_warning_and_the_rest_is_read(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str], what: str,
                                                                        edit: Callable[[Path, list[dict[str, Any]]], None],
                                                                        warned: str) -> None:
    d = _server_bundle(tmp_path, edit)
    code, out, err = run(capsys, "report", str(d), "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert not [w for w in doc["warnings"] if "could not be read" in w], doc["warnings"]  # not the whole view lost
    if warned:
        assert [w for w in doc["warnings"] if warned in w], doc["warnings"]
    for fmt in ("text", "md"):
        code, out, _ = run(capsys, "report", str(d), "--format", fmt)
        assert code == 0 and "\x1b" not in out and "\x07" not in out and (fmt == "text" or "<b>" not in out)


def test_a_server_profile_holding_crlf_bytes_is_read_as_binary(tmp_path: Path) -> None:
    from profiler.analyzers.server.view import read_server_status
    from profiler.analyzers.stacks.export import StackProfile

    from profiler.bundle import Bundle
    from profiler.renderers import pprof_out

    def crlf(d: Path, index: list[dict[str, Any]]) -> None:
        raw = pprof_out.encode(StackProfile({"main.a\r\n;main.b": 130, "main.x": 3338}, "cpu", "nanoseconds"))
        assert b"\r\n" in raw
        (d / _a_profile(index)["member"]).write_bytes(gzip.compress(raw))

    v = read_server_status(Bundle.open(_server_bundle(tmp_path, crlf)))
    assert v is not None and not [w for w in v.warnings if "could not be read" in w]
    cpu = v.targets[12961].cpu
    assert cpu is not None and cpu.flat[0][0] == "main.x"


# --------------------------------------------------------------------------- names that make regular expressions backtrack

@pytest.mark.parametrize("comm,frame", [
    ("a" + "1" * 40 + "x", "main.f"),  # pool names: trailing-index stripping
    ("w", "a/" + "a.func1" * 3000 + "!"),  # Go function names
    ("w", "f" + ".constprop.1" * 3000 + "!"),  # symbol version and clone suffixes
    ("w", "f" + "@A" * 6000 + "!"),
])
def test_hostile_names_cost_linear_time(tmp_path: Path, capsys: pytest.CaptureFixture[str], comm: str, frame: str) -> None:
    text = "".join(f"{comm} {100 + i}/{100 + i} [000] {1.0 + i:.6f}: 1 cpu-clock:\n\tffff {frame}{i} (/x)\n\tffff main (/x)\n\n"
                   for i in range(20))
    (tmp_path / "s.txt").write_text(text)
    t0 = time.monotonic()
    for args in (["flamegraph", str(tmp_path / "s.txt"), "--by", "pool", "-o", str(tmp_path / "f.svg")],
                 ["flamegraph", str(tmp_path / "s.txt"), "--offcpu", "--folded"]):
        code, _, err = run(capsys, *args)
        assert code in (0, 7), err
    assert time.monotonic() - t0 < 20


def test_pool_names_match_the_trailing_index_pattern() -> None:
    import random

    from profiler.knowledge import _TRAILING_INDEX, pool_of

    rng = random.Random(18)
    for _ in range(20_000):
        s = "".join(rng.choice("ab-_:.#0123456789 ") for _ in range(rng.randint(0, 10)))
        name = s.strip()
        want = _TRAILING_INDEX.sub("", name).rstrip("-_:.# ") or name
        assert pool_of(s) == want, s


# --------------------------------------------------------------------------- cluster bundles and the load's log

@pytest.mark.parametrize("poke,field", [
    (lambda m: m["nodes"][0].update(started="two"), "nodes[0].started"),
    (lambda m: m["nodes"][0].update(pulled_bytes="HUGE"), "nodes[0].pulled_bytes"),  # 5,000 digits, below
    (lambda m: m["window"].update(duration=[1]), "window.duration"),
    (lambda m: m.update(nodes={"a": 1}), "nodes"),
    (lambda m: m["nodes"][1].update(dir="nodes/../../etc"), "nodes/../../etc"),
])
def test_a_cluster_manifest_of_the_wrong_shape_is_exit_4_naming_the_field(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str],
                                                                          poke: Callable[[dict[str, Any]], None],
                                                                          field: str) -> None:
    from tests import server_status_seed

    d = server_status_seed.make_cluster(tmp_path / "cl")
    m = json.loads((d / "cluster.json").read_text())
    poke(m)
    (d / "cluster.json").write_text(json.dumps(m).replace('"HUGE"', "9" * 5000))
    for args in (["analyze", str(d)], ["report", str(d), "--format", "json"], ["report", str(d)]):
        code, _, err = run(capsys, *args)
        assert code == 4 and field in one_error_line(err), err
    code, _, err = run(capsys, "flamegraph", str(d), "--folded")
    assert code == 4 and "cluster bundle" in one_error_line(err)


@pytest.mark.parametrize("log", [b"\x00\xff" * 5000, b"x" * (17 << 20), b"[ 1s ] thds: 99999999999999999999999 tps: nan\n" * 50,
                                 b"\x1b]0;pwn\x07 tps: 1\n" * 10])
def test_a_damaged_load_log_leaves_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str], log: bytes) -> None:
    cap = bundle(tmp_path, SAMPLES / "mariadb-sysbench-run")
    (cap / "load.log").write_bytes(log)
    code, out, err = run(capsys, "report", str(cap), "--format", "json")
    assert code == 0, err
    json.loads(out)
    code, out, err = run(capsys, "report", str(cap))
    assert code == 0 and "\x1b" not in out and "\x07" not in out
