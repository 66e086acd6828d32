"""The load on the capture's clock: placing intervals (line arrival times, timestamps in the log,
the load's start), the warm-up and dip rules, the verdict window, per-transaction figures, the
bundle's load members (v1 -> v2) and the report of a real `profiler run` bundle."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from profiler.analyzers.analysis import analyze
from profiler.analyzers.load.align import Point, place
from profiler.analyzers.load.analysis import analyze_load, per_transaction
from profiler.analyzers.load.model import Interval
from profiler.analyzers.load.parse import parse_lines
from profiler.analyzers.load.phases import DIP_BELOW, find_phases
from profiler.analyzers.load.view import LoadLog, read_load
from profiler.analyzers.views import read_views
from profiler.analyzers.views.window import cut

from profiler.bundle import Bundle, ClockInfo, LoadInfo, Manifest, members, parse_manifest
from profiler.cli import main
from profiler.renderers import report_html, report_text
from tests.conftest import SAMPLES, TESTS

DATA = TESTS / "data" / "load"
RUN = SAMPLES / "mariadb-sysbench-run"


def sysbench_lines(rates: list[float]) -> list[str]:
    return [f"[ {i}s ] thds: 4 tps: {r:.2f} qps: {r:.2f} (r/w/o: {r:.2f}/0.00/0.00) lat (ms,95%): 1.00 err/s: 0.00 "
            "reconn/s: 0.00" for i, r in enumerate(rates, 1)]


def points(rates: list[float], start: float = 100.0) -> list[Point]:
    return [Point(end=start + i, duration=1.0, interval=Interval(end=float(i), duration=1.0, tps=r))
            for i, r in enumerate(rates, 1)]


# ------------------------------------------------------------------------------- placing


def test_line_arrival_times_win() -> None:
    parsed = parse_lines(sysbench_lines([100, 110, 120]))
    # line 2 was read at 50.25 on the capture's clock; the others were not timed
    pl = place(parsed, line_times={2: 50.25}, start=None)
    assert [p.end for p in pl.points] == pytest.approx([49.25, 50.25, 51.25])
    assert pl.how == "the load's start plus the tool's own times"  # two of the three
    assert pl.start == pytest.approx(48.25)  # worked out from the timed line: 50.25 - 2 s
    assert any("worked out" in n for n in pl.notes)


def test_start_plus_tool_time() -> None:
    pl = place(parse_lines(sysbench_lines([100, 110])), start=1000.0)
    assert [p.end for p in pl.points] == [1001.0, 1002.0] and pl.how == "the load's start plus the tool's own times"


def test_wall_clock_prefixes_move_to_the_monotonic_clock() -> None:
    with open(DATA / "sysbench-cpu-epoch-prefixed.txt", encoding="utf-8") as fh:
        parsed = parse_lines(fh)
    offset = 1795492000.0  # wall = monotonic + offset
    pl = place(parsed, wall_offset=offset)
    assert pl.how == "the timestamps printed in the log"
    assert [round(p.end, 3) for p in pl.points] == [round(145.305682212, 3), round(146.293608161, 3)]


def test_given_start_that_disagrees_with_the_lines_is_reported() -> None:
    pl = place(parse_lines(sysbench_lines([100, 110])), line_times={1: 20.0, 2: 21.0}, start=5.0)
    assert [p.end for p in pl.points] == [20.0, 21.0]
    assert any("+14.0 s from the start given" in n for n in pl.notes)


def test_no_time_at_all_leaves_intervals_unplaced() -> None:
    with open(DATA / "sysbench-bare-interval-no-brackets.txt", encoding="utf-8") as fh:
        pl = place(parse_lines(fh), start=10.0)
    assert not pl.points and pl.unplaced == 1


# ------------------------------------------------------------------------------- phases


def test_warmup_is_the_ramp_before_the_steady_level() -> None:
    ph = find_phases(points([200, 500, 800, 950, 1000, 980, 1010, 990, 1000, 1005]), (100.0, 111.0))
    assert ph.warmup_intervals == 3 and ph.warmup_end == 103.0
    assert ph.window == (103.0, 110.0) and "left out" in ph.reason
    assert ph.level == pytest.approx(1000.0)
    assert not ph.dips


def test_no_warmup_when_steady_from_the_start() -> None:
    ph = find_phases(points([990, 1000, 1010, 1000, 995, 1005]), (100.0, 107.0))
    assert ph.warmup_end is None and ph.window == (100.0, 106.0) and ph.reason.startswith("no warm-up")


def test_a_run_that_never_settles_keeps_the_whole_capture() -> None:
    ph = find_phases(points([100, 200, 300, 400, 500, 600, 700, 800]), (100.0, 109.0))
    assert ph.window is None and "no steady state" in ph.reason


def test_a_steady_part_too_short_for_a_verdict() -> None:
    ph = find_phases(points([100, 900, 1000, 1000]), (0.0, 200.0))
    assert ph.window is None and "too short" in ph.reason


def test_dips_name_their_range() -> None:
    rates = [1000, 1000, 990, 1010, 400, 350, 1000, 1005, 995, 1000]
    ph = find_phases(points(rates), (100.0, 111.0))
    (dip,) = ph.dips
    assert (dip.start, dip.end, dip.intervals) == (104.0, 106.0, 2)
    assert dip.lowest == 350 and dip.mean == 375 and dip.drop == pytest.approx(1 - 375 / 1000)
    assert DIP_BELOW * dip.level > 400


def test_too_few_intervals() -> None:
    ph = find_phases(points([100, 200]), (100.0, 103.0))
    assert ph.window is None and "at least 4" in ph.reason


# ------------------------------------------------------------------------------- the load of a bundle


def test_v1_manifest_load_is_upgraded() -> None:
    m = parse_manifest(json.dumps({"schema": "profiler.bundle", "version": 1,
                                   "load": {"argv": ["sysbench"], "exit_code": 0, "log": "load.log", "started": 5.0}}))
    assert m.load is not None and (m.load.source, m.load.start_from, m.load.times) == ("run", "spawn", None)


def test_load_member_names_stay_inside() -> None:
    from profiler.errors import BundleError

    with pytest.raises(BundleError, match="outside"):
        parse_manifest(json.dumps({"schema": "profiler.bundle", "version": 2, "load": {"times": "../t.csv"}}))


def _log(name: str, info: LoadInfo | None = None) -> LoadLog:
    with open(DATA / name, encoding="utf-8") as fh:
        return LoadLog(info=info or LoadInfo(argv=["x"], log=members.LOAD_LOG), parsed=parse_lines(fh))


def _manifest() -> Manifest:
    return Manifest(clock=ClockInfo(monotonic_start=100.0, wall_start=1.8e9, offset=1.8e9 - 100.0), ended=130.0)


def test_unrecognised_tool_keeps_the_log_and_says_so() -> None:
    la = analyze_load(_log("unrecognised-stress-ng-metrics.txt"), _manifest())
    assert la.status == "unrecognised" and la.tool is None
    assert la.why is not None and "not recognised" in la.why and "load.log" in la.why
    d = la.to_dict()
    assert d["series"] == [] and d["unknown_lines"] == 6


def test_failed_load_says_why() -> None:
    la = analyze_load(_log("sysbench-connect-failed-fatal.txt", LoadInfo(argv=["sysbench"], exit_code=1,
                                                                            log=members.LOAD_LOG)), _manifest())
    assert la.status == "no-figures" and la.why is not None and "FATAL: unable to connect" in la.why
    assert la.notes[0] == "the load exited with code 1"


def test_summary_only_load_gives_its_rate_and_work() -> None:
    info = LoadInfo(argv=["sysbench"], log=members.LOAD_LOG, started=105.0, ended=125.0)
    la = analyze_load(_log("sysbench-summary-only.txt", info), _manifest())
    assert la.status == "ok" and la.tps == 905.23 and la.tps_from == "summary"
    assert la.transactions(100.0, 130.0) == pytest.approx((905.23 * 20.0, 20.0))
    assert any("--report-interval=1" in n for n in la.notes)


def test_per_transaction_figures() -> None:
    from profiler.analyzers.verdict.model import TargetMetrics

    info = LoadInfo(argv=["sysbench"], log=members.LOAD_LOG, started=100.0)
    la = analyze_load(LoadLog(info=info, parsed=parse_lines(sysbench_lines([1000.0] * 10))), _manifest())
    assert la.tps == pytest.approx(1000.0)
    tm = TargetMetrics.from_flat(pid=7, comm="mariadbd", cpu_cores=1.5,
                                 read_bps=2_000_000.0, write_bps=1_000_000.0, vcsw_rate=3000.0, ivcsw_rate=500.0)
    (pt,) = per_transaction(la, [tm], {7: 5000}, 10.0)
    assert (pt.cpu_ms, pt.io_bytes, pt.ctx_switches, pt.ios) == pytest.approx((1.5, 3000.0, 3.5, 0.5))


# ------------------------------------------------------------------------------- a real run


def test_real_run_bundle_reads_its_load() -> None:
    b = Bundle.open(RUN)
    log = read_load(b)
    assert log is not None and log.info.source == "run" and log.info.times == members.LOAD_TIMES
    assert log.parsed.tool == "sysbench" and len(log.parsed.intervals) == 7
    # every report line was timed as it arrived, one a second
    ends = [log.line_times[iv.line] for iv in log.parsed.intervals]
    assert all(0.8 < b2 - b1 < 1.2 for b1, b2 in zip(ends, ends[1:], strict=False))
    assert log.info.started is not None and 0.7 < ends[0] - log.info.started < 1.3


def test_real_run_analysis_windows_the_verdict() -> None:
    a = analyze(Bundle.open(RUN))
    la = a.load
    assert la is not None and la.placement.how == "the time each report line was read"
    win = la.phases.window
    assert win is not None and la.phases.warmup_intervals == 3
    # the verdict's metrics cover the window only; the timeline the whole capture
    assert a.metrics.window == pytest.approx(win[1] - win[0], abs=0.6)
    assert a.timeline.t[-1] + a.timeline.step > win[1] - win[0] + 2
    d = a.to_dict()["load"]
    assert d["summary"]["tps"] == 15260.31 and d["summary"]["window"]["used"]
    s = d["series"]
    assert len(s) == 7 and s[0]["tps"] == 10971.08 and s[0]["p95_ms"] == 0.28 and s[0]["dt"] == 1.0
    assert all(0 < p["t"] < 12 for p in s)
    mean = sum(p["tps"] for p in s) / len(s)
    assert abs(mean / d["summary"]["tps"] - 1) < 0.05
    assert {m.kind for m in a.timeline.marks} == {"warmup", "dip"}
    assert {"load_tps", "load_latency"} <= set(a.timeline.panels)
    assert d["per_transaction"][0]["cpu_ms"] > 0


def test_real_run_reports_show_the_load() -> None:
    a = analyze(Bundle.open(RUN))
    html = report_html.RENDERER.render(a)
    assert 'id="load"' in html and "Throughput (sysbench)" in html and "Latency p95 (sysbench)" in html
    assert "warm-up (left out of the verdict)" in html
    text = report_text.RENDERER.render(a)
    assert "load: verdict window" in text and "warm-up: the first 3 intervals" in text


def test_window_cut_keeps_only_the_window() -> None:
    v = read_views(Bundle.open(RUN))
    assert v.proc is not None and v.proc.t0 is not None and v.proc.t1 is not None
    lo, hi = v.proc.t0 + 3.0, v.proc.t0 + 6.0
    c = cut(v, lo, hi)
    assert c.proc is not None and c.proc.t0 is not None and c.proc.t1 is not None
    assert lo <= c.proc.t0 and c.proc.t1 <= hi
    assert v.proc.t0 < lo  # the original is untouched
    rec = v.manifest.collector("perf-stat")
    assert c.stat is not None and rec is not None and rec.started is not None
    for t, _ in c.stat.events.values():
        assert all(lo < rec.started + x <= hi for x in t)


def test_diff_of_two_runs_is_per_transaction(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "other"
    shutil.copytree(RUN, other)
    assert main(["diff", str(RUN), str(other), "-o", str(tmp_path / "d.svg")]) == 0
    err = capsys.readouterr().err
    assert "per 1,000 transactions" in err and "(+0%)" in err
    assert "normalised by throughput" in (tmp_path / "d.svg").read_text()
