"""Goroutines by what they wait for, from a Go server's goroutine profile (analyzers layer).

The OS sees a Go server's threads, not its goroutines: ten thousand goroutines queued on one
``sync.Mutex`` leave the threads idle in futex (the scheduler parks them), so lock contention
between goroutines is invisible to perf and /proc. The goroutine profile shows it: every
goroutine's stack, which ends in what it waits for.

Two inputs: the pprof protobuf (``/debug/pprof/goroutine``, debug=0: stacks with counts, read
by profiler.inputs.pprof) and the text dump (``?debug=2``: one block per goroutine, with its
state in the header, ``goroutine 7 [chan receive, 3 minutes]:``). Each goroutine gets:

- a **state** from its innermost frames (:data:`WAITS`, first match from the leaf): ``chan
  receive``, ``chan send``, ``select``, ``sync.Mutex.Lock``, ``sync.RWMutex.RLock``,
  ``sync.WaitGroup.Wait``, ``sync.Cond.Wait``, ``IO wait`` (the netpoller), ``syscall``,
  ``sleep``, a runtime worker (GC, finalizers, scavenger), or ``running`` when its stack ends in
  no wait; the text dump's own state is used where the frames say no more than "parked";
- a **kind** the verdict reads: ``lock`` (queued on a mutex: contention), ``io`` (netpoller:
  network or pipe reads, idle when it is a server waiting for requests), ``syscall`` (blocked in
  the kernel: fsync, file reads), ``chan``/``select``/``wait`` (waiting for another goroutine),
  ``sleep``, ``runtime`` (idle by design), ``run`` (running or runnable);
- its **wait site**: the outermost standard-library frame of the wait (``op``, e.g.
  ``sync.(*Mutex).Lock``) and the first frame of the program's own code above it (``caller``:
  a package whose path starts with a domain, or ``main``), e.g. ``main.lockedWork``.

Goroutines are grouped by (state, op, caller); the groups, the counts by state and by kind,
and folded stacks rooted at the state (for the goroutine flame graph) make one snapshot.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from profiler.inputs.pprof import Profile
from profiler.knowledge import goroutines as kg

LOCK, IO, SYSCALL, CHAN, SELECT, WAIT, SLEEP, RUNTIME, RUN, OTHER = (
    "lock", "io", "syscall", "chan", "select", "wait", "sleep", "runtime", "run", "other")
# what the program's own frames say a parked goroutine waits for (profiler.knowledge.goroutines)
QUEUE, RPC, COMMIT, BACKOFF = kg.QUEUE, kg.RPC, kg.COMMIT, kg.BACKOFF
KINDS = (LOCK, IO, SYSCALL, CHAN, SELECT, WAIT, SLEEP, RUNTIME, RUN, OTHER, QUEUE, RPC, COMMIT, BACKOFF)
# runtime kinds of a parked goroutine whose wait the program's frames may name better
_PARKED = frozenset({LOCK, IO, CHAN, SELECT, WAIT, SLEEP, OTHER})
UNKNOWN_FRAME = "[unknown]"  # what profiler.inputs.pprof names a sample with no location
NO_STACK = "(no stack: running on another thread)"
MAX_FRAMES = 256  # frames kept of one goroutine's stack
MAX_GOROUTINES = 2_000_000

# (frame name, or prefix ending in "*"; state; kind), tried from the leaf outwards: the first
# frame that matches any entry decides. More specific entries (RWMutex) come before the
# semaphore they park on.
WAITS: tuple[tuple[str, str, str], ...] = (
    ("sync.(*RWMutex).RLock", "sync.RWMutex.RLock", LOCK),
    ("sync.(*RWMutex).Lock", "sync.RWMutex.Lock", LOCK),
    ("sync.(*Mutex).Lock", "sync.Mutex.Lock", LOCK),
    ("internal/sync.(*Mutex).Lock", "sync.Mutex.Lock", LOCK),
    ("internal/sync.(*Mutex).lockSlow", "sync.Mutex.Lock", LOCK),
    ("sync.(*Mutex).lockSlow", "sync.Mutex.Lock", LOCK),
    ("sync.runtime_SemacquireRWMutexR", "sync.RWMutex.RLock", LOCK),
    ("sync.runtime_SemacquireRWMutex", "sync.RWMutex.Lock", LOCK),
    ("sync.runtime_SemacquireMutex", "sync.Mutex.Lock", LOCK),
    ("internal/sync.runtime_SemacquireMutex", "sync.Mutex.Lock", LOCK),
    ("sync.(*WaitGroup).Wait", "sync.WaitGroup.Wait", WAIT),
    ("sync.(*Cond).Wait", "sync.Cond.Wait", WAIT),
    ("sync.runtime_notifyListWait", "sync.Cond.Wait", WAIT),
    ("sync.runtime_SemacquireWaitGroup", "sync.WaitGroup.Wait", WAIT),
    ("sync.runtime_Semacquire", "semacquire", WAIT),
    ("runtime.chanrecv", "chan receive", CHAN),
    ("runtime.chanrecv1", "chan receive", CHAN),
    ("runtime.chanrecv2", "chan receive", CHAN),
    ("runtime.chansend", "chan send", CHAN),
    ("runtime.chansend1", "chan send", CHAN),
    ("runtime.selectgo", "select", SELECT),
    ("runtime.block", "select (no cases)", SELECT),
    ("internal/poll.runtime_pollWait", "IO wait", IO),
    ("time.Sleep", "sleep", SLEEP),
    ("syscall.Syscall", "syscall", SYSCALL),
    ("syscall.Syscall6", "syscall", SYSCALL),
    ("syscall.RawSyscall", "syscall", SYSCALL),
    ("syscall.RawSyscall6", "syscall", SYSCALL),
    ("syscall.syscall", "syscall", SYSCALL),
    ("internal/runtime/syscall.Syscall6", "syscall", SYSCALL),
    ("runtime/internal/syscall.Syscall6", "syscall", SYSCALL),
    ("runtime.gcBgMarkWorker", "GC worker", RUNTIME),
    ("runtime.bgsweep", "GC sweeper", RUNTIME),
    ("runtime.bgscavenge", "GC scavenger", RUNTIME),
    ("runtime.forcegchelper", "forced GC helper", RUNTIME),
    ("runtime.runfinq", "finalizers", RUNTIME),
    ("runtime.runCleanups", "cleanups", RUNTIME),
    ("runtime.unique_runtime_registerUniqueMapCleanup.func*", "runtime worker", RUNTIME),
    ("runtime/trace.*", "tracer", RUNTIME),
    ("runtime/pprof.writeGoroutine", "running (this profile)", RUN),
    ("runtime/pprof.*", "running (this profile)", RUN),
    ("runtime.gopark", "parked", OTHER),
    ("runtime.goparkunlock", "parked", OTHER),
)
_EXACT = {name: (state, kind) for name, state, kind in WAITS if not name.endswith("*")}
_PREFIX = tuple((name[:-1], state, kind) for name, state, kind in WAITS if name.endswith("*"))

# States that a frame further out may name better (a semaphore under a WaitGroup, a bare gopark).
_GENERIC = frozenset({"parked", "semacquire"})

# The text dump's states, where they say more than the frames (a goroutine parked in gopark
# with frames we do not know): the kind of each.
_TEXT_STATES = {
    "chan receive": CHAN, "chan receive (nil chan)": CHAN, "chan send": CHAN, "chan send (nil chan)": CHAN,
    "select": SELECT, "select (no cases)": SELECT, "IO wait": IO, "sleep": SLEEP, "syscall": SYSCALL,
    "sync.Mutex.Lock": LOCK, "sync.RWMutex.Lock": LOCK, "sync.RWMutex.RLock": LOCK,
    "sync.WaitGroup.Wait": WAIT, "sync.Cond.Wait": WAIT, "semacquire": WAIT, "running": RUN, "runnable": RUN,
    "GC worker (idle)": RUNTIME, "GC sweep wait": RUNTIME, "GC scavenge wait": RUNTIME,
    "finalizer wait": RUNTIME, "force gc (idle)": RUNTIME, "cleanup wait": RUNTIME,
}

# Frames that belong to the wait itself, not to the code that waits.
_PLUMBING = ("runtime.", "internal/", "sync.", "sync/", "syscall.", "time.", "net.", "os.", "io.",
             "bufio.", "crypto/tls.", "context.")


def _pkg(frame: str) -> str:
    """The import path of a frame's package: ``go.etcd.io/etcd/server/v3/wal.(*WAL).sync`` ->
    ``go.etcd.io/etcd/server/v3/wal``."""
    slash = frame.rfind("/")
    dot = frame.find(".", slash + 1)
    return frame[:dot] if dot > 0 else frame


def is_own_code(frame: str) -> bool:
    """The program's own code (and its dependencies), not the Go standard library: a package path
    that starts with a domain (``github.com/...``, ``go.etcd.io/...``) or ``main``."""
    pkg = _pkg(frame)
    first = pkg.split("/", 1)[0]
    return pkg == "main" or pkg.startswith("main.") or "." in first


def classify(frames_leaf_first: list[str]) -> tuple[str, str, str, str]:
    """(state, kind, op, caller) of one goroutine's stack, leaf first.

    The state is the runtime's (how it is parked); the kind, op and caller say what it waits
    for: the program's own frames above the wait when the table of profiler.knowledge.goroutines
    names one (a lock waiter, a token queue, an RPC to another tier), else the runtime's wait
    (``sync.(*Mutex).Lock``, ``chan receive``...)."""
    state, kind, op, caller = _runtime_wait(frames_leaf_first)
    if kind in _PARKED:
        app = app_wait(frames_leaf_first)
        if app is not None:
            w, i = app
            rest = frames_leaf_first[i + 1:]
            return state, w.kind, frames_leaf_first[i], next((f for f in rest if is_own_code(f)), "")
    return state, kind, op, caller


def app_wait(frames_leaf_first: list[str]) -> tuple[kg.GoWait, int] | None:
    """The table entry (profiler.knowledge.goroutines) the innermost program frames name, and
    the index of the frame that matched, or None."""
    for i, f in enumerate(frames_leaf_first[:kg.DEPTH]):
        w = kg.match_frame(f)
        if w is not None:
            return w, i
    return None


def _runtime_wait(frames_leaf_first: list[str]) -> tuple[str, str, str, str]:
    if all(f in ("", UNKNOWN_FRAME) for f in frames_leaf_first):
        # the profile leaves out the stack of a goroutine running on another thread when it
        # is taken (one sample with no location: seen from Go 1.19 to 1.26)
        return "running", RUN, NO_STACK, ""
    state, kind, at = "running", RUN, -1
    for i, f in enumerate(frames_leaf_first):
        hit = _EXACT.get(f)
        if hit is None:
            for prefix, s, k in _PREFIX:
                if f.startswith(prefix):
                    hit = (s, k)
                    break
        if hit is not None and (at < 0 or state in _GENERIC):
            state, kind, at = hit[0], hit[1], i
            if state not in _GENERIC:
                break
    op = ""
    caller = ""
    if at >= 0:
        # the outermost standard-library frame of the wait, then the first own-code frame above it
        j = at
        while j + 1 < len(frames_leaf_first) and frames_leaf_first[j + 1].startswith(_PLUMBING):
            j += 1
        op = frames_leaf_first[j] if state not in _GENERIC else frames_leaf_first[at]
        rest = frames_leaf_first[j + 1:]
    else:
        rest = frames_leaf_first
    caller = next((f for f in rest if is_own_code(f)), rest[0] if rest else "")
    if at < 0 and frames_leaf_first:
        op = frames_leaf_first[0]
    return state, kind, op, caller


@dataclass
class GoroutineGroup:
    state: str
    kind: str
    op: str  # e.g. sync.(*Mutex).Lock
    caller: str  # e.g. main.lockedWork
    count: int
    stack: tuple[str, ...] = ()  # one example, root first
    wait: str = ""  # the profiler.knowledge.goroutines key that named the wait, if one did

    @property
    def site(self) -> str:
        """``sync.(*Mutex).Lock <- main.lockedWork``."""
        return " <- ".join(x for x in dict.fromkeys((self.op, self.caller)) if x)


@dataclass
class GoroutineSnapshot:
    t: float  # capture clock
    total: int = 0
    by_state: dict[str, int] = field(default_factory=dict)
    by_kind: dict[str, int] = field(default_factory=dict)
    groups: list[GoroutineGroup] = field(default_factory=list)  # largest first
    folded: dict[str, int] = field(default_factory=dict)  # "state;root;...;leaf" -> goroutines
    source: str = "pprof"  # "pprof" (debug=0) or "text" (debug=2)
    warnings: list[str] = field(default_factory=list)

    def count(self, kind: str) -> int:
        return self.by_kind.get(kind, 0)


def _fold_name(frame: str) -> str:
    return frame.replace(";", ":").replace("\n", " ")


def summarize(stacks: Iterable[tuple[tuple[str, ...], int]], t: float, source: str = "pprof",
              text_states: Iterable[str | None] | None = None) -> GoroutineSnapshot:
    """A snapshot from (frames root first, goroutines) pairs; ``text_states`` (one per pair) are
    the debug=2 dump's header states."""
    snap = GoroutineSnapshot(t=t, source=source)
    groups: dict[tuple[str, str, str], GoroutineGroup] = {}
    states = iter(text_states) if text_states is not None else None
    for frames, n in stacks:
        header = next(states, None) if states is not None else None
        if n <= 0:
            continue
        leaf_first = list(reversed(frames[-MAX_FRAMES:]))
        state, kind, op, caller = classify(leaf_first)
        named = app_wait(leaf_first) if kind in kg.KINDS else None
        if header and named is None and (kind == OTHER or state in ("running", "semacquire")):
            base = header.split(",", 1)[0].strip()
            if base in _TEXT_STATES:
                state, kind = base, _TEXT_STATES[base]
        snap.total += n
        snap.by_state[state] = snap.by_state.get(state, 0) + n
        snap.by_kind[kind] = snap.by_kind.get(kind, 0) + n
        key = (state, op, caller)
        g = groups.get(key)
        if g is None:
            groups[key] = GoroutineGroup(state, kind, op, caller, n, tuple(frames[-MAX_FRAMES:]),
                                         named[0].key if named is not None else "")
        else:
            g.count += n
        shown = (op,) if op == NO_STACK else frames[-MAX_FRAMES:]
        line = ";".join([state, *(_fold_name(f) for f in shown)])
        snap.folded[line] = snap.folded.get(line, 0) + n
    snap.groups = sorted(groups.values(), key=lambda g: (-g.count, g.state, g.op, g.caller))
    return snap


def from_profile(profile: Profile, t: float) -> GoroutineSnapshot:
    """A goroutine profile (debug=0 pprof): the ``goroutine`` sample type's counts."""
    try:
        i = profile.index("goroutine")
    except Exception:  # noqa: BLE001 - a profile of another kind: its last type
        i = len(profile.sample_types) - 1
    return summarize(profile.stacks(i), t, "pprof")


# --------------------------------------------------------------------------- the debug=2 text dump

_HEADER = re.compile(r"^goroutine (\d+)(?: gp=\S+ m=\S+(?: mp=\S+)?)? \[([^\]]*)\]:\s*$")


def _strip_args(line: str) -> str:
    """``sync.(*Mutex).Lock(0xc000012345)`` -> ``sync.(*Mutex).Lock``: cut the trailing argument
    list (matched from its closing parenthesis, so receivers like ``(*Mutex)`` stay)."""
    if not line.endswith(")"):
        return line
    depth = 0
    for i in range(len(line) - 1, -1, -1):
        c = line[i]
        if c == ")":
            depth += 1
        elif c == "(":
            depth -= 1
            if depth == 0:
                return line[:i] or line
    return line


def parse_text_dump(lines: Iterable[str]) -> Iterator[tuple[tuple[str, ...], str]]:
    """(frames root first, header state) of each goroutine in a ``debug=2`` dump.

    Function lines name the function (arguments cut); tab-indented lines give its file (skipped);
    ``created by`` lines are not frames of the goroutine; anything else is skipped."""
    state: str | None = None
    frames: list[str] = []
    count = 0
    for raw in lines:
        line = raw.rstrip("\n")
        m = _HEADER.match(line)
        if m:
            if state is not None:
                yield tuple(reversed(frames)), state
                count += 1
                if count >= MAX_GOROUTINES:
                    return
            state, frames = m.group(2), []
            continue
        if state is None or not line or line.startswith(("\t", " ")):
            continue
        if line.startswith("created by ") or line.startswith("...additional frames elided"):
            continue
        if line.startswith("goroutine "):
            continue
        if len(frames) < MAX_FRAMES:
            frames.append(_strip_args(line.strip()))
    if state is not None:
        yield tuple(reversed(frames)), state


def from_text(lines: Iterable[str], t: float) -> GoroutineSnapshot:
    pairs = list(parse_text_dump(lines))
    return summarize(((f, 1) for f, _ in pairs), t, "text", (s for _, s in pairs))
