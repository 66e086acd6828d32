"""Wait classification (analyzers layer): what a blocked thread waits for, and whether the wait is idle by design.

Two kinds of evidence, the better one first:

1. the thread's off-CPU stacks (``offcpu.perf.txt.gz``: one kernel + user stack per
   switch-out), where the user frames name the waiter (``tpool::thread_pool_generic::
   wait_for_tasks``, ``runtime.stopm``, ``bioProcessBackgroundJobs``) and a lock acquire
   (``pthread_mutex_lock``, ``runtime.lock2``) tells contention from parking;
2. the procfs sampler's syscall, wchan and state (``proc.jsonl.gz``), which name the
   mechanism (futex, io_uring_enter, epoll_wait) but not who waits.

Every blocked sample gets one class:

  ``io``     the work path waits on storage: D state, fsync/fdatasync, pread/pwrite...
  ``aio``    a completion wait (io_uring_enter, io_getevents): idle by design in a reaper,
             the work path waiting on IO in a thread that submitted it (the thread's role
             decides, analyzers.verdict.threads)
  ``futex``  a user-space lock or condition variable, or a kernel lock (rwsem, mutex)
  ``idle``   idle by design (profiler.knowledge.waits: pollers, runtime and pool parking, signals)
  ``sleep``  timers and sleeps
  ``other``  anything else

plus, for ``idle``/``sleep``/``aio``, the table entry that recognised it. Stacks refine
the procfs classes per thread: a thread's futex time is split between parking and locks in
proportion to its futex stacks' verdicts (``StackMix``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from profiler.analyzers.series import procfs as procmod

from profiler.inputs import perfscript
from profiler.knowledge import waits as kw

IO, AIO, FUTEX, IDLE, SLEEP, OTHER = "io", "aio", "futex", "idle", "sleep", "other"
CLASSES = (IO, AIO, FUTEX, IDLE, SLEEP, OTHER)
_FROM_PROCFS = {procmod.DISK: IO, procmod.FUTEX: FUTEX, procmod.IDLE: IDLE, procmod.SLEEP: SLEEP,
                procmod.OTHER: OTHER}


@dataclass(frozen=True)
class WaitClass:
    cls: str  # one of CLASSES
    entry: str | None = None  # profiler.knowledge.waits key when the table recognised it
    lock: bool = False  # a lock acquire (mutex, rwlock, kernel lock), not a condition wait


def _kind_class(w: kw.IdleWait) -> str:
    if w.kind == kw.REAPER:
        return AIO
    if w.kind == kw.TIMER:
        return SLEEP
    return IDLE


@functools.lru_cache(maxsize=4096)
def classify_sample(state: str, syscall: str | None, wchan: str | None, runtime: str | None) -> WaitClass:
    """One procfs sample of a thread that is not running: state letter, syscall name, wchan
    (pure, and called once per sample of every thread: memoized, a capture has few distinct ones)."""
    wchan = wchan or None
    if state == "D":
        if wchan and ("rwsem" in wchan or "mutex_lock" in wchan):
            return WaitClass(FUTEX, lock=True)
        return WaitClass(IO)
    if state == "I":
        return WaitClass(IDLE)
    if (syscall in kw.COMPLETION_SYSCALLS) or (wchan and kw.wchan_hit(wchan, kw.COMPLETION_WCHANS)):
        w = kw.match_syscall(syscall, wchan, runtime)
        return WaitClass(AIO, w.key if w is not None and w.kind == kw.REAPER else None)
    if syscall in kw.SYNC_IO_SYSCALLS:
        return WaitClass(IO)
    w = kw.match_syscall(syscall, wchan, runtime)
    if w is not None:
        return WaitClass(_kind_class(w), w.key)
    base = _FROM_PROCFS.get(procmod.classify(state, syscall, wchan), OTHER)
    if base == FUTEX and wchan and ("rwsem" in wchan or "mutex_lock" in wchan):
        return WaitClass(FUTEX, lock=True)
    return WaitClass(base)


def by_pool(parts: list[tuple[WaitClass, float]], pool: str | None) -> list[tuple[WaitClass, float]]:
    """A thread's wait classes once its pool is known: a task pool's worker (TiKV's, RocksDB's, by
    its thread name: profiler.knowledge.waits ``pools``) waits for its next task on a condition
    variable, so its futex waits that nothing named are that wait; a lock acquire is still a lock."""
    w = kw.pool_wait(pool)
    if w is None:
        return parts
    return [(WaitClass(IDLE, w.key), f) if p.cls == FUTEX and not p.lock and p.entry is None else (p, f)
            for p, f in parts]


# --------------------------------------------------------------------------- stacks

_SYS = re.compile(r"^(?:__x64_sys_|__ia32_sys_|__arm64_sys_|__se_sys_|__do_sys_|ksys_)(\w+?)(?:\.\w+)?$")
_KERNEL_LOCK = ("rwsem_down", "mutex_lock", "__mutex_lock", "rt_mutex")


@dataclass
class ParsedStack:
    state: str
    kernel: list[str]  # innermost first
    user: list[str]  # innermost first
    syscall: str | None


def parse_stack(key: tuple[str, ...]) -> ParsedStack:
    """A counted off-CPU stack (analyzers.views.stacks: prev_state, then perf script frame lines)."""
    state = key[0] if key else "S"
    kernel: list[str] = []
    user: list[str] = []
    for line in key[1:]:
        f = perfscript.parse_frame(line)
        if f is None:
            continue
        name = f.symbol if f.symbol and f.symbol != "[unknown]" else (
            f"[{f.dso.rsplit('/', 1)[-1]}]" if f.dso and f.dso != "[unknown]" else "[unknown]")
        if (f.dso or "").startswith("[kernel"):
            kernel.append(name)
        else:
            user.append(_demangled(name))
    syscall = None
    for k in kernel:
        m = _SYS.match(k)
        if m:
            syscall = m.group(1)
            break
    return ParsedStack(state=state, kernel=kernel, user=user, syscall=syscall)


def _demangled(name: str) -> str:
    if name.startswith(("_R", "_ZN")):
        from profiler.analyzers.stacks.demangle import demangle

        return demangle(name)
    return name


def classify_stack(st: ParsedStack, runtime: str | None) -> WaitClass | None:
    """One off-CPU switch-out; None when the thread was preempted (runnable, not waiting)."""
    state = st.state.rstrip("+")
    if state in ("R", ""):
        return None
    joined = " ".join(st.kernel[:24])
    if state.startswith("D"):
        if any(k in joined for k in _KERNEL_LOCK):
            return WaitClass(FUTEX, lock=True)
        return WaitClass(IO)
    w = kw.match_frames(st.user, runtime)
    if w is kw.LOCK:
        return WaitClass(FUTEX, lock=True)
    if isinstance(w, kw.IdleWait):
        return WaitClass(_kind_class(w), w.key)
    wchan = next((k for k in st.kernel if not k.startswith(("__traceiter", "__schedule", "schedule", "__x64_sys",
                                                            "do_syscall", "entry_SYSCALL"))), None)
    return classify_sample("S", st.syscall, wchan, runtime)


def wait_frames(user: list[str], depth: int = 3) -> str:
    """The first ``depth`` user frames that say who waits (plumbing and unsymbolised frames
    skipped), innermost first: ``ProcSleep <- LockAcquireExtended <- XactLockTableWait``."""
    names: list[str] = []
    for raw in user:
        f = kw.normalise(raw)
        if (kw.is_plumbing(f) and not kw.is_lock_frame(f)) or f.startswith(("__lll_", "lll_")):
            continue
        names.append(f.split("(", 1)[0])
        if len(names) >= kw.FRAME_DEPTH + depth:
            break
    # a lock acquire under the wait mechanism (PostgreSQL: epoll_wait <- WaitLatch <- ProcSleep)
    # is who waits: start there
    first = next((i for i, f in enumerate(names[:kw.FRAME_DEPTH]) if kw.is_lock_frame(f)), 0)
    return " <- ".join(names[first:first + depth])


def mechanism(st: ParsedStack) -> str:
    """The class the kernel side alone gives (what a procfs sample of the same wait would say)."""
    state = st.state.rstrip("+")
    if state.startswith("D"):
        return FUTEX if any(k in " ".join(st.kernel[:24]) for k in _KERNEL_LOCK) else IO
    wchan = next((k for k in st.kernel if not k.startswith(("__traceiter", "__schedule", "schedule", "__x64_sys",
                                                            "do_syscall", "entry_SYSCALL"))), None)
    return classify_sample("S", st.syscall, wchan, None).cls


@dataclass
class StackMix:
    """One thread's off-CPU switch-outs: per kernel-side class, how its stacks' full verdicts split."""

    switches: int = 0
    by_mechanism: dict[str, dict[WaitClass, int]] = field(default_factory=dict)
    # the waits the stacks call futex (lock acquires and unnamed condition waits): their first
    # meaningful user frames, innermost first, " <- "-joined -> switch-outs
    futex_frames: dict[str, int] = field(default_factory=dict)

    def split(self, cls: str) -> list[tuple[WaitClass, float]] | None:
        """How time the procfs sampler put in ``cls`` divides, or None when no stack says."""
        d = self.by_mechanism.get(cls)
        if not d:
            return None
        tot = sum(d.values())
        return [(wc, n / tot) for wc, n in sorted(d.items(), key=lambda kv: (-kv[1], kv[0].cls, kv[0].entry or ""))]


def stack_mixes(stacks_by_tid: dict[int, dict[tuple[str, ...], int]], tids: Iterable[int],
                runtime: str | None) -> dict[int, StackMix]:
    """Per thread (of ``tids``), its stacks' classes grouped by the procfs class of the same wait."""
    out: dict[int, StackMix] = {}
    cache: dict[tuple[str, ...], tuple[str, WaitClass | None, str]] = {}
    for tid in tids:
        per = stacks_by_tid.get(tid)
        if not per:
            continue
        mix = StackMix()
        for key, n in per.items():
            hit = cache.get(key)
            if hit is None:
                st = parse_stack(key)
                wc0 = classify_stack(st, runtime)
                names = wait_frames(st.user) if wc0 is not None and wc0.cls == FUTEX else ""
                hit = (mechanism(st), wc0, names)
                cache[key] = hit
            mech, wc, names = hit
            if wc is None:
                continue
            mix.switches += n
            bucket = mix.by_mechanism.setdefault(mech, {})
            bucket[wc] = bucket.get(wc, 0) + n
            if names:
                mix.futex_frames[names] = mix.futex_frames.get(names, 0) + n
        if mix.switches:
            out[tid] = mix
    return out


_RUST_HASH = re.compile(r"::h[0-9a-f]{16}$")


def runtime_from_stacks(stacks_by_tid: dict[int, dict[tuple[str, ...], int]], tids: Iterable[int]) -> str | None:
    """"go" or "rust" when these threads' off-CPU user frames say so plainly, else None.

    Go: ``runtime.`` frames make up a fifth of the named user frames. Rust: mangled ``_R``/
    ``_ZN..E`` names with a hash, or ``::h<16 hex>`` suffixes (C++ also has ``::``, so that
    alone proves nothing)."""
    go = rust = named = 0
    for tid in tids:
        for key in (stacks_by_tid.get(tid) or {}):
            for line in key[1:]:
                f = perfscript.parse_frame(line)
                if f is None or (f.dso or "").startswith("[kernel") or not f.symbol or f.symbol == "[unknown]":
                    continue
                named += 1
                if f.symbol.startswith("runtime."):
                    go += 1
                elif f.symbol.startswith("_R") or (f.symbol.startswith("_ZN") and re.search(r"17h[0-9a-f]{16}E", f.symbol)) \
                        or _RUST_HASH.search(f.symbol):
                    rust += 1
        if named > 5000:
            break
    if named and go >= max(3, 0.2 * named):
        return "go"
    if named and rust >= max(3, 0.2 * named):
        return "rust"
    return None
