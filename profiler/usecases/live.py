"""The running verdict of a capture still in progress (usecases layer): what `--live` draws.

The collectors' members are written under temporary names until they stop, so the live view
does not read the bundle: it hears every member it needs as it is written (``tees``, installed
on the bundle writer), keeps the last ``window`` seconds of each, and every interval builds
the views from those bytes with the same readers, cuts them to the window and runs the same
verdict as the report (analyzers.views, analyzers.verdict), on what the capture holds so far:

- the verdict, its score, confidence and top evidence;
- the top waits (bcc's per-second off-CPU stacks: blocked time per wait reason, thread pool
  and the innermost frames that say who waits), as threads waiting on average;
- the top on-CPU functions per thread pool (the bcc on-CPU sampler, when it runs:
  collectors/bcc/oncpu.py), as a share of the pool's samples;
- the load's throughput and latency, from its log as the load prints it (run, attach --load-log).

Nothing here writes anything: Ctrl-C or the end of the capture writes the bundle and the report
as without ``--live``.
"""

from __future__ import annotations

import copy
import io
import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from profiler.analyzers.load.parse import parse_lines as parse_load
from profiler.analyzers.stacks.waits import wait_frames
from profiler.analyzers.verdict import metrics as metmod
from profiler.analyzers.verdict import ranking
from profiler.analyzers.views import read_views
from profiler.analyzers.views.window import cut
from profiler.bundle import Bundle, Manifest, members
from profiler.knowledge import pool_of
from profiler.tolerant import LINE_LIMIT, open_tolerant

# members the live view hears, and how each keeps only its recent lines
_JSON_KEEP = ("host", "header", "stack")  # lines of these kinds are kept whatever their time
TIMED_JSON = (members.PROC, members.OFFCPU_SLOTS, members.FUTEX_SLOTS, members.BLOCK_HIST)
TIMED_CSV = (members.SYSCALLS,)
WHOLE = (members.STAT,)  # small: kept whole (perf stat's times are relative to its start)
WINDOW = 10.0  # seconds of the recent past the verdict covers
MAX_KEPT = 2_000_000  # bytes kept per member at most (a very busy proc.jsonl: the oldest go first)


class _Member:
    """The recent lines of one member, as written (uncompressed)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.rest = b""
        self.lines: deque[tuple[float | None, bytes]] = deque()  # (time or None: always kept, line)
        self.kept = 0
        self.lock = threading.Lock()

    def hear(self, data: bytes) -> None:
        with self.lock:
            parts = (self.rest + data).split(b"\n")
            self.rest = parts.pop()
            for line in parts:
                if line:
                    self.lines.append((self._time(line), line))
                    self.kept += len(line) + 1

    def _time(self, line: bytes) -> float | None:
        if self.name in TIMED_JSON:
            try:
                d = json.loads(line)
            except ValueError:
                return None
            if not isinstance(d, dict) or d.get("kind") in _JSON_KEEP:
                return None
            t = d.get("t")
            return float(t) if isinstance(t, int | float) else None
        if self.name in TIMED_CSV:
            head = line.split(b",", 1)[0]
            try:
                return float(head)
            except ValueError:
                return None  # the header
        return None

    def trim(self, since: float) -> None:
        """Drop the timed lines before ``since`` (and the oldest past MAX_KEPT bytes)."""
        with self.lock:
            keep = [(t, line) for t, line in self.lines if t is None or t >= since]
            kept = sum(len(line) + 1 for _t, line in keep)
            for i, (t, line) in enumerate(keep):
                if kept <= MAX_KEPT:
                    break
                if t is not None:
                    keep[i] = (t, b"")
                    kept -= len(line) + 1
            self.lines = deque((t, line) for t, line in keep if line)
            self.kept = kept

    def data(self) -> bytes:
        with self.lock:
            return b"\n".join(line for _t, line in self.lines) + b"\n"


class _Heard(Bundle):
    """A bundle made of what the live view heard: the views' readers read it as they read a bundle."""

    def __init__(self, root: Path, manifest: Manifest, heard: dict[str, bytes]) -> None:
        super().__init__(root, manifest)
        self.heard = heard

    def has(self, name: str) -> bool:
        return name in self.heard

    def open_binary(self, name: str, *, text: bool = True, line_limit: int = LINE_LIMIT) -> IO[bytes]:
        log = self.log(name)
        log.reset()
        return open_tolerant(io.BytesIO(self.heard.get(name, b"")), log, text=text, line_limit=line_limit)


@dataclass
class Wait:
    reason: str
    pool: str
    frames: str
    threads: float  # threads waiting there, on average over the window


@dataclass
class LiveModel:
    """What one redraw shows."""

    elapsed: float
    window: float
    backend: str
    category: str | None = None
    score: float = 0.0
    confidence: str = ""
    headline: str = ""
    evidence: list[tuple[str, float | None, str, str]] = field(default_factory=list)  # (metric, value, unit, note)
    waits: list[Wait] = field(default_factory=list)
    oncpu: dict[str, list[tuple[str, float]]] = field(default_factory=dict)  # pool -> [(function, share)]
    oncpu_note: str = ""
    load: str = ""
    notes: list[str] = field(default_factory=list)


class LiveCapture:
    """Hears the members of a capture in progress and makes its running verdict on demand."""

    def __init__(self, out: Path, backend: str, window: float = WINDOW, load_log: Path | None = None) -> None:
        self.out = Path(out)
        self.backend = backend
        self.window = window
        self.members = {n: _Member(n) for n in (*TIMED_JSON, *TIMED_CSV, *WHOLE)}
        self.manifest: Manifest | None = None
        self.started = time.monotonic()
        self.load_log = load_log  # the load's output as the capture copies it (run: BUNDLE/load.log)
        self.oncpu: Callable[[float, float], tuple[dict[str, list[tuple[str, float]]], str]] | None = None

    def tees(self) -> dict[str, Callable[[bytes], None]]:
        return {n: m.hear for n, m in self.members.items()}

    def snapshot(self, manifest: Manifest | None) -> LiveModel:
        now = time.monotonic()
        lo = max(now - self.window, self.started)
        model = LiveModel(elapsed=now - self.started, window=self.window, backend=self.backend)
        for m in self.members.values():
            m.trim(lo - 1.0)
        if manifest is not None:
            try:
                self._verdict(model, copy.deepcopy(manifest), lo, now)
            except Exception as exc:  # noqa: BLE001 - a redraw that fails says why and the next one tries again
                model.notes.append(f"the running verdict could not be made: {type(exc).__name__}: {exc}")
        if self.oncpu is not None:
            model.oncpu, model.oncpu_note = self.oncpu(lo, now)
        model.load = self._load()
        return model

    def _verdict(self, model: LiveModel, manifest: Manifest, lo: float, hi: float) -> None:
        heard = {n: m.data() for n, m in self.members.items() if m.lines}
        b = _Heard(self.out, manifest, heard)
        views = read_views(b)
        met = metmod.compute(cut(views, lo, hi))
        cv = ranking.judge(met).overall
        model.category, model.score, model.headline = cv.category, cv.score, cv.headline
        model.confidence = f"{cv.confidence_label} ({cv.confidence:.2f})"
        model.evidence = [(e.metric, e.value, e.unit or "", e.note) for e in cv.evidence[:3]]
        off = views.offcpu
        if off is not None and off.timed:
            model.waits = self._waits(off.timed, lo, hi)
        elif off is None and self.backend == "perf":
            model.notes.append("waits: the perf backend's off-CPU stacks are decoded after the capture")

    def _waits(self, timed: list[Any], lo: float, hi: float, top: int = 5) -> list[Wait]:
        """Blocked time per (reason, pool, who waits) inside the window, as threads waiting."""
        span = max(hi - lo, 1e-9)
        by: dict[tuple[str, str, str], float] = {}
        for iv in timed:
            a, z, key = iv[0], iv[1], iv[2]
            if z <= lo or a >= hi or len(iv) < 4:
                continue
            us = float(iv[3]) * min(1.0, (min(z, hi) - max(a, lo)) / max(z - a, 1e-9))
            reason, pool, *frames = key.split(";")
            if reason.startswith("preempted"):
                continue  # runnable, not waiting
            user = [f for f in reversed(frames) if not f.endswith("_[k]")]  # innermost first
            who = wait_frames(user, depth=2) or next((f for f in user if f != "[unknown]"), "") or _syscall(frames)
            k = (reason, pool, who)
            by[k] = by.get(k, 0.0) + us / 1e6
        best = sorted(by.items(), key=lambda kv: -kv[1])[:top]
        return [Wait(r, p, w, s / span) for (r, p, w), s in best if s / span >= 0.01]

    def _load(self) -> str:
        if self.load_log is None:
            return ""
        try:
            with open(self.load_log, "rb") as fh:
                text = fh.read().decode("utf-8", "replace")
        except OSError:
            return ""
        parsed = parse_load(text.splitlines())
        if not parsed.intervals:
            return f"load: {parsed.tool or 'unknown tool'}, no interval report yet" if parsed.lines else ""
        last = parsed.intervals[-1]
        lat = ", ".join(f"{k} {v:,.2f} ms" for k, v in sorted(last.latency_ms.items()))
        at = f" at {last.end:g}s" if last.end is not None else ""
        tps = f"{last.tps:,.0f}/s" if last.tps is not None else "?/s"
        return f"load: {parsed.tool}{at}: {tps}" + (f", {lat}" if lat else "")


_SYS = re.compile(r"^__(?:x64|arm64|ia32)_sys_(\w+)_\[k\]$")


def _syscall(frames: list[str]) -> str:
    """The syscall a kernel stack went through (``__x64_sys_futex_[k]`` -> ``futex()``), else ''."""
    for f in frames:
        m = _SYS.match(f)
        if m:
            return f"{m.group(1)}()"
    return ""


def pools_of(comm_counts: dict[tuple[str, str], int], top: int = 3) -> dict[str, list[tuple[str, float]]]:
    """{(thread comm, function): samples} -> per thread pool, its top functions and their shares."""
    per: dict[str, dict[str, int]] = {}
    for (comm, fn), n in comm_counts.items():
        d = per.setdefault(pool_of(comm), {})
        d[fn] = d.get(fn, 0) + n
    out = {}
    for pool, d in sorted(per.items(), key=lambda kv: -sum(kv[1].values())):
        total = sum(d.values()) or 1
        out[pool] = [(fn, n / total) for fn, n in sorted(d.items(), key=lambda kv: (-kv[1], kv[0]))[:top]]
    return out
