"""`profiler heatmap`: IO latency heatmap from a bundle, block tracepoints, or time/latency pairs (CLI layer)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from profiler.cli._common import check_output, write_output
from profiler.cli._progress import Bars
from profiler.errors import UsageError

HELP = """Draw an IO latency heatmap (SVG) or print its matrix as JSON.

INPUT is a capture bundle, a perf.data of block:block_rq_issue/complete (read directly, or
through perf script), perf script or ftrace text of those tracepoints (plain or .gz), or the
two-column `time latency` text that HeatMap's trace2heatmap.pl reads. With --cpu: the
sub-second offset heatmap of a bundle's CPU samples (or of perf script text / perf.data of
cpu-clock samples).

**Examples**

    profiler heatmap cap/ -o io.svg --by op --log

    perf record -a -e block:block_rq_issue,block:block_rq_complete -- sleep 30; profiler heatmap perf.data -o io.svg

    profiler heatmap biosnoop.txt --units-time s --units-latency ms -o io.svg

    profiler heatmap cap/ --json | jq .totals

    profiler heatmap cap/ --cpu -o cpu-subsecond.svg
"""


def command(
    input: str = typer.Argument(..., help="A bundle, perf.data / perf script of block tracepoints, ftrace text, 'time latency' pairs, or - for stdin."),
    output: Path = typer.Option(None, "--output", "-o", help="Output file (.svg, or .json for the matrix). Default: SVG on stdout."),
    as_json: bool = typer.Option(False, "--json", help="Print the matrix, its axes and the totals as JSON on stdout."),
    by: str = typer.Option("none", "--by", help="One panel per: none, op, device, issuer (target / kernel / other), comm."),
    log: bool = typer.Option(None, "--log/--linear", help="Latency axis: log (the default: rows evenly spaced in log10, readable whatever the spread) or linear (HeatMap's; what --step-lat implies)."),
    colour: str = typer.Option("log", "--colour", "--color", help="Colour scale: log (default), quantile, or linear (HeatMap's)."),
    rows: int = typer.Option(50, "--rows", help="Latency rows (HeatMap: --rows)."),
    step_sec: float = typer.Option(None, "--step-sec", "--stepsec", help="Seconds per column (default: a round step giving <= 240 columns)."),
    step_lat: float = typer.Option(None, "--step-lat", "--steplat", help="Row height in latency units, instead of --rows (linear axis)."),
    min_lat: float = typer.Option(None, "--min-lat", "--minlat", help="Lowest latency row, in latency units."),
    max_lat: float = typer.Option(None, "--max-lat", "--maxlat", help="Highest latency row, in latency units (slower IOs count in the top row)."),
    max_col: int = typer.Option(None, "--max-col", "--maxcol", help="At most this many columns (later IOs count in the last)."),
    units_time: str = typer.Option("s", "--units-time", "--unitstime", help="Pairs input: unit of the time column (s, ms, us, ns)."),
    units_latency: str = typer.Option("us", "--units-latency", "--unitslatency", help="Unit of the latency column (pairs) and of --min/--max/--step-lat (s, ms, us, ns)."),
    title: str = typer.Option(None, "--title", help="Title text."),
    cpu: bool = typer.Option(False, "--cpu", help="Sub-second offset heatmap of CPU samples instead (FlameScope-style)."),
    force: bool = typer.Option(False, "--force", "-f", help="Overwrite the output file."),
) -> None:
    from profiler.inputs.pairs import TIME_UNITS
    from profiler.renderers import heatmap_svg
    from profiler.usecases.heatmap import BY, HeatmapRequest, heatmap

    if by not in BY:
        raise UsageError(f"--by {by!r}: use one of {', '.join(BY)}")
    if colour not in heatmap_svg.COLOUR_SCALES:
        raise UsageError(f"--colour {colour!r}: use one of {', '.join(heatmap_svg.COLOUR_SCALES)}")
    if rows < 1 or rows > 2000:
        raise UsageError("--rows must be between 1 and 2000")
    for unit in (units_time, units_latency):
        if unit not in TIME_UNITS:
            raise UsageError(f"unknown unit {unit!r}: use s, ms, us or ns")
    if output is not None:
        check_output(output, force)
    if log and step_lat is not None:
        raise UsageError("--step-lat is a row height on a linear axis: give --linear, or --rows with --log")
    log = step_lat is None if log is None else log
    lat_f = TIME_UNITS[units_latency]
    opts = HeatmapRequest(
        cpu=cpu, by=by, log=log, colour=colour, rows=rows, step_sec=step_sec, max_col=max_col,
        step_lat=step_lat * lat_f if step_lat is not None else None,
        min_lat=min_lat * lat_f if min_lat is not None else None,
        max_lat=max_lat * lat_f if max_lat is not None else None,
        units_time=units_time, units_latency=units_latency, title=title,
        analysis=as_json or (output is not None and output.suffix == ".json"),
    )
    progress = Bars()
    try:
        result = heatmap(input, opts, progress=progress)
    finally:
        progress.done()
    for w in result.warnings:
        progress.warn(w)
    text = json.dumps(result.doc, sort_keys=True, allow_nan=False, default=_jsonable)
    if output is not None:
        write_output(text + "\n" if output.suffix == ".json" else result.svg, output, force)
    if as_json:
        typer.echo(text)
    elif output is None:
        write_output(result.svg, None, force)


def _jsonable(o: Any) -> Any:
    import numpy as np

    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return None if np.isnan(o) else float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON-serialisable: {type(o).__name__}")


def register(app: typer.Typer) -> None:
    app.command("heatmap", help=HELP)(command)
