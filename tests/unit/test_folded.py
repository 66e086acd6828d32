"""Folding perf script: ours against goldens made by inferno-collapse-perf on real captures."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import pytest
from profiler.analyzers.stacks.folding import (
    Collapser,
    FoldOptions,
    collapse_stream,
    collapse_text,
    format_folded,
)
from profiler.analyzers.stacks.naming import (
    fix_half_demangled_rust,
    frame_name,
    tidy_args,
    tidy_args_perl,
)

from profiler.inputs.folded import is_folded, parse_folded
from profiler.inputs.window import TimeWindow
from profiler.tolerant import ReadLog
from tests.conftest import ROOT

DIR = ROOT / "samples" / "perf-script"
INPUTS = sorted(DIR.glob("*.txt"))
# inferno garbles tracepoint samples whose payload precedes a call chain: no reference golden.
NO_REFERENCE = {"sched-switch-callchain"}


def fold(path: Path, **kw: object) -> str:
    with open(path, "rb") as f:
        return "".join(format_folded(collapse_stream(f, FoldOptions(**kw)).counts))  # type: ignore[arg-type]


def test_every_sample_has_a_golden() -> None:
    assert len(INPUTS) >= 12
    for p in INPUTS:
        stem = p.stem
        assert (DIR / f"{stem}.folded").exists() or (DIR / f"{stem}.ours.folded").exists(), stem


@pytest.mark.parametrize("path", [p for p in INPUTS if p.stem not in NO_REFERENCE], ids=lambda p: p.stem)
def test_inferno_mode_matches_reference(path: Path) -> None:
    assert fold(path, compat="inferno") == (DIR / f"{path.stem}.folded").read_text()


@pytest.mark.parametrize("path", INPUTS, ids=lambda p: p.stem)
def test_default_matches_golden(path: Path) -> None:
    ours = DIR / f"{path.stem}.ours.folded"
    golden = ours if ours.exists() else DIR / f"{path.stem}.folded"
    assert fold(path) == golden.read_text()


def test_options_match_reference() -> None:
    src = DIR / "mariadb-sysbench.txt"
    got = fold(src, compat="inferno", annotate_kernel=True, annotate_jit=True, include_tid=True, include_addrs=True)
    assert got == (DIR / "mariadb-sysbench.all-tid-addrs.folded").read_text()
    got = fold(DIR / "redis-benchmark.txt", include_pid=True)
    assert got == (DIR / "redis-benchmark.pid.folded").read_text()
    # the collectors' field set: comm pid/tid [cpu] time: period event:
    got = fold(DIR / "pid-tid-cpu-fields.txt", include_tid=True)
    assert got == (DIR / "pid-tid-cpu-fields.tid.folded").read_text()


def test_chunking_does_not_change_the_result() -> None:
    text = (DIR / "mariadb-sysbench.txt").read_text()
    whole = collapse_text(text)
    for size in (1, 7, 100, 4096):
        c = Collapser()
        for i in range(0, len(text), size):
            c.feed(text[i : i + size])
        assert c.close() == whole


def test_gzip_and_truncated_last_sample_counts() -> None:
    raw = (DIR / "truncated-last-sample.txt").read_bytes()
    c = collapse_stream(io.BytesIO(gzip.compress(raw)))
    assert c.counts == collapse_text(raw.decode())
    # the cut sample still counts (with its frames up to the cut), as in the reference
    assert c.samples == raw.count(b"cpu-clock")


def test_comm_with_spaces_and_digits_is_kept_whole() -> None:
    counts = collapse_text((DIR / "comm-with-spaces.txt").read_text(), FoldOptions(include_tid=True))
    roots = {k.split(";")[0] for k in counts}
    assert roots == {"Web_Content_1-?/18945", "rocksdb:low12-?/18946"}


def test_pools_merge_thread_instances() -> None:
    text = (DIR / "comm-with-spaces.txt").read_text()
    roots = {k.split(";")[0] for k in collapse_text(text, FoldOptions(pools=True))}
    assert roots == {"Web_Content", "rocksdb:low"}


def test_event_filter_and_periods() -> None:
    text = (DIR / "several-events.txt").read_text()
    cpu = collapse_text(text)
    assert sum(cpu.values()) == 6 * 250000  # six cpu-clock samples, period 250000 each
    pf = collapse_text(text, FoldOptions(event_filter="page-faults"))
    assert sum(pf.values()) == 1 + 1 + 4  # their periods
    samples = collapse_text(text, FoldOptions(count_samples=True))
    assert sum(samples.values()) == 6


def test_time_range_and_tid_filter() -> None:
    text = (DIR / "mariadb-sysbench.txt").read_text()
    c = Collapser()
    c.feed(text)
    c.close()
    assert c.first_time is not None and c.last_time is not None
    mid = (c.first_time + c.last_time) / 2
    early = collapse_text(text, FoldOptions(window=TimeWindow(end=mid), count_samples=True))
    late = collapse_text(text, FoldOptions(window=TimeWindow(start=mid), count_samples=True))
    assert sum(early.values()) + sum(late.values()) == c.samples
    assert sum(early.values()) > 0 and sum(late.values()) > 0
    only = collapse_text(text, FoldOptions(tid_filter=frozenset({10670}), count_samples=True))
    assert sum(only.values()) == text.count("mariadbd 10670 ")


def test_no_callchain_perl_mode_keeps_comm_alone() -> None:
    text = "a 1 1.0: 1 cpu-clock:\n\tff (deleted) (/x)\n\n"
    assert collapse_text(text) == {}
    assert collapse_text(text, FoldOptions(compat="perl")) == {"a": 1}


def test_frame_naming_rules() -> None:
    assert tidy_args("h(int)") == "h"
    assert tidy_args("<(A, B) as T>::m") == "<(A, B) as T>::m"
    assert tidy_args("net/http.(*Client).Do") == "net/http.(*Client).Do"
    assert tidy_args("(anonymous namespace)::f(int)") == "(anonymous namespace)::f"
    assert tidy_args("a;b") == "a:b"
    assert tidy_args_perl("<(A, B) as T>::m") == "<"
    assert tidy_args_perl("it's") == "its"
    assert (
        fix_half_demangled_rust("_$LT$std..fs..ReadDir$u20$as$u20$Iterator$GT$::next::h0123456789abcdef")
        == "<std::fs::ReadDir as Iterator>::next"
    )
    # Go assembly functions: the ELF name's ABI suffix goes, as in Go's own profiles; C names stay
    assert frame_name("runtime.futex.abi0") == "runtime.futex"
    assert frame_name("internal/runtime/syscall.Syscall6.abi0") == "internal/runtime/syscall.Syscall6"
    assert frame_name("abi0") == "abi0" and frame_name("x_abi0") == "x_abi0"


def test_go_abi_suffix_is_ours_only() -> None:
    text = (DIR / "go-runtime.txt").read_text()
    ours = collapse_text(text, FoldOptions())
    inferno = collapse_text(text, FoldOptions(compat="inferno"))
    assert any("runtime.goexit.abi0;" in k for k in inferno) and not any(".abi0" in k for k in ours)
    assert sum(ours.values()) == sum(inferno.values())


def test_kernel_jit_and_inline_annotations() -> None:
    text = (
        "java 5 1.0: 1 cpu-clock:\n"
        "\t7f00 Lcom/x/Y;::run->Lcom/x/Z;::inner (/tmp/perf-5.map)\n"
        "\tffffffff81000000 do_syscall_64 ([kernel.kallsyms])\n"
        "\t1234 [unknown] (/usr/lib/libz.so)\n\n"
    )
    got = collapse_text(text, FoldOptions(annotate_kernel=True, annotate_jit=True, include_addrs=True))
    assert got == {"java;[libz.so <1234>];do_syscall_64_[k];com/x/Y:::run_[j];com/x/Z:::inner_[i]": 1}


def test_parse_folded_roundtrip_and_errors() -> None:
    counts = parse_folded(["a;b 3\n", "a;b 2\n", "c 1\n", "\n"])
    assert counts == {"a;b": 5, "c": 1}
    assert is_folded("a;b 3\nc 1\n")
    assert not is_folded((DIR / "mariadb-sysbench.txt").read_text())
    log = ReadLog("x")  # a line that is not 'stack count' is skipped and counted, as inferno does
    assert parse_folded(["not folded\n", "a 1\n", "b -2\n", "c nan\n"], log) == {"a": 1}
    assert log.skipped == {"lines that are not 'stack count'": 3}


@pytest.mark.parametrize("name", ["mariadb-sysbench.txt", "several-events.txt", "comm-with-spaces.txt", "blank-lines.txt"])
def test_several_processes_fold_the_same(name: str) -> None:
    from profiler.analyzers.stacks.folding_files import collapse_file

    path = DIR / name
    for opts in (FoldOptions(), FoldOptions(include_tid=True, window=TimeWindow(start=0.005, relative=True), count_samples=True)):
        with open(path, "rb") as f:
            one = collapse_stream(f, opts)
        many = collapse_file(str(path), opts, workers=3)
        assert many.counts == one.counts
        assert (many.samples, many.first_time) == (one.samples, one.first_time)
