"""The three core-layer guards against hostile input, unit by unit: writing outputs (profiler.files),
reading damaged bytes (profiler.tolerant), printing untrusted names (profiler.untrusted), and the
manifest's schema (profiler.bundle.manifest)."""

from __future__ import annotations

import gzip
import io
import json
import os
import stat
import zlib
from pathlib import Path

import pytest

from profiler import files, tolerant
from profiler.bundle.manifest import parse_manifest
from profiler.errors import BundleError, OutputError, OutputExists
from profiler.tolerant import ReadLog, open_tolerant
from profiler.untrusted import markdown, sanitize
from tests.conftest import ROOT

SAMPLES = ROOT / "samples"
TEXT = (SAMPLES / "perf-script" / "mariadb-sysbench.txt").read_bytes() * 40


def read(data: bytes, *, text: bool = True) -> tuple[bytes, ReadLog]:
    log = ReadLog("x")
    with open_tolerant(io.BytesIO(data), log, text=text) as fh:
        return fh.read(), log


# --------------------------------------------------------------------------- profiler.files


def test_new_file_is_written_through_a_fresh_exclusive_name(tmp_path: Path) -> None:
    out = tmp_path / "out.svg"
    # a link planted where the old writers put their temporary file is never touched
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / ".out.svg.tmp").symlink_to(victim)
    files.write_output(out, "<svg/>")
    assert out.read_text() == "<svg/>" and victim.read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.svg.tmp", "out.svg", "victim"]


def test_existing_file_needs_force_and_is_replaced_whole(tmp_path: Path) -> None:
    out = tmp_path / "r.md"
    out.write_text("old")
    with pytest.raises(OutputExists):
        files.write_output(out, "new")
    assert out.read_text() == "old"
    files.write_output(out, "new", force=True)
    assert out.read_text() == "new"


def test_symbolic_link_is_never_followed(tmp_path: Path) -> None:
    victim = tmp_path / "passwd"
    victim.write_text("root:x:0:0")
    link = tmp_path / "report.html"
    link.symlink_to(victim)
    with pytest.raises(OutputExists, match="symbolic link"):
        files.write_output(link, "report")
    files.write_output(link, "report", force=True)  # the link itself is replaced
    assert victim.read_text() == "root:x:0:0"
    assert not link.is_symlink() and link.read_text() == "report"


def test_devices_and_pipes_are_written_into_inside_a_bundle_replaced(tmp_path: Path) -> None:
    files.write_output("/dev/null", "x" * 100_000)  # no --force needed: not a regular file
    fifo = tmp_path / "report.html"
    os.mkfifo(fifo)
    files.write_output(fifo, "report", force=True, special=False)  # a bundle's own file: replaced, never opened
    assert stat.S_ISREG(fifo.lstat().st_mode) and fifo.read_text() == "report"


def test_stdout_and_fd_names(capfd: pytest.CaptureFixture[str]) -> None:
    files.write_output("-", "dash\n")
    files.write_output("/dev/stdout", "devstdout\n")
    files.write_output("/dev/stderr", "devstderr\n")
    out, err = capfd.readouterr()
    assert out == "dash\ndevstdout\n" and err == "devstderr\n"


@pytest.mark.parametrize(("where", "why"), [
    ("missing/dir/x.svg", "no such directory"),
    (".", "it is a directory"),
    ("/dev/full", "no space left"),
])
def test_os_errors_are_one_output_error(tmp_path: Path, where: str, why: str) -> None:
    path = where if where.startswith("/") else str(tmp_path / where)
    with pytest.raises(OutputError, match=why) as exc:
        files.write_output(path, "x" * 100_000)
    assert exc.value.exit_code == 9 and "\n" not in str(exc.value)


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    out.write_text("old")
    with pytest.raises(RuntimeError), files.open_output(out, force=True) as fh:
        fh.write(b"half")
        raise RuntimeError("the renderer failed")
    assert out.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_a_file_that_appears_meanwhile_is_not_clobbered(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    with pytest.raises(OutputExists, match="appeared"), files.open_output(out) as fh:
        fh.write(b"mine")
        out.write_text("someone else's")
    assert out.read_text() == "someone else's" and [p.name for p in tmp_path.iterdir()] == ["out.txt"]


# --------------------------------------------------------------------------- profiler.tolerant


def test_clean_inputs_plain_and_gzip() -> None:
    for data in (TEXT, gzip.compress(TEXT), gzip.compress(TEXT[:5000]) + gzip.compress(TEXT[5000:])):
        out, log = read(data)
        assert out == TEXT and log.clean


def test_gzip_cut_keeps_every_byte_that_inflates() -> None:
    gz = gzip.compress(TEXT)
    for cut in (len(gz) // 3, len(gz) // 2, len(gz) - 9):
        expected = zlib.decompressobj(31).decompress(gz[:cut])  # what zlib itself gets out of the prefix
        out, log = read(gz[:cut])
        assert out == expected and len(out) > 0
        assert log.damage and log.damage[0].startswith("truncated")


def test_bad_crc_at_the_very_end_keeps_everything() -> None:
    gz = bytearray(gzip.compress(TEXT))
    gz[-8] ^= 0xFF  # CRC32 of the trailer
    out, log = read(bytes(gz))
    assert out == TEXT and log.damage == ["bad CRC in gzip member 1 (data kept: it inflated cleanly)"]


def test_trailing_garbage_is_ignored_and_noted_zero_padding_silently() -> None:
    out, log = read(gzip.compress(TEXT) + b"GARBAGE\x00\x01")
    assert out == TEXT and "trailing garbage" in log.damage[0]
    out, log = read(gzip.compress(TEXT) + bytes(512))
    assert out == TEXT and log.clean


@pytest.mark.parametrize("seed", range(8))
def test_corrupt_deflate_keeps_what_came_before(seed: int) -> None:
    import random

    rng = random.Random(seed)
    text = rng.randbytes(1 << 16).hex().encode()  # little redundancy: a damaged block stays local
    gz = bytearray(gzip.compress(text))
    at = rng.randrange(len(gz) // 4, len(gz) * 3 // 4)
    gz[at : at + 8] = rng.randbytes(8)
    out, log = read(bytes(gz))
    assert log.damage, "the damage must be noted"
    if "corrupt" in log.damage[0]:  # inflate refused a block: everything before it came out, intact
        assert 0 < len(out) and text.startswith(out)
    else:  # the block inflated to something else (the CRC says so), or the stream ended early
        assert "CRC" in log.damage[0] or log.damage[0].startswith("truncated"), log.damage


def test_crlf_is_folded_also_across_chunk_ends() -> None:
    text = TEXT.replace(b"\n", b"\r\n")
    for data in (text, gzip.compress(text)):
        out, log = read(data)
        assert out == TEXT and log.clean
    # a '\r' at the very end of a chunk and its '\n' at the start of the next
    raw = b"a" * (tolerant.CHUNK - 1) + b"\r\nb\r\n"
    out, _ = read(raw)
    assert out == b"a" * (tolerant.CHUNK - 1) + b"\nb\n"
    out, _ = read(b"binary\r\n", text=False)
    assert out == b"binary\r\n"


def test_a_line_longer_than_the_limit_stops_reading() -> None:
    out, log = read(b"ok 1\n" + b"x" * (tolerant.LINE_LIMIT + 10) + b"\nlater 2\n")
    assert out.startswith(b"ok 1\n") and b"later" not in out
    assert log.stopped is not None and "longer than 16 MiB" in log.stopped


def test_bomb_stops_past_its_ratio(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tolerant, "BOMB_FLOOR", 1 << 20)  # the real floor is 1 GiB: same rule, smaller
    out, log = read(gzip.compress(b"\n" * (64 << 20)), text=False)
    assert len(out) < 32 << 20 and log.stopped is not None and "decompression bomb" in log.stopped
    out, log = read(gzip.compress(TEXT * 20))  # real text compresses far less: read whole
    assert len(out) == len(TEXT) * 20 and log.clean


def test_read_errors_end_the_input_noted() -> None:
    class Failing(io.RawIOBase):
        def readable(self) -> bool:
            return True

        def readinto(self, b: bytearray) -> int:  # type: ignore[override]
            raise OSError(5, "Input/output error")

    log = ReadLog("x")
    assert open_tolerant(Failing(), log).read() == b""  # type: ignore[arg-type]
    assert log.stopped is not None and "Input/output error" in log.stopped


def test_skipped_lines_are_counted_by_kind_in_one_summary() -> None:
    log = ReadLog("m")
    log.skip(0, "never")
    log.skip(2, "bad rows")
    log.skip(3, "bad rows")
    assert log.summary() == "m: bad rows: 5 skipped" and log.to_dict()["skipped_lines"] == {"bad rows": 5}


# --------------------------------------------------------------------------- profiler.untrusted


def test_terminal_sequences_are_neutralised() -> None:
    evil = "pool\x1b]52;c;cHduZWQ=\x07-1\x1b[2J\x9b31m\x1bPq#0\x1b\\x\r\x00y"
    out = sanitize(evil)
    assert not any(ord(c) < 32 or 0x7F <= ord(c) <= 0x9F for c in out), repr(out)
    assert out.startswith("pool?-1") and "cHduZWQ" not in out
    assert sanitize("a\nb\tc") == "a\nb\tc" and sanitize("a\nb", newlines=False) == "a?b"
    assert sanitize("grpc-server-0 ä 中") == "grpc-server-0 ä 中"


def test_markdown_renders_names_as_text() -> None:
    out = markdown("<script>alert(1)</script> <img src=x onerror=alert(1)> ![x](http://e/) a|b `c`\n")
    assert "<" not in out and ">" not in out and "\n" not in out
    assert "&lt;script&gt;" in out and "\\|" in out and "\\[x\\]" in out and "\\`c\\`" in out


# --------------------------------------------------------------------------- the manifest's schema

BASE = json.loads((SAMPLES / "perf" / "fio-fsync-and-python-locks" / "manifest.json").read_text())


def _manifest_with(path: str, value: object) -> str:
    data = json.loads(json.dumps(BASE))
    node = data
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node[k]
    node[keys[-1]] = value
    return json.dumps(data)


@pytest.mark.parametrize(("path", "value", "named"), [
    ("collectors.0.stats", "a string", "collectors[0].stats"),
    ("host", None, "host"),
    ("host.cpus", "two", "host.cpus"),
    ("host.cpus", -1, "host.cpus"),
    ("targets.0.pid", 1 << 40, "targets[0].pid"),
    ("targets.0.threads", [{"tid": "x", "comm": "a"}], "targets[0].threads[0].tid"),
    ("targets.0.cgroup", {"cpu_quota_us": "max"}, "targets[0].cgroup.cpu_quota_us"),
    ("options", {"interval": 0}, "options.interval"),
    ("options", {"deep": json.loads("[" * 40 + "]" * 40)}, "options.deep"),
    ("duration", -5, "duration"),
    ("status", "exploded", "status"),
    ("clock", {"monotonic_start": "yesterday"}, "clock.monotonic_start"),
])
def test_manifest_fields_are_checked_by_type_and_range(path: str, value: object, named: str) -> None:
    with pytest.raises(BundleError, match="manifest field " + named.replace("[", r"\[").replace("]", r"\]")):
        parse_manifest(_manifest_with(path, value))


def test_manifest_numbers_json_cannot_hold() -> None:
    text = json.dumps(BASE)
    huge = text.replace('"cpus": 2', '"cpus": ' + "9" * 5000)
    with pytest.raises(BundleError, match="host.cpus should be an integer, not a 5,000-digit number"):
        parse_manifest(huge)
    with pytest.raises(BundleError, match="host.cpus should be an integer, not NaN"):
        parse_manifest(text.replace('"cpus": 2', '"cpus": NaN'))
    with pytest.raises(BundleError, match="nests"):
        parse_manifest("[" * 100_000 + "]" * 100_000)
    with pytest.raises(BundleError, match="not a profiler bundle manifest"):
        parse_manifest("[]")


def test_every_sample_manifest_still_loads() -> None:
    found = sorted(SAMPLES.glob("**/manifest.json"))
    assert len(found) >= 10
    for p in found:
        parse_manifest(p.read_text(), str(p))


def test_a_growing_file_replaces_a_planted_link_and_never_follows_it(tmp_path: Path) -> None:
    """load.log is written as the load runs (create_growing): a link planted at its name in the
    output directory is replaced, and what it pointed to is left as it was."""
    from profiler.files import create_growing

    outside = tmp_path / "outside.txt"
    outside.write_text("keep me\n")
    cap = tmp_path / "cap"
    cap.mkdir()
    (cap / "load.log").symlink_to(outside)
    with create_growing(cap / "load.log") as fh:
        fh.write(b"tps: 42\n")
    assert outside.read_text() == "keep me\n"
    assert not (cap / "load.log").is_symlink() and (cap / "load.log").read_bytes() == b"tps: 42\n"
    (cap / "dir").mkdir()
    with pytest.raises(OutputError, match="is a directory"):
        create_growing(cap / "dir")


def test_trailing_bytes_after_gzip_are_read_only_so_far(tmp_path: Path) -> None:
    """A member grown to a terabyte of holes after its gzip data (truncate -s 1T) reads in no time:
    the data is kept and the rest noted, never read to its end (it was: a 1 TB read)."""
    p = tmp_path / "cpu.perf.txt.gz"
    p.write_bytes(gzip.compress(TEXT[:5000]))
    with open(p, "ab") as f:
        f.truncate(1 << 40)
    log = ReadLog("x")
    with open(p, "rb") as raw, open_tolerant(raw, log) as fh:
        assert fh.read() == TEXT[:5000]
    assert log.bytes_in < 2 * tolerant.TRAILING_LIMIT
    assert any("trailing data" in n and "not read" in n for n in log.damage), log.damage
    # padding within the limit stays silent, as gzip(1) keeps it
    data, log = read(gzip.compress(b"a\n") + bytes(1000))
    assert data == b"a\n" and not log.damage
