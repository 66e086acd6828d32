"""Block IO latency aggregated in the kernel with bcc (collectors layer): block.hist.jsonl.gz.

The perf backend keeps one ftrace line per IO (block.trace.gz); this collector keeps, per
time slot (``--interval``), device and op, a log-linear latency histogram (16 linear
sub-buckets per power of two of nanoseconds), counts, bytes, sum and max, plus who issued
the IOs. Issue and completion are paired in the kernel (collectors/bcc/bpf/blockio.c), system
wide (its helper process sends the finished slots every interval), so completions that run in
interrupt context are never lost the way a per-event perf ring buffer can lose them. analyzers/io/histograms.py reads the file back into the same
percentiles and heatmap the analyzers compute from block.trace.gz.
"""

from __future__ import annotations

import json
from typing import Any

from profiler.collectors import host
from profiler.collectors.base import CaptureContext
from profiler.collectors.bcc.common import BccCollector, comm_text

from profiler.bundle import PARTIAL, CollectorRecord, members

MEMBER = members.BLOCK_HIST
FORMAT = "profiler.block-hist"
SUB_BITS = 4
MAX_EXP = 40
OPS = {1: "R", 2: "W", 3: "D", 4: "F", 5: "O"}
OP_NAMES = {"R": "read", "W": "write", "D": "discard", "F": "flush", "O": "other"}
COUNTERS = ["issued", "completed", "unmatched_complete", "inflight_full", "hist_full", "tasks_full", "restamped",
            "preflush_complete"]


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
    program = "blockio.c"
    needs_targets = False  # system-wide: the disk is shared, writeback runs in kernel threads

    def __init__(self, max_inflight: int = 16384, hist_entries: int = 16384, task_entries: int = 8192) -> None:
        super().__init__()
        self.max_inflight = max_inflight
        self.hist_entries = hist_entries
        self.task_entries = task_entries
        self.out: Any = None
        self.devices: dict[str, str | None] = {}
        self.slots_written = 0
        self.ios = 0
        self.header_written = False
        self.tasks: list[list[Any]] = []
        self.in_flight = 0

    def settings(self, ctx: CaptureContext) -> dict[str, Any]:
        return {"max_inflight": self.max_inflight, "hist_entries": self.hist_entries, "task_entries": self.task_entries}

    def open_outputs(self, ctx: CaptureContext) -> None:
        self.out = self.open_member(ctx, MEMBER)

    def _header(self) -> None:
        """Written with the first slots: t0 is the helper's, known once it attached."""
        self.header_written = True
        self._line({
            "kind": "header",
            "format": FORMAT,
            "version": 1,
            "unit": "ns",
            "clock": "monotonic",
            "t0": self.t0_ns / 1e9,
            "slot_seconds": self.slot_ns / 1e9,
            "buckets": {"scheme": "log-linear", "sub_bits": SUB_BITS, "max_exp": MAX_EXP},
            "ops": OP_NAMES,
            "targets": self.pids,
        })

    def _line(self, obj: dict[str, Any]) -> None:
        self.out.write((json.dumps(obj, sort_keys=True, separators=(",", ":")) + "\n").encode())

    def on_data(self, ctx: CaptureContext, msg: dict[str, Any]) -> None:
        if not self.header_written:
            self._header()
        for slot, dev, op, g in msg.get("groups") or []:
            start, end = self.slot_bounds(slot)
            majmin = dev_text(dev)
            if majmin not in self.devices:
                self.devices[majmin] = dev_name(majmin)
            g["hist"].sort()
            g.setdefault("count", sum(c for _, c in g["hist"]))
            self.ios += g["count"]
            self._line({"kind": "slot", "slot": slot, "t": round(start, 9), "end": round(end, 9),
                        "dev": majmin, "op": OPS.get(op, "O"), **g})
            self.slots_written += 1
        if msg.get("final"):
            self.tasks = msg.get("tasks") or []
            self.in_flight = int(msg.get("in_flight_at_stop") or 0)

    def finish(self, ctx: CaptureContext, rec: CollectorRecord) -> None:
        if not self.header_written:
            self._header()
        targets = set(self.pids)
        tasks: list[dict[str, Any]] = []
        for dev, op, tid, tgid, comm, count, nbytes, sum_ns in self.tasks:
            tasks.append({
                "dev": dev_text(dev), "op": OPS.get(op, "O"), "tid": int(tid), "pid": int(tgid),
                "comm": comm_text(comm), "count": int(count), "bytes": int(nbytes),
                "sum_ns": int(sum_ns), "target": int(tgid) in targets,
            })
        tasks.sort(key=lambda t: (-t["count"], t["dev"], t["op"], t["tid"]))
        for t in tasks:
            self._line({"kind": "task", **t})
        counters = {k: int(self.counters.get(k, 0)) for k in COUNTERS}
        self._line({"kind": "end", "ended": self.end_ns / 1e9, "counters": counters,
                    "in_flight_at_stop": self.in_flight,
                    "devices": {k: v for k, v in sorted(self.devices.items())}})
        rec.files = [MEMBER]
        by_targets = sum(t["count"] for t in tasks if t["target"])
        total = sum(t["count"] for t in tasks)
        dropped = counters["inflight_full"] + counters["hist_full"] + counters["tasks_full"]
        rec.stats.update({
            "ios": counters["completed"],
            "issued": counters["issued"],
            "unmatched_complete": counters["unmatched_complete"],
            "in_flight_at_stop": self.in_flight,
            "requeued": counters["restamped"],
            "preflush_only": counters["preflush_complete"],
            "dropped": dropped,
            "slots": self.slots_written,
            "target_share": round(by_targets / total, 4) if total else None,
            "unit": "ns",
            "events": counters["completed"],  # the capture summary's columns
            "lost": dropped,
        })
        if dropped:
            rec.status = PARTIAL
            rec.reason = (f"{dropped} IO latencies dropped: kernel maps full "
                          f"(inflight {counters['inflight_full']}, histogram {counters['hist_full']}, "
                          f"tasks {counters['tasks_full']})")
