"""The kernel side of each bcc collector (collectors layer): its maps read, drained and sent as rows.

Runs in the bcc helper process (collectors/bcc/helper.py), never in the profiler's own: each
``Side`` knows one program's maps byte for byte (struct layouts of collectors/bcc/bpf/*.c,
checked against the sizes the kernel reports for each map), moves finished time slots out of
them every interval, and at the stop adds what was still in flight. What it returns are plain
JSON messages; the collector in the profiler's process turns them into bundle members
(collectors/bcc/{syscalls,blockio,offcpu,futex}.py). Stack ids are sent with their addresses
the first time they appear; naming them is the profiler's job (collectors/bcc/symbols.py).
"""

from __future__ import annotations

import os
import struct
import time
from typing import Any

from profiler.collectors.bcc import bpfsys

Msg = dict[str, Any]

CFG = struct.Struct("<QQII16III")
INLINE_TARGETS = 16
U32 = struct.Struct("<I")
STACK_DEPTH = 127


def _comm(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def _alive_comm(tgid: int, tid: int) -> str | None:
    try:
        with open(f"/proc/{tgid}/task/{tid}/comm", "rb") as fh:
            return _comm(fh.read().strip())
    except OSError:
        return None


class Side:
    """One program's maps. ``layouts``: map name -> (key struct, value struct) as the C declares them."""

    program = ""
    counters: tuple[str, ...] = ()
    layouts: dict[str, tuple[struct.Struct | None, struct.Struct | None]] = {}
    sizes: dict[str, str] = {}  # settings key -> map name whose max_entries it sets
    stack_events = ""  # the counter of events that may walk a stack (offcpu: switch-outs; futex: waits entered)

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings
        self.maps: dict[str, bpfsys.Map] = {}
        self.t0 = 0
        self.slot_ns = int(settings["slot_ns"])
        self.sent: dict[str, set[int]] = {}
        self.stack_every = 1  # walk a stack for one event in this many, at random (cfg; budget_stacks)
        self._base_every = 1
        self._events = (0, 0.0)
        self._cfg_fields: tuple[int, ...] = ()

    def entries(self) -> dict[str, int]:
        return {m: int(self.settings[k]) for k, m in self.sizes.items() if k in self.settings}

    def bind(self, maps: dict[str, bpfsys.Map]) -> None:
        for name, (key, value) in self.layouts.items():
            m = maps.get(name)
            if m is None:
                raise RuntimeError(f"{self.program}: the object has no map {name!r}")
            if (key is not None and key.size != m.key_size) or (value is not None and value.size != m.value_size):
                raise RuntimeError(f"{self.program}: map {name} is {m.key_size}/{m.value_size} bytes, "
                                   f"the reader expects {key.size if key else '?'}/{value.size if value else '?'}")
        self.maps = maps

    def configure(self, t0: int, targets: list[int], stack_every: int = 1) -> None:
        """Write the capture's settings before attaching (t0 arms the programs)."""
        self.t0 = t0
        self.stack_every = max(1, stack_every)
        self._base_every = self.stack_every
        self._events = (0, time.monotonic())
        tg = [int(p) for p in targets]
        if "targets" in self.maps:
            for pid in tg:
                self.maps["targets"].update(U32.pack(pid), b"\x01")
        inline = (tg + [0] * INLINE_TARGETS)[:INLINE_TARGETS]
        # the per-thread array the program masks thread ids (or task hashes) into
        table = self.maps.get("start") or self.maps.get("offstart") or self.maps.get("fstart")
        mask = table.max_entries - 1 if table is not None else 0
        self._cfg_fields = (len(tg), *inline, mask, 0)
        self._write_cfg()

    def _write_cfg(self) -> None:
        self.maps["cfg"].update(U32.pack(0), CFG.pack(self.t0, self.slot_ns, self.stack_every, *self._cfg_fields))

    def budget_stacks(self, counters: dict[str, int]) -> None:
        """Keep the stacks walked within ``stack_budget`` a second (settings; 0: no budget).

        A walk costs the target microseconds (a user stack read frame by frame from its memory,
        the kernel's unwinder, both hashed into a stack map): measured on the event-dense MariaDB
        at 55K switches a second, the walks of one switch-out in 32 were 170 of the 450 ns the
        sched_switch program took per switch. So after each drain the sampling rate is set from
        the last interval's events: one in max(stack_every, events per second / budget), still at
        random. A quiet server keeps one in ``stack_every``; a busy one keeps about ``budget``
        stacks a second, which a profile of its waits needs, not one per thousand events."""
        budget = int(self.settings.get("stack_budget") or 0)
        if not self.stack_events or budget <= 0 or "cfg" not in self.maps:
            return
        now, n = time.monotonic(), int(counters.get(self.stack_events, 0))
        n0, t0 = self._events
        self._events = (n, now)
        if now - t0 < 0.2 or n < n0:
            return
        rate = (n - n0) / (now - t0)
        every = max(self._base_every, min(1 << 20, int(rate / budget) + 1))
        if every != self.stack_every:
            self.stack_every = every
            self._write_cfg()

    def read_counters(self) -> dict[str, int]:
        m = self.maps["counters"]
        return {name: m.percpu_sum(U32.pack(i)) for i, name in enumerate(self.counters) if name}

    def take(self, name: str, cutoff: int | None) -> list[tuple[tuple[Any, ...], tuple[Any, ...]]]:
        """Entries of a slot-keyed map (slot first in the key) whose slot is before ``cutoff``
        (every entry when None), deleted from the map once read."""
        m = self.maps[name]
        key_s, val_s = self.layouts[name]
        assert key_s is not None and val_s is not None
        out = []
        done = []
        for k, v in m.items():
            kk = key_s.unpack(k)
            if cutoff is not None and kk[0] >= cutoff:
                continue
            out.append((kk, val_s.unpack(v)))
            done.append(k)
        m.delete_many(done)
        return out

    def stacks(self, kind: str, table: str, ids: set[int]) -> dict[str, list[int]]:
        """Addresses (innermost first) of the stack ids not sent before."""
        sent = self.sent.setdefault(kind, set())
        out: dict[str, list[int]] = {}
        m = self.maps[table]
        for sid in sorted(i for i in ids if i >= 0 and i not in sent):
            sent.add(sid)
            raw = m.lookup(U32.pack(sid))
            if raw is None:
                out[str(sid)] = []
                continue
            addrs = struct.unpack_from(f"<{len(raw) // 8}Q", raw)
            out[str(sid)] = [a for a in addrs if a]
        return out

    def drain(self, cutoff: int | None) -> Msg | None:
        return None

    def final(self, end_ns: int) -> Msg:
        return {}


class SyscallsSide(Side):
    program = "syscalls.c"
    counters = ("enters", "exits", "", "counts_full", "began_before", "shared_entry")
    layouts = {"counts": (struct.Struct("<IIII"), struct.Struct("<QQ16s")), "start": (U32, struct.Struct("<QII"))}
    sizes = {"max_threads": "start", "count_entries": "counts"}

    def drain(self, cutoff: int | None) -> Msg | None:
        rows = [[slot, tid, tgid, nr, _comm(comm), count, total]
                for (slot, tid, nr, tgid), (count, total, comm) in self.take("counts", cutoff)]
        return {"rows": rows, "counters": self.read_counters()}

    def final(self, end_ns: int) -> Msg:
        in_flight = []
        for _k, v in self.maps["start"].items():
            ts, nr, tid = self.layouts["start"][1].unpack(v)  # type: ignore[union-attr]
            if ts and self.t0 <= ts <= end_ns:
                in_flight.append([tid, nr, ts, os.path.exists(f"/proc/{tid}")])
        return {"in_flight": in_flight}


class BlockSide(Side):
    program = "blockio.c"
    counters = ("issued", "completed", "unmatched_complete", "inflight_full", "hist_full", "tasks_full", "restamped",
                "preflush_complete")
    layouts = {"hist": (struct.Struct("<IIII"), struct.Struct("<Q")), "totals": (struct.Struct("<IIII"), struct.Struct("<QQQQ")),
               "tasks": (struct.Struct("<IIII16s"), struct.Struct("<QQQ")), "inflight": (struct.Struct("<IIQ"), None)}
    sizes = {"max_inflight": "inflight", "hist_entries": "hist", "task_entries": "tasks"}

    def drain(self, cutoff: int | None) -> Msg | None:
        groups: dict[tuple[int, int, int], dict[str, Any]] = {}
        for (slot, dev, op, bucket), (count,) in self.take("hist", cutoff):
            groups.setdefault((slot, dev, op), {"hist": []})["hist"].append([bucket, count])
        for (slot, dev, op, _pad), (count, nbytes, sum_ns, max_ns) in self.take("totals", cutoff):
            g = groups.setdefault((slot, dev, op), {"hist": []})
            g.update(count=count, bytes=nbytes, sum_ns=sum_ns, max_ns=max_ns)
        return {"groups": [[s, d, o, g] for (s, d, o), g in sorted(groups.items())], "counters": self.read_counters()}

    def final(self, end_ns: int) -> Msg:
        key_s, val_s = self.layouts["tasks"]
        assert key_s is not None and val_s is not None
        tasks = []
        for k, v in self.maps["tasks"].items():
            dev, op, tid, tgid, comm = key_s.unpack(k)
            count, nbytes, sum_ns = val_s.unpack(v)
            tasks.append([dev, op, tid, tgid, _comm(comm), count, nbytes, sum_ns])
        return {"tasks": tasks, "in_flight_at_stop": len(self.maps["inflight"].keys())}


class OffCpuSide(Side):
    program = "offcpu.c"
    stack_events = "switch_out"
    counters = ("switch_out", "switch_in", "shared_entry", "blocked_full", "user_stack_collision", "user_stack_error",
                "kernel_stack_collision", "kernel_stack_error", "no_user_stack", "stacks_sampled")
    layouts = {"blocked": (struct.Struct("<IIIIiiII"), struct.Struct("<QQQ16s")),
               "offstart": (U32, struct.Struct("<QQqiiII16s"))}
    sizes = {"user_stacks": "ustacks", "kernel_stacks": "kstacks", "blocked_entries": "blocked",
             "max_threads": "offstart"}

    def _stacks(self, rows: list[list[Any]], ui: int, ki: int) -> Msg:
        return {"ustacks": self.stacks("u", "ustacks", {r[ui] for r in rows}),
                "kstacks": self.stacks("k", "kstacks", {r[ki] for r in rows})}

    def drain(self, cutoff: int | None) -> Msg | None:
        rows = [[slot, back, tgid, tid, _comm(comm), state, us, ks, total, count, head]
                for (slot, back, tgid, tid, us, ks, state, _pad), (total, count, head, comm) in self.take("blocked", cutoff)]
        msg: Msg = {"rows": rows, "counters": self.read_counters()}
        if self.settings.get("ongoing"):
            msg["ongoing"] = self.ongoing(None)
        msg.update(self._stacks(rows + [[0, 0, 0, 0, "", 0, r[4], r[5]] for r in msg.get("ongoing", [])], 6, 7))
        return msg

    def ongoing(self, end_ns: int | None) -> list[list[Any]]:
        """Threads switched out in the window and not back (yet): [tgid, tid, comm, prev_state, ustack, kstack, since]."""
        out = []
        val_s = self.layouts["offstart"][1]
        assert val_s is not None
        for _k, v in self.maps["offstart"].items():
            _key, ts, state, us, ks, tgid, tid, raw_comm = val_s.unpack(v)
            if not ts or ts < self.t0 or (end_ns is not None and ts > end_ns):
                continue
            if _alive_comm(tgid, tid) is None:
                continue  # the thread exited while off the CPU
            out.append([tgid, tid, _comm(raw_comm), state, us, ks, ts])
        return out

    def final(self, end_ns: int) -> Msg:
        """Threads off the CPU when the capture stopped (their stacks not sent before, too)."""
        still = self.ongoing(end_ns)
        return {"still_off": still, **self._stacks([r[:2] + [0, 0, "", 0, r[4], r[5]] for r in still], 6, 7)}


class FutexSide(Side):
    program = "futex.c"
    stack_events = "entered"
    counters = ("entered", "paired", "shared_entry", "waits_full", "locks_full", "user_stack_collision", "user_stack_error",
                "stacks_sampled")
    layouts = {"waits": (struct.Struct("<IIIIiI"), struct.Struct("<QQQQQQ16s")),
               "locks": (struct.Struct("<IIQ"), struct.Struct("<QQQ")), "fstart": (U32, struct.Struct("<QQiIII"))}
    sizes = {"user_stacks": "ustacks", "wait_entries": "waits", "lock_entries": "locks", "max_threads": "fstart"}
    TOP_LOCKS = 200

    def drain(self, cutoff: int | None) -> Msg | None:
        rows = [[slot, back, tgid, tid, _comm(comm), us, total, count, timeouts, eagain, mx, head]
                for (slot, back, tgid, tid, us, _pad), (total, count, timeouts, eagain, mx, head, comm)
                in self.take("waits", cutoff)]
        return {"rows": rows, "ustacks": self.stacks("u", "ustacks", {r[5] for r in rows}), "counters": self.read_counters()}

    def final(self, end_ns: int) -> Msg:
        key_s, val_s = self.layouts["locks"]
        fval = self.layouts["fstart"][1]
        assert key_s is not None and val_s is not None and fval is not None
        locks = []
        lmap = self.maps["locks"]
        for k, v in lmap.items():
            tgid, _pad, uaddr = key_s.unpack(k)
            # one value per CPU (a per-CPU map; one value where the map is shared): summed, max of maxima
            per_cpu = [val_s.unpack_from(v, i) for i in range(0, len(v), lmap.slot)]
            locks.append([tgid, uaddr, sum(p[0] for p in per_cpu), sum(p[1] for p in per_cpu),
                          max(p[2] for p in per_cpu)])
        locks.sort(key=lambda x: -x[2])
        waiting = []
        for _k, v in self.maps["fstart"].items():
            ts, uaddr, us, tgid, tid, _pad = fval.unpack(v)
            if not ts or not self.t0 <= ts <= end_ns:
                continue
            comm = _alive_comm(tgid, tid)
            if comm is not None:
                waiting.append([tgid, tid, comm, us, ts, uaddr])
        return {"locks": locks[:self.TOP_LOCKS], "lock_addresses": len(locks), "waiting": waiting,
                "ustacks": self.stacks("u", "ustacks", {w[3] for w in waiting})}


class OnCpuSide(Side):
    """The live view's sampler (oncpu.c): samples per slot, thread and stack pair."""

    program = "oncpu.c"
    counters = ("samples", "counts_full", "user_stack_lost", "kernel_stack_lost")
    layouts = {"counts": (struct.Struct("<IIIiiI16s"), struct.Struct("<Q"))}
    sizes = {"count_entries": "counts", "user_stacks": "ustacks", "kernel_stacks": "kstacks"}

    def drain(self, cutoff: int | None) -> Msg | None:
        rows = [[slot, tgid, tid, _comm(comm), us, ks, n]
                for (slot, tgid, tid, us, ks, _pad, comm), (n,) in self.take("counts", cutoff)]
        return {"rows": rows, "ustacks": self.stacks("u", "ustacks", {r[4] for r in rows}),
                "kstacks": self.stacks("k", "kstacks", {r[5] for r in rows}), "counters": self.read_counters()}


SIDES: dict[str, type[Side]] = {s.program: s for s in (SyscallsSide, BlockSide, OffCpuSide, FutexSide, OnCpuSide)}
