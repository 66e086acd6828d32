"""Benchmark of the IO heatmap path (bench layer, not part of the package).

Two steps, both run by hand as root on a quiet-ish machine:

    python bench/heatmap.py record --seconds 60 --dir /tmp/heatbench   # >= 1M IOs, ftrace + perf.data
    python bench/heatmap.py run --dir /tmp/heatbench [--repeat 3]

`record` runs fio (small random direct IOs on a file in the trace directory) plus a background
buffered writer with fsync (kernel writeback and jbd2 traffic), traced at once by a private
tracefs instance (the block.trace format of docs/bundle.md) and by `perf record` of the same
tracepoints (the perf.data / perf script path). Traces stay in that directory, never in the repo.

`run` prints, side by side, medians over interleaved repeats:
  - our parse, pairing and heatmap in IOs/s (wall clock and CPU time: the machine is shared),
    and memory per IO (peak RSS growth / IOs), for ftrace text, perf script text and perf.data
    read directly;
  - the whole path perf.data -> SVG (`profiler heatmap perf.data -o x.svg`, which reads the
    file directly) vs `perf script` alone;
  - a straightforward awk pairing script (the baseline the issue measured) on the same text.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

EVENTS = ("block_rq_complete", "block_rq_issue", "block_rq_requeue", "block_rq_merge")
TRACEFS = Path("/sys/kernel/tracing")

AWK_PAIRING = r"""
# Pair block_rq_issue with block_rq_complete by (device, sector); print "time latency" in us.
{
    for (i = 1; i <= NF; i++) if ($i ~ /block_rq_(issue|complete):$/) break
    if (i > NF) next
    ts = $(i - 1); sub(/:$/, "", ts)
    if ($i ~ /issue/) { start[$(i + 1), $(i + 5 + ($(i + 4) ~ /^\(/ ? 0 : 1))] = ts; next }
    key = $(i + 1) SUBSEP $(i + 4 + ($(i + 3) ~ /^\(/ ? 0 : 1))
    if (key in start) { printf "%.0f %.0f\n", ts * 1000000, (ts - start[key]) * 1000000; delete start[key]; n++ }
}
END { print n " paired" > "/dev/stderr" }
"""


def record(args: argparse.Namespace) -> int:
    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    inst = TRACEFS / "instances" / f"profiler-heat-{os.getpid()}"
    inst.mkdir()
    perf = None
    procs: list[subprocess.Popen[bytes]] = []
    try:
        (inst / "trace_clock").write_text("mono")
        (inst / "buffer_size_kb").write_text("32768")
        # Completion before issue: a capture then starts with orphan completions (harmless)
        # rather than issues whose completion was never traced.
        for ev in EVENTS:
            p = inst / "events" / "block" / ev / "enable"
            if p.exists():
                p.write_text("1")
        raw = out / "block.trace"
        stop = threading.Event()

        def pump() -> None:
            with open(inst / "trace_pipe", "rb", buffering=0) as src, open(raw, "wb") as dst:
                os.set_blocking(src.fileno(), False)
                while not stop.is_set():
                    try:
                        data = src.read(1 << 20)
                    except BlockingIOError:
                        data = None
                    if data:
                        dst.write(data)
                    else:
                        time.sleep(0.05)
                while True:  # drain
                    try:
                        data = src.read(1 << 20)
                    except BlockingIOError:
                        break
                    if not data:
                        break
                    dst.write(data)

        th = threading.Thread(target=pump)
        th.start()
        perf = subprocess.Popen(
            ["perf", "record", "-q", "-a", "-k", "CLOCK_MONOTONIC", "-m", "8M", "-o", str(out / "perf.data")]
            + [x for ev in EVENTS for x in ("-e", f"block:{ev}")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        time.sleep(1.0)
        data = out / "fio.dat"
        bg = subprocess.Popen(
            ["fio", "--name=bg", f"--filename={out / 'bg.dat'}", "--rw=write", "--bs=64k", "--size=256M",
             "--fsync=16", "--rate=8m", f"--runtime={args.seconds}", "--time_based", "--output=/dev/null"],
        )
        procs.append(bg)
        fg = subprocess.Popen(
            ["fio", "--name=fg", f"--filename={data}", "--size=512M", "--rw=randrw", "--rwmixread=70",
             "--bs=4k", "--direct=1", "--ioengine=libaio", "--iodepth=16", f"--runtime={args.seconds}",
             "--time_based", "--output=/dev/null"],
        )
        procs.append(fg)
        for proc in procs:
            proc.wait()
        time.sleep(1.0)
        perf.send_signal(2)
        perf.wait(timeout=60)
        stop.set()
        th.join()
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if perf is not None and perf.poll() is None:
            perf.kill()
            perf.wait()
        for ev in EVENTS:
            p = inst / "events" / "block" / ev / "enable"
            if p.exists():
                p.write_text("0")
        inst.rmdir()
        for name in ("fio.dat", "bg.dat"):
            (out / name).unlink(missing_ok=True)
    with open(out / "block.trace", "rb") as src, gzip.open(out / "block.trace.gz", "wb", compresslevel=1) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    with open(out / "perf.txt", "wb") as fh:
        subprocess.run(["perf", "script", "-i", str(out / "perf.data")], stdout=fh, stderr=subprocess.DEVNULL, check=True)
    lines = sum(1 for _ in open(out / "block.trace", "rb"))
    print(f"recorded {lines} ftrace lines and {out / 'perf.data'} in {out}")
    return 0


def _timed(argv: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t


def run(args: argparse.Namespace) -> int:
    d = Path(args.dir)
    py = sys.executable
    inner = Path(__file__).resolve()
    rows: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        rows.setdefault(name, []).append(value)

    svg = d / "bench.svg"
    for _ in range(args.repeat):
        add("perf script alone (s)", _timed(["perf", "script", "-i", str(d / "perf.data")]))
        add("perf.data -> SVG, profiler heatmap (s)",
            _timed([py, "-m", "profiler", "heatmap", str(d / "perf.data"), "-o", str(svg), "--force"]))
        for fmt, name in (("ftrace", "block.trace"), ("perf", "perf.txt"), ("perf.data", "perf.data")):
            res = subprocess.run([py, str(inner), "inner", str(d / name)], capture_output=True, text=True, check=True)
            for line in res.stdout.splitlines():
                key, _, val = line.partition("=")
                add(f"{fmt}: {key}", float(val))
        add("awk pairing of perf script text (s)", _timed(["awk", AWK_PAIRING, str(d / "perf.txt")]))
    print(f"{'measure':48s} {'median':>12s}   (runs; machine shared with other engineers)")
    for k, vals in rows.items():
        print(f"{k:48s} {statistics.median(vals):12.3f}   {' '.join(f'{x:.3f}' for x in vals)}")
    med = {k: statistics.median(v) for k, v in rows.items()}
    ios = med.get("perf: paired IOs", 0.0)
    whole = med["perf.data -> SVG, profiler heatmap (s)"] / med["perf script alone (s)"]
    print()
    print(f"whole path perf.data -> SVG / perf script alone: {whole:.2f}x wall (target <= 1.3x)")
    print(f"awk pairing: {ios / med['awk pairing of perf script text (s)']:.0f} IOs/s wall")
    for fmt in ("ftrace", "perf", "perf.data"):
        print(f"{fmt}: parse {med[f'{fmt}: parse IOs/s (wall)']:.0f} IOs/s wall, {med[f'{fmt}: parse IOs/s (cpu)']:.0f} cpu; "
              f"pairing+heatmap {med[f'{fmt}: pair+heatmap IOs/s (wall)']:.0f} IOs/s wall, "
              f"{med[f'{fmt}: pair+heatmap IOs/s (cpu)']:.0f} cpu (target >= 2M); "
              f"memory {med[f'{fmt}: bytes per IO']:.1f} B/IO (target < 100)")
    return 0


def inner(args: argparse.Namespace) -> int:
    """Measure in a fresh process so peak RSS belongs to this input alone."""
    import resource

    import numpy as np
    from profiler.analyzers.io import heatmap
    from profiler.analyzers.io import pairing as blockio

    from profiler.inputs import blocktrace, perfdata_blocks

    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    # Streaming path first (what the CLI runs): its peak RSS growth is the memory we report.
    direct = open(args.path, "rb").read(8) == b"PERFILE2"
    t, c = time.perf_counter(), time.process_time()
    bio = blockio.read_perf_data(args.path) if direct else blockio.read_block_trace(args.path)
    t_stream, c_stream = time.perf_counter() - t, time.process_time() - c
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    n = len(bio.ios)
    del bio
    t, c = time.perf_counter(), time.process_time()
    events = perfdata_blocks.read_block_events(args.path)[0] if direct else blocktrace.read_events(args.path)
    t_parse, c_parse = time.perf_counter() - t, time.process_time() - c
    t, c = time.perf_counter(), time.process_time()
    ios = blockio.pair_events(events, inplace=True).ios
    hm = heatmap.latency_heatmap(ios["t_complete"], ios["latency"], log=True)
    t_pair, c_pair = time.perf_counter() - t, time.process_time() - c
    assert int(hm.counts.sum()) == len(ios) == n
    print(f"paired IOs={n}")
    print(f"parse IOs/s (wall)={n / t_parse:.0f}")
    print(f"parse IOs/s (cpu)={n / c_parse:.0f}")
    print(f"pair+heatmap IOs/s (wall)={n / t_pair:.0f}")
    print(f"pair+heatmap IOs/s (cpu)={n / c_pair:.0f}")
    print(f"streaming parse+pair s (wall)={t_stream:.3f}")
    print(f"streaming parse+pair s (cpu)={c_stream:.3f}")
    print(f"bytes per IO={(peak - base) / max(n, 1):.1f}")
    _ = np
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--seconds", type=int, default=60)
    r.add_argument("--dir", default="/tmp/heatbench")
    b = sub.add_parser("run")
    b.add_argument("--dir", default="/tmp/heatbench")
    b.add_argument("--repeat", type=int, default=3)
    i = sub.add_parser("inner")
    i.add_argument("path")
    args = ap.parse_args()
    return {"record": record, "run": run, "inner": inner}[args.cmd](args)


if __name__ == "__main__":
    raise SystemExit(main())
