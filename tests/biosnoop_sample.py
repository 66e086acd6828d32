# ruff: noqa: UP031 - biosnoop's own %-format strings, kept as it prints them
"""Make samples/biosnoop/ from a real perf capture of block events (test helper, run by hand).

This VM's kernel has no kprobes, so bcc's biosnoop (which needs them) cannot run here. The
samples are the IOs of a real ``perf record -a -e block:block_rq_insert,block:block_rq_issue,
block:block_rq_complete`` capture, printed with biosnoop's own format strings (bcc
tools/biosnoop.py, 0.26): TIME(s) is the completion time since the first IO, LAT(ms) issue to
completion, QUE(ms) (-Q) insert to issue, COMM/PID the process that inserted the request.

    python -m tests.biosnoop_sample perf.data samples/biosnoop
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

LINE = re.compile(r"^\s*(?P<comm>.+?)\s+(?P<pid>\d+)/\d+\s+(?P<t>\d+\.\d+):\s+block:block_rq_(?P<ev>insert|issue|complete):"
                  r"\s+(?P<maj>\d+),(?P<min>\d+)\s+(?P<rwbs>\S+)\s+(?:(?P<bytes>\d+)\s+)?\(\)\s+(?P<sector>\d+)\s+\+\s+(?P<n>\d+)")


def disk_name(maj: str, mn: str) -> str:
    try:
        return Path(f"/sys/dev/block/{maj}:{mn}").resolve().name
    except OSError:
        return f"{maj}:{mn}"


def main(perf_data: str, out_dir: str) -> None:
    text = subprocess.run(["perf", "script", "-i", perf_data, "-F", "comm,pid,tid,time,event,trace"],
                          capture_output=True, text=True, check=True).stdout
    pending: dict[tuple[str, str, str], dict[str, object]] = {}
    rows = []
    for line in text.splitlines():
        m = LINE.match(line)
        if m is None:
            continue
        key = (m["maj"], m["min"], m["sector"])
        t = float(m["t"])
        if m["ev"] == "insert":
            pending[key] = {"insert": t, "comm": m["comm"].strip(), "pid": m["pid"], "rwbs": m["rwbs"],
                            "bytes": int(m["bytes"] or 0)}
        elif m["ev"] == "issue":
            rec = pending.setdefault(key, {"comm": m["comm"].strip(), "pid": m["pid"], "rwbs": m["rwbs"],
                                           "bytes": int(m["bytes"] or 0)})
            rec["issue"] = t
        elif key in pending and "issue" in pending[key]:
            rec = pending.pop(key)
            rows.append((t, rec, disk_name(m["maj"], m["min"]), m["sector"]))
    rows.sort(key=lambda r: r[0])
    t0 = rows[0][0]
    out = Path(out_dir)
    for name, queue in (("biosnoop.txt", False), ("biosnoop-Q.txt", True)):
        lines = ["%-11s %-14s %-7s %-9s %-1s %-10s %-7s" % ("TIME(s)", "COMM", "PID", "DISK", "T", "SECTOR", "BYTES")
                 + ("%7s " % "QUE(ms)" if queue else "") + "%7s" % "LAT(ms)"]
        for t, rec, disk, sector in rows:
            rw = "W" if "W" in str(rec["rwbs"]) else "R"
            line = "%-11.6f %-14.14s %-7s %-9s %-1s %-10s %-7s" % (t - t0, rec["comm"], rec["pid"], disk, rw, sector, rec["bytes"])
            if queue:
                q = float(rec["issue"]) - float(rec.get("insert", rec["issue"]))  # type: ignore[arg-type]
                line += "%7.2f " % (q * 1000)
            line += "%7.2f" % ((t - float(rec["issue"])) * 1000)  # type: ignore[arg-type]
            lines.append(line)
        (out / name).write_text("\n".join(lines) + "\n")
        print(f"wrote {out / name}: {len(rows)} IOs")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
