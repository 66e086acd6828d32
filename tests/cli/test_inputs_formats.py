"""The inputs layer: format detection on every sample, named pipes and stdin, the shared streams,
the time window, and which bundle member answers which question."""

from __future__ import annotations

import gzip
import io
import os
import threading
from pathlib import Path

import pytest
from profiler.analyzers import views

from profiler.bundle import BundleWriter, Manifest
from profiler.cli import main
from profiler.cli._common import parse_window
from profiler.errors import BundleError, InputError, UsageError
from profiler.inputs import (
    TimeWindow,
    blocktrace,
    bundles,
    detect,
    folded,
    pairs,
    perfdata,
    perfscript,
)
from profiler.inputs.streams import HEAD_SIZE, iter_chunks, iter_decoded, open_binary, prefixed
from profiler.usecases.flamegraph import STACK_READERS
from profiler.usecases.heatmap import LATENCY_READERS, TIMES_READERS
from tests.conftest import ROOT

SAMPLES = ROOT / "samples"

# what each verb accepts, in detection order: the rows of its use case's table
STACKS = tuple(STACK_READERS)
SAMPLE_TIMES = tuple(TIMES_READERS)
BLOCK_EVENTS = tuple(LATENCY_READERS)
PERF_SCRIPT = SAMPLES / "perf-script"


@pytest.mark.parametrize("path", sorted(PERF_SCRIPT.glob("*.txt")), ids=lambda p: p.name)
def test_perf_script_samples_are_perf_script(path: Path) -> None:
    assert detect(str(path), STACKS).format is perfscript.FORMAT
    assert detect(str(path), SAMPLE_TIMES).format is perfscript.FORMAT


@pytest.mark.parametrize("path", sorted((SAMPLES / "block").glob("*.txt")), ids=lambda p: p.name)
def test_block_samples(path: Path) -> None:
    want = pairs.FORMAT if path.name.startswith("pairs") else blocktrace.FORMAT
    assert detect(str(path), BLOCK_EVENTS).format is want


def test_folded_gzip_perf_data_and_bundles(tmp_path: Path) -> None:
    assert detect(str(SAMPLES / "folded" / "tiny.folded"), STACKS).format is folded.FORMAT
    gz = tmp_path / "x"  # gzip is told by its magic, not by a name
    gz.write_bytes(gzip.compress((PERF_SCRIPT / "mariadb-sysbench.txt").read_bytes()))
    src = detect(str(gz), STACKS)
    assert src.format is perfscript.FORMAT and src.compressed and src.head.startswith(b"mariadbd")
    data = tmp_path / "perf.data"
    data.write_bytes(gzip.decompress((SAMPLES / "block" / "loop-fio.perf.data.gz").read_bytes()))
    assert detect(str(data), STACKS).format is perfdata.FORMAT
    assert detect(str(data), BLOCK_EVENTS).format is perfdata.FORMAT
    # a gzipped perf.data is decompressed to a private file for perf script, removed at close
    src = detect(str(SAMPLES / "block" / "loop-fio.perf.data.gz"), STACKS)
    assert src.format is perfdata.FORMAT and src.file.read_bytes() == data.read_bytes()
    unpacked = src.file
    src.close()
    assert not unpacked.exists()
    cut = tmp_path / "cut.perf.data.gz"
    cut.write_bytes((SAMPLES / "block" / "loop-fio.perf.data.gz").read_bytes()[:5000])
    # a cut gzip is decompressed up to the cut, and the source's log says so (issue 18)
    src = detect(str(cut), STACKS)
    assert src.format is perfdata.FORMAT and data.read_bytes().startswith(src.file.read_bytes())
    assert "cut off" in (src.log.summary() or "")
    src.close()
    root = tmp_path / "cap"
    BundleWriter(root, Manifest()).finish("ok")
    assert detect(str(root), STACKS).format is bundles.FORMAT
    with pytest.raises(BundleError, match="not a capture bundle"):
        detect(str(tmp_path), STACKS)
    with pytest.raises(InputError, match="no such file"):
        detect(str(tmp_path / "missing"), STACKS)
    with pytest.raises(InputError, match="is not a capture bundle, perf.data, a block trace .* or 'time latency' pairs"):
        detect(str(SAMPLES / "README.md"), BLOCK_EVENTS)


def _feed(path: Path, payload: bytes) -> threading.Thread:
    def write() -> None:
        try:
            with open(path, "wb") as fh:
                fh.write(payload)
        except BrokenPipeError:
            pass  # the reader stopped early, on purpose

    t = threading.Thread(target=write, daemon=True)
    t.start()
    return t


def test_named_pipes_are_read_once_without_losing_the_head(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    text = (PERF_SCRIPT / "mariadb-sysbench.txt").read_bytes()
    t = _feed(pipe, gzip.compress(text))
    assert main(["flamegraph", str(pipe), "--folded"]) == 0
    t.join(timeout=5)
    assert capsys.readouterr().out == (PERF_SCRIPT / "mariadb-sysbench.folded").read_text()
    t = _feed(pipe, (SAMPLES / "block" / "merges.txt").read_bytes())
    assert main(["heatmap", str(pipe), "--json"]) == 0
    t.join(timeout=5)
    assert '"kind": "io-latency"' in capsys.readouterr().out
    t = _feed(pipe, gzip.decompress((SAMPLES / "block" / "loop-fio.perf.data.gz").read_bytes())[: 1 << 20])
    assert main(["heatmap", str(pipe)]) == 7  # perf.data needs a file
    t.join(timeout=5)
    assert "must be read from a file" in capsys.readouterr().err


def test_stdin_source_hands_over_the_whole_stream() -> None:
    text = (PERF_SCRIPT / "comm-with-spaces.txt").read_bytes() * 200  # more than the sniffed head
    assert len(text) > HEAD_SIZE
    src = detect("-", STACKS, stdin=io.BytesIO(text))
    assert src.name == "stdin" and not src.rereadable
    with src.open() as fh:
        assert fh.read() == text
    with pytest.raises(InputError, match="only once"):
        src.open()


def test_streams() -> None:
    s = prefixed(b"head-", io.BytesIO(b"rest"))
    assert s.read() == b"head-rest"
    gz = gzip.compress(b"a\nbb\nccc")
    assert open_binary(io.BytesIO(gz)).read() == b"a\nbb\nccc"
    assert list(iter_chunks(io.BytesIO(b"a\nbb\nccc"), size=3)) == [b"a\n", b"bb\n", b"ccc\n"]
    warnings: list[str] = []
    lines = b"".join(b"line %d\n" % i for i in range(50_000))
    cut = gzip.compress(lines)[:-1000]
    text = "".join(iter_decoded(io.BytesIO(cut), chunk_size=4096, warnings=warnings))
    assert text.startswith("line 0\nline 1\n") and len(text) > 100_000 and "truncated" in warnings[0]
    assert "".join(iter_decoded(io.BytesIO(b"caf\xc3\xa9 \xff"))) == "café \ufffd"


def test_time_window_is_parsed_once_and_rebased_once() -> None:
    w = parse_window("10s", "20s")
    assert w == TimeWindow(10.0, 20.0, relative=True) and w.bounded
    a = w.rebased(100.0)
    assert a == TimeWindow(110.0, 120.0) and a.rebased(5.0) == a  # absolute: unchanged
    assert a.contains(110.0) and not a.contains(120.0)
    assert parse_window("@5.5", None) == TimeWindow(5.5, None)
    assert not parse_window(None, None).bounded
    for bad in (("1s", "@2"), ("2s", "1s"), ("@x", None), ("soon", None)):
        with pytest.raises(UsageError):
            parse_window(*bad)


def test_bundle_members_by_backend(tmp_path: Path) -> None:
    def bundle(name: str, members: list[str]) -> bundles.Bundle:
        w = BundleWriter(tmp_path / name, Manifest())
        for m in members:
            with w.open_member(m) as fh:
                fh.write(b"x\n")
        w.finish("ok")
        return bundles.Bundle.open(tmp_path / name)

    perf = bundle("perf", ["cpu.perf.txt.gz", "offcpu.perf.txt.gz", "offcpu.csv.gz", "block.trace.gz"])
    off = views.read_offcpu(perf)
    assert views.block_member(perf) == "block.trace.gz" and off is not None and off.source == "offcpu.perf.txt.gz"
    assert views.read_cpu_times(perf) is not None
    bcc = bundle("bcc", ["offcpu.folded.gz", "block.hist.jsonl.gz"])
    off = views.read_offcpu(bcc)
    assert off is not None and off.bcc and off.source == "offcpu.folded.gz"
    assert views.read_cpu_times(bcc) is None and views.block_member(bcc) is None
    assert bundles.collector_status(bcc, "block-io") == "not run"
    rows = ["tid,comm,off,on,state", "7,a,1.5,1.75,S", "bad,row", "8,b,2.0,2.5,D"]
    assert bundles.read_intervals(rows) == {(7, 1_500_000): 1.75, (8, 2_000_000): 2.5}
