"""The perf script parser on real captures: every line variant of samples/perf-script/."""

from __future__ import annotations

from profiler.inputs.perfscript import (
    Frame,
    event_base,
    iter_samples,
    parse_frame,
    parse_header,
)
from tests.conftest import ROOT

DIR = ROOT / "samples" / "perf-script"


def samples(name: str) -> list:  # type: ignore[type-arg]
    with open(DIR / name) as f:
        return list(iter_samples(f))


def test_header_with_callchain() -> None:
    s = samples("mariadb-sysbench.txt")
    first = s[0]
    assert (first.comm, first.pid, first.tid, first.cpu) == ("mariadbd", None, 10670, None)
    assert first.time == 431.613674 and first.period == 1001001 and first.event == "cpu-clock:pppH"
    assert first.frames[0] == Frame(addr=0x758300, symbol="SQL_SELECT::test_quick_select", dso="/usr/sbin/mariadbd", offset=0)
    assert first.frames[-1].symbol == "start_thread"
    assert all(not x.truncated for x in s)
    assert len(s) == (DIR / "mariadb-sysbench.txt").read_text().count("cpu-clock")


def test_no_callchain_single_line_samples() -> None:
    s = samples("no-callchain.txt")
    assert len(s) == 40
    assert s[0].comm == "python3" and len(s[0].frames) == 1
    assert s[0].frames[0].symbol == "intel_check_word.constprop.0"
    assert s[0].frames[0].dso == "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"


def test_tracepoint_payload_and_cpu() -> None:
    s = samples("sched-switch-callchain.txt")
    assert s[0].event == "sched:sched_switch" and event_base(s[0].event) == "sched:sched_switch"
    assert s[0].cpu is not None
    assert s[0].payload is not None and "prev_state=" in s[0].payload
    assert s[0].frames[0].symbol == "__traceiter_sched_switch"


def test_comm_with_spaces_header_comments_and_events() -> None:
    assert {x.comm for x in samples("comm-with-spaces.txt")} == {"Web Content 1", "rocksdb:low12"}
    hdr = samples("header-comments.txt")
    assert hdr and all(x.comm == "redis-server" for x in hdr)
    ev = {event_base(x.event or "") for x in samples("several-events.txt")}
    assert ev == {"cpu-clock", "page-faults"}


def test_truncated_and_blank_lines() -> None:
    s = samples("truncated-last-sample.txt")
    assert s[-1].truncated and not s[0].truncated
    # the frame cut mid-line is dropped, the whole ones before it are kept
    assert s[-1].frames and all(f.dso for f in s[-1].frames)
    assert len(samples("blank-lines.txt")) == (DIR / "blank-lines.txt").read_text().count("cpu-clock")


def test_frame_variants() -> None:
    assert parse_frame("\t7f1e2215d058  (/lib/libc.so)") == Frame(0x7F1E2215D058, "", "/lib/libc.so", None)
    f = parse_frame("\t4a1b2c foo+0x10 (/usr/bin/x (deleted))")
    assert f == Frame(0x4A1B2C, "foo", "/usr/bin/x (deleted)", 16)
    f = parse_frame("\t5867e alloc::alloc::alloc+0x2e (inlined)")
    assert f is not None and f.dso == "inlined"
    assert parse_frame("  file.c:12") is None
    h = parse_header("V8 WorkerThread 24636/25607 [000] 94564.109216: 100 cycles:u: ")
    assert h is not None and (h.comm, h.pid, h.tid, h.cpu, h.period) == ("V8 WorkerThread", 24636, 25607, 0, 100)
    assert event_base("cycles:u") == "cycles"
