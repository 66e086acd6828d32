"""Capture bundle v1: writing, loading, defaults for older fields, and refusal of bad bundles."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from profiler.bundle import (
    MANIFEST,
    VERSION,
    Bundle,
    BundleWriter,
    ClockInfo,
    CollectorRecord,
    Manifest,
    TargetInfo,
    parse_manifest,
)
from profiler.errors import BundleError, OutputError, OutputExists


def _write(tmp_path: Path) -> Path:
    m = Manifest(clock=ClockInfo.now(), targets=[TargetInfo(pid=42, comm="tikv-server", kind="tikv")])
    w = BundleWriter(tmp_path / "cap", m)
    with w.open_member("cpu.perf.txt.gz") as fh:
        fh.write(b"line one\nline two\n")
    w.record(CollectorRecord(name="cpu-stacks", status="ok", files=["cpu.perf.txt.gz"], argv=["perf", "record"]))
    w.finish("ok")
    return w.root


def test_round_trip(tmp_path: Path) -> None:
    root = _write(tmp_path)
    b = Bundle.open(root)
    assert b.manifest.status == "ok" and not b.partial
    assert b.manifest.targets[0].comm == "tikv-server"
    assert b.manifest.collector("cpu-stacks").files == ["cpu.perf.txt.gz"]  # type: ignore[union-attr]
    assert list(b.iter_lines("cpu.perf.txt.gz")) == ["line one", "line two"]
    assert not list(root.glob(".*.tmp")), "temporary files must be renamed into place"


def test_manifest_rewritten_while_running(tmp_path: Path) -> None:
    w = BundleWriter(tmp_path / "cap", Manifest(clock=ClockInfo.now()))
    assert Bundle.open(w.root).manifest.status == "running"
    w.record(CollectorRecord(name="perf-stat", status="running"))
    assert Bundle.open(w.root).manifest.collectors[0].status == "running"
    w.finish("partial", "interrupted")
    b = Bundle.open(w.root)
    assert b.partial and b.manifest.reason == "interrupted"


def test_older_manifest_gets_defaults() -> None:
    # A minimal v1 manifest from an early writer: every other field takes its default.
    m = parse_manifest(json.dumps({"schema": "profiler.bundle", "version": 1, "status": "ok",
                                   "targets": [{"pid": 1, "comm": "x"}]}))
    assert m.targets[0].threads == [] and m.collectors == [] and m.host.cpus == 0


def test_unknown_fields_are_ignored() -> None:
    m = parse_manifest(json.dumps({"schema": "profiler.bundle", "version": VERSION, "future_field": 1}))
    assert m.version == VERSION


def test_refuses_to_overwrite(tmp_path: Path) -> None:
    root = _write(tmp_path)
    with pytest.raises(OutputExists, match="--force"):
        BundleWriter(root, Manifest())
    BundleWriter(root, Manifest(), force=True)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no capture bundle"),
        ("", "is empty"),
        ("{\"schema\": \"profiler.bundle\", \"vers", "truncated or corrupted"),
        ('{"schema": "something.else", "version": 1}', "not a profiler bundle"),
        ('{"schema": "profiler.bundle", "version": 99, "tool_version": "9.0"}', "newer profiler"),
        ('{"schema": "profiler.bundle", "version": 1, "collectors": [{"name": "x", "files": ["../../etc/passwd"]}]}',
         "outside the bundle"),
        ('{"schema": "profiler.bundle", "version": 1, "collectors": [{"name": "x", "files": ["/etc/passwd"]}]}',
         "outside the bundle"),
        ('{"schema": "profiler.bundle", "version": 1, "load": {"log": "../x"}}', "outside the bundle"),
        ('{"schema": "profiler.bundle", "version": 1, "collectors": [{"name": "x", "status": "weird"}]}',
         "unknown status"),
        ('{"schema": "profiler.bundle", "version": 1, "targets": {"pid": 1}}', "should be a list"),
        ("[1, 2]", "not a profiler bundle"),
    ],
)
def test_bad_bundles(tmp_path: Path, content: str | None, message: str) -> None:
    root = tmp_path / "cap"
    if content is not None:
        root.mkdir()
        (root / MANIFEST).write_text(content)
    with pytest.raises(BundleError, match=message):
        Bundle.open(root)


def test_empty_and_foreign_directories(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(BundleError, match="is empty"):
        Bundle.open(tmp_path / "empty")
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("hello")
    with pytest.raises(BundleError, match="no manifest.json"):
        Bundle.open(tmp_path / "foreign")
    (tmp_path / "file").write_text("x")
    with pytest.raises(BundleError, match="is a file"):
        Bundle.open(tmp_path / "file")


def test_symlink_out_of_bundle_is_refused(tmp_path: Path) -> None:
    root = _write(tmp_path)
    (root / "evil.txt").symlink_to("/etc/hostname")
    with pytest.raises(BundleError, match="outside the bundle"):
        Bundle.open(root).path("evil.txt")


def test_truncated_gzip_member_keeps_what_was_read(tmp_path: Path) -> None:
    root = _write(tmp_path)
    data = gzip.compress(b"".join(b"sample %d\n" % i for i in range(20000)))
    (root / "cpu.perf.txt.gz").write_bytes(data[: len(data) // 2])
    b = Bundle.open(root)
    lines = list(b.iter_lines("cpu.perf.txt.gz"))
    assert 0 < len(lines) < 20000
    assert lines[-2] == f"sample {len(lines) - 2}"  # every whole line up to the cut
    warnings = b.read_warnings()
    assert len(warnings) == 1 and warnings[0].startswith("cpu.perf.txt.gz: truncated")


def test_a_full_disk_still_gets_the_final_manifest(tmp_path: Path) -> None:
    """The writer holds space back from the start; the last manifest is written with it."""
    import subprocess

    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)]).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here")
    try:
        w = BundleWriter(mnt / "cap", Manifest(clock=ClockInfo.now()))
        with pytest.raises(OutputError), w.open_member("big.bin") as fh:  # fill the disk to the last byte
            while True:
                fh.write(b"x" * 4096)
                fh.flush()
        recs = [CollectorRecord(name=f"c{i}", status="ok", reason="r" * 200, files=["big.bin"]) for i in range(30)]
        for rec in recs:
            w.record(rec)  # does not raise: noted, the in-memory manifest keeps it
        assert w.ran_short is not None and "no space left" in w.ran_short
        w.finish("partial", "disk full")
        m = Bundle.open(mnt / "cap").manifest
        assert m.status == "partial" and [c.name for c in m.collectors] == [r.name for r in recs]
        assert not (mnt / "cap" / ".space-reserve").exists()
    finally:
        subprocess.run(["umount", "-l", str(mnt)])
