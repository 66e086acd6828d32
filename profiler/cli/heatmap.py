"""`profiler heatmap`: IO latency heatmap from a bundle, block tracepoints, or time/latency pairs (CLI layer)."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np
import typer

from profiler.analyzers.io import heatmap
from profiler.analyzers.io import pairing as blockio
from profiler.analyzers.io import stats as iostats
from profiler.analyzers.stacks import subsecond
from profiler.bundle import Bundle, looks_like_bundle, members
from profiler.cli._common import check_output
from profiler.errors import BundleError, CapabilityError, InputError, UsageError
from profiler.renderers import heatmap_svg

HELP = """Draw an IO latency heatmap (SVG) or print its matrix as JSON.

INPUT is a capture bundle, a perf.data of block:block_rq_issue/complete (perf script is run),
perf script or ftrace text of those tracepoints (plain or .gz), or the two-column
`time latency` text that HeatMap's trace2heatmap.pl reads. With --cpu: the sub-second offset
heatmap of a bundle's CPU samples (or of perf script text / perf.data of cpu-clock samples).

**Examples**

    profiler heatmap cap/ -o io.svg --by op --log

    perf record -a -e block:block_rq_issue,block:block_rq_complete -- sleep 30; profiler heatmap perf.data -o io.svg

    profiler heatmap biosnoop.txt --units-time s --units-latency ms -o io.svg

    profiler heatmap cap/ --json | jq .totals

    profiler heatmap cap/ --cpu -o cpu-subsecond.svg
"""

BY = ("none", "op", "device", "issuer", "comm")
PERF_FIELDS = "comm,tid,time,event,trace"  # no cpu: per-task recordings may lack it


def _progress(msg: str) -> None:
    if sys.stderr.isatty():
        sys.stderr.write("\r" + msg[:100].ljust(100))
        sys.stderr.flush()


def _done_progress() -> None:
    if sys.stderr.isatty():
        sys.stderr.write("\r" + " " * 100 + "\r")
        sys.stderr.flush()


def _is_perf_data(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(8) == b"PERFILE2"
    except OSError:
        return False


def _perf_script(path: Path, fields: str | None) -> subprocess.Popen[bytes]:
    perf = shutil.which("perf")
    if not perf:
        raise CapabilityError("perf is not installed: cannot read perf.data (pass `perf script` text instead)")
    argv = [perf, "script", "-i", str(path)]
    if fields:
        argv += ["-F", fields]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _pipe_chunks(proc: subprocess.Popen[bytes], size: int = 2 << 20) -> Iterator[bytes]:
    assert proc.stdout is not None
    yield from blockio.iter_chunks(proc.stdout, size)


def _finish(proc: subprocess.Popen[bytes], path: Path) -> None:
    err = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
    rc = proc.wait()
    if rc != 0:
        last = [ln for ln in err.splitlines() if ln.strip()]
        raise InputError(f"perf script -i {path} failed: {last[-1] if last else f'exit {rc}'}")


def _open_text(input: str) -> tuple[IO[bytes], str]:
    if input == "-":
        return sys.stdin.buffer, "stdin"
    p = Path(input)
    if not p.exists():
        raise InputError(f"no such file: {p}")
    return blockio.open_input(p), p.name


def _sniff(fh: IO[bytes]) -> tuple[bytes, IO[bytes]]:
    """Peek at the start of a stream without losing it."""
    head = fh.read(1 << 16)
    rest = io.BufferedReader(_Concat(head, fh))
    return head, rest


class _Concat(io.RawIOBase):
    def __init__(self, head: bytes, fh: IO[bytes]) -> None:
        self.head = head
        self.fh = fh

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        if self.head:
            n = min(len(b), len(self.head))
            b[:n] = self.head[:n]
            self.head = self.head[n:]
            return n
        data = self.fh.read(len(b))
        n = len(data)
        b[:n] = data
        return n


class _Source:
    """What the input turned out to be."""

    def __init__(self) -> None:
        self.kind = ""  # block | pairs | cpu
        self.name = ""
        self.bio: blockio.BlockIO | None = None
        self.bundle: Bundle | None = None
        self.pairs: heatmap.Pairs | None = None
        self.samples: subsecond.SampleTimes | None = None


def _read_block(chunks: Iterator[bytes], name: str) -> blockio.BlockIO:
    p = blockio.BlockPairer()
    last = time.monotonic()
    for chunk in chunks:
        p.feed(chunk)
        if time.monotonic() - last > 0.5:
            _progress(f"reading {name}: {p.counts.events} block events, {p.counts.paired} IOs paired")
            last = time.monotonic()
    _done_progress()
    return p.finish()


def _load(input: str, *, cpu: bool, units_time: str, units_latency: str) -> _Source:
    src = _Source()
    path = Path(input)
    if input != "-" and path.is_dir():
        if not looks_like_bundle(path):
            raise BundleError(f"{path} is a directory but not a capture bundle (no manifest.json)")
        b = Bundle.open(path)
        src.bundle, src.name = b, str(path)
        if cpu:
            if not b.has(members.CPU_STACKS):
                raise BundleError(f"{path} holds no cpu.perf.txt.gz (cpu-stacks collector: {_status(b, 'cpu-stacks')})")
            src.kind = "cpu"
            with b.open_binary(members.CPU_STACKS) as fh:
                src.samples = subsecond.parse_sample_times(io.TextIOWrapper(fh, encoding="utf-8", errors="replace"))
            return src
        if not b.has(iostats.BLOCK_MEMBER):
            raise BundleError(f"{path} holds no {iostats.BLOCK_MEMBER} (block-io collector: {_status(b, 'block-io')})")
        src.kind = "block"
        with b.open_binary(iostats.BLOCK_MEMBER) as fh:
            src.bio = _read_block(blockio.iter_chunks(fh), iostats.BLOCK_MEMBER)
        src.bio.warnings.extend(b.warnings)
        return src
    if input != "-" and path.is_file() and _is_perf_data(path):
        src.name = path.name
        if not cpu:
            try:  # block events straight from the file: no perf script, no text
                src.kind = "block"
                src.bio = blockio.read_perf_data(path)
            except blockio.PerfDataUnsupported:
                src.bio = None
            else:
                if src.bio.counts.events == 0:
                    raise InputError(f"{path} holds no block:block_rq_issue/complete events")
                return src
        proc = _perf_script(path, None if cpu else PERF_FIELDS)
        try:
            if cpu:
                src.kind = "cpu"
                assert proc.stdout is not None
                src.samples = subsecond.parse_sample_times(io.TextIOWrapper(proc.stdout, encoding="utf-8", errors="replace"))
            else:
                src.kind = "block"
                src.bio = _read_block(_pipe_chunks(proc), path.name)
        finally:
            if proc.poll() is None and proc.stdout is not None:
                proc.stdout.close()
        _finish(proc, path)
        if src.kind == "block" and src.bio is not None and src.bio.counts.events == 0:
            raise InputError(f"{path} holds no block:block_rq_issue/complete events")
        return src
    fh, src.name = _open_text(input)
    with fh:
        head, stream = _sniff(fh)
        if cpu:
            src.kind = "cpu"
            src.samples = subsecond.parse_sample_times(io.TextIOWrapper(stream, encoding="utf-8", errors="replace"))
            if not len(src.samples.t):
                raise InputError(f"{src.name}: no perf script samples with times found")
            return src
        if b"block_rq_" in head:
            src.kind = "block"
            src.bio = _read_block(blockio.iter_chunks(stream), src.name)
            return src
        if heatmap.looks_like_pairs(head):
            src.kind = "pairs"
            src.pairs = heatmap.parse_pairs(blockio.iter_chunks(stream), units_time=units_time, units_latency=units_latency)
            return src
    raise InputError(
        f"{src.name}: not a block trace (no block_rq_ events), nor 'time latency' pairs, nor a bundle or perf.data"
    )


def _status(b: Bundle, name: str) -> str:
    rec = b.manifest.collector(name)
    if rec is None:
        return "not run"
    return rec.status + (f", {rec.reason}" if rec.reason else "")


def command(
    input: str = typer.Argument(..., help="A bundle, perf.data / perf script of block tracepoints, ftrace text, 'time latency' pairs, or - for stdin."),
    output: Path = typer.Option(None, "--output", "-o", help="Output file (.svg, or .json for the matrix). Default: SVG on stdout."),
    as_json: bool = typer.Option(False, "--json", help="Print the matrix, its axes and the totals as JSON on stdout."),
    by: str = typer.Option("none", "--by", help="One panel per: none, op, device, issuer (target / kernel / other), comm."),
    log: bool = typer.Option(False, "--log", help="Log-scale latency axis (rows evenly spaced in log10)."),
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
    force: bool = typer.Option(False, "--force", help="Overwrite the output file."),
) -> None:
    if by not in BY:
        raise UsageError(f"--by {by!r}: use one of {', '.join(BY)}")
    if colour not in heatmap_svg.COLOUR_SCALES:
        raise UsageError(f"--colour {colour!r}: use one of {', '.join(heatmap_svg.COLOUR_SCALES)}")
    if rows < 1 or rows > 2000:
        raise UsageError("--rows must be between 1 and 2000")
    for unit in (units_time, units_latency):
        if unit not in heatmap.TIME_UNITS:
            raise UsageError(f"unknown unit {unit!r}: use s, ms, us or ns")
    if output is not None:
        check_output(output, force)
    lat_f = heatmap.TIME_UNITS[units_latency]
    src = _load(input, cpu=cpu, units_time=units_time, units_latency=units_latency)

    if src.kind == "cpu":
        assert src.samples is not None
        t0 = subsecond.capture_origin(src.bundle, src.samples.t) if src.bundle else None
        h = subsecond.subsecond_heatmap(src.samples.t, rows=rows, t0=t0)
        doc: dict[str, Any] = {"kind": "cpu-subsecond", "input": src.name, **h.to_json()}
        svg_text = heatmap_svg.render_subsecond(
            h, title=title or "CPU samples: sub-second offset heatmap",
            subtitle=f"{src.name}: {h.total} samples over {h.ncols} s", source=input if src.bundle else "BUNDLE",
        )
        _emit(doc, svg_text, output, as_json)
        return

    kw: dict[str, Any] = {
        "rows": rows, "log": log, "step": step_sec, "max_cols": max_col,
        "min_lat": min_lat * lat_f if min_lat is not None else None,
        "max_lat": max_lat * lat_f if max_lat is not None else None,
        "step_lat": step_lat * lat_f if step_lat is not None else None,
    }
    totals: dict[str, Any]
    extra: dict[str, Any] = {}
    if src.kind == "pairs":
        assert src.pairs is not None
        t, lat = src.pairs.t, src.pairs.lat
        if not len(t):
            raise InputError(f"{src.name}: no time/latency pairs")
        if by != "none":
            raise UsageError("--by needs block events: 'time latency' pairs carry no op, device or issuer")
        groups = {"all": np.ones(len(t), bool)}
        totals = {"ios": len(t), "skipped_lines": src.pairs.skipped_lines}
        subtitle = f"{src.name}: {len(t)} IOs"
    else:
        bio = src.bio
        assert bio is not None
        if not len(bio.ios):
            raise InputError(f"{src.name}: no issue/completion pairs found ({bio.counts.events} block events)")
        t, lat = bio.ios["t_complete"], bio.ios["latency"]
        tids, comms = iostats.targets_of(src.bundle.manifest) if src.bundle else ((), ())
        if by == "none":
            groups = {"all IOs": np.ones(len(t), bool)}
        elif by == "comm":
            groups = _top_comms(bio)
        else:
            groups = iostats.split(bio, by, target_tids=tids, target_comms=comms)
        c = bio.counts
        totals = {"paired": c.paired, "unpaired_issues": c.unpaired_issues, "unpaired_completions": c.unpaired_completions,
                  "requeues": c.requeues, "merges": c.merges, "dataless_completions": c.dataless_completions,
                  "lost_events": c.lost_events}
        if as_json or (output is not None and output.suffix == ".json"):
            analysis = iostats.analyze_io(bio, target_tids=tids, target_comms=comms)
            extra = {"counts": c.to_json(), "overall": analysis.overall, "by_op": analysis.by_op,
                     "by_device": analysis.by_device, "by_issuer": analysis.by_issuer, "warnings": bio.warnings}
        p50, p99 = np.percentile(lat, [50, 99])
        kw["t0"] = bio.t_first
        subtitle = f"{src.name}: {c.paired} IOs, p50 {_lat(float(p50))}, p99 {_lat(float(p99))}, max {_lat(float(lat.max()))}"
        for w in bio.warnings:
            typer.echo(f"profiler: warning: {w}", err=True)
    panels = heatmap.panels(t, lat, groups, **kw)
    doc = {
        "kind": "io-latency", "input": src.name, "source": src.kind, "totals": totals,
        "panels": [p.to_json() for p in panels], **extra,
    }
    short = {"paired": totals.get("paired", totals.get("ios")), "unpaired issues": totals.get("unpaired_issues", 0),
             "unpaired completions": totals.get("unpaired_completions", 0)}
    if totals.get("lost_events"):
        short["lost events"] = totals["lost_events"]
    svg_text = heatmap_svg.render(panels, title=title or "Block IO latency heatmap", subtitle=subtitle, colour=colour,
                                  totals=short)
    _emit(doc, svg_text, output, as_json)


def _lat(v: float | None) -> str:
    return "-" if v is None else heatmap_svg.fmt_latency(v)


def _top_comms(bio: blockio.BlockIO, n: int = 6) -> dict[str, np.ndarray]:
    ids, counts = np.unique(bio.ios["comm"], return_counts=True)
    top = ids[np.argsort(-counts, kind="stable")][:n]
    groups = {(bio.comms[int(i)] or "?"): bio.ios["comm"] == i for i in top}
    rest = ~np.isin(bio.ios["comm"], top)
    if rest.any():
        groups["(others)"] = rest
    return groups


def _emit(doc: dict[str, Any], svg_text: str, output: Path | None, as_json: bool) -> None:
    text = json.dumps(doc, sort_keys=True, allow_nan=False, default=_jsonable)
    if output is not None:
        data = text + "\n" if output.suffix == ".json" else svg_text
        tmp = output.with_name(f".{output.name}.tmp")
        try:
            tmp.write_text(data, encoding="utf-8")
            os.replace(tmp, output)
        except OSError as exc:
            raise UsageError(f"cannot write {output}: {exc.strerror or exc}") from None
    if as_json:
        typer.echo(text)
    elif output is None:
        sys.stdout.write(svg_text)
        sys.stdout.flush()


def _jsonable(o: Any) -> Any:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return None if np.isnan(o) else float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON-serialisable: {type(o).__name__}")


def register(app: typer.Typer) -> None:
    app.command("heatmap", help=HELP)(command)
