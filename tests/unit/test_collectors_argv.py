"""Collectors' command lines and parsers, without perf: argv building, stream counters, pairing."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from profiler.collectors import registry
from profiler.collectors.base import CaptureContext, CaptureOptions, Collector, Target
from profiler.collectors.perf import cpu_stacks, offcpu, perf_stat, syscalls
from profiler.collectors.tracefs import counting, instance

from profiler.bundle import BundleWriter, Manifest
from profiler.formats import offcpu_intervals, syscall_pairs
from tests.conftest import ROOT

SAMPLES = ROOT / "samples"


@pytest.fixture
def ctx(tmp_path: Path) -> CaptureContext:
    writer = BundleWriter(tmp_path / "cap", Manifest())
    targets = [Target(pid=4242, comm="tikv-server"), Target(pid=4343, comm="tidb-server")]
    return CaptureContext(writer=writer, targets=targets, options=CaptureOptions(), perf="perf")


def test_perf_stat_runs_perf_only_for_hardware_counters(ctx: CaptureContext) -> None:
    ctx.options.interval = 0.5
    argv = perf_stat.PerfStatCollector(hardware=True).argv(ctx)
    assert argv[:6] == ["perf", "stat", "-I", "500", "-x", ","]
    # only what perf alone can count; the software counters come from the kernel's accounting
    assert argv[argv.index("-e") + 1].split(",") == ["cycles", "instructions", "cache-misses"]
    assert argv[argv.index("-p") + 1] == "4242,4343"
    out = Path(argv[argv.index("-o") + 1])
    assert out.parent == ctx.writer.root and out.name.startswith(".")  # a temporary name in the bundle
    assert perf_stat.PerfStatCollector(hardware=False).argv(ctx) == []  # no per-thread perf event at all


def test_kernel_counters_count_a_real_process(tmp_path: Path) -> None:
    import subprocess
    import sys
    import threading
    import time

    from profiler.analyzers.series import perfstat
    from profiler.collectors.process import cpu_seconds

    # a process that burns CPU and switches (sleeps) in a loop
    code = "import time\nwhile True:\n    t = time.time()\n    while time.time() - t < 0.004: pass\n    time.sleep(0.001)"
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(0.2)
        kc = perf_stat.KernelCounters([proc.pid], tmp_path / "stat.csv", 0.2)
        t = threading.Thread(target=kc.run, args=(time.monotonic(),))
        before = cpu_seconds(proc.pid)
        t.start()
        time.sleep(1.1)
        kc.stop_event.set()
        t.join()
        after = cpu_seconds(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    ps = perfstat.parse((tmp_path / "stat.csv").read_text().splitlines())
    assert set(ps.events) == set(perf_stat.SOFTWARE_EVENTS) and ps.units["task-clock"] == "msec"
    times, ms = ps.events["task-clock"]
    assert len(times) >= 4 and all(b > a for a, b in zip(times, times[1:], strict=False))
    # The counters agree with the kernel's own accounting of the process (utime + stime, in
    # 10 ms ticks), whatever share of a CPU a loaded host gave it: they cover the same window
    # but the part after the last full interval (at most one interval of CPU).
    assert before is not None and after is not None
    used, counted = after - before, ms.sum() / 1000.0
    assert used >= 0.03, used  # it did run (three ticks, even on a crowded host)
    assert used - 0.2 - 0.03 <= counted <= used + 0.03, (counted, used)
    # every 4 ms of CPU ends in a sleep, so at least one switch per 4 ms it ran (half, for the
    # window's edges), whatever the host's load
    switches = ps.events["context-switches"][1].sum()
    assert switches >= 0.5 * (used - 0.2) / 0.004 and switches > 0, (switches, used)


def test_interval_is_whole_milliseconds_and_at_least_ten() -> None:
    assert perf_stat.interval_ms(1.0) == 1000
    assert perf_stat.interval_ms(0.0001) == 10


def test_perf_stat_summary_reads_not_supported_rows() -> None:
    text = (SAMPLES / "perf-stat" / "interval-not-supported.csv").read_text()
    rows, unsupported = perf_stat.summarize(text)
    assert rows == 16  # two intervals of eight events, the comment and blank line skipped
    assert unsupported == {"cycles", "instructions", "cache-misses"}


@pytest.mark.parametrize("mode", ["fp", "dwarf", "lbr"])
def test_cpu_stacks_argv(ctx: CaptureContext, mode: str) -> None:
    ctx.options.call_graph = mode
    ctx.options.frequency = 49
    col = cpu_stacks.CpuStacksCollector()
    col.system_wide = lambda: True  # type: ignore[method-assign]
    argv = col.argv(ctx)
    # on the CPUs, not the targets' threads (no timer re-armed at each of their context switches)
    assert argv[:5] == ["perf", "record", "-a", "-e", "cpu-clock:I"] and "-p" not in argv
    assert col.script_extra(ctx) == ["--pid", "4242,4343"]  # only the targets' samples are written
    assert argv[argv.index("-F") + 1] == "49"
    assert argv[argv.index("--call-graph") + 1] == mode
    assert argv[argv.index("-k") + 1] == "CLOCK_MONOTONIC"
    assert "--sample-cpu" in argv and "-N" in argv  # CPU column for perf script; no build-id cache copies


def test_cpu_stacks_samples_the_targets_threads_without_system_wide_rights(ctx: CaptureContext) -> None:
    col = cpu_stacks.CpuStacksCollector()
    col.system_wide = lambda: False  # type: ignore[method-assign]
    argv = col.argv(ctx)
    assert argv[argv.index("-p") + 1] == "4242,4343" and "-a" not in argv
    assert argv[argv.index("-e") + 1] == "cpu-clock"


def test_unknown_call_graph_is_refused(ctx: CaptureContext) -> None:
    ctx.options.call_graph = "frame"
    with pytest.raises(ValueError):
        cpu_stacks.CpuStacksCollector().argv(ctx)


def test_script_argv_is_fast_by_default(tmp_path: Path) -> None:
    argv = cpu_stacks.script_argv("perf", tmp_path / "x.data", cpu_stacks.SCRIPT_FIELDS, inline=False)
    assert "--no-inline" in argv and "--inline" not in argv
    assert argv[argv.index("-F") + 1] == "comm,pid,tid,cpu,time,period,event,ip,sym,symoff,dso"
    assert "--inline" in cpu_stacks.script_argv("perf", tmp_path / "x.data", "ip", inline=True)


def test_offcpu_argv_filters_a_system_wide_switch_event_on_the_targets(ctx: CaptureContext) -> None:
    ctx.options.call_graph = "dwarf"  # never a DWARF copy per context switch
    argv = offcpu.OffCpuCollector().argv(ctx)
    assert argv[argv.index("-e") + 1] == "sched:sched_switch"
    assert "-a" in argv and "-p" not in argv
    assert argv[argv.index("--filter") + 1] == ("prev_pid==4242||prev_pid==4343||next_pid==4242||next_pid==4343")
    assert argv[argv.index("--call-graph") + 1] == "fp"
    assert argv[argv.index("-k") + 1] == "CLOCK_MONOTONIC"


def test_syscalls_argv(ctx: CaptureContext) -> None:
    col = syscalls.SyscallsCollector()
    argv = col.argv(ctx)
    events = [argv[i + 1] for i, a in enumerate(argv) if a == "-e"]
    filters = [argv[i + 1] for i, a in enumerate(argv) if a == "--filter"]
    assert events == ["raw_syscalls:sys_enter", "raw_syscalls:sys_exit"] and "-a" in argv
    assert filters == ["common_pid==4242||common_pid==4343"] * 2  # one per event
    assert "--call-graph" not in argv and "-g" not in argv  # no stacks: cheap


def test_block_counter_argv_counts_system_wide(tmp_path: Path) -> None:
    argv = counting.counter_argv("perf", tmp_path / "c")
    assert argv[:3] == ["perf", "stat", "-a"]
    assert argv[argv.index("-e") + 1] == "block:block_rq_issue,block:block_rq_complete"


@pytest.mark.parametrize("split", [1, 7, 64, 10_000])
def test_sample_counter_counts_across_chunk_boundaries(split: int) -> None:
    text = b"a 1/1 [000] 1.0: 1 cpu-clock:\n\tffff f (k)\n\nb 1/1 [000] 1.1: 1 cpu-clock:\n\tffff g (k)\n\n" * 5
    counter = cpu_stacks.SampleCounter()
    for i in range(0, len(text), split):
        counter(text[i:i + split])
    assert counter.samples == 10


def test_offcpu_intervals_pair_switch_out_with_next_switch_in() -> None:
    out = io.StringIO()
    # A real capture: perf record -a -e sched:sched_switch --filter on a two-thread python ping-pong
    # (pid 11598, threads 11640 and 11641); other tasks appear only as the ones switched away from.
    pairs = offcpu_intervals.IntervalWriter(out, pids={11598})
    for line in (SAMPLES / "perf-script-collectors" / "sched-switch-offcpu.txt").read_text().splitlines():
        pairs.feed(line)
    pairs.close()  # lines are paired in batches: close() writes the last one
    rows = out.getvalue().splitlines()
    assert rows[0] == "tid,comm,off,on,state"
    # 11640 left the CPU sleeping (S) at .660343 and came back at .660903 (from "sleep", pid 11647)
    assert rows[1] == "11640,python3,11129.660343,11129.660903,S"
    # 11641 left first (.659764) and came back later, when 11640 switched to it
    assert "11641,python3,11129.659764,11129.660915,S" in rows
    assert pairs.intervals == len(rows) - 1 > 20
    for row in rows[1:]:
        tid, _, off, on, state = row.split(",")
        assert tid in {"11640", "11641"}  # never the tasks that were not targets (sleep, swapper, migration)
        assert float(on) >= float(off) and state in {"S", "D", "R", "R+"}


def test_syscall_table_comes_from_the_kernel_uapi_header() -> None:
    table = syscalls.parse_unistd("#define __NR_read 0\n#define __NR_write 1\n#define __NR_syscalls 451\n")
    assert table == {0: "read", 1: "write"}
    assert syscalls.parse_ausyscall("Using x86_64 syscall table:\n0\tread\n1\twrite\n") == {0: "read", 1: "write"}
    assert syscall_pairs.syscall_name(999, {}) == "syscall_999"


def test_syscall_line_parser_handles_spaces_in_comm() -> None:
    got = syscall_pairs.parse_line("  V8 Worker 123   625.752142: raw_syscalls:sys_enter: NR 110 (7fb5, 0)")
    assert got == ("V8 Worker", 123, 625.752142, True, 110)
    assert syscall_pairs.parse_line("  x 7   1.5:  raw_syscalls:sys_exit: NR 230 = 0") == ("x", 7, 1.5, False, 230)
    assert syscall_pairs.parse_line("garbage") is None


def test_syscall_pairing_per_interval_from_real_perf_script() -> None:
    out = io.StringIO()
    lines = (SAMPLES / "perf-script-collectors" / "raw-syscalls-pairs.txt").read_text().splitlines()
    first = syscall_pairs.parse_line(lines[0])
    assert first is not None
    pairs = syscall_pairs.Pairing(out, t0=first[2], interval=0.001, names={230: "clock_nanosleep", 110: "getppid"})
    for line in lines:
        pairs.feed(line)
    pairs.close()
    rows = [r.split(",") for r in out.getvalue().splitlines()]
    assert rows[0] == ["time", "tid", "comm", "syscall", "count", "total_ns"]
    body = rows[1:]
    assert body and all(int(r[4]) >= 1 and int(r[5]) >= 0 for r in body)
    assert {r[3] for r in body} >= {"getppid", "clock_nanosleep"}
    assert sum(int(r[4]) for r in body) == pairs.calls
    times = [float(r[0]) for r in body]
    assert times == sorted(times)  # written interval by interval


def test_syscall_blocked_at_end_is_counted_up_to_the_last_event() -> None:
    out = io.StringIO()
    pairs = syscall_pairs.Pairing(out, t0=10.0, interval=1.0, names={232: "epoll_wait", 0: "read"})
    pairs.feed("srv 5   10.100000: raw_syscalls:sys_enter: NR 232 (4, 0)")
    pairs.feed("srv 6   10.200000: raw_syscalls:sys_enter: NR 0 (3, 0)")
    pairs.feed("srv 6   12.200000:  raw_syscalls:sys_exit: NR 0 = 8")
    assert pairs.close() == 1
    rows = out.getvalue().splitlines()[1:]
    assert rows == ["12.000000,5,srv,epoll_wait,1,2100000000", "12.000000,6,srv,read,1,2000000000"]


def test_block_balance_flags_lost_completions() -> None:
    stats, why = counting.balance({"block_rq_issue": 83_000, "block_rq_complete": 83_000},
                                 {"block_rq_issue": 725_000, "block_rq_complete": 725_000}, 0)
    assert why is not None and "83000 of 725000" in why
    stats, why = counting.balance({"block_rq_issue": 1000, "block_rq_complete": 998},
                                 {"block_rq_issue": 1003, "block_rq_complete": 1001}, 0)
    assert why is None and stats["unpaired"] == 2
    _, why = counting.balance({"block_rq_issue": 10, "block_rq_complete": 10}, None, 5)
    assert why is not None and "lost 5" in why


@pytest.mark.parametrize("split", [1, 13, 100_000])
def test_trace_counter_counts_events_and_target_issues_across_chunks(split: int) -> None:
    text = (b"   fio-7  [001] .....  10.000001: block_rq_issue: 254,0 RS 4096 () 8 + 8 be,0,4 [fio]\n"
            b"  <idle>-0  [000] ..s1.  10.000101: block_rq_complete: 254,0 RS () 8 + 8 be,0,4 [0]\n"
            b" kworker/0:1H-44 [000] .....  10.000201: block_rq_issue: 254,0 WS 4096 () 16 + 8 be,0,4 [kworker/0:1H]\n") * 3
    tc = counting.TraceCounter(["block_rq_issue", "block_rq_complete"], lambda tid: tid == 7)
    for i in range(0, len(text), split):
        tc.feed(text[i:i + split])
    tc.close()
    assert tc.counts == {"block_rq_issue": 6, "block_rq_complete": 3}
    assert tc.target_issues == 3


def test_ring_buffer_is_sized_from_a_total_budget() -> None:
    assert instance.buffer_kb_per_cpu(2) == 32768
    assert instance.buffer_kb_per_cpu(16) == 4096
    assert instance.buffer_kb_per_cpu(256) == 1024


def test_block_counter_and_ring_stats_parsers() -> None:
    counted = counting.parse_counter("# started on x\n\n725000,,block:block_rq_issue,1000,100.00,,\n"
                                    "724990,,block:block_rq_complete,1000,100.00,,\n")
    assert counted == {"block_rq_issue": 725000, "block_rq_complete": 724990}
    st = counting.parse_cpu_stats("entries: 0\noverrun: 12\ncommit overrun: 0\nbytes: 0\n"
                                 "oldest event ts:     0.000000\nnow ts:   960.368984\ndropped events: 3\n")
    assert st["overrun"] == 12 and st["dropped events"] == 3


def test_registry_lists_every_collector_once() -> None:
    cols = registry.default_collectors(CaptureOptions())
    names = [c.name for c in cols]
    assert {"perf-stat", "cpu-stacks", "offcpu-stacks", "block-io", "syscalls", "procfs"} <= set(names)
    assert len(set(names)) == len(names)
    assert all(isinstance(c, Collector) for c in cols)
    assert [c.name for c in registry.by_name(CaptureOptions(), ["syscalls", "perf-stat"])] == ["perf-stat", "syscalls"]
