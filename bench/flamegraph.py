#!/usr/bin/env python3
"""Flame graph speed: ours against inferno and perf script, side by side (bench, not a test).

Prints medians of interleaved runs and their ratios for
  1. the whole path perf.data -> SVG: ours vs `perf script` alone and vs
     `perf script | inferno-collapse-perf | inferno-flamegraph` (goal: ours <= 1.2x perf script),
  2. folding perf script text: `profiler flamegraph X --folded` vs inferno-collapse-perf
     (its default threads, and one thread),
  3. drawing the SVG for >= 100K unique stacks: ours vs inferno-flamegraph on the same file,
plus CPU seconds and peak memory (max RSS) of each.

Input: a big perf.data you recorded from a real server, e.g. MariaDB under sysbench:

    perf record -F 999 -g -p $(pidof mariadbd) -o /tmp/big.data -- sleep 300

    python bench/flamegraph.py --perf-data /tmp/big.data [--reps 5]

or let the bench record one: it starts its own MariaDB (as bench/overhead.py does), drives it
with sysbench oltp_read_only and records mariadbd at 9999 Hz with call chains:

    sudo python bench/flamegraph.py --record 60 --perf-data /var/tmp/big.data

inferno (`cargo install inferno`, from crates.io) is looked for in ~/.cargo/bin and on PATH,
and installed with cargo when it is missing and cargo is there (``--no-install``: never); its
rows are left out when neither works. The perf script text is written next to the perf.data
(keep both out of the repository). The machine is usually shared: read ratios of medians, not
single timings, and the CPU columns (user + system of the whole process tree), which hardly
depend on the load.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROFILER = [str(Path(sys.executable).parent / "profiler")]
INFERNO = Path.home() / ".cargo" / "bin"


INPROC = """
import sys, time
t0 = time.perf_counter()
import profiler.cli
t1 = time.perf_counter()
from profiler.inputs.folded import parse_folded
from profiler.analyzers.stacks.flame import FlameGraph, build_tree
from profiler.renderers.flamegraph_svg import RENDERER
t2 = time.perf_counter()
with open(sys.argv[1]) as f:
    counts = parse_folded(f)
t3 = time.perf_counter()
root = build_tree(counts, min_fraction=0.1 / 1180)
t4 = time.perf_counter()
svg = RENDERER.render(FlameGraph(root))
t5 = time.perf_counter()
print(t3 - t2, t4 - t3, t5 - t4, t1 - t0)
"""


def timed(argv: list[str] | str, stdout: Path | None = None, shell: bool = False) -> tuple[float, int, float]:
    """Wall seconds, max RSS (KiB) and CPU seconds (user + system, children included) of one
    run. CPU time hardly depends on how busy the machine is; wall time does."""
    out = open(stdout, "wb") if stdout else subprocess.DEVNULL  # noqa: SIM115
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE, shell=shell)  # noqa: S603
    _, status, ru = os.wait4(proc.pid, 0)
    dt = time.perf_counter() - t0
    if stdout:
        out.close()  # type: ignore[union-attr]
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {argv}\n{err[-500:]}")
    return dt, ru.ru_maxrss, ru.ru_utime + ru.ru_stime


def bench(cases: dict[str, list[str] | str], reps: int, shell: set[str] | None = None) -> dict[str, tuple[float, int, float]]:
    """Run the cases interleaved (A B C A B C ...): median wall s, max RSS, median CPU s."""
    shell = shell or set()
    times: dict[str, list[float]] = {k: [] for k in cases}
    cpu: dict[str, list[float]] = {k: [] for k in cases}
    rss: dict[str, int] = dict.fromkeys(cases, 0)
    for _ in range(reps):
        for name, argv in cases.items():
            dt, m, c = timed(argv, shell=name in shell)
            times[name].append(dt)
            cpu[name].append(c)
            rss[name] = max(rss[name], m)
    return {k: (statistics.median(v), rss[k], statistics.median(cpu[k])) for k, v in times.items()}


def report(title: str, res: dict[str, tuple[float, int, float]], base: str, size_mb: float | None = None) -> None:
    print(f"\n## {title}")
    print(f"{'':42} {'median s':>9} {'x ' + base[:14]:>16} {'MB/s':>8} {'CPU s':>7} {'CPU x':>6} {'max RSS MB':>11}")
    b = res[base][0]
    bc = res[base][2] or 1e-9
    for name, (t, m, c) in res.items():
        rate = f"{size_mb / t:8.0f}" if size_mb else f"{'':8}"
        print(f"{name:42} {t:9.2f} {t / b:16.2f} {rate} {c:7.2f} {c / bc:6.2f} {m / 1024:11.0f}")


def ensure_text(perf_data: Path) -> Path:
    text = perf_data.with_suffix(".txt")
    if not text.exists() or text.stat().st_mtime < perf_data.stat().st_mtime:
        print(f"writing {text} with perf script ...", file=sys.stderr)
        with open(text, "wb") as fh:
            subprocess.run(["perf", "script", "-i", str(perf_data)], stdout=fh, stderr=subprocess.DEVNULL, check=True)
    return text


def many_stacks(text: Path, work: Path, want: int = 100_000) -> Path:
    """>= `want` unique real stacks: per-thread folding with addresses, copied under renamed roots
    until there are enough."""
    base = work / "tid-addrs.folded"
    subprocess.run([*PROFILER, "flamegraph", str(text), "--folded", "--by", "thread", "--addrs", "-o", str(base), "--force"], check=True)
    lines = base.read_text().splitlines()
    out: list[str] = []
    copy = 0
    while len(out) < want:
        suffix = "" if copy == 0 else f"~{copy}"
        for ln in lines:
            root, _, rest = ln.partition(";")
            out.append(f"{root}{suffix};{rest}")
        copy += 1
    path = work / f"unique-{len(out)}.folded"
    path.write_text("\n".join(out[:want]) + "\n")
    return path


def find_inferno(install: bool) -> tuple[str, str] | None:
    """inferno-collapse-perf and inferno-flamegraph, installed with cargo when missing (and allowed)."""
    def where(tool: str) -> str | None:
        if (INFERNO / tool).exists():
            return str(INFERNO / tool)
        return shutil.which(tool)

    found = where("inferno-collapse-perf"), where("inferno-flamegraph")
    if None in found and install and (shutil.which("cargo") or (INFERNO / "cargo").exists()):
        cargo = shutil.which("cargo") or str(INFERNO / "cargo")
        print("# inferno not found: cargo install inferno ...", file=sys.stderr)
        subprocess.run([cargo, "install", "--quiet", "inferno"], check=False)
        found = where("inferno-collapse-perf"), where("inferno-flamegraph")
    if None in found:
        return None
    return found[0], found[1]  # type: ignore[return-value]


def record(perf_data: Path, seconds: int) -> None:
    """A perf.data of a real server: our own MariaDB under sysbench oltp_read_only, 9999 Hz, call chains."""
    sys.path.insert(0, str(ROOT / "bench"))
    import overhead

    with tempfile.TemporaryDirectory(prefix="profiler-bench-flame-db-", dir="/var/tmp") as tmp:
        with overhead.mariadb(Path(tmp)) as (server, sock):
            base = dict(sock=sock, threads=8, tables=4, size=20000)
            subprocess.run(overhead.sysbench_argv(verb="prepare", seconds=1, **base),  # type: ignore[arg-type]
                           check=True, stdout=subprocess.DEVNULL)
            argv = overhead.sysbench_argv(verb="run", seconds=seconds + 15, **base)  # type: ignore[arg-type]
            argv[1] = "oltp_read_only"
            load = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
            try:
                time.sleep(5)
                subprocess.run(["perf", "record", "-q", "-F", "9999", "-g", "-p", str(server.pid), "-o", str(perf_data),
                                "--", "sleep", str(seconds)], check=True)
            finally:
                load.kill()
                load.wait()


def merged_stacks(data: Path) -> str:
    from profiler.formats import perfdata as pd
    from profiler.formats import perfdata_reduce as pr

    with tempfile.TemporaryDirectory() as tmp:
        try:
            m = pr.merge_samples(data, Path(tmp) / "m.data", by_tid=False)
        except pd.PerfDataUnsupported as exc:
            return f"not merged ({exc})"
    return f"{m.samples:,} samples, {m.written:,} distinct stacks symbolized ({m.samples / max(m.written, 1):.1f}x fewer)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--perf-data", type=Path, required=True, help="a big perf.data from a real server")
    ap.add_argument("--record", type=int, metavar="SECONDS", help="record --perf-data first (root: MariaDB + sysbench)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-install", action="store_true", help="never run cargo install inferno")
    args = ap.parse_args()
    data = args.perf_data.resolve()
    if args.record:
        record(data, args.record)
    inferno = find_inferno(not args.no_install)
    text = ensure_text(data)
    size_mb = text.stat().st_size / 1e6
    with open(text, "rb") as fh:
        nsamples = sum(1 for ln in fh if ln[:1] not in (b"\t", b"\n", b"#"))
    print(f"# flame graph benchmark: {size_mb:.0f} MB of perf script text, {nsamples:,} headers, {args.reps} interleaved runs each")
    print(f"# host: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start (shared with other jobs):")
    print("# wall times are medians, read the ratios; CPU s (user+system, children included) barely depends on load")
    if inferno is None:
        print("# inferno not installed (cargo install inferno): its rows are left out")

    with tempfile.TemporaryDirectory(prefix="profiler-bench-flame-") as tmp:
        work = Path(tmp)
        out_svg = work / "whole.svg"
        cases: dict[str, list[str] | str] = {
            "perf script > /dev/null": ["perf", "script", "-i", str(data)],
            "ours: profiler flamegraph perf.data": [*PROFILER, "flamegraph", str(data), "-o", str(out_svg), "--force"],
        }
        if inferno is not None:
            icollapse, igraph = inferno
            cases["perf script | inferno-collapse | inferno-fg"] = (
                f"perf script -i {data} 2>/dev/null | {icollapse} | {igraph} > {work / 'inf.svg'}")
        res = bench(cases, args.reps, shell={"perf script | inferno-collapse | inferno-fg"})
        report("1. whole path perf.data -> SVG (goal: ours <= 1.2x perf script)", res, "perf script > /dev/null")
        print(f"ours merges identical stacks before perf script: {merged_stacks(data)}")
        same = subprocess.run([*PROFILER, "flamegraph", str(data), "--folded"], capture_output=True, check=True).stdout == (
            subprocess.run([*PROFILER, "flamegraph", str(text), "--folded"], capture_output=True, check=True).stdout)
        print(f"folded stacks from perf.data (merged) identical to those of its full perf script text: {same}")
        if inferno is None:
            return 0
        icollapse, igraph = inferno
        folded_out = work / "ours.folded"
        res = bench(
            {
                "ours: profiler flamegraph --folded": [*PROFILER, "flamegraph", str(text), "--folded", "-o", str(folded_out), "--force"],
                "inferno-collapse-perf (2 threads)": [icollapse, str(text)],
                "inferno-collapse-perf -n 1": [icollapse, "-n", "1", str(text)],
            },
            args.reps,
        )
        report("2. folding perf script text", res, "inferno-collapse-perf (2 threads)", size_mb)
        same = subprocess.run([icollapse, str(text)], capture_output=True, check=True).stdout == (
            subprocess.run([*PROFILER, "flamegraph", str(text), "--folded", "--compat", "inferno"], capture_output=True, check=True).stdout
        )
        print(f"identical output to inferno-collapse-perf (--compat inferno): {same}")

        many = many_stacks(text, work)
        svg = work / "many.svg"
        res = bench(
            {
                "ours: profiler flamegraph F.folded -o x.svg": [*PROFILER, "flamegraph", str(many), "-o", str(svg), "--force"],
                "inferno-flamegraph F.folded": [igraph, str(many)],
            },
            args.reps,
        )
        report(f"3. SVG from {sum(1 for _ in open(many)):,} unique stacks", res, "inferno-flamegraph F.folded")
        inproc = []
        for _ in range(args.reps):
            r = subprocess.run([sys.executable, "-c", INPROC, str(many)], capture_output=True, text=True, check=True)
            inproc.append([float(x) for x in r.stdout.split()])
        med = [statistics.median(col) for col in zip(*inproc, strict=True)]
        print(
            f"ours in-process (the < 1 s target): read {med[0]:.2f} s + tree {med[1]:.2f} s + render {med[2]:.2f} s"
            f" = {sum(med[:3]):.2f} s; the rest of the CLI's time is Python start-up and imports ({med[3]:.2f} s)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
