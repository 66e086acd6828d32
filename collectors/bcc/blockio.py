"""Block IO latency aggregated in the kernel with bcc (collectors layer): block.hist.jsonl.gz.

The perf backend keeps one ftrace line per IO (block.trace.gz); this collector keeps, per
time slot (``--interval``), device and op, a log-linear latency histogram (16 linear
sub-buckets per power of two of nanoseconds), counts, bytes, sum and max, plus who issued
the IOs. Issue and completion are paired in the kernel (collectors/bcc/bpf/blockio.c), system
wide, so completions that run in interrupt context are never lost the way a per-event perf
ring buffer can lose them. analyzers/io/histograms.py reads the file back into the same
percentiles and heatmap the analyzers compute from block.trace.gz.
"""

from __future__ import annotations

import json
import time
from typing import Any

from profiler.collectors import host
from profiler.collectors.base import CaptureContext
from profiler.collectors.bcc.common import BccCollector, comm_text, read_counters

from profiler.bundle import PARTIAL, CollectorRecord, members

MEMBER = members.BLOCK_HIST
FORMAT = "profiler.block-hist"
SUB_BITS = 4
MAX_EXP = 40
OPS = {1: "R", 2: "W", 3: "D", 4: "F", 5: "O"}
OP_NAMES = {"R": "read", "W": "write", "D": "discard", "F": "flush", "O": "other"}
COUNTERS = ["issued", "completed", "unmatched_complete", "inflight_full", "hist_full", "tasks_full", "restamped",
            "preflush_complete"]
SETTLE_NS = 50_000_000  # a slot is drained once it ended this long ago


def dev_text(dev: int) -> str:
    """The kernel's internal dev_t (major << 20 | minor) as 'major:minor'."""
    return f"{dev >> 20}:{dev & 0xFFFFF}"


def dev_name(majmin: str) -> str | None:
    text = host.read_text(f"/sys/dev/block/{majmin}/uevent") or ""
    for line in text.splitlines():
        if line.startswith("DEVNAME="):
            return line.split("=", 1)[1]
    return None


class BccBlockIO(BccCollector):
    name = "block-io"
    source = "blockio.c"
    tracepoints = (
        ("block:block_rq_issue", "pf_rq_issue"),
        ("block:block_rq_complete", "pf_rq_complete"),
    )
    needs_targets = False  # system-wide: the disk is shared, writeback runs in kernel threads
    has_cfg = True
    drains = True

    def __init__(self, max_inflight: int = 16384, hist_entries: int = 65536, task_entries: int = 8192) -> None:
        super().__init__()
        self.max_inflight = max_inflight
        self.hist_entries = hist_entries
        self.task_entries = task_entries
        self.out: Any = None
        self.devices: dict[str, str | None] = {}
        self.slots_written = 0
        self.ios = 0

    def defines(self, ctx: CaptureContext) -> dict[str, int | str]:
        return {
            "SLOT_NS": f"{self.interval_ns(ctx)}ULL",
            "MAX_INFLIGHT": self.max_inflight,
            "HIST_ENTRIES": self.hist_entries,
            "TASK_ENTRIES": self.task_entries,
        }

    def open_outputs(self, ctx: CaptureContext) -> None:
        self.out = self.open_member(ctx, MEMBER)
        self._line({
            "kind": "header",
            "format": FORMAT,
            "version": 1,
            "unit": "ns",
            "clock": "monotonic",
            "t0": self.t0_ns / 1e9,
            "slot_seconds": self.interval_ns(ctx) / 1e9,
            "buckets": {"scheme": "log-linear", "sub_bits": SUB_BITS, "max_exp": MAX_EXP},
            "ops": OP_NAMES,
            "targets": self.pids,
        })

    def _line(self, obj: dict[str, Any]) -> None:
        self.out.write((json.dumps(obj, sort_keys=True, separators=(",", ":")) + "\n").encode())

    def drain(self, ctx: CaptureContext, final: bool) -> None:
        cutoff = None if final else self.slot_of(ctx, time.monotonic_ns() - SETTLE_NS)
        hist = self.bpf[b"hist"]
        totals = self.bpf[b"totals"]
        groups: dict[tuple[int, int, int], dict[str, Any]] = {}
        hkeys = []
        for k, v in hist.items():
            if cutoff is not None and k.slot >= cutoff:
                continue
            g = groups.setdefault((k.slot, k.dev, k.op), {"hist": []})
            g["hist"].append([int(k.bucket), int(v.value)])
            hkeys.append(k)
        tkeys = []
        for k, v in totals.items():
            if cutoff is not None and k.slot >= cutoff:
                continue
            g = groups.setdefault((k.slot, k.dev, k.op), {"hist": []})
            g.update(count=int(v.count), bytes=int(v.bytes), sum_ns=int(v.sum_ns), max_ns=int(v.max_ns))
            tkeys.append(k)
        for k in hkeys:
            del hist[k]
        for k in tkeys:
            del totals[k]
        for (slot, dev, op), g in sorted(groups.items()):
            start, end = self.slot_bounds(ctx, slot)
            majmin = dev_text(dev)
            if majmin not in self.devices:
                self.devices[majmin] = dev_name(majmin)
            g["hist"].sort()
            g.setdefault("count", sum(c for _, c in g["hist"]))
            self.ios += g["count"]
            self._line({"kind": "slot", "slot": slot, "t": round(start, 9), "end": round(end, 9),
                        "dev": majmin, "op": OPS.get(op, "O"), **g})
            self.slots_written += 1

    def finish(self, ctx: CaptureContext, rec: CollectorRecord) -> None:
        targets = set(self.pids)
        tasks: list[dict[str, Any]] = []
        for k, v in self.bpf[b"tasks"].items():
            tasks.append({
                "dev": dev_text(k.dev), "op": OPS.get(k.op, "O"), "tid": int(k.tid), "pid": int(k.tgid),
                "comm": comm_text(bytes(k.comm)), "count": int(v.count), "bytes": int(v.bytes),
                "sum_ns": int(v.sum_ns), "target": int(k.tgid) in targets,
            })
        tasks.sort(key=lambda t: (-t["count"], t["dev"], t["op"], t["tid"]))
        for t in tasks:
            self._line({"kind": "task", **t})
        counters = read_counters(self.bpf, COUNTERS)
        in_flight = len(self.bpf[b"inflight"])
        self._line({"kind": "end", "ended": self.end_ns / 1e9, "counters": counters,
                    "in_flight_at_stop": in_flight,
                    "devices": {k: v for k, v in sorted(self.devices.items())}})
        rec.files = [MEMBER]
        by_targets = sum(t["count"] for t in tasks if t["target"])
        total = sum(t["count"] for t in tasks)
        rec.stats = {
            "ios": counters["completed"],
            "issued": counters["issued"],
            "unmatched_complete": counters["unmatched_complete"],
            "in_flight_at_stop": in_flight,
            "requeued": counters["restamped"],
            "preflush_only": counters["preflush_complete"],
            "dropped": counters["inflight_full"] + counters["hist_full"] + counters["tasks_full"],
            "slots": self.slots_written,
            "target_share": round(by_targets / total, 4) if total else None,
            "unit": "ns",
        }
        rec.stats["events"] = rec.stats["ios"]  # the capture summary's columns
        rec.stats["lost"] = rec.stats["dropped"]
        if rec.stats["dropped"]:
            rec.status = PARTIAL
            rec.reason = (f"{rec.stats['dropped']} IO latencies dropped: kernel maps full "
                          f"(inflight {counters['inflight_full']}, histogram {counters['hist_full']}, "
                          f"tasks {counters['tasks_full']})")
