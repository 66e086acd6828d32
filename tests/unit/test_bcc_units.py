"""The bcc backend's pieces that need no kernel: header setup script, folding, states, names, CSV quoting."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

import pytest
from profiler.collectors.bcc import objects
from profiler.collectors.bcc import slots as objects_slots
from profiler.collectors.bcc.common import KERNEL_SUFFIX, syscall_name, syscall_names
from profiler.collectors.bcc.offcpu import fold_frames, state_class, trim_tracing
from profiler.collectors.bcc.syscalls import csv_field

from tests.conftest import ROOT

SCRIPT = ROOT / "scripts" / "bcc-headers.sh"
ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


def run_script(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, KERNEL_RELEASE="9.9.9-test", MODULES_ROOT=str(tmp_path / "modules"),
               HEADERS_ROOT=str(tmp_path / "src"))
    return subprocess.run(["sh", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=30)


def fake_headers(tmp_path: Path, *versions: str) -> None:
    for v in versions:
        build = tmp_path / "src" / f"linux-headers-{v}-{ARCH}"
        (build / "include").mkdir(parents=True)
        (build / "Makefile").write_text("# fake\n")
        (tmp_path / "src" / f"linux-headers-{v}-common" / "include").mkdir(parents=True)


def test_headers_script_links_the_newest_headers_and_undoes_only_its_own_work(tmp_path):
    fake_headers(tmp_path, "6.1.0-9", "6.1.0-56")
    kdir = tmp_path / "modules" / "9.9.9-test"
    assert run_script(tmp_path, "status").returncode == 1
    first = run_script(tmp_path)
    assert first.returncode == 0, first.stderr
    assert os.readlink(kdir / "build").endswith(f"linux-headers-6.1.0-56-{ARCH}")
    assert os.readlink(kdir / "source").endswith("linux-headers-6.1.0-56-common")
    assert run_script(tmp_path, "status").returncode == 0
    again = run_script(tmp_path)  # idempotent
    assert again.returncode == 0 and "already present" in again.stdout
    assert sorted(p.name for p in kdir.iterdir()) == [".profiler-bcc-headers", "build", "source"]
    removed = run_script(tmp_path, "remove")
    assert removed.returncode == 0
    assert not kdir.exists()
    assert run_script(tmp_path, "remove").returncode == 0  # nothing left to undo


def test_headers_script_leaves_someone_elses_build_link_alone(tmp_path):
    fake_headers(tmp_path, "6.1.0-56")
    kdir = tmp_path / "modules" / "9.9.9-test"
    other = tmp_path / "their-headers"
    (other / "include").mkdir(parents=True)
    kdir.mkdir(parents=True)
    (kdir / "build").symlink_to(other)
    assert run_script(tmp_path).returncode == 0
    assert run_script(tmp_path, "remove").returncode == 0
    assert os.readlink(kdir / "build") == str(other)
    assert kdir.is_dir()


def test_headers_script_says_what_to_install_when_there_are_no_headers(tmp_path):
    (tmp_path / "src").mkdir()
    r = run_script(tmp_path)
    assert r.returncode == 1 and f"apt-get install linux-headers-{ARCH}" in r.stderr
    r = run_script(tmp_path, "bogus")
    assert r.returncode == 1 and "usage" in r.stderr


def test_folded_stacks_go_root_first_user_then_kernel():
    line = fold_frames("raftstore-1", ["leaf_user", "main"], ["schedule" + KERNEL_SUFFIX, "entry" + KERNEL_SUFFIX])
    assert line == "raftstore-1;main;leaf_user;entry_[k];schedule_[k]"


def test_the_tracepoints_own_frames_are_cut_from_kernel_stacks():
    frames = ["__traceiter_sched_switch_[k]", "bpf_trace_run4_[k]", "__schedule_[k]", "schedule_[k]"]
    assert trim_tracing(frames) == ["__schedule_[k]", "schedule_[k]"]
    assert trim_tracing(["schedule_[k]"]) == ["schedule_[k]"]


@pytest.mark.parametrize("state,cls", [(0, 0), (1, 1), (2, 2), (0x402, 1), (4, 3), (0x80, 3), (0x100 | 1, 1)])
def test_switch_out_states(state, cls):
    assert state_class(state) == cls


def test_syscall_names_come_from_the_kernel_table():
    names = syscall_names()
    assert names, "no syscall table found (kernel headers, linux-libc-dev or bcc)"
    if platform.machine() == "x86_64":
        assert names[0] == "read" and names[202] == "futex" and names[110] == "getppid"
    assert syscall_name(99999) == "syscall_99999"


def test_csv_fields_are_quoted_only_when_needed():
    assert csv_field("grpc-server-0") == "grpc-server-0"
    assert csv_field('a,b"c') == '"a,b""c"'


def test_the_shipped_objects_are_built_from_these_sources():
    """Edit a program in collectors/bcc/bpf/ and its prebuilt object is stale: rebuild it
    (python -m profiler.collectors.bcc.objects build, docs/bcc.md)."""
    shipped = objects.shipped()
    assert sorted(shipped) == objects.variants()
    for name, obj in shipped.items():
        assert obj.digest == objects.source_digest(name), f"{name}: the prebuilt object is stale"
        program = objects.PROGRAMS[name.removesuffix(objects.RAW)]
        raw_as = dict(program.raw_as) if name.endswith(objects.RAW) else {}
        assert [p.tracepoint for p in obj.progs] == [raw_as.get(tp, tp) for tp, _fn in program.tracepoints]
        assert all(p.raw == name.endswith(objects.RAW) for p in obj.progs)
        # a raw tracepoint or perf_event program reads no tracepoint field: only classic ones have layouts
        assert sorted(obj.layouts) == sorted(p.tracepoint for p in obj.progs if not p.raw and not p.perf_event)
        for p in obj.progs:
            assert [i for i, _fd in objects.map_loads(p.insns)] == [i for i, _name in p.maps_at]
            assert {n for _i, n in p.maps_at} <= {m.name for m in obj.maps}


def test_a_wait_spanning_slots_is_split_exactly_between_them():
    ns = 1_000_000_000
    # one wait ending in slot 5 after starting in slot 2, 0.3 s before slot 2 ended
    parts = objects_slots.spread(5, 3, int(2.55e9), 1, int(0.3e9), ns)
    assert parts == [(2, int(0.3e9)), (3, ns), (4, ns), (5, int(0.25e9))]
    assert sum(n for _s, n in parts) == int(2.55e9)
    # two waits, both from slot 1 to slot 2: the middle has none, the tail is what is left
    assert objects_slots.spread(2, 1, 500, 2, 200, ns) == [(1, 200), (2, 300)]
    assert objects_slots.spread(7, 0, 42, 3, 0, ns) == [(7, 42)]
    t0 = 10 * ns
    assert objects_slots.interval_parts(t0 + int(0.5e9), t0 + int(2.25e9), t0, ns) == [
        (0, int(0.5e9)), (1, ns), (2, int(0.25e9))]
    assert objects_slots.interval_parts(t0 - 5, t0 + 10, t0, ns) == [(0, 10)]  # nothing before the start


def test_map_loads_find_every_map_fd_and_skip_the_second_half_of_wide_loads():
    import struct

    insns = (struct.pack("<BBhi", 0x18, 0x11, 0, 7) + struct.pack("<BBhi", 0, 0, 0, 0)  # r1 = map fd 7
             + struct.pack("<BBhi", 0x18, 0x01, 0, 99) + struct.pack("<BBhi", 0, 0, 0, 0)  # r1 = 99 (a constant)
             + struct.pack("<BBhi", 0x95, 0, 0, 0))
    assert list(objects.map_loads(insns)) == [(0, 7)]


def test_unsampled_waits_share_their_time_among_the_stacks_sampled_from_the_same_thread():
    S = objects_slots
    sharer = S.Sharer()
    # rows: [tid, state, ustack, kstack, total_ns, count]; stacks sampled for two waits of thread 1
    rows = [[1, 1, 10, 20, 3000, 1], [1, 1, 11, 21, 1000, 1], [1, 1, S.UNSAMPLED, S.UNSAMPLED, 8000, 6],
            [2, 1, S.UNSAMPLED, S.UNSAMPLED, 500, 2]]
    got = sharer.share(rows, key=lambda r: (r[0], r[1]), stack=lambda r: (r[2], r[3]), amounts=(4,),
                       fractions=(5,), with_stack=lambda r, st: [r[0], r[1], st[0], st[1], *r[4:]])
    by = {}
    for tid, _st, us, ks, ns, n in got:
        by[(tid, us, ks)] = by.get((tid, us, ks), (0, 0.0))
        by[(tid, us, ks)] = (by[(tid, us, ks)][0] + ns, by[(tid, us, ks)][1] + n)
    # every nanosecond kept, whole numbers; thread 1's unsampled time split ~3:1 like its sampled time
    assert sum(v[0] for v in by.values()) == 12500 and all(isinstance(r[4], int) for r in got)
    assert by[(1, 10, 20)][0] == pytest.approx(3000 + 8000 * 3001 / 4002, abs=1)
    assert by[(1, 11, 21)][0] == pytest.approx(1000 + 8000 * 1001 / 4002, abs=1)
    assert by[(1, 10, 20)][1] + by[(1, 11, 21)][1] == pytest.approx(8)
    # thread 2 had no sampled stack: its time stays, under the not-sampled marker
    assert by[(2, S.UNSAMPLED, S.UNSAMPLED)] == (500, 2) and sharer.kept == 1 and sharer.shared == 1
    # later, an unsampled wait of thread 1 with nothing sampled in its message: the capture's profile
    later = sharer.share([[1, 1, S.UNSAMPLED, S.UNSAMPLED, 400, 1]], key=lambda r: (r[0], r[1]),
                         stack=lambda r: (r[2], r[3]), amounts=(4,), fractions=(5,),
                         with_stack=lambda r, st: [r[0], r[1], st[0], st[1], *r[4:]])
    assert {(r[2], r[3]) for r in later} == {(10, 20), (11, 21)} and sum(r[4] for r in later) == 400


class _CfgMap:
    """The one map budget_stacks writes: keeps what was written (a dict stands in for the kernel's array)."""

    def __init__(self) -> None:
        self.values: list[bytes] = []

    def update(self, key: bytes, value: bytes) -> None:
        self.values.append(value)


def test_the_stack_budget_thins_the_sampling_only_past_the_budget():
    import time

    from profiler.collectors.bcc.sides import CFG, FutexSide, OffCpuSide

    side = OffCpuSide({"slot_ns": 1_000_000_000, "stack_budget": 256})
    cfg = _CfgMap()
    side.maps = {"cfg": cfg}  # type: ignore[dict-item]
    side.configure(5, [42], 32)
    assert CFG.unpack(cfg.values[-1])[2] == 32
    # 5,000 switch-outs a second: one in 32 walks 156 stacks a second, within the budget
    side._events = (0, time.monotonic() - 1.0)
    side.budget_stacks({"switch_out": 5_000})
    assert side.stack_every == 32 and len(cfg.values) == 1
    # 55,000 a second: one in 215 keeps 256 a second
    side._events = (5_000, time.monotonic() - 1.0)
    side.budget_stacks({"switch_out": 60_000})
    assert 210 <= side.stack_every <= 220
    t0, slot_ns, every, ntargets, first = CFG.unpack(cfg.values[-1])[:5]
    assert (t0, slot_ns, every, ntargets, first) == (5, 1_000_000_000, side.stack_every, 1, 42)
    # quiet again: back to one in 32, never sparser than needed
    side._events = (60_000, time.monotonic() - 1.0)
    side.budget_stacks({"switch_out": 61_000})
    assert side.stack_every == 32
    # no budget: the sampling stays as configured
    futex = FutexSide({"slot_ns": 1_000_000_000, "stack_budget": 0})
    futex.maps = {"cfg": _CfgMap()}  # type: ignore[dict-item]
    futex.configure(5, [42], 32)
    futex._events = (0, time.monotonic() - 1.0)
    futex.budget_stacks({"entered": 1_000_000})
    assert futex.stack_every == 32
