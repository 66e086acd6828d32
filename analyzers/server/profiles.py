"""A Go server's mutex, block and CPU profiles over the capture window (analyzers layer).

The mutex and block profiles are cumulative since the server turned them on
(``runtime.SetMutexProfileFraction`` / ``SetBlockProfileRate``): the capture takes one at the
start and one at the end, and the window's contention is their difference, stack by stack
(a stack whose value fell means the profile was reset: its end value counts). Both have two
sample types, ``contentions``/count and ``delay``/nanoseconds. In the mutex profile a stack
ends where the lock was *released* (``sync.(*Mutex).Unlock`` and its caller: who held the lock
that others waited for); in the block profile where a goroutine *waited* (``sync.(*Mutex).Lock``,
a channel operation, ``select``).

A profile with no samples at either end means the server did not turn that profile on, or
nothing blocked: the report says which it cannot tell.

The CPU profile (``/debug/pprof/profile?seconds=N``) is the Go runtime's own sampling of the
same window perf sampled: its top functions are a cross-check of the perf flame graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from profiler.analyzers.server.goroutines import is_own_code

from profiler.inputs.pprof import Profile

TOP = 10
# Frames where a goroutine waits for a Go lock (block profile leaves, goroutine wait ops).
LOCK_OPS = ("sync.(*Mutex).Lock", "sync.(*RWMutex).Lock", "sync.(*RWMutex).RLock", "internal/sync.(*Mutex).Lock",
            "sync.(*Mutex).lockSlow", "internal/sync.(*Mutex).lockSlow")


@dataclass
class Contention:
    """One stack's share of a mutex or block profile over the window."""

    site: str  # the own-code frame nearest the leaf, else the leaf
    leaf: str
    contentions: float
    delay_s: float
    stack: tuple[str, ...] = ()  # root first


@dataclass
class ContentionProfile:
    kind: str  # "mutex" | "block"
    seconds: float  # the window between the two profiles
    contentions: float = 0.0
    delay_s: float = 0.0
    top: list[Contention] = field(default_factory=list)
    folded: dict[str, int] = field(default_factory=dict)  # delay (us) per stack, for a flame graph
    enabled: bool = True  # False: both ends empty (not turned on, or nothing blocked)
    lock_delay_s: float = 0.0  # of delay_s, the waits on Go locks (a stack through LOCK_OPS)

    @property
    def delay_per_s(self) -> float:
        """Seconds of waiting per second of the window (goroutines waiting, on average)."""
        return self.delay_s / self.seconds if self.seconds > 0 else 0.0


def _index(profile: Profile, name: str, fallback: int) -> int:
    for i, st in enumerate(profile.sample_types):
        if st.type == name:
            return i
    return fallback


def _totals(profile: Profile) -> dict[tuple[str, ...], tuple[float, float]]:
    """stack (root first) -> (contentions, delay in seconds)."""
    ci = _index(profile, "contentions", 0)
    di = _index(profile, "delay", len(profile.sample_types) - 1)
    scale = 1e-9 if profile.sample_types and profile.sample_types[di].unit == "nanoseconds" else 1.0
    out: dict[tuple[str, ...], tuple[float, float]] = {}
    for key, values in profile.all_values():
        c = values[ci] if ci < len(values) else 0
        d = values[di] * scale if di < len(values) else 0.0
        old = out.get(key, (0.0, 0.0))
        out[key] = (old[0] + c, old[1] + d)
    return out


def _site(stack: tuple[str, ...]) -> str:
    for f in reversed(stack):
        if is_own_code(f):
            return f
    return stack[-1] if stack else "[unknown]"


def contention(kind: str, start: Profile | None, end: Profile, seconds: float) -> ContentionProfile:
    """The window's contention: end minus start, stack by stack."""
    a = _totals(start) if start is not None else {}
    b = _totals(end)
    out = ContentionProfile(kind=kind, seconds=seconds)
    out.enabled = bool(a or b)
    rows: list[Contention] = []
    for stack, (c1, d1) in b.items():
        c0, d0 = a.get(stack, (0.0, 0.0))
        c, d = (c1 - c0, d1 - d0) if c1 >= c0 and d1 >= d0 else (c1, d1)
        if c <= 0 and d <= 0:
            continue
        rows.append(Contention(_site(stack), stack[-1] if stack else "[unknown]", c, d, stack))
        out.contentions += c
        out.delay_s += d
        if any(f in LOCK_OPS for f in stack[-6:]):
            out.lock_delay_s += d
        if d > 0:
            line = ";".join(f.replace(";", ":") for f in stack)
            out.folded[line] = out.folded.get(line, 0) + max(1, int(d * 1e6))
    out.top = sorted(rows, key=lambda r: (-r.delay_s, -r.contentions, r.site))[:TOP]
    return out


@dataclass
class CpuTop:
    """The server's own CPU profile: total CPU seconds and the functions that used most of it."""

    seconds: float  # the profile's duration
    cpu_s: float
    flat: list[tuple[str, float]] = field(default_factory=list)  # (function, share of samples as the leaf)


def cpu_top(profile: Profile) -> CpuTop:
    i = profile.index("cpu") if any(st.type == "cpu" for st in profile.sample_types) else len(profile.sample_types) - 1
    scale = 1e-9 if profile.sample_types and profile.sample_types[i].unit == "nanoseconds" else 1.0
    flat: dict[str, float] = {}
    total = 0.0
    for stack, v in profile.stacks(i):
        flat[stack[-1]] = flat.get(stack[-1], 0.0) + v
        total += v
    top = sorted(flat.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP]
    return CpuTop(seconds=profile.duration_nanos / 1e9, cpu_s=total * scale,
                  flat=[(f, v / total) for f, v in top] if total else [])
