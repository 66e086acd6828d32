"""Where a capture's cost lands in the server: the event-dense MariaDB's CPU per transaction, by
function and by kind (BPF programs, hash maps, clock reads, tracepoint dispatch, spin-waits...),
with no capture and under each configuration.

bench/bcc_cost.py gives each BPF program's own time per run (bpf_stats, which add two clock reads
to every run); this bench samples the server itself with ``perf record -e cpu-clock -p`` (999 Hz,
no bpf_stats) over the middle of each capture, so the time the kernel spends around the programs
(the syscall slow path, tracepoint dispatch, the perf path of classic tracepoints) and what the
server's own code does differently (its spin-waits) are counted too. Starts the private MariaDB
of bench/overhead.py (``--case dense``), keeps sysbench running, and attaches ``profiler attach``
once per configuration and round (``--config NAME=ARGS``; ``none`` attaches nothing),
interleaved; transactions from the server's Com_update counter. Prints medians of the rounds in
microseconds of the server's CPU per transaction.

Functions that run with interrupts off (sched_switch's program runs under the run queue's lock)
cannot be sampled by a timer: their time lands where interrupts come back on
(``_raw_spin_unlock_irqrestore``), counted as "irq-off exit (sched_switch)". Unnamed addresses
in the server at or just after a PAUSE are its spin-waits (InnoDB's mutexes).

    sudo .venv/bin/python bench/bcc_profile.py --rounds 4 --seconds 6
    sudo .venv/bin/python bench/bcc_profile.py --config none= --config default= --config perf="--backend perf"
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from overhead import CASES, cpu_seconds, mariadb, sysbench_argv, which  # noqa: E402

FREQ = 999
KINDS = [  # (kind, pattern on the symbol), first match wins
    ("BPF programs", r"^bpf_prog_"),
    ("hash maps", r"lookup_nulls_elem|htab_|jhash"),
    ("clock reads", r"^read_tsc$|ktime_get_mono_fast|bpf_ktime"),
    ("stack walks", r"stackid|callchain|unwind_|orc_|copy_from_user_nofault"),
    ("classic tracepoint path", r"^perf_syscall_|perf_trace_buf|perf_swevent|perf_tp_event|perf_call_bpf|trace_call_bpf"
                                r"|perf_trace_run_bpf|perf_trace_block|perf_trace_sys"),
    ("raw tracepoint dispatch", r"bpf_trace_run|^__bpf_trace_|^__traceiter_|rcu_read_.*trace"),
    ("syscall slow path", r"^syscall_trace_enter|^syscall_exit_work"),
    ("BPF helpers", r"^bpf_get_|prandom"),
    ("irq-off exit (sched_switch)", r"^_raw_spin_unlock_irqrestore$"),
]
TRACING = {k for k, _ in KINDS[:8]}  # the kinds that exist only when something traces


def status(sock: str, name: str) -> int:
    out = subprocess.run([which("mariadb", "mysql"), f"--socket={sock}", "-uroot", "-N", "-e",
                          f"show global status like '{name}'"], capture_output=True, text=True, check=True).stdout
    return int(out.split()[1])


def profile(pid: int, seconds: float, data: Path) -> dict[str, int]:
    """Samples per symbol of the process over ``seconds``."""
    subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-F", str(FREQ), "-p", str(pid), "-o", str(data),
                    "--", "sleep", str(seconds)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    text = subprocess.run(["perf", "report", "-i", str(data), "--stdio", "-n", "--sort", "dso,sym", "-F",
                           "sample,dso,sym"], capture_output=True, text=True, check=False).stdout
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split(None, 2)
        if len(parts) == 3 and parts[0].isdigit():
            dso, sym = parts[1], re.sub(r"^\[[.k]\]\s*", "", parts[2].strip())
            key = f"{dso} {sym}" if sym.startswith("0x") else sym
            out[key] = out.get(key, 0) + int(parts[0])
    return out


_LOADS: dict[str, list[tuple[int, int, int]]] = {}


def _segments(binary: str) -> list[tuple[int, int, int]]:
    """(vaddr, file offset, size) of the ELF's loaded segments."""
    if binary not in _LOADS:
        with open(binary, "rb") as fh:
            head = fh.read(64)
            phoff, = struct.unpack_from("<Q", head, 32)
            phentsize, phnum = struct.unpack_from("<HH", head, 54)
            fh.seek(phoff)
            table = fh.read(phentsize * phnum)
        segs = []
        for i in range(phnum):
            ptype, _flags, off, vaddr, _paddr, filesz = struct.unpack_from("<IIQQQQ", table, i * phentsize)
            if ptype == 1:  # PT_LOAD
                segs.append((vaddr, off, filesz))
        _LOADS[binary] = segs
    return _LOADS[binary]


def spin(key: str, binary: str) -> bool:
    """An unnamed address of the server at or just after a PAUSE (f3 90: a spin-wait loop)."""
    dso, _, addr = key.partition(" ")
    if not addr.startswith("0x") or not binary.endswith(dso):
        return False
    a = int(addr, 16)
    for vaddr, off, size in _segments(binary):
        if vaddr + 2 <= a < vaddr + size:
            with open(binary, "rb") as fh:
                fh.seek(off + a - vaddr - 2)
                return b"\xf3\x90" in (here := fh.read(4)) and here.index(b"\xf3\x90") in (0, 2)
    return False


def kind_of(sym: str, binary: str) -> str:
    for kind, pat in KINDS:
        if re.search(pat, sym):
            return kind
    return "server spin-waits (PAUSE loops)" if spin(sym, binary) else "the rest"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, help="sysbench clients (default: the dense case's 32)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=6.0, help="the sampled window of each capture (default 6)")
    ap.add_argument("--config", action="append", help="NAME=ARGS added to profiler attach; none= for no capture "
                                                       "(default: none= and default=)")
    ap.add_argument("--top", type=int, default=25, help="functions listed (largest change first)")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("bench: run as root")
    configs = [(c.split("=", 1)[0], shlex.split(c.split("=", 1)[1] if "=" in c else ""))
               for c in (args.config or ["none=", "default="])]
    binary = which("mariadbd", "mysqld")
    rows: dict[str, list[dict[str, float]]] = {n: [] for n, _ in configs}
    cpu: dict[str, list[float]] = defaultdict(list)
    loads: list[float] = []
    with tempfile.TemporaryDirectory(prefix="profiler-bcc-profile-") as tmp, mariadb(Path(tmp)) as (server, sock):
        test, threads, tables, size = CASES["dense"]
        base = dict(sock=sock, threads=args.threads or threads, tables=tables, size=size, test=test)
        subprocess.run(sysbench_argv(verb="prepare", seconds=1, **base), check=True,  # type: ignore[arg-type]
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        total = int(len(configs) * args.rounds * (args.seconds + 15) + 60)
        load = subprocess.Popen(sysbench_argv(verb="run", seconds=total, **base),  # type: ignore[arg-type]
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(4)
            for r in range(args.rounds):
                for name, extra in configs if r % 2 == 0 else configs[::-1]:
                    proc = None
                    if name != "none":
                        proc = subprocess.Popen(
                            [sys.executable, "-m", "profiler", "attach", "--pid", str(server.pid), "-d",
                             f"{args.seconds + 8}s", "-o", f"{tmp}/cap-{name}-{r}", "--force", "--no-report", *extra],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    time.sleep(5 if proc else 1)  # past the capture's start
                    loads.append(os.getloadavg()[0])
                    q0, c0 = status(sock, "Com_update"), cpu_seconds(server.pid)
                    samples = profile(server.pid, args.seconds, Path(tmp) / "perf.data")
                    tx = max(1, status(sock, "Com_update") - q0)
                    cpu[name].append(1e6 * (cpu_seconds(server.pid) - c0) / tx)
                    if proc:
                        proc.wait()
                    rows[name].append({k: 1e6 * v / FREQ / tx for k, v in samples.items()})
                    kinds: dict[str, float] = defaultdict(float)
                    for k, v in rows[name][-1].items():
                        kinds[kind_of(k, binary)] += v
                    traced = sum(v for k, v in kinds.items() if k in TRACING)
                    print(f"round {r + 1} {name:10s} load {loads[-1]:5.1f}: {tx / args.seconds:8.0f} tx/s, server CPU "
                          f"{cpu[name][-1]:5.1f} us/tx, sampled {sum(rows[name][-1].values()):5.1f} us/tx: tracing "
                          f"{traced:4.1f}, irq-off exit {kinds['irq-off exit (sched_switch)']:4.1f}, spin-waits "
                          f"{kinds['server spin-waits (PAUSE loops)']:4.1f}, the rest {kinds['the rest']:5.1f}",
                          flush=True)
        finally:
            load.kill()
            load.wait()
    names = [n for n, _ in configs]
    keys = set().union(*(d.keys() for rs in rows.values() for d in rs))
    med = {n: {k: statistics.median(d.get(k, 0.0) for d in rows[n]) for k in keys} for n in names}
    print(f"\nload average (1 min) at the windows: {min(loads):.1f}-{max(loads):.1f}; host CPUs {os.cpu_count()}")
    print("microseconds of the server's CPU per transaction, medians of the rounds\n")
    print("".join(f"{n:>12s}" for n in names) + "  kind")
    by_kind = {n: defaultdict(float) for n in names}
    for n in names:
        for k, v in med[n].items():
            by_kind[n][kind_of(k, binary)] += v
    for kind in [k for k, _ in KINDS] + ["server spin-waits (PAUSE loops)", "the rest"]:
        print("".join(f"{by_kind[n][kind]:12.2f}" for n in names) + f"  {kind}")
    print("".join(f"{sum(med[n].values()):12.2f}" for n in names) + "  sampled in all")
    print("".join(f"{statistics.median(cpu[n]):12.2f}" for n in names) + "  server CPU (procfs)")
    print("\nfunctions, largest change from the first configuration first:")
    first = names[0]
    for k in sorted(keys, key=lambda k: -max(abs(med[n][k] - med[first][k]) for n in names))[:args.top]:
        print("".join(f"{med[n][k]:12.3f}" for n in names) + f"  {k[:80]}  [{kind_of(k, binary)}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
