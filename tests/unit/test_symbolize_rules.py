"""The rules perf 6.1 names frames by, as profiler.formats re-implements them: symbol tables
(ends of sizeless symbols, one symbol per address, lookups), kallsyms, demangling, and folding
samples already cut the same as their text (unit tier: no perf, no root)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from profiler.analyzers.stacks.folding import Collapser, FoldOptions

from profiler.formats import elfsyms, kallsyms, perfdemangle
from profiler.formats.elf import Elf
from profiler.formats.elfsyms import STB_GLOBAL, STB_LOCAL, STB_WEAK, SymTable
from profiler.formats.perfscript_fields import same_sequences, unique_rows

U = np.uint64


def _table(rows: list[tuple[int, int, int, str]]) -> SymTable:
    """A table from (start, end, binding, name) rows, as load() leaves it (sorted, ends fixed)."""
    strings = b""
    at = []
    for _s, _e, _b, name in rows:
        at.append(len(strings))
        strings += name.encode() + b"\0"
    return SymTable(np.asarray([r[0] for r in rows], U), np.asarray([r[1] for r in rows], U), np.asarray(at, np.int64),
                    np.asarray([r[2] for r in rows], np.uint8), strings, demangle=False)


def test_lookup_is_start_inclusive_end_exclusive() -> None:
    t = _table([(0x100, 0x110, STB_GLOBAL, "a"), (0x120, 0x130, STB_GLOBAL, "b")])
    got = t.lookup(np.asarray([0xFF, 0x100, 0x10F, 0x110, 0x11F, 0x120, 0x130], U))
    assert [t.name(int(i)) if i >= 0 else None for i in got] == [None, "a", "a", None, None, "b", None]


def test_one_symbol_per_address_by_perfs_preferences() -> None:
    # sized beats sizeless; then non-weak beats weak; then global beats local; then fewer
    # leading underscores; then the longer name; then the first loaded
    cases = [
        ([(0x10, 0x10, STB_GLOBAL, "zero"), (0x10, 0x20, STB_LOCAL, "sized")], "sized"),
        ([(0x10, 0x20, STB_WEAK, "weak"), (0x10, 0x20, STB_LOCAL, "local")], "local"),
        ([(0x10, 0x20, STB_LOCAL, "local"), (0x10, 0x20, STB_GLOBAL, "global")], "global"),
        ([(0x10, 0x20, STB_GLOBAL, "__x"), (0x10, 0x20, STB_GLOBAL, "_x")], "_x"),
        ([(0x10, 0x20, STB_GLOBAL, "ab"), (0x10, 0x20, STB_GLOBAL, "abc")], "abc"),
        ([(0x10, 0x20, STB_GLOBAL, "one"), (0x10, 0x20, STB_GLOBAL, "two")], "one"),
    ]
    for rows, want in cases:
        t = _table(rows)
        assert t.name(int(t.lookup(np.asarray([0x18], U))[0])) == want, rows


def test_sizeless_symbols_end_at_the_next_and_the_last_a_page_on() -> None:
    starts = np.asarray([0x1000, 0x1000, 0x1040, 0x2345], U)
    ends = starts.copy()
    fixed = elfsyms._fix_ends(starts, ends, ends == starts)
    # the first of two at one address stays sizeless (its next starts where it does)
    assert fixed.tolist() == [0x1000, 0x1040, 0x2345, 0x3000 + 0x1000]


def test_kallsyms_module_boundary_and_duplicates() -> None:
    text = (b"ffffffff81000000 T _stext\n"
            b"ffffffff81000000 T _text\n"
            b"ffffffff81000010 t helper\n"
            b"ffffffff81000100 r not_text\n"
            b"ffffffff81000200 T last_kernel\n"
            b"ffffffffc0001000 t mod_fn\t[mymod]\n")
    t, module, named = kallsyms.parse(text)
    assert named["_text"] == 0xFFFFFFFF81000000
    hit = t.lookup(np.asarray([0xFFFFFFFF81000005, 0xFFFFFFFF81000150, 0xFFFFFFFF81000FFF, 0xFFFFFFFF81001000,
                               0xFFFFFFFFC0001004], U))
    names = [t.name(int(i)) if i >= 0 else None for i in hit]
    # _text wins at its address (the only one with a size once both end at the next symbol);
    # the rodata symbol is not loaded; the last kernel symbol ends at the page past it,
    # not at the module's first symbol
    assert names == ["_text", "helper", "last_kernel", None, "mod_fn\t[mymod]"]
    assert module.tolist() == [False, False, False, False, True]


def test_kallsyms_modules_perf_has_no_map_for_are_dropped(tmp_path: Path) -> None:
    text = (b"ffffffff81000000 T _text\n"
            b"ffffffffc0001000 t ext4_fn\t[ext4]\n"
            b"ffffffffc0002000 t bpf_prog_1234_x\t[bpf]\n")
    (tmp_path / "kallsyms").write_bytes(text)
    t, module, _ = kallsyms.parse(text)
    modules = tmp_path / "modules"
    # no kcore beside the kallsyms: a module's symbols only with a map from /proc/modules; [bpf] never
    modules.write_bytes(b"ext4 1000 1 - Live 0xffffffffc0000000\n")
    kept = kallsyms.kept_modules(str(tmp_path / "kallsyms"), t, module, str(modules))
    assert kept.tolist() == [False, True, False]
    assert not kallsyms.kept_modules(str(tmp_path / "kallsyms"), t, module, str(tmp_path / "none")).any()
    # a readable kcore: perf keeps every module symbol
    (tmp_path / "kcore").write_bytes(b"")
    assert kallsyms.kept_modules(str(tmp_path / "kallsyms"), t, module, str(modules)).tolist() == [False, True, True]


def test_perfs_demangling() -> None:
    assert perfdemangle.demangle("camlFoo__bar_12") == "Foo.bar_12"
    assert perfdemangle.demangle("main") == "main"
    assert perfdemangle.demangle("net/http.(*conn).serve") == "net/http.(*conn).serve"  # not a Java signature
    assert perfdemangle._java("Ljava/lang/Object;toString()V") == "java.lang.Object.toString()"
    if perfdemangle.backend() == "none":
        pytest.skip("no demangler library on this host")
    assert perfdemangle.demangle("_ZN10SQL_SELECT17test_quick_selectEP3THD6BitmapILj64EEyybbbb") == \
        "SQL_SELECT::test_quick_select"
    assert perfdemangle.demangle("_Z3fooIiEvT_") == "foo<int>"


def test_a_real_binary_loads_and_names_its_functions() -> None:
    real = Path(sys.executable).resolve()  # the interpreter running the tests: an ELF executable
    with Elf(real) as e:
        t = elfsyms.load(e, e)
    assert len(t) > 0
    mid = t.starts[len(t) // 2]
    assert t.lookup(np.asarray([mid], U))[0] >= 0


def test_unique_rows() -> None:
    a = np.asarray([3, 1, 3, 1, 2], np.int64)
    b = np.asarray([0, 5, 0, 5, 0], np.int64)
    first, inv = unique_rows(a, b)
    assert [(int(a[i]), int(b[i])) for i in first] == [(1, 5), (2, 0), (3, 0)]
    assert inv.tolist() == [2, 0, 2, 0, 1]


def test_same_sequences_are_told_apart_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stacks of symbols merge only when equal, entry by entry, even when their hashes collide."""
    rng = np.random.default_rng(7)
    seqs = [tuple(rng.integers(0, 4, size=int(rng.integers(0, 5))).tolist()) for _ in range(400)]
    vals = np.asarray([v for s in seqs for v in s], np.int64)
    starts = np.concatenate([[0], np.cumsum([len(s) for s in seqs])]).astype(np.int64)
    from profiler.formats import perfdata_reduce

    for collide in (False, True):
        if collide:  # every hash the same: the check entry by entry must still tell them apart
            monkeypatch.setattr(perfdata_reduce, "_mix", lambda x: np.zeros_like(x))
        ids = same_sequences(vals, starts).tolist()
        for i in range(len(seqs)):
            for j in range(0, len(seqs), 37):
                assert (ids[i] == ids[j]) == (seqs[i] == seqs[j]), (collide, seqs[i], seqs[j])


def test_bpf_programs_named_from_the_captures_own_records() -> None:
    """A kernel entry inside a BPF program is named as perf names it (``name+0xoff (name)``)
    from the capture's own ksymbol records as they stood at its sample; a program unregistered
    by then names nothing, and a record over a live program's map is left to perf script."""
    from types import SimpleNamespace

    from profiler.formats.perfstacks import Ksymbol
    from profiler.formats.perfsymbolize import Symbolizer

    a, b, c = 0xFFFFFFFFC0000000, 0xFFFFFFFFC0001000, 0xFFFFFFFFC0002000
    side = [Ksymbol(a, 0x100, "bpf_prog_aa_one"), Ksymbol(b, 0x100, "bpf_prog_bb_gone"),
            Ksymbol(b, 0x100, "bpf_prog_bb_gone", unregister=True), Ksymbol(c, 0x100, "bpf_prog_cc_first"),
            Ksymbol(c, 0x100, "bpf_prog_cc_second")]
    sym = Symbolizer.__new__(Symbolizer)
    sym.dsos, sym._dso_of, sym.build_ids = [], {}, {}
    sym.st = SimpleNamespace(side=side)  # type: ignore[assignment]
    sym.ksymbols = list(side)
    ip = np.asarray([a + 0xCC, b + 0x10, b + 0x10, c + 4, c + 4, 0xFFFFFFFF81000000], np.uint64)
    kgen = np.asarray([5, 2, 3, 4, 5, 5], np.int64)  # kernel records seen before each entry's sample
    d = np.full(len(ip), -1, np.int64)
    s_ = np.full(len(ip), -1, np.int64)
    off = np.zeros(len(ip), np.uint64)
    names: list[str] = []
    named = sym._bpf_entries(ip, np.ones(len(ip), bool), d, s_, off, names, kgen)
    assert named.tolist() == [True, True, False, True, False, False]
    assert [names[-2 - int(k)] for k in s_[named]] == ["bpf_prog_aa_one", "bpf_prog_bb_gone", "bpf_prog_cc_first"]
    assert off[named].tolist() == [0xCC, 0x10, 4]
    assert [sym.dsos[int(k)].name for k in d[named]] == ["bpf_prog_aa_one", "bpf_prog_bb_gone", "bpf_prog_cc_first"]


TEXT = """\
mariadbd 10451/10460 1.000001:    1001001 cpu-clock:ppp:{sp}
\t          758300 SQL_SELECT::test_quick_select (/usr/sbin/mariadbd)
\t          8372bc mysql_execute_command (/usr/sbin/mariadbd)
\tffffffff8143fa13 futex_wait_setup ([kernel.kallsyms])

java 7/8 1.000002:    3 cpu-clock:ppp:{sp}
\t    7f722d142778 Ljava/io/PrintStream;::print (/tmp/perf-7.map)
\t          8372bc [unknown] (/usr/sbin/mariadbd)

mariadbd 10451/10461 1.000003:    1001001 cpu-clock:ppp:{sp}
\t          758300 SQL_SELECT::test_quick_select (/usr/sbin/mariadbd)
\t          8372bc mysql_execute_command (/usr/sbin/mariadbd)
\tffffffff8143fa13 futex_wait_setup ([kernel.kallsyms])

""".format(sp=" ")  # perf ends a header with the event's ": "


@pytest.mark.parametrize("opts", [FoldOptions(), FoldOptions(compat="inferno", annotate_kernel=True, include_addrs=True),
                                  FoldOptions(compat="perl", include_tid=True), FoldOptions(pools=True, count_samples=True)])
def test_samples_already_cut_fold_as_their_text(opts: FoldOptions) -> None:
    by_text = Collapser(opts)
    by_text.feed(TEXT)
    by_text.close()
    cut = Collapser(opts)
    table: list[str] = []
    for block in TEXT.strip("\n").split("\n\n"):
        header, *lines = block.split("\n")
        ids = []
        for ln in lines:
            table.append(ln + "\n")
            ids.append(len(table) - 1)
        cut.feed_sample(header, hash(tuple(lines)), lambda ids=ids: ids, table)
    cut.close()
    assert cut.counts == by_text.counts and cut.samples == by_text.samples


def test_fast_option_values_are_typers() -> None:
    """The options converted without pydantic get the values typer's own conversion gives."""
    exe = str(Path(sys.executable).parent / "profiler")
    if not Path(exe).exists():
        pytest.skip("profiler is not installed as a command")
    out = subprocess.run([exe, "flamegraph", "-", "--folded", "--width", "1300", "--min-width", "1e-1", "--pid", "+7"],
                         input=TEXT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout == "java;[mariadbd];java/io/PrintStream:::print 3\n"  # --pid +7: 7
    bad = subprocess.run([exe, "flamegraph", "-", "--width", "12x"], input=TEXT, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "valid integer" in bad.stderr  # typer's own message: not a plain integer
