"""Load output parsers on real output: the seeds' sysbench, go-ycsb and go-tpc lines and sysbench
runs made here (tests/data/load/README.md says where each file comes from). Expected figures are
the ones printed in the files themselves."""

from __future__ import annotations

import statistics

import pytest
from profiler.analyzers.load.model import ParsedLoad
from profiler.analyzers.load.parse import parse_lines
from profiler.analyzers.load.timestamps import strip_timestamp

from tests.conftest import TESTS

DATA = TESTS / "data" / "load"


def parse(name: str) -> ParsedLoad:
    with open(DATA / name, encoding="utf-8") as fh:
        return parse_lines(fh)


# ------------------------------------------------------------------------------- sysbench


def test_sysbench_interval_pasted_without_time() -> None:
    p = parse("sysbench-bare-interval-no-brackets.txt")
    assert p.tool == "sysbench" and p.unknown == 0 and p.summary is None
    (iv,) = p.intervals
    assert iv.end is None and iv.duration is None
    assert (iv.tps, iv.qps, iv.threads, iv.errors) == (13029.46, 13029.46, 128, 0.0)
    assert iv.latency_ms == {"p95": 23.95}


def test_sysbench_interval_cut_before_thds() -> None:
    (iv,) = parse("sysbench-bare-interval-truncated-thds.txt").intervals
    assert (iv.tps, iv.qps, iv.threads, iv.latency_ms) == (2311.03, 2311.03, 128, {"p95": 89.16})


def test_sysbench_summary_only() -> None:
    p = parse("sysbench-summary-only.txt")
    assert p.tool == "sysbench" and not p.intervals and p.unknown == 0
    s = p.summary
    assert s is not None
    assert (s.tps, s.qps, s.errors, s.transactions, s.seconds) == (905.23, 905.23, 0.0, 108638, 120.0093)
    assert s.latency_ms == {"min": 3.47, "avg": 8.84, "max": 79.62, "p95": 14.73}


def test_sysbench_report_interval_1_matches_its_summary() -> None:
    p = parse("sysbench-oltp-point-select-report-interval-1.txt")
    assert p.tool == "sysbench" and p.version == "1.0.20" and p.unknown == 0
    assert [iv.end for iv in p.intervals] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    assert all(iv.duration == 1.0 and iv.threads == 2 for iv in p.intervals)
    assert p.intervals[0].tps == 13618.82 and p.intervals[-1].latency_ms == {"p95": 3.07}
    s = p.summary
    assert s is not None and s.tps == 9559.65 and s.transactions == 76641 and s.seconds == 8.0079
    mean = statistics.fmean(iv.tps or 0.0 for iv in p.intervals)
    assert abs(mean / s.tps - 1) < 0.05


def test_sysbench_percentile_99_and_queries() -> None:
    p = parse("sysbench-oltp-read-write-percentile-99.txt")
    assert p.latency_key == "p99"
    assert p.intervals[0].latency_ms == {"p99": 183.21} and p.intervals[0].qps == 897.17
    s = p.summary
    assert s is not None and (s.tps, s.qps) == (58.5, 1169.95) and s.latency_ms["p99"] == 183.21


def test_sysbench_percentile_disabled_gives_no_latency() -> None:
    p = parse("sysbench-percentile-disabled.txt")
    assert len(p.intervals) == 3 and all(iv.latency_ms == {} for iv in p.intervals)
    assert p.summary is not None and set(p.summary.latency_ms) == {"min", "avg", "max"}
    assert p.unknown == 0


def test_sysbench_histogram_rows_are_recognised() -> None:
    p = parse("sysbench-histogram.txt")
    assert p.unknown == 0 and len(p.intervals) == 1
    assert p.summary is not None and p.summary.tps == 1923.14


def test_sysbench_failed_connection_keeps_fatal_lines() -> None:
    p = parse("sysbench-connect-failed-fatal.txt")
    assert p.tool == "sysbench" and not p.intervals and p.summary is None
    assert len(p.fatal) == 7 and p.fatal[0].startswith("FATAL: unable to connect")


def test_sysbench_run_shorter_than_one_report() -> None:
    p = parse("sysbench-events-limit-no-intervals.txt")
    assert not p.intervals and p.summary is not None
    assert (p.summary.tps, p.summary.transactions, p.summary.seconds) == (11808.09, 3000, 0.2525)


def test_sysbench_cpu_and_threads_count_events() -> None:
    cpu = parse("sysbench-cpu-eps.txt")
    assert [iv.tps for iv in cpu.intervals] == [761.51, 485.10]
    assert cpu.summary is not None and cpu.summary.tps == 501.52  # "events per second"
    threads = parse("sysbench-threads-eps.txt")
    assert [iv.tps for iv in threads.intervals] == [202.49, 218.93]
    s = threads.summary
    assert s is not None and s.transactions == 424 and s.tps == pytest.approx(424 / 2.0173)


def test_sysbench_fileio_operations_from_block_size() -> None:
    p = parse("sysbench-fileio-mib-per-s.txt")
    (iv,) = p.intervals
    # 92.58 MiB/s read + 61.72 MiB/s written in 16 KiB blocks, plus 196.53 fsyncs/s
    assert iv.tps == pytest.approx((92.58 + 61.72) * 1024 / 16 + 196.53)
    assert p.summary is not None and p.summary.tps == pytest.approx(10456.19 + 6970.79 + 349.54)
    assert p.unknown == 0


@pytest.mark.parametrize("name", ["sysbench-cpu-epoch-prefixed.txt", "sysbench-cpu-iso8601-prefixed.txt"])
def test_timestamp_prefixes_give_each_line_its_time(name: str) -> None:
    p = parse(name)
    assert p.tool == "sysbench" and p.unknown == 0 and len(p.intervals) == 2
    first, second = (p.wall_times[iv.line] for iv in p.intervals)
    assert 0.5 < second - first < 1.5  # one report a second
    assert all(1.7e9 < t < 2.0e9 for t in p.wall_times.values())


def test_strip_timestamp_forms() -> None:
    assert strip_timestamp("1795492145.305682212 [ 1s ] x") == (1795492145.305682212, "[ 1s ] x")
    t, rest = strip_timestamp("2026-11-24T03:49:11.5+08:00 tps: 1")
    assert rest == "tps: 1" and t == pytest.approx(1795492151.5 - 8 * 3600)
    t_local, _ = strip_timestamp("2026-11-24 03:49:11 x", utc_offset=3600.0)
    assert t_local == pytest.approx(1795492151.0 - 3600)
    t_ts, _ = strip_timestamp("Nov 24 03:49:11.25 x", year=2026)
    assert t_ts == pytest.approx(1795492151.25)
    assert strip_timestamp("[ 10s ] thds: 8") == (None, "[ 10s ] thds: 8")


# ------------------------------------------------------------------------------- go-ycsb


def test_go_ycsb_final_lines_after_run_finished() -> None:
    p = parse("go-ycsb-final-ops-99.9th.txt")
    assert p.tool == "go-ycsb" and not p.intervals and p.unknown == 0
    s = p.summary
    assert s is not None and s.seconds == 1.074185347 and s.transactions == 524 + 468
    assert s.tps == pytest.approx(992 / 1.074185347)
    assert {o.name: o.count for o in s.ops} == {"READ": 524, "UPDATE": 468}
    assert s.latency_ms["p99"] == 49.0 and s.latency_ms["p99.99"] == 52.0  # the larger of READ's and UPDATE's
    read = next(o for o in s.ops if o.name == "READ")
    assert read.rate == 492.4 and read.latency_ms["p99.9"] == 23.0


def test_go_ycsb_run_finished_in_milliseconds() -> None:
    s = parse("go-ycsb-run-finished-ms.txt").summary
    assert s is not None and s.seconds == pytest.approx(0.331406872) and s.tps == pytest.approx(992 / 0.331406872)


def test_go_ycsb_operation_names_with_underscores() -> None:
    s = parse("go-ycsb-read-modify-write-op.txt").summary
    assert s is not None and [o.name for o in s.ops] == ["READ", "READ_MODIFY_WRITE", "UPDATE"]
    assert s.transactions == 992 + 506 + 506


def test_go_ycsb_final_block_without_run_finished() -> None:
    p = parse("go-ycsb-no-run-finished.txt")
    assert p.summary is not None and p.summary.transactions == 951 + 41 and p.summary.seconds == 0.4


def test_go_ycsb_cumulative_reports_become_intervals() -> None:
    p = parse("go-ycsb-interval-qps-95th-info-logs.txt")
    assert p.tool == "go-ycsb"
    assert p.unknown == 3  # the author's "." elision lines; the INFO[0000] lines are go-ycsb's
    assert len(p.intervals) == 11
    first, second, last = p.intervals[0], p.intervals[1], p.intervals[-1]
    assert first.end == 9.9 and first.tps == pytest.approx(23256 / 9.9)
    assert second.duration == pytest.approx(10.0) and second.tps == pytest.approx((43691 - 23256) / 10.0)
    assert last.end == 611.7 and last.tps == pytest.approx((1000000 - 185369) / (611.7 - 99.9))
    assert first.latency_ms["p95"] == 73.0 and first.latency_ms["p99"] == 208.0
    assert any("since the run started" in n for n in p.notes)
    s = p.summary
    assert s is not None and s.transactions == 1000000 and s.seconds == 611.7


def test_go_ycsb_v1_0_3_total_row_gives_the_combined_percentiles() -> None:
    # go-ycsb v1.0.3 against tidb-server v8.5.3 here: banner, TOTAL sorted between READ and UPDATE
    p = parse("go-ycsb-v1.0.3-total-row-properties-banner.txt")
    assert p.tool == "go-ycsb" and p.unknown == 0 and not p.intervals
    s = p.summary
    assert s is not None and s.transactions == 20000 and s.seconds == pytest.approx(9.060063186)
    # the TOTAL row's own figures, not the largest of READ's and UPDATE's (UPDATE p99 45695 us)
    assert s.latency_ms["p99"] == pytest.approx(35.455) and s.latency_ms["p50"] == pytest.approx(1.832)
    assert not any("upper bound" in n for n in p.notes)


def test_go_ycsb_cumulative_reports_every_2s_with_read_modify_write() -> None:
    p = parse("go-ycsb-interval-2-cumulative-read-modify-write.txt")
    assert p.tool == "go-ycsb" and p.unknown == 0 and len(p.intervals) == 2
    one, two = p.intervals
    assert (one.end, two.end) == (2.0, 4.0)
    assert one.tps == pytest.approx(3773 / 2.0) and two.tps == pytest.approx((9532 - 3773) / 2.0)  # TOTAL's counts
    s = p.summary
    assert s is not None and s.transactions == 12043  # TOTAL: READ 8000 + READ_MODIFY_WRITE 4043 (its UPDATEs inside)
    assert {o.name for o in s.ops} == {"READ", "READ_MODIFY_WRITE", "TOTAL", "UPDATE"}
    assert any("since the run started" in n for n in p.notes)


def test_go_ycsb_load_run() -> None:
    s = parse("go-ycsb-load-insert-dotransactions-false.txt").summary
    assert s is not None and s.transactions == 2000 and [o.name for o in s.ops] == ["INSERT", "TOTAL"]


# ------------------------------------------------------------------------------- go-tpc


def test_go_tpc_tpmc_alone() -> None:
    p = parse("go-tpc-tpmc-only.txt")
    assert p.tool == "go-tpc" and p.summary is not None
    assert p.summary.extra == {"tpmC": 205.3} and p.summary.tps is None


def test_go_tpc_unprefixed_summary_with_error_rows() -> None:
    p = parse("go-tpc-summary-no-prefix-err-rows.txt")
    s = p.summary
    assert p.tool == "go-tpc" and s is not None and p.unknown == 0
    assert s.transactions == 988 + 12042 + 1086 + 11654 + 1149
    assert s.seconds == 118.9
    assert s.errors == pytest.approx((12 + 26 + 3 + 7 + 1) / 118.9)
    assert [o.name for o in s.ops if o.error] == ["DELIVERY_ERR", "NEW_ORDER_ERR", "ORDER_STATUS_ERR",
                                                    "PAYMENT_ERR", "STOCK_LEVEL_ERR"]
    # tpmC from the NEW_ORDER row agrees with the TPM go-tpc printed for it (6081.6)
    assert s.extra["tpmC"] == pytest.approx(6081.6, rel=0.002)
    assert s.latency_ms["p99.9"] == 4000.0  # DELIVERY's, the largest


def test_go_tpc_summary_missing_an_error_row() -> None:
    s = parse("go-tpc-summary-missing-err-row.txt").summary
    assert s is not None and len(s.ops) == 9 and "STOCK_LEVEL_ERR" not in {o.name for o in s.ops}
    assert s.transactions == 1075 + 12175 + 1099 + 11620 + 1066


def test_go_tpc_current_blocks_and_summary() -> None:
    # go-tpc v1.0.7 against tidb-server v8.5.3 here: three [Current] blocks, Finished, [Summary] with *_ERR rows
    p = parse("go-tpc-tpcc-current-blocks-err-rows-efficiency.txt")
    assert p.tool == "go-tpc" and p.unknown == 0 and len(p.intervals) == 3
    one, two, three = p.intervals
    assert (one.end, two.end, three.end) == (9.9, 19.9, 29.9)
    assert one.tps == pytest.approx((18 + 235 + 11 + 162 + 14) / 9.9)
    assert two.latency_ms["p99"] == 1275.1  # NEW_ORDER's, the largest of the block
    s = p.summary
    assert s is not None and s.extra == {"tpmC": 1115.1, "efficiency": 8671.2}  # no tpmTotal in v1.0.7
    assert s.transactions == 47 + 648 + 38 + 550 + 55 and s.seconds == 34.9
    assert s.errors == pytest.approx((2 + 1) / 34.9)
    assert [o.name for o in s.ops if o.error] == ["NEW_ORDER_ERR", "PAYMENT_ERR"]


def test_go_tpc_prepare_progress_is_known_in_lower_case() -> None:
    # v1.0.7's prepare writes "creating table warehouse" (not "Creating table"): go-tpc's, not unknown lines
    p = parse("go-tpc-tpcc-prepare-lowercase-creating-table.txt")
    assert p.tool == "go-tpc" and p.unknown == 0 and not p.intervals and p.summary is None


# ------------------------------------------------------------------------------- detection


def test_unknown_tool_is_not_guessed() -> None:
    p = parse("unrecognised-stress-ng-metrics.txt")
    assert p.tool is None and p.unknown == 6 and not p.intervals and p.summary is None
    assert p.unknown_examples[0].startswith("stress-ng: info:")


def test_unknown_lines_are_counted_not_fatal() -> None:
    lines = ["[ 1s ] thds: 2 tps: 100.00 qps: 100.00 (r/w/o: 100.00/0.00/0.00) lat (ms,95%): 1.00 err/s: 0.00 reconn/s: 0.00",
             "\x00\x01 binary junk", "a line from a wrapper script", "",
             "[ 2s ] thds: 2 tps: 110.00 qps: 110.00 (r/w/o: 110.00/0.00/0.00) lat (ms,95%): 1.10 err/s: 0.00 reconn/s: 0.00"]
    p = parse_lines(lines)
    assert p.tool == "sysbench" and len(p.intervals) == 2 and p.unknown == 2
    assert p.unknown_examples == ["\x00\x01 binary junk", "a line from a wrapper script"]


def test_every_fixture_is_read_by_its_tool() -> None:
    prefixes = {"sysbench-": "sysbench", "go-ycsb-": "go-ycsb", "go-tpc-": "go-tpc", "unrecognised-": None}
    files = sorted(DATA.glob("*.txt"))
    assert len(files) >= 20
    for f in files:
        want = next(tool for prefix, tool in prefixes.items() if f.name.startswith(prefix))
        assert parse(f.name).tool == want, f.name
