"""An IO latency heatmap, or the sub-second heatmap of CPU samples (usecases layer).

IO latency from block events or `time latency` pairs.

Composes the block readers of profiler.inputs (bundle member, perf.data read directly or
through `perf script`, ftrace / perf script text, HeatMap pairs), pairing and the IO
statistics, the heatmap model and its SVG renderer. Returns the JSON document and the SVG;
printing them is the CLI's.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from profiler.analyzers.io import heatmap as hm
from profiler.analyzers.io import hist_heatmap, pairing, stats
from profiler.analyzers.stacks import subsecond
from profiler.bundle import Bundle, members
from profiler.errors import BundleError, InputError, UsageError
from profiler.inputs import (
    Format,
    Source,
    biosnoop,
    blocktrace,
    bundles,
    detect,
    pairs,
    perfdata,
    perfscript,
)
from profiler.inputs.perfdata_blocks import PerfDataUnsupported
from profiler.progress import Progress
from profiler.renderers import heatmap_svg

BY = ("none", "op", "device", "issuer", "comm")
PERF_FIELDS = "comm,tid,time,event,trace"  # what block parsing reads; no cpu: per-task recordings may lack it


@dataclass
class HeatmapRequest:
    """What to draw. Latencies (min/max/step) are in seconds; the units only say how to read pairs."""

    cpu: bool = False  # the sub-second heatmap of CPU samples instead
    by: str = "none"
    log: bool = True  # a log latency axis (linear squashes most IOs into the bottom row)
    colour: str = "log"
    rows: int = 50
    step_sec: float | None = None
    step_lat: float | None = None
    min_lat: float | None = None
    max_lat: float | None = None
    max_col: int | None = None
    units_time: str = "s"
    units_latency: str = "us"
    title: str | None = None
    analysis: bool = False  # add the IO statistics to the document (JSON output)


@dataclass
class HeatmapResult:
    doc: dict[str, Any]  # the matrix, its axes and totals (what --json prints)
    svg: str
    warnings: list[str] = field(default_factory=list)


class _Ticker:
    """Calls ``progress`` at most every half second."""

    def __init__(self, progress: Progress | None) -> None:
        self.progress = progress
        self.last = time.monotonic()

    def pairer(self, name: str) -> Callable[[pairing.BlockPairer], None] | None:
        if self.progress is None:
            return None
        progress = self.progress

        def tick(p: pairing.BlockPairer) -> None:
            progress(f"pairing block IO of {name}", p.counts.events, None, "events")

        return tick


@dataclass
class _Request:
    """One heatmap input being read."""

    input: str  # as the user gave it
    name: str  # as messages name it
    src: Source
    bundle: Bundle | None
    opts: HeatmapRequest
    ticker: _Ticker


def heatmap(input: str, opts: HeatmapRequest, *, progress: Progress | None = None, stdin: IO[bytes] | None = None) -> HeatmapResult:
    """`profiler heatmap`: one input -> the heatmap document and SVG. The input's format picks its
    reader in LATENCY_READERS (or, with ``opts.cpu``, TIMES_READERS)."""
    readers: dict[Format, Any] = TIMES_READERS if opts.cpu else LATENCY_READERS
    src = detect(input, tuple(readers), stdin=stdin)
    bundle = src.bundle() if src.format.directory else None
    name = str(Path(input)) if bundle is not None else src.path.name if src.path is not None else src.name
    req = _Request(input, name, src, bundle, opts, _Ticker(progress))
    if opts.cpu:
        return _cpu(req, TIMES_READERS[src.format](req))
    return LATENCY_READERS[src.format](req)


def _warnings_of(src: Source, bundle: Bundle | None) -> list[str]:
    """What reading the input tolerated (a bundle's members, or the file), one line each."""
    if bundle is not None:
        return bundle.read_warnings() + bundle.warnings
    summary = src.log.summary()
    return [summary] if summary is not None else []


def _text(fh: IO[bytes]) -> IO[str]:
    return io.TextIOWrapper(fh, encoding="utf-8", errors="replace", newline="\n")


# --------------------------------------------------------------------------- CPU sample times


def _bundle_times(req: _Request) -> subsecond.SampleTimes:
    from profiler.analyzers import views  # the analysis's readers: only for a bundle

    assert req.bundle is not None
    st = views.read_cpu_times(req.bundle)
    if st is None:
        raise BundleError(f"{req.name} holds no {members.CPU_STACKS} (cpu-stacks collector: "
                          f"{bundles.collector_status(req.bundle, 'cpu-stacks')})")
    return st


def _perf_data_times(req: _Request) -> subsecond.SampleTimes:
    src = req.src
    return perfdata.read_perf_script(src.file, lambda out: subsecond.parse_sample_times(_text(out)),
                                     name=src.name + src.damage())


def _perf_script_times(req: _Request) -> subsecond.SampleTimes:
    src = req.src
    with src.open() as fh:
        st = subsecond.parse_sample_times(_text(fh), src.log)
    if not len(st.t):
        raise InputError(f"{req.name}: no perf script samples with times found{src.damage()}")
    return st


def _cpu(req: _Request, st: subsecond.SampleTimes) -> HeatmapResult:
    src, bundle, name, opts = req.src, req.bundle, req.name, req.opts
    warnings = _warnings_of(src, bundle)
    if not len(st.t):
        raise InputError(f"{name}: no CPU samples with times" + (f" (read: {'; '.join(warnings)})" if warnings else ""))
    t0 = subsecond.capture_origin(bundle, st.t) if bundle is not None else None
    h = subsecond.subsecond_heatmap(st.t, rows=opts.rows, t0=t0)
    if h.note:
        warnings.append(h.note)
    doc: dict[str, Any] = {"kind": "cpu-subsecond", "input": name, **h.to_json(), "warnings": warnings}
    svg = heatmap_svg.SUBSECOND.render(h, heatmap_svg.HeatmapOptions(
        title=opts.title, subtitle=f"{name}: {h.total} samples over {h.ncols * h.step:,.0f} s",
        source=req.input if bundle is not None else "BUNDLE",
    ))
    return HeatmapResult(doc, svg, warnings=warnings)


# --------------------------------------------------------------------------- IO latency


def _bundle_latency(req: _Request) -> HeatmapResult:
    from profiler.analyzers import views  # the analysis's readers: only for a bundle

    bundle = req.bundle
    assert bundle is not None
    if views.block_member(bundle) is None and bundle.has(members.BLOCK_HIST):
        return _bcc_hist(bundle, req.name, req.opts)
    bio = views.read_block_trace(bundle, req.ticker.pairer(views.block_member(bundle) or ""))
    if bio is None:
        raise BundleError(f"{req.name} holds no {members.BLOCK_EVENTS} or {members.BLOCK_TRACE} (block-io collector: "
                          f"{bundles.collector_status(bundle, 'block-io')})")
    bio.warnings.extend(_warnings_of(req.src, bundle))
    return _block(bio, bundle, req.name, req.opts)


def _perf_data_latency(req: _Request) -> HeatmapResult:
    src = req.src
    try:  # block events straight from the file: no perf script, no text
        bio = pairing.read_perf_data(str(src.file))
    except PerfDataUnsupported:
        bio = perfdata.read_perf_script(src.file, lambda out: pairing.pair_stream(out, req.ticker.pairer(req.name)),
                                        PERF_FIELDS, name=src.name + src.damage())
    if bio.counts.events == 0:
        raise InputError(f"{src.name} holds no block:block_rq_issue/complete events")
    return _block(bio, None, req.name, req.opts)


def _block_trace_latency(req: _Request) -> HeatmapResult:
    with req.src.open() as fh:
        bio = pairing.pair_stream(fh, req.ticker.pairer(req.name))
    bio.warnings.extend(_warnings_of(req.src, None))
    return _block(bio, None, req.name, req.opts)


def _lattice(opts: HeatmapRequest) -> dict[str, Any]:
    return {"rows": opts.rows, "log": opts.log, "step": opts.step_sec, "max_cols": opts.max_col,
            "min_lat": opts.min_lat, "max_lat": opts.max_lat, "step_lat": opts.step_lat}


def _pairs_latency(req: _Request) -> HeatmapResult:
    """HeatMap's `time latency` pairs, in the units --units-time and --units-latency say."""
    src, name, opts = req.src, req.name, req.opts
    p = pairs.read_source(src, units_time=opts.units_time, units_latency=opts.units_latency)
    if not len(p.t):
        raise InputError(f"{name}: no time/latency pairs{src.damage()}")
    if opts.by != "none":
        raise UsageError("--by needs block events: 'time latency' pairs carry no op, device or issuer")
    panels = hm.panels(p.t, p.lat, {"all": np.ones(len(p.t), bool)}, **_lattice(opts))
    totals: dict[str, Any] = {"ios": len(p.t), "skipped_lines": p.skipped_lines}
    doc = {"kind": "io-latency", "input": name, "source": "pairs", "totals": totals, "panels": [x.to_json() for x in panels]}
    short = {"paired": len(p.t), "unpaired issues": 0, "unpaired completions": 0}
    svg = heatmap_svg.LATENCY.render(hm.LatencyHeatmap(panels, subtitle=f"{name}: {len(p.t)} IOs", totals=short),
                                     heatmap_svg.HeatmapOptions(title=opts.title, colour=opts.colour))
    warnings = _warnings_of(src, None)
    doc["warnings"] = warnings
    return HeatmapResult(doc, svg, warnings=warnings)


def _biosnoop_latency(req: _Request) -> HeatmapResult:
    """bcc biosnoop's own output: one record per IO, latency in ms, time in s (no --units needed)."""
    src, name, opts = req.src, req.name, req.opts
    b = biosnoop.read_source(src)
    if not len(b.t):
        raise InputError(f"{name}: biosnoop output with no IO lines{src.damage()}")
    n = len(b.t)
    if opts.by == "none":
        groups = {"all IOs": np.ones(n, bool)}
    elif opts.by in ("op", "device", "comm"):
        keys = {"op": [{"R": "read", "W": "write"}.get(o, o) for o in b.op], "device": b.disk, "comm": b.comm}[opts.by]
        arr = np.asarray(keys, dtype=object)
        names, counts = np.unique(arr, return_counts=True)
        order = [str(x) for x in names[np.argsort(-counts, kind="stable")]]
        groups = {k: arr == k for k in order[:6]}
        if len(order) > 6:
            groups["(others)"] = ~np.isin(arr, order[:6])
    else:
        raise UsageError("--by issuer needs a capture bundle (it knows which processes are the targets); "
                         "biosnoop output can be split --by op, device or comm")
    t_complete = b.t  # biosnoop prints the completion time
    panels = hm.panels(t_complete, b.lat, groups, t0=0.0, **_lattice(opts))
    p50, p99 = np.percentile(b.lat, [50, 99])
    totals: dict[str, Any] = {"ios": n, "skipped_lines": b.skipped_lines}
    doc = {"kind": "io-latency", "input": name, "source": "biosnoop", "totals": totals,
           "panels": [x.to_json() for x in panels]}
    lat_s = hm.fmt_latency
    subtitle = (f"{name} (biosnoop): {n} IOs, p50 {lat_s(float(p50))}, p99 {lat_s(float(p99))}, "
                f"max {lat_s(float(b.lat.max()))}")
    svg = heatmap_svg.LATENCY.render(hm.LatencyHeatmap(panels, subtitle=subtitle, totals={"IOs": n}),
                                     heatmap_svg.HeatmapOptions(title=opts.title, colour=opts.colour))
    warnings = _warnings_of(src, None)
    doc["warnings"] = warnings
    return HeatmapResult(doc, svg, warnings=warnings)


def _bcc_hist(bundle: Bundle, name: str, opts: HeatmapRequest) -> HeatmapResult:
    """A bcc-backend bundle: its in-kernel latency histograms, one panel per op (as the report draws it)."""
    from profiler.analyzers import views  # the analysis's readers: only for a bundle

    if opts.by not in ("none", "op"):
        raise UsageError(f"--by {opts.by}: a bcc capture keeps latency histograms per device and op, not per IO; "
                         "use --by op (its panels) or capture with --backend perf")
    try:
        h = views.read_block_hist(bundle)  # its warnings join the bundle's
    except InputError as exc:  # no header line: nothing can be read
        raise InputError(f"{name}: {exc}" + (f" (read: {'; '.join(bundle.read_warnings())})"
                                              if bundle.read_warnings() else "")) from None
    assert h is not None
    model = hist_heatmap.from_hist(h)
    if model is None:
        raise InputError(f"{name}: {members.BLOCK_HIST} holds no IOs")
    doc = {"kind": "io-latency", "input": name, "source": "bcc histograms",
           "totals": {"ios": int(sum(s.count for s in h.slots))},
           "panels": [x.to_json() for x in model.panels]}
    svg = heatmap_svg.LATENCY.render(model, heatmap_svg.HeatmapOptions(title=opts.title, colour=opts.colour))
    warnings = bundle.read_warnings() + bundle.warnings
    doc["warnings"] = warnings
    return HeatmapResult(doc, svg, warnings=warnings)


def _block(bio: pairing.PairedIO, bundle: Bundle | None, name: str, opts: HeatmapRequest) -> HeatmapResult:
    if not len(bio.ios):
        read = f"; read: {'; '.join(bio.warnings)}" if bio.warnings else ""
        raise InputError(f"{name}: no issue/completion pairs found ({bio.counts.events} block events{read})")
    t, lat = bio.ios["t_complete"], bio.ios["latency"]
    tids, comms = stats.targets_of(bundle.manifest) if bundle is not None else ((), ())
    if opts.by == "none":
        groups = {"all IOs": np.ones(len(t), bool)}
    elif opts.by == "comm":
        groups = _top_comms(bio)
    else:
        groups = stats.split(bio, opts.by, target_tids=tids, target_comms=comms)
    c = bio.counts
    totals = {"paired": c.paired, "unpaired_issues": c.unpaired_issues, "unpaired_completions": c.unpaired_completions,
              "requeues": c.requeues, "merges": c.merges, "dataless_completions": c.dataless_completions,
              "lost_events": c.lost_events}
    extra: dict[str, Any] = {}
    if opts.analysis:
        a = stats.analyze_io(bio, target_tids=tids, target_comms=comms)
        extra = {"counts": c.to_json(), "overall": a.overall, "by_op": a.by_op, "by_device": a.by_device,
                 "by_issuer": a.by_issuer, "warnings": bio.warnings}
    p50, p99 = np.percentile(lat, [50, 99])
    panels = hm.panels(t, lat, groups, t0=bio.t_first, **_lattice(opts))
    doc = {"kind": "io-latency", "input": name, "source": "block", "totals": totals,
           "panels": [x.to_json() for x in panels], **extra, "warnings": bio.warnings}
    short = {"paired": c.paired, "unpaired issues": c.unpaired_issues, "unpaired completions": c.unpaired_completions}
    if c.lost_events:
        short["lost events"] = c.lost_events
    lat_s = hm.fmt_latency
    subtitle = f"{name}: {c.paired} IOs, p50 {lat_s(float(p50))}, p99 {lat_s(float(p99))}, max {lat_s(float(lat.max()))}"
    svg = heatmap_svg.LATENCY.render(hm.LatencyHeatmap(panels, subtitle=subtitle, totals=short),
                                     heatmap_svg.HeatmapOptions(title=opts.title, colour=opts.colour))
    return HeatmapResult(doc, svg, warnings=list(bio.warnings))


def _top_comms(bio: pairing.PairedIO, n: int = 6) -> dict[str, np.ndarray]:
    """The ``n`` task names that issued most IOs, one group each, and the rest together."""
    ids, counts = np.unique(bio.ios["comm"], return_counts=True)
    top = ids[np.argsort(-counts, kind="stable")][:n]
    groups = {(bio.comms[int(i)] or "?"): bio.ios["comm"] == i for i in top}
    rest = ~np.isin(bio.ios["comm"], top)
    if rest.any():
        groups["(others)"] = rest
    return groups


# How each input format gives the heatmap its data, in the order detection tries them
# (profiler/inputs/source.py: the first that claims the input's head wins).
# IO latency: block events (a bundle's member, perf.data, ftrace or perf script text), bcc
# biosnoop's output, HeatMap's `time latency` pairs.
LATENCY_READERS: dict[Format, Callable[[_Request], HeatmapResult]] = {
    bundles.FORMAT: _bundle_latency,
    perfdata.FORMAT: _perf_data_latency,
    blocktrace.FORMAT: _block_trace_latency,
    biosnoop.FORMAT: _biosnoop_latency,
    pairs.FORMAT: _pairs_latency,
}
# --cpu: timestamped CPU samples.
TIMES_READERS: dict[Format, Callable[[_Request], subsecond.SampleTimes]] = {
    bundles.FORMAT: _bundle_times,
    perfdata.FORMAT: _perf_data_times,
    perfscript.FORMAT: _perf_script_times,
}
