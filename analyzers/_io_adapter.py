"""Minimal block-IO reader for the verdict (analyzers layer), until analyzers/blockio.py lands in main.

Reads ``block.trace.gz`` as docs/bundle.md defines it (ftrace text of block_rq_issue and
block_rq_complete from a tracefs instance with trace_clock=mono) and pairs each completion
with the oldest outstanding issue of the same device and sector. Merges and requeues are not
modelled (the heatmap engineer's analyzer does that): this is the smallest thing that gives
the verdict per-device, per-op latency and the targets' share of the IO. Delete it once
``profiler.analyzers.blockio.io_from_bundle`` is in main, and point metrics.py at that.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

# "  fio-1234  [001] d..1. 12345.678901: block_rq_issue: 254,0 WS 4096 () 123456 + 8 [fio]"
# "  <idle>-0  [000] ..s1. 12345.679001: block_rq_complete: 254,0 WS () 123456 + 8 [0]"
_LINE = re.compile(
    r"^\s*(?P<comm>.+?)-(?P<tid>\d+)\s+(?:\(\s*[-\d]+\)\s+)?\[\d+\]\s+(?:\S+\s+)?(?P<t>\d+\.\d+):\s+"
    r"block_rq_(?P<ev>issue|complete):\s+(?P<maj>\d+),(?P<min>\d+)\s+(?P<rwbs>\S+)\s+(?P<rest>.*)$"
)
_ISSUE_REST = re.compile(r"^(?P<bytes>\d+)\s+\(.*?\)\s+(?P<sector>\d+)\s+\+\s+(?P<nr>\d+)")
_COMPLETE_REST = re.compile(r"^\(.*?\)\s+(?P<sector>\d+)\s+\+\s+(?P<nr>\d+)")


@dataclass
class IOEvents:
    t: np.ndarray  # issue time (monotonic s)
    latency: np.ndarray  # seconds
    dev: list[str]  # "254:0"
    op: list[str]  # read | write | flush | discard | other
    nbytes: np.ndarray
    tid: np.ndarray
    comm: list[str]
    unpaired_completions: int = 0
    unpaired_issues: int = 0


def op_of(rwbs: str) -> str:
    if "D" in rwbs:
        return "discard"
    if "R" in rwbs:
        return "read"
    if "W" in rwbs:
        return "write"
    if "F" in rwbs:
        return "flush"
    return "other"


def parse(lines: Iterable[str]) -> IOEvents:
    pending: dict[tuple[str, int], deque[tuple[float, str, int, int, str]]] = {}
    t_l: list[float] = []
    lat: list[float] = []
    devs: list[str] = []
    ops: list[str] = []
    nb: list[int] = []
    tids: list[int] = []
    comms: list[str] = []
    unpaired_c = 0
    for line in lines:
        m = _LINE.match(line)
        if not m:
            continue
        dev = f"{m['maj']}:{m['min']}"
        t = float(m["t"])
        if m["ev"] == "issue":
            r = _ISSUE_REST.match(m["rest"])
            if not r:
                continue
            nbytes = int(r["bytes"]) or int(r["nr"]) * 512
            pending.setdefault((dev, int(r["sector"])), deque()).append(
                (t, op_of(m["rwbs"]), nbytes, int(m["tid"]), m["comm"].strip()))
        else:
            r = _COMPLETE_REST.match(m["rest"])
            if not r:
                continue
            q = pending.get((dev, int(r["sector"])))
            if not q:
                unpaired_c += 1
                continue
            ti, op, nbytes, tid, comm = q.popleft()
            t_l.append(ti)
            lat.append(max(0.0, t - ti))
            devs.append(dev)
            ops.append(op)
            nb.append(nbytes)
            tids.append(tid)
            comms.append(comm)
    return IOEvents(t=np.asarray(t_l), latency=np.asarray(lat), dev=devs, op=ops, nbytes=np.asarray(nb, dtype=np.int64),
                    tid=np.asarray(tids, dtype=np.int64), comm=comms, unpaired_completions=unpaired_c,
                    unpaired_issues=sum(len(q) for q in pending.values()))
