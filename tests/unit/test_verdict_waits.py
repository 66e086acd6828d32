"""Wait classification: idle-by-design waits (pollers, reapers, parking, timers) against the work path.

The stacks under tests/data/waits/ are real off-CPU switch-outs (perf script text of
offcpu.perf.txt.gz) taken from scenario captures on this project's VM: MariaDB, Redis,
PostgreSQL, etcd (a stripped Go binary) and memcached, each named after what it shows. The
frame-list cases use the function names the runtimes' and servers' own sources give their
waits (Go's runtime.stopm, tokio's park, InnoDB's tpool).
"""

from __future__ import annotations

import re

import pytest
from profiler.analyzers.stacks import waits as sw
from profiler.analyzers.verdict.threads import ThreadTime, assign_roles

from profiler.knowledge import waits as kw
from tests.conftest import ROOT, TESTS

DATA = TESTS / "data" / "waits"
DOCS = ROOT / "docs" / "verdict.md"


def _stack(name: str) -> sw.ParsedStack:
    lines = (DATA / f"{name}.txt").read_text().splitlines()
    state = re.search(r"prev_state=(\S+)", lines[0])
    assert state is not None
    return sw.parse_stack((state.group(1), *lines[1:]))


# --------------------------------------------------------------------------- real stacks


@pytest.mark.parametrize(("name", "runtime", "cls", "entry", "lock"), [
    ("mariadb-connection-poll", None, sw.IDLE, "poll", False),  # a connection thread waiting for its client
    ("redis-epoll", None, sw.IDLE, "epoll", False),  # the event loop between requests
    ("postgres-commit-fdatasync", None, sw.IO, None, False),  # the commit path: D state in fdatasync
    ("etcd-go-futex-stripped", "go", sw.IDLE, "go-park", False),  # Go M parked: no symbols, the runtime says
    ("etcd-go-futex-stripped", None, sw.FUTEX, None, False),  # runtime unknown: a futex wait, not named idle
    ("memcached-mutex", None, sw.FUTEX, None, True),  # __lll_lock_wait: a mutex acquire
    ("memcached-lru-sleep", None, sw.SLEEP, "sleep", False),  # the LRU maintainer's timer
    ("mariadb-condvar-unnamed", None, sw.FUTEX, None, False),  # a condition wait nobody named: stays futex
])
def test_real_stacks(name: str, runtime: str | None, cls: str, entry: str | None, lock: bool) -> None:
    wc = sw.classify_stack(_stack(name), runtime)
    assert wc is not None
    assert (wc.cls, wc.entry, wc.lock) == (cls, entry, lock)


def test_parse_stack_splits_kernel_and_user_frames_and_finds_the_syscall() -> None:
    st = _stack("postgres-commit-fdatasync")
    assert st.state == "D" and st.syscall == "fdatasync"
    assert st.kernel[0] == "__traceiter_sched_switch" and "io_schedule" in st.kernel
    assert st.user[0] == "fdatasync" and "XLogFlush" in st.user
    assert sw.mechanism(st) == sw.IO


def test_preempted_switch_is_not_a_wait() -> None:
    st = _stack("redis-epoll")
    st.state = "R+"
    assert sw.classify_stack(st, None) is None


# --------------------------------------------------------------------------- frames (innermost first)


@pytest.mark.parametrize(("frames", "runtime", "want"), [
    (["runtime.futex", "runtime.futexsleep", "runtime.notesleep", "runtime.stopm", "runtime.findRunnable"], "go",
     "go-park"),
    (["runtime.futex", "runtime.futexsleep", "runtime.lock2", "runtime.schedule"], "go", kw.LOCK),  # runtime lock
    (["runtime.usleep", "runtime.sysmon", "runtime.newm.func1"], "go", "go-sysmon"),
    (["runtime.epollwait", "runtime.netpoll", "runtime.findRunnable"], "go", "go-netpoll"),
    (["syscall", "std::sys::unix::futex::futex_wait", "std::sync::condvar::Condvar::wait",
      "tokio::runtime::scheduler::multi_thread::park::Parker::park", "tokio::runtime::scheduler::multi_thread::worker::Context::park"],
     "rust", "tokio-park"),
    (["syscall", "parking_lot_core::parking_lot::park", "yatp::pool::spawn::QueueCore::park", "yatp::pool::worker::WorkerThread::run"],
     "rust", "yatp-park"),
    (["syscall", "parking_lot_core::parking_lot::park", "parking_lot::raw_mutex::RawMutex::lock_slow",
      "raftstore::store::fsm::apply"], "rust", kw.LOCK),
    (["__futex_abstimed_wait_common", "__pthread_cond_wait_common", "pthread_cond_wait@@GLIBC_2.3.2",
      "tpool::thread_pool_generic::wait_for_tasks(std::unique_lock<std::mutex>&, tpool::worker_data*)",
      "tpool::thread_pool_generic::get_task(tpool::worker_data*, tpool::task**)"], None, "cpp-pool-park"),
    (["__futex_abstimed_wait_common", "__pthread_cond_wait_common", "pthread_cond_wait@@GLIBC_2.3.2",
      "bioProcessBackgroundJobs", "start_thread"], None, "redis-bio"),
    (["__GI___lll_lock_wait", "pthread_mutex_lock@@GLIBC_2.2.5", "bioProcessBackgroundJobs"], None, kw.LOCK),
    (["__io_uring_get_cqe", "[unknown]", "start_thread"], None, "io_uring-reaper"),
    (["epoll_wait", "WaitEventSetWait", "WaitLatch", "ProcSleep", "WaitOnLock"], None, kw.LOCK),  # PG row lock
    (["epoll_wait", "WaitEventSetWait", "secure_read", "pq_getbyte", "PostgresMain"], None, "epoll"),  # PG idle client
    (["__poll", "vio_socket_io_wait", "vio_read"], None, "poll"),
    (["[unknown]", "[unknown]"], None, None),
    (["runtime.notesleep", "runtime.stopm"], None, None),  # Go frames mean nothing for a target not known as Go
])
def test_frames(frames: list[str], runtime: str | None, want: object) -> None:
    got = kw.match_frames(frames, runtime)
    if isinstance(got, kw.IdleWait):
        assert got.key == want
    else:
        assert got is want


@pytest.mark.parametrize(("state", "syscall", "wchan", "runtime", "cls", "entry"), [
    ("S", "io_uring_enter", "io_cqring_wait", None, sw.AIO, "io_uring-reaper"),
    ("S", "io_getevents", "read_events", None, sw.AIO, "aio-reaper"),
    ("S", "futex", "futex_do_wait", "go", sw.IDLE, "go-park"),
    ("S", "futex", "futex_do_wait", None, sw.FUTEX, None),
    ("S", "epoll_wait", "do_epoll_wait", "go", sw.IDLE, "go-netpoll"),
    ("S", "epoll_wait", "do_epoll_wait", None, sw.IDLE, "epoll"),
    ("S", None, "futex_do_wait", None, sw.FUTEX, None),  # not "do_wait" (a supervisor) by substring
    ("S", "wait4", "do_wait", None, sw.IDLE, "child-wait"),
    ("S", "read", "unix_stream_read_generic", None, sw.IDLE, "accept-recv"),
    ("S", "clock_nanosleep", "hrtimer_nanosleep", None, sw.SLEEP, "sleep"),
    ("S", "fdatasync", "folio_wait_bit", None, sw.IO, None),
    ("D", "pread64", "folio_wait_bit_common", None, sw.IO, None),
    ("D", None, "rwsem_down_read_slowpath", None, sw.FUTEX, None),
])
def test_samples(state: str, syscall: str | None, wchan: str, runtime: str | None, cls: str, entry: str | None) -> None:
    wc = sw.classify_sample(state, syscall, wchan, runtime)
    assert (wc.cls, wc.entry) == (cls, entry)


# --------------------------------------------------------------------------- roles and stack mixes


def _tt(tid: int, cpu: float, aio: float, idle: float = 0.0, futex: float = 0.0, io: float = 0.0) -> ThreadTime:
    secs = {"cpu": cpu, "runnable": 0.0, "io": io, "aio": aio, "futex": futex, "idle": idle, "sleep": 0.0, "other": 0.0}
    return ThreadTime(pid=1, tid=tid, comm="db", pool="db", span=sum(secs.values()), seconds=secs, samples=100,
                      blocked_syscalls={}, wchans={}, completion_waits={"io_uring-reaper": aio} if aio else {},
                      io_calls={"io_uring_enter": 10} if aio else {})


def test_a_reaper_that_does_less_work_than_the_connection_threads_is_a_helper() -> None:
    conn = _tt(2, cpu=3.0, aio=0.0, idle=7.0)
    reaper = _tt(3, cpu=0.3, aio=9.7)
    assign_roles([conn, reaper])
    assert (conn.role, reaper.role) == ("work", "reaper")
    assert reaper.seconds["aio"] == 0.0 and reaper.seconds["idle"] == pytest.approx(9.7)
    assert reaper.idle_by_design == {"io_uring-reaper": 9.7} and not reaper.active


def test_a_thread_that_submits_and_waits_for_its_own_io_is_the_work_path() -> None:
    job = _tt(2, cpu=0.1, aio=9.9)  # a fio job: the process's busiest thread, waiting for completions
    main = _tt(3, cpu=0.0, aio=0.0, idle=10.0)
    assign_roles([job, main])
    assert job.role == "work" and job.active and job.seconds["aio"] == pytest.approx(9.9)


def test_stack_mix_splits_a_threads_futex_time_between_parking_and_locks() -> None:
    park = ("S", *(DATA / "etcd-go-futex-stripped.txt").read_text().splitlines()[1:])
    mutex = ("S", *(DATA / "memcached-mutex.txt").read_text().splitlines()[1:])
    mixes = sw.stack_mixes({7: {park: 3, mutex: 1}}, [7], "go")
    split = dict((wc.cls, frac) for wc, frac in mixes[7].split(sw.FUTEX) or [])
    assert split == {sw.IDLE: 0.75, sw.FUTEX: 0.25}
    assert mixes[7].split(sw.IO) is None  # no stack says anything about its IO time


# --------------------------------------------------------------------------- the table and its page


def test_every_entry_is_well_formed() -> None:
    keys = [w.key for w in kw.IDLE_WAITS]
    assert len(keys) == len(set(keys))
    for w in kw.IDLE_WAITS:
        assert w.kind in kw.KINDS and w.what and (w.frames or w.syscalls or w.wchans or w.pools), w.key
        assert not (w.needs_role and w.kind != kw.REAPER), w.key
        assert not any(kw.is_lock_frame(f) for f in w.frames), w.key  # a parking frame is never a lock acquire


def test_docs_table_lists_every_entry_with_its_evidence() -> None:
    text = DOCS.read_text()
    section = text.split("## Idle-by-design waits", 1)[1].split("\n## ", 1)[0]
    rows = {line.split("|")[1].strip().strip("`"): line for line in section.splitlines()
            if line.startswith("| `")}
    assert set(rows) == {w.key for w in kw.IDLE_WAITS}
    for w in kw.IDLE_WAITS:
        for ev in (*w.frames[:2], *w.syscalls[:1], *w.wchans[:1], *w.pools):
            assert ev in rows[w.key], (w.key, ev)


def test_rust_and_cpp_frames_match_the_table_whatever_their_generic_arguments() -> None:
    # demangled Rust names carry their impl's generics: yatp's park is QueueCore<T>::park in a stack
    stack = ["syscall", "parking_lot_core::parking_lot::park", "yatp::pool::spawn::QueueCore<T>::park",
             "yatp::pool::worker::WorkerThread<T,H>::run"]
    w = kw.match_frames(stack, "rust")
    assert isinstance(w, kw.IdleWait) and w.key == "yatp-park"
    assert kw.strip_generics("<yatp::task::future::Runner as yatp::pool::Runner>::handle") == \
        "<yatp::task::future::Runner as yatp::pool::Runner>::handle"
    assert kw.strip_generics("std::vector<int, std::allocator<int> >::push_back") == "std::vector::push_back"
    # a lock acquire under a generic type is still a lock
    assert kw.match_frames(["syscall", "parking_lot::raw_mutex::RawMutex::lock_slow",
                            "engine_rocks::RocksEngine<E>::write"], "rust") is kw.LOCK


# --------------------------------------------------------------------------- task pools by their threads' names


def test_a_task_pools_unnamed_condition_waits_are_its_workers_parked_and_its_lock_acquires_stay_locks() -> None:
    futex, acquire = sw.WaitClass(sw.FUTEX), sw.WaitClass(sw.FUTEX, lock=True)
    named = sw.WaitClass(sw.IDLE, "epoll")
    parts = [(futex, 0.5), (acquire, 0.3), (named, 0.2)]
    for pool in ("rocksdb:low", "unified-read-po", "raftstore", "apply", "sched-worker-po", "grpc-server"):
        out = sw.by_pool(parts, pool)
        assert out == [(sw.WaitClass(sw.IDLE, "task-pool-park"), 0.5), (acquire, 0.3), (named, 0.2)], pool
    # a thread of no known pool (db_bench's own writer, a connection thread) keeps its futex waits
    assert sw.by_pool(parts, "db_bench") == parts and sw.by_pool(parts, None) == parts


def test_rocksdbs_background_pool_parked_between_jobs_is_not_lock_contention() -> None:
    # real capture (samples/rocksdb-bg-pool-parked/README.md: db_bench's stats, gdb's stacks, /proc)
    from profiler.analyzers.analysis import analyze

    from profiler.bundle import Bundle

    a = analyze(Bundle.open(ROOT / "samples" / "rocksdb-bg-pool-parked"))
    (v,) = a.verdict.per_target
    (t,) = a.metrics.targets
    assert v.category == "not_saturated"
    lock = next(f for f in v.findings if f.category == "lock_contention")
    assert lock.score < 0.1
    parked = dict(t.time.idle_by_design).get("task-pool-park", 0.0)
    assert parked >= 0.15  # the pool's threads spend a fifth or more of the thread time parked
    assert "task-pool-park" in v.primary.sub_cause
