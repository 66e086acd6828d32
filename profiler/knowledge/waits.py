"""Idle-by-design waits (core layer, pure data): the one table of waits that are not bottlenecks.

A thread that sleeps is not necessarily held back. Event loops wait in epoll for the next
request, completion reapers wait for IOs that other threads submitted, runtimes and thread
pools park threads that have no work, timers sleep between ticks. None of these says the
work path waits for a resource; reading them as IO wait or lock contention is the kind of
mistake the verdict must not make (issue 14: an idle database's io_uring reaper called
IO-bound, Go runtime threads parked in futex called lock contention).

Each ``IdleWait`` names one such wait and the evidence that recognises it:

- ``frames``: user-stack function names (substrings of the demangled name) seen in the off-CPU
  stack at or near the wait, once the generic wait plumbing (``PLUMBING``: futex and condvar
  wrappers of libc, Rust std and parking_lot, the Go runtime's futex calls) is skipped. They
  are matched in the first ``FRAME_DEPTH`` remaining frames, innermost first, so a parked pool
  thread matches and a thread of the same pool queued on a mutex (``LOCK_FRAMES``) does not.
- ``syscalls``: the system call the thread sits in (``/proc/TID/syscall``).
- ``wchans``: the kernel function it sleeps in (``/proc/TID/wchan``, or a kernel frame of its
  off-CPU stack).
- ``runtime``: the entry applies only to targets of this runtime ("any" for all); it lets
  syscall evidence alone decide where the runtime leaves no doubt (every futex wait of a Go
  program's threads is the scheduler parking an idle M: goroutines block in the Go scheduler,
  not in the kernel).
- ``needs_role``: the syscall and wchan alone are not enough: a completion wait is idle by
  design in a dedicated reaper, but the same ``io_uring_enter`` in the thread that submitted
  the IO and waits for it (fio, a synchronous client) is the work path waiting on IO. Without
  a user stack that names the reaper, analyzers.stacks.waits decides from the thread's role.

docs/verdict.md#idle-by-design-waits renders this table; tests check they agree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

POLLER = "poller"  # waits for the next event or request (epoll, poll, select, accept, recv)
REAPER = "reaper"  # waits for completions of IOs that other threads submitted
PARKING = "parking"  # a runtime or pool thread parked because it has no work
TIMER = "timer"  # sleeps until the next tick
SIGNAL = "signal"  # a signal-handling thread waiting for a signal
KINDS = (POLLER, REAPER, PARKING, TIMER, SIGNAL)

# Innermost user frames searched for a table entry, after PLUMBING is skipped.
FRAME_DEPTH = 4


@dataclass(frozen=True)
class IdleWait:
    key: str
    kind: str
    runtime: str  # "any", "go", "rust", "c", "c++", or a program ("mariadb", "redis", ...)
    what: str  # one line, as the report says it
    frames: tuple[str, ...] = ()
    syscalls: tuple[str, ...] = ()
    wchans: tuple[str, ...] = ()
    needs_role: bool = False
    # Thread pools (names as knowledge.pool_of gives them) whose futex waits that no stack names
    # (neither a lock acquire nor another entry) are this wait: a task pool's workers park on
    # their queue's condition variable between tasks, and its stacks often stop in libc (no frame
    # pointers) or carry no symbols at all (the bcc backend). See ``pool_wait``.
    pools: tuple[str, ...] = ()


IDLE_WAITS: tuple[IdleWait, ...] = (
    # ---- pollers: waiting for the next request or event
    IdleWait("epoll", POLLER, "any", "event loop waiting in epoll for the next event",
             frames=("epoll_wait", "epoll_pwait", "aeApiPoll", "aeProcessEvents", "event_base_loop",
                     "ngx_epoll_process_events", "ngx_process_events_and_timers", "WaitEventSetWait",
                     "WaitLatch", "mio::poll::Poll::poll", "mio::sys::unix::selector",
                     "boost::asio::detail::epoll_reactor::run", "folly::EventBase::loopBody",
                     "grpc_core::", "pollset_work", "uv__io_poll"),
             syscalls=("epoll_wait", "epoll_pwait", "epoll_pwait2"), wchans=("ep_poll", "do_epoll_wait")),
    IdleWait("poll", POLLER, "any", "poll/select loop waiting for sockets or pipes",
             frames=("__poll", "poll", "ppoll", "select", "pselect", "handle_connections_sockets",
                     "vio_io_wait", "vio_socket_io_wait"),
             syscalls=("poll", "ppoll", "select", "pselect6"),
             wchans=("poll_schedule_timeout", "do_sys_poll", "do_select", "core_sys_select")),
    IdleWait("accept-recv", POLLER, "any", "waiting for a connection or a request on a socket",
             frames=("accept", "accept4", "recv", "recvfrom", "recvmsg", "my_net_read", "secure_read",
                     "pq_getbyte", "ClientRead"),
             syscalls=("accept", "accept4", "recvfrom", "recvmsg", "recvmmsg"),
             wchans=("inet_csk_accept", "sk_wait_data", "tcp_recvmsg", "unix_stream_read", "sock_recvmsg")),
    IdleWait("go-netpoll", POLLER, "go", "Go netpoller: a runtime thread waiting in epoll for network readiness",
             frames=("runtime.netpoll", "runtime.epollwait"),
             syscalls=("epoll_wait", "epoll_pwait", "epoll_pwait2")),
    # ---- completion reapers: waiting for IOs other threads submitted
    IdleWait("io_uring-reaper", REAPER, "any", "io_uring completion reaper waiting for completions (io_uring_enter GETEVENTS)",
             frames=("__io_uring_get_cqe", "io_uring_wait_cqe", "io_uring_wait_cqes", "io_uring_get_events",
                     "aio_uring::thread_routine", "tpool::aio_uring"),
             syscalls=("io_uring_enter",), wchans=("io_cqring_wait", "io_uring_cqring_wait"), needs_role=True),
    IdleWait("aio-reaper", REAPER, "any", "Linux AIO completion reaper waiting in io_getevents",
             frames=("io_getevents", "io_pgetevents", "aio_linux::getevent_thread_routine", "tpool::aio_linux",
                     "LinuxAIOHandler::poll", "os_aio_linux_collect"),
             syscalls=("io_getevents", "io_pgetevents"), wchans=("read_events",), needs_role=True),
    # ---- runtime parking
    IdleWait("go-park", PARKING, "go", "Go runtime: an idle thread (M) parked by the scheduler (futexsleep/notesleep/stopm)",
             frames=("runtime.notesleep", "runtime.notetsleep", "runtime.stopm", "runtime.findRunnable",
                     "runtime.findrunnable", "runtime.mPark", "runtime.stoplockedm", "runtime.gcstopm",
                     "runtime.schedule", "runtime.park_m"),
             syscalls=("futex",), wchans=("futex_wait", "futex_do_wait")),
    IdleWait("go-sysmon", TIMER, "go", "Go runtime: sysmon and timer threads sleeping between checks",
             frames=("runtime.sysmon", "runtime.usleep", "runtime.notetsleepg", "runtime.timeSleepUntil"),
             syscalls=("nanosleep", "clock_nanosleep")),
    IdleWait("tokio-park", PARKING, "rust", "Rust tokio: a worker or blocking-pool thread parked without tasks",
             frames=("tokio::runtime::park", "tokio::runtime::scheduler::multi_thread::park",
                     "tokio::runtime::scheduler::multi_thread::worker::Context::park",
                     "tokio::runtime::scheduler::current_thread", "tokio::runtime::blocking::pool::Inner::run",
                     "tokio::park")),
    IdleWait("crossbeam-park", PARKING, "rust", "Rust crossbeam/std channels: a thread parked waiting for a message",
             frames=("crossbeam_channel::context::Context::wait_until", "crossbeam_utils::sync::parker",
                     "crossbeam_channel::flavors", "std::sync::mpmc::context::Context::wait_until",
                     "std::sync::mpsc", "std::thread::park", "futures_executor::local_pool::run_executor")),
    IdleWait("rayon-park", PARKING, "rust", "Rust rayon: a worker asleep with no jobs",
             frames=("rayon_core::sleep::Sleep::sleep", "rayon_core::sleep::Sleep::no_work_found",
                     "rayon_core::registry::WorkerThread::wait_until_cold")),
    IdleWait("yatp-park", PARKING, "rust", "TiKV yatp pool: a worker parked with no tasks",
             frames=("yatp::pool::worker::WorkerThread", "yatp::pool::spawn::QueueCore::park",
                     "yatp::queue", "tikv_util::yatp_pool")),
    IdleWait("cpp-pool-park", PARKING, "c++", "C++ thread pool: a worker waiting on its condition variable for tasks",
             frames=("tpool::thread_pool_generic::wait_for_tasks", "tpool::thread_pool_generic::get_task",
                     "rocksdb::ThreadPoolImpl::Impl::BGThread", "folly::ThreadPoolExecutor",
                     "boost::asio::detail::scheduler::do_run_one", "grpc_core::Executor")),
    IdleWait("task-pool-park", PARKING, "any",
             "a task pool's worker waiting on its queue's condition variable for the next task (TiKV's and "
             "RocksDB's pools, named by their threads); a lock acquire its stacks name still counts as a lock",
             pools=("unified-read-po", "raftstore", "apply", "sched-worker-po", "sched-worker-hi", "grpc-server",
                    "store-read-norm", "cop-normal", "rocksdb:low", "rocksdb:high", "rocksdb:bottom", "rocksdb:bg",
                    "raftdb:bg", "split-check", "snap-handler")),
    IdleWait("innodb-background", PARKING, "mariadb", "InnoDB/MariaDB background threads waiting for work or their next period",
             frames=("buf_flush_page_cleaner", "srv_purge_coordinator", "srv_master_callback", "timer_handler",
                     "tpool::thread_pool_generic::timer_generic", "ma_checkpoint_background",
                     "binlog_background_thread", "handle_manager", "os_event::wait", "log_flush_notify")),
    IdleWait("redis-bio", PARKING, "redis", "Redis bio threads (close, fsync, lazy free) waiting for jobs",
             frames=("bioProcessBackgroundJobs",)),
    IdleWait("memcached-maintainers", PARKING, "memcached",
             "memcached maintenance threads (hash expander, LRU crawler/maintainer) waiting for work",
             frames=("assoc_maintenance_thread", "item_crawler_thread", "lru_maintainer_thread",
                     "logger_thread", "conn_timeout_thread", "storage_compact_thread")),
    IdleWait("postgres-background", PARKING, "postgres",
             "PostgreSQL background processes (walwriter, checkpointer, autovacuum launcher) waiting on their latch",
             frames=("WalWriterMain", "CheckpointerMain", "BackgroundWriterMain", "AutoVacLauncherMain",
                     "PgArchiverMain", "ApplyLauncherMain")),
    IdleWait("jvm-park", PARKING, "jvm", "JVM: a pool thread parked (Unsafe.park in getTask/take)",
             frames=("Unsafe_Park", "Parker::park", "ObjectMonitor::wait")),
    # ---- timers and signals
    IdleWait("sleep", TIMER, "any", "a thread sleeping for a fixed time (timer or periodic check)",
             frames=("nanosleep", "clock_nanosleep", "usleep", "sleep", "std::thread::sleep",
                     "std::this_thread::sleep_for"),
             syscalls=("nanosleep", "clock_nanosleep"), wchans=("hrtimer_nanosleep", "do_nanosleep")),
    IdleWait("signal-wait", SIGNAL, "any", "a signal-handling thread waiting for a signal",
             frames=("sigwait", "sigwaitinfo", "sigtimedwait", "signal_hand", "sigsuspend"),
             syscalls=("rt_sigtimedwait", "rt_sigsuspend", "pause", "sigsuspend"),
             wchans=("do_sigtimedwait", "sigsuspend", "sys_pause")),
    IdleWait("child-wait", SIGNAL, "any", "a supervisor waiting for its children (postmaster, nginx master)",
             syscalls=("wait4", "waitid"), wchans=("do_wait",)),
)

BY_KEY = {w.key: w for w in IDLE_WAITS}

# Generic wait plumbing: says "a thread waits" but not for what. Skipped before matching frames.
PLUMBING = (
    "syscall", "__futex", "futex_", "futex", "__lll_", "pthread_cond_", "__pthread_cond_",
    "___pthread_cond_", "__new_sem_wait", "sem_wait", "sem_timedwait", "do_futex_wait", "__new_sem",
    "std::sys::", "std::sync::condvar", "std::sync::poison", "std::sync::once", "parking_lot_core::",
    "parking_lot::condvar", "std::condition_variable::wait", "std::condition_variable::__wait", "std::__condvar",
    "std::_V2::condition_variable_any::wait",
    "runtime.futex", "runtime.futexsleep", "runtime.futexwakeup", "runtime.semasleep",
    "__internal_syscall", "__syscall_cancel", "[unknown]", "[lost user stack]", "[",
)

# Frames that mean "acquiring a lock": a wait on one is contention, never idle by design,
# even inside a pool's loop (a parked worker waits on a condvar, not in a mutex acquire).
LOCK_FRAMES = (
    "pthread_mutex_lock", "__pthread_mutex_lock", "___pthread_mutex_lock", "__pthread_mutex_cond_lock",
    "lll_lock_wait", "__lll_lock_wait", "pthread_rwlock_rdlock", "pthread_rwlock_wrlock",
    "__pthread_rwlock_rdlock", "__pthread_rwlock_wrlock", "std::mutex::lock", "std::shared_mutex",
    "parking_lot::raw_mutex::RawMutex::lock_slow", "parking_lot::raw_rwlock::RawRwLock::lock_",
    "std::sys::sync::mutex", "std::sys::unix::locks::futex_mutex::Mutex::lock_contended",
    "std::sys::sync::rwlock", "spin::mutex", "runtime.lock2", "runtime.lockWithRank",
    "sync.(*Mutex).lockSlow", "sync.(*RWMutex)", "ssux_lock_impl", "srw_mutex_impl", "srw_lock_impl",
    "inline_mysql_mutex_lock", "safe_mutex_lock", "lock_wait", "LWLockAcquire", "PGSemaphoreLock",
    "LockAcquire", "ProcSleep", "XactLockTableWait", "LockBufferForCleanup", "__GI___pthread_mutex_lock",
)
# A wait for another thread or process to let go of something: it may sit in futex, a semaphore or
# even epoll (PostgreSQL's heavyweight lock waits sleep on their latch: epoll_wait under ProcSleep),
# so a lock frame anywhere in the first FRAME_DEPTH meaningful frames makes the wait contention.

# Syscalls that wait for IO the caller needs now (the work path waiting on storage).
SYNC_IO_SYSCALLS = frozenset({
    "fsync", "fdatasync", "sync_file_range", "sync", "syncfs", "msync", "pread64", "pwrite64", "preadv",
    "pwritev", "preadv2", "pwritev2", "fallocate", "ftruncate", "openat", "unlink", "rename", "renameat",
    "renameat2",
})
# Syscalls that wait for completions of IOs submitted earlier (by this thread or another).
COMPLETION_SYSCALLS = frozenset({"io_uring_enter", "io_getevents", "io_pgetevents"})
COMPLETION_WCHANS = ("io_cqring_wait", "io_uring_cqring_wait", "read_events")
# Commit-path syscalls: a flush the caller waits for before it can answer (fsync on commit).
COMMIT_SYSCALLS = frozenset({"fsync", "fdatasync", "sync_file_range", "msync", "syncfs", "sync"})


_BY_POOL = {pool: w for w in IDLE_WAITS for pool in w.pools}


def pool_wait(pool: str | None) -> IdleWait | None:
    """The entry whose pool this thread belongs to (``pool``: knowledge.pool_of of its name): what
    its futex waits are when no stack names them."""
    return _BY_POOL.get(pool) if pool else None


def entries_for(runtime: str | None) -> list[IdleWait]:
    """The entries that may apply to a target of this runtime (None: unknown): the generic and
    program entries always, the runtime entries (go, rust, jvm) only for their runtime, and first."""
    own = [w for w in IDLE_WAITS if runtime is not None and w.runtime == runtime]
    return own + [w for w in IDLE_WAITS if w.runtime not in _RUNTIMES and w not in own]


_RUNTIMES = ("go", "rust", "jvm")
_SUFFIX = re.compile(r"(@@?[A-Z_0-9.]+|\.(constprop|isra|part|cold)\.?\d*)+$")
SUFFIX_TAIL = 256  # characters of a frame's end searched for version and clone suffixes


_GENERIC_ARGS = re.compile(r"(\w)<[^<>]*>")
GENERIC_DEPTH = 8  # nested generic argument lists removed, innermost first


def strip_generics(frame: str) -> str:
    """A Rust or C++ name without its generic arguments: ``yatp::pool::spawn::QueueCore<T>::park``
    -> ``yatp::pool::spawn::QueueCore::park`` (the table names functions, not instantiations; a
    qualified path ``<A as B>::f`` keeps its brackets, which follow no name)."""
    for _ in range(GENERIC_DEPTH):
        if "<" not in frame:
            break
        stripped = _GENERIC_ARGS.sub(r"\1", frame)
        if stripped == frame:
            break
        frame = stripped
    return frame


def normalise(frame: str) -> str:
    """A user frame as the table spells it: no ``__GI_`` alias prefix, no symbol version or
    compiler clone suffix (``epoll_wait@@GLIBC_2.3.2`` -> ``epoll_wait``), no generic arguments
    (``QueueCore<T>::park`` -> ``QueueCore::park``)."""
    while frame.startswith("__GI_"):
        frame = frame[5:]
    if len(frame) > SUFFIX_TAIL:  # the pattern backtracks polynomially: only a name's tail can hold a suffix
        frame = frame[:-SUFFIX_TAIL] + _SUFFIX.sub("", frame[-SUFFIX_TAIL:])
    else:
        frame = _SUFFIX.sub("", frame)
    return strip_generics(frame)


def is_plumbing(frame: str) -> bool:
    return frame == "" or frame.startswith(PLUMBING)


def is_lock_frame(frame: str) -> bool:
    return any(k in frame for k in LOCK_FRAMES)


def frame_hit(frame: str, pattern: str) -> bool:
    """A frame matches a pattern when it is that function (``poll``, ``poll(args)``) or, for a
    qualified pattern (``tokio::runtime::park``, ``runtime.stopm``), contains it."""
    if frame == pattern:
        return True
    if "::" in pattern or "." in pattern:
        return pattern in frame
    if not frame.startswith(pattern):
        return False
    nxt = frame[len(pattern)]
    return not (nxt.isalnum() or nxt == "_")


class _Lock:
    """The sentinel ``match_frames`` returns for a lock acquire."""

    def __repr__(self) -> str:
        return "LOCK"


LOCK = _Lock()


def match_frames(frames: list[str], runtime: str | None = None) -> IdleWait | _Lock | None:
    """What a user stack (innermost first) says the thread waits for: ``LOCK`` when one of its
    first ``FRAME_DEPTH`` meaningful frames (plumbing skipped) acquires a lock; else the
    idle-by-design table entry the first of those frames to match names; else None."""
    meaningful: list[str] = []
    for raw in frames:
        f = normalise(raw)
        if is_lock_frame(f):
            return LOCK
        if is_plumbing(f):
            continue
        meaningful.append(f)
        if len(meaningful) >= FRAME_DEPTH:
            break
    cands = entries_for(runtime)
    for f in meaningful:
        for w in cands:
            if any(frame_hit(f, pat) for pat in w.frames):
                return w
    return None


def wchan_hit(wchan: str, fragments: tuple[str, ...]) -> bool:
    """A kernel wait function is one of these (``ep_poll``, ``poll_schedule_timeout.constprop.0``)."""
    return wchan.startswith(fragments)


def match_syscall(syscall: str | None, wchan: str | None, runtime: str | None) -> IdleWait | None:
    """The idle-by-design wait a syscall (else a wchan) names, without a user stack, or None."""
    cands = entries_for(runtime)
    if syscall:
        for w in cands:
            if syscall in w.syscalls:
                return w
    if wchan:
        for w in cands:
            if wchan_hit(wchan, w.wchans) and (not syscall or not w.syscalls or syscall in w.syscalls
                                                     or syscall not in _KNOWN_SYSCALLS):
                return w
    return None


_KNOWN_SYSCALLS = frozenset(s for w in IDLE_WAITS for s in w.syscalls) | SYNC_IO_SYSCALLS | {"futex"}
