"""The bcc backend's per-slot off-CPU member as the off-CPU view (analyzers layer).

offcpu.slots.jsonl.gz (collectors/bcc/slots.py writes it) holds, for every time slot of the
capture, the blocked nanoseconds per thread, state and stack. Read once, it gives the off-CPU
view everything the perf backend's switch-by-switch member gives:

- ``folded``: blocked microseconds per ``wait reason;thread pool;stack`` (the reason from the
  thread's real state and its kernel frames, as for perf);
- ``stacks``: per thread, every (state, stack) and how many switch-outs it took, in the frame
  lines the wait classification reads (analyzers/stacks/waits.py): what tells a lock wait in
  ``pthread_cond_wait`` from an idle pool's, per thread, as the perf backend does;
- ``futex``: the same for stacks through futex code;
- ``timed``: (slot start, slot end, stack, microseconds) per slot and stack, so a range of the
  report has the off-CPU time of its own seconds.

A thread still off the CPU at the stop counts one switch-out (its time up to the stop is in).
"""

from __future__ import annotations

import json
from typing import Any

from profiler.analyzers.stacks import offcpu
from profiler.analyzers.views.stacks import BCC_MIN_NS, OffCpuView

from profiler.bundle import Bundle, members
from profiler.knowledge import pool_of

# the state the collector wrote -> perf's prev_state letter, as the analyzers read it
LETTER = {"runnable": "R", "sleep": "S", "disk": "D", "other": "T"}
KSUFFIX = "_[k]"


def frame_lines(frames: list[str]) -> tuple[str, ...]:
    """Root-first folded frames -> innermost-first frame lines in perf script's layout
    (``\\t0 symbol (dso)``; kernel frames in ``[kernel.kallsyms]``)."""
    out = []
    for f in reversed(frames):
        if f.endswith(KSUFFIX):
            out.append(f"\t0 {f[:-len(KSUFFIX)]} ([kernel.kallsyms])")
        elif f.startswith("[") and f.endswith("]"):
            out.append(f"\t0 [unknown] ({f[1:-1]})")
        else:
            out.append(f"\t0 {f} ([unknown])")
    return tuple(out)


class _Stack:
    __slots__ = ("frames", "futex", "leaf_first", "lines", "reasons")

    def __init__(self, text: str) -> None:
        self.frames = [f for f in text.split(";") if f]
        self.leaf_first = [f[:-len(KSUFFIX)] if f.endswith(KSUFFIX) else f for f in reversed(self.frames)]
        self.lines = frame_lines(self.frames)
        self.futex = any("futex" in f for f in self.frames if f.endswith(KSUFFIX))
        self.reasons: dict[str, str] = {}

    def reason(self, letter: str) -> str:
        r = self.reasons.get(letter)
        if r is None:
            r = self.reasons[letter] = offcpu.wait_reason(letter, self.leaf_first)
        return r


def read_offcpu_slots(bundle: Bundle, *, pools: bool = True) -> OffCpuView:
    view = OffCpuView(source=members.OFFCPU_SLOTS)
    stacks: dict[int, _Stack] = {}
    keys: dict[tuple[int, str, str], str] = {}
    folded: dict[str, int] = {}
    by_slot: dict[tuple[float, float, str], int] = {}
    switches: dict[tuple[int, int, str], int] = {}  # (tid, stack, letter) -> switch-outs
    blocked: dict[tuple[int, int, str], int] = {}
    try:
        for line in bundle.iter_lines(members.OFFCPU_SLOTS):
            x: dict[str, Any] = json.loads(line)
            kind = x.get("kind")
            if kind == "stack":
                stacks[int(x["id"])] = _Stack(str(x.get("frames") or ""))
            elif kind == "slot":
                t, end = float(x["t"]), float(x["end"])
                for tid, _pid, comm, state, sid, ns, count in x["rows"]:
                    st = stacks.get(int(sid))
                    if st is None:
                        continue
                    letter = LETTER.get(state, "T")
                    k = keys.get((sid, comm, letter))
                    if k is None:
                        root = (pool_of(comm) if pools else comm).replace(" ", "_")
                        k = keys[(sid, comm, letter)] = ";".join(
                            [st.reason(letter), root, *st.frames])
                    folded[k] = folded.get(k, 0) + ns
                    by_slot[(t, end, k)] = by_slot.get((t, end, k), 0) + ns
                    w = (int(tid), int(sid), letter)
                    switches[w] = switches.get(w, 0) + int(count)
                    blocked[w] = blocked.get(w, 0) + int(ns)
    except (ValueError, KeyError, TypeError) as exc:
        view.error = exc
        return view
    # microseconds, as the perf backend's off-CPU graph counts them
    view.folded = {k: round(v / 1000) for k, v in folded.items() if v > BCC_MIN_NS}
    view.timed = [(a, z, k, ns / 1000) for (a, z, k), ns in sorted(by_slot.items()) if ns > BCC_MIN_NS]
    for (tid, sid, letter), n in switches.items():
        if not n and not blocked[(tid, sid, letter)]:
            continue
        st = stacks[sid]
        key = (letter, *st.lines)
        per = view.stacks.setdefault(tid, {})
        per[key] = per.get(key, 0) + max(n, 1)
        view.switches += max(n, 1)
        if st.futex:
            fut = view.futex.setdefault(tid, {})
            fut[st.lines] = fut.get(st.lines, 0) + max(n, 1)
    return view
