#!/usr/bin/env python3
"""Flame graph speed: ours against perf script and inferno, side by side (bench, not a test).

Prints medians of interleaved runs and their ratios for
  1. the whole path perf.data -> SVG, for every perf.data given, side by side: ours
     (`profiler flamegraph perf.data -o x.svg`, start-up included) vs `perf script` alone
     (goal: ours <= 1.2x perf script on each; stretch: <= 0.5x on a large one), and vs
     `perf script | inferno-collapse-perf | inferno-flamegraph` when inferno is installed;
     then whether ours folds what perf script prints (`profiler flamegraph perf.data --folded`
     byte for byte against folding perf script's own text), and how many samples perf script
     named for it (the ones the direct path cannot: JIT maps, kernel modules...);
  2. folding perf script text: `profiler flamegraph X --folded` vs inferno-collapse-perf
     (its default threads, and one thread),
  3. drawing the SVG for >= 100K unique stacks: ours vs inferno-flamegraph on the same file,
plus CPU seconds and peak memory (max RSS) of each. Sections 2 and 3 need inferno.

Inputs: perf.data files you recorded from a real server, or let the bench record them: it
starts its own MariaDB (as bench/overhead.py does), drives it with sysbench oltp_read_only and
records until each file reaches its size (perf record --max-size):

    sudo python bench/flamegraph.py --record-sizes 10,200 --keep /var/tmp   # 10 MB and 200 MB
    python bench/flamegraph.py --perf-data /var/tmp/a.data --perf-data /var/tmp/b.data [--reps 5]

A 10 MB file is recorded system-wide at 999 Hz (a typical capture: every process's binaries and
the kernel), a larger one of mariadbd alone at 9999 Hz. inferno (`cargo install inferno`) is
looked for in ~/.cargo/bin and on PATH, installed with cargo when missing and cargo is there
(``--no-install``: never). The machine is usually shared: read ratios of medians, and the CPU
columns (user + system of the whole process tree), which hardly depend on the load.
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


def ensure_bytecode() -> None:
    """Compile the package's modules, as pip does when it installs a wheel: a run with
    PYTHONDONTWRITEBYTECODE set (an editable install, this host's environment) would otherwise
    compile every module it imports at every start, which no installed copy does."""
    import importlib.util

    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for pkg in ("profiler", "profiler.analyzers", "profiler.collectors"):
        spec = importlib.util.find_spec(pkg)
        for where in (spec.submodule_search_locations or []) if spec else []:
            subprocess.run([sys.executable, "-m", "compileall", "-q", where], env=env, check=False,
                           stdout=subprocess.DEVNULL)


def timed(argv: list[str] | str, stdout: Path | None = None, shell: bool = False) -> tuple[float, int, float]:
    """Wall seconds, max RSS (KiB) and CPU seconds (user + system, children included) of one
    run. CPU time hardly depends on how busy the machine is; wall time does."""
    out = open(stdout, "wb") if stdout else subprocess.DEVNULL  # noqa: SIM115
    with tempfile.TemporaryFile() as errf:  # a file, not a pipe: a chatty child must not block
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=errf, shell=shell)  # noqa: S603
        _, status, ru = os.wait4(proc.pid, 0)
        dt = time.perf_counter() - t0
        if stdout:
            out.close()  # type: ignore[union-attr]
        errf.seek(0)
        err = errf.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        hint = ""
        if "type: 17" in err:
            hint = ("\n(perf script cannot read this file's BPF events: record again with "
                    "--record-sizes, which keeps the file without them)")
        raise SystemExit(f"failed: {argv}\n{err[-500:]}{hint}")
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


def record(perf_data: Path, size_mb: int) -> None:
    """A perf.data of a real server: our own MariaDB under sysbench oltp_read_only, recorded
    until the file holds ``size_mb`` MB (system-wide at 999 Hz up to 20 MB, else mariadbd at 9999 Hz)."""
    sys.path.insert(0, str(ROOT / "bench"))
    import overhead

    wide = size_mb <= 20
    seconds = 600
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
                who = ["-a", "-F", "999"] if wide else ["-p", str(server.pid), "-F", "9999"]
                # perf stops at the size with SIGTERM to the command it ran: its own exit says so
                subprocess.run(["perf", "record", "-q", "-N", *who, "-g", "--max-size", f"{size_mb}M", "-o",
                                str(perf_data), "--", "sleep", str(seconds)], check=False)
            finally:
                load.kill()
                load.wait()
    if not perf_data.exists() or perf_data.stat().st_size < size_mb << 19:
        raise SystemExit(f"bench: recording {perf_data} failed")
    if wide:
        # perf record asks for BPF programs' symbol records on its tracking event even with
        # --no-bpf-event, and this host's perf script stops at them ("failed to process type:
        # 17"), which would leave no baseline: the file is kept without them (every sample stays)
        import numpy as np

        from profiler.formats import perfdata as pdata
        from profiler.formats.perfdata_reduce import filter_samples

        raw = perf_data.with_suffix(".raw")
        perf_data.rename(raw)
        filter_samples(raw, perf_data, lambda pid, tid, t: np.ones(len(pid), bool),
                       drop_types=(pdata.RECORD_KSYMBOL, pdata.RECORD_BPF_EVENT))
        raw.unlink()


def whole_path(datas: list[Path], reps: int, inferno: tuple[str, str] | None, work: Path) -> None:
    """Section 1, every perf.data side by side: ours vs perf script, medians of interleaved runs."""
    cases: dict[str, list[str] | str] = {}
    shell: set[str] = set()
    for i, data in enumerate(datas):
        tag = f"[{i + 1}] "
        cases[tag + "perf script > /dev/null"] = ["perf", "script", "-i", str(data)]
        cases[tag + "ours: profiler flamegraph -o x.svg"] = [*PROFILER, "flamegraph", str(data), "-o",
                                                             str(work / f"ours{i}.svg"), "--force"]
        if inferno is not None:
            name = tag + "perf script | inferno-collapse | inferno-fg"
            cases[name] = f"perf script -i {data} 2>/dev/null | {inferno[0]} | {inferno[1]} > {work / f'inf{i}.svg'}"
            shell.add(name)
    res = bench(cases, reps, shell=shell)
    print("\n## 1. whole path perf.data -> SVG, start-up included (goal: ours <= 1.2x perf script; stretch <= 0.5x on a large file)")
    print(f"{'':50} {'median s':>9} {'x perf script':>14} {'CPU s':>7} {'CPU x':>6} {'max RSS MB':>11}")
    for i, data in enumerate(datas):
        tag = f"[{i + 1}] "
        size = data.stat().st_size / 1e6
        print(f"[{i + 1}] {data} ({size:.0f} MB)")
        b, bc = res[tag + "perf script > /dev/null"][0], res[tag + "perf script > /dev/null"][2] or 1e-9
        for name, (t, m, c) in res.items():
            if name.startswith(tag):
                print(f"{name:50} {t:9.2f} {t / b:14.2f} {c:7.2f} {c / bc:6.2f} {m / 1024:11.0f}")
        print(f"{'':4}ours against perf script's own text: {same_folded(data)}")


def same_folded(data: Path) -> str:
    """Whether `profiler flamegraph perf.data --folded` prints what folding perf script's text
    prints, and how many samples perf script had to name for the direct path."""
    fields = "comm,pid,tid,time,period,event,ip,sym,dso"
    ours = subprocess.run([*PROFILER, "flamegraph", str(data), "--folded"], capture_output=True, check=True)
    text = subprocess.run(["perf", "script", "-i", str(data), "-F", fields], capture_output=True, check=True).stdout
    ref = subprocess.run([*PROFILER, "flamegraph", "-", "--folded"], input=text, capture_output=True, check=True).stdout
    note = ours.stderr.decode(errors="replace").strip().splitlines()
    named = next((ln.split(": ", 2)[-1] for ln in note if "named by perf script" in ln), "all named without perf script")
    return f"folded output {'identical' if ours.stdout == ref else 'DIFFERENT'}; {named}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--perf-data", type=Path, action="append", default=[], help="a perf.data from a real server (repeatable)")
    ap.add_argument("--record-sizes", help="record perf.data files of these sizes first, MB, e.g. 10,200 (root: MariaDB + sysbench)")
    ap.add_argument("--keep", type=Path, default=Path("/var/tmp"), help="where recorded perf.data files go (kept)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--only-whole-path", action="store_true", help="section 1 only")
    ap.add_argument("--no-install", action="store_true", help="never run cargo install inferno")
    args = ap.parse_args()
    datas = [p.resolve() for p in args.perf_data]
    for mb in [int(x) for x in args.record_sizes.split(",")] if args.record_sizes else []:
        data = (args.keep / f"profiler-bench-{mb}mb.perf.data").resolve()
        print(f"# recording {data} ({mb} MB) ...", file=sys.stderr)
        record(data, mb)
        datas.append(data)
    if not datas:
        ap.error("give --perf-data FILE (repeatable) or --record-sizes")
    inferno = find_inferno(not args.no_install)
    ensure_bytecode()
    print(f"# flame graph benchmark: {len(datas)} perf.data, {args.reps} interleaved runs each")
    print(f"# host: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start (shared with other jobs):")
    print("# wall times are medians, read the ratios; CPU s (user+system, children included) barely depends on load")
    if inferno is None:
        print("# inferno not installed (cargo install inferno): its rows and sections 2-3 are left out")
    with tempfile.TemporaryDirectory(prefix="profiler-bench-flame-") as tmp:
        work = Path(tmp)
        whole_path(datas, args.reps, inferno, work)
        print(f"# load average at the end of section 1: {os.getloadavg()[0]:.1f}")
        if inferno is None or args.only_whole_path:
            return 0
        data = datas[-1]
        text = ensure_text(data)
        size_mb = text.stat().st_size / 1e6
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
