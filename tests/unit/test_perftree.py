"""perf 6.1's symbol tree rebuilt (profiler/formats/perftree.py): a valid red-black tree after
any inserts and erases, the shapes lib/rbtree.c gives, and the PLT rule that answers without
the tree agreeing with the tree on the binaries of this host (unit tier: no perf, no root)."""

from __future__ import annotations

import glob
import os
import random
import sysconfig

import numpy as np
import pytest

from profiler.formats import perftree, symfiles
from profiler.formats.elfsyms import STB_GLOBAL, Plt, SymTable
from profiler.formats.perftree import Tree

U = np.uint64


def _check(tree: Tree, alive: list[int]) -> None:
    """In-order is (start, insertion order) of the live nodes; the red-black rules hold."""
    got: list[int] = []

    def walk(n: int, parent: int) -> int:
        if n < 0:
            return 1
        assert tree.parent[n] == parent
        if tree.red[n]:
            assert parent < 0 or not tree.red[parent], "two reds in a row"
        lh = walk(tree.left[n], n)
        got.append(n)
        rh = walk(tree.right[n], n)
        assert lh == rh, "black heights differ"
        return lh + (0 if tree.red[n] else 1)

    walk(tree.root, -1)
    assert tree.root < 0 or not tree.red[tree.root]
    assert got == alive


@pytest.mark.parametrize("seed", range(6))
def test_inserts_and_erases_keep_a_red_black_tree_in_perfs_order(seed: int) -> None:
    rnd = random.Random(seed)
    n = 400
    starts = [rnd.randrange(60) for _ in range(n)]  # many equal starts: ties go right
    tree = Tree(starts, [s + 1 for s in starts])
    alive: list[int] = []
    for batch in range(4):
        new = list(range(batch * 100, batch * 100 + 100))
        tree.insert_all(new)
        alive = sorted(alive + new, key=lambda i: (starts[i], i))
        _check(tree, alive)
        for victim in rnd.sample(alive, 30):
            tree.erase(victim)
            alive.remove(victim)
            _check(tree, alive)


def test_the_shapes_linux_gives_ascending_inserts() -> None:
    # 1..7 in ascending order: rotations at each second insert, a colour flip at the fourth and sixth
    starts = list(range(7))
    tree = Tree(starts, [s + 1 for s in starts])
    tree.insert_all(starts)
    assert tree.root == 1
    assert (tree.left[1], tree.right[1]) == (0, 3)
    assert (tree.left[3], tree.right[3]) == (2, 5)
    assert (tree.left[5], tree.right[5]) == (4, 6)
    assert [tree.red[i] for i in range(7)] == [False, False, False, True, True, False, True]
    # the walk stops at the first holder: a node holding everything found from the root only when on the path
    wide = Tree([0, 10, 20], [100, 11, 21])
    wide.insert_all([0, 1, 2])  # 10 at the root, 0 on its left
    assert wide.find(20) == 2 and wide.find(15) == -1 and wide.find(5) == 0


def _plt_tables() -> list[tuple[str, SymTable]]:
    """Shared objects of this Python whose lowest symbol (``_init``) holds a PLT of two or more."""
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    dynload = sysconfig.get_config_var("DESTSHARED") or ""
    paths = sorted(glob.glob(os.path.join(libdir, "libpython3*.so*")))[:1] + sorted(glob.glob(os.path.join(dynload, "*.so")))
    out = []
    for p in paths:
        found = symfiles.find(os.path.realpath(p), None)
        if found is None:
            continue
        t = symfiles.table(found)
        if len(t.plt) >= 2 and len(t.starts) and t.loaded is not None and len(t) + len(t.plt) <= perftree.TREE_MAX \
                and t.ends[0] > t.plt.starts[0]:
            out.append((p, t))
    return out


def test_the_plt_rule_answers_what_the_rebuilt_tree_does() -> None:
    tables = _plt_tables()
    if not tables:
        pytest.skip("no shared object here has its lowest symbol stretched over a PLT")
    for path, t in tables[:12]:
        lo = int(t.starts[0])
        higher = np.flatnonzero(t.starts > t.starts[0])
        hi = int(t.starts[higher[0]]) if len(higher) else int(t.ends[0])
        addrs = np.arange(lo, hi, dtype=U)
        rule = perftree.plt_rule(t, addrs)
        tree = perftree.build(t)
        want = np.asarray([tree.find(a) for a in addrs.tolist()], np.int64)
        if (rule == -2).all():
            # a layout the rule does not claim (Debian's own libpython3.11 and lib-dynload objects):
            # resolve(), what the symbolizer asks, gets every answer from the rebuilt tree instead
            got = t.resolve(addrs)
            assert (got == want).all(), (path, [hex(a) for a in addrs[got != want][:5].tolist()])
            continue
        assert (rule != -2).all(), path  # where the rule holds, it holds for the whole stretch
        assert (rule == want).all(), (path, [hex(a) for a in addrs[rule != want][:5].tolist()])
        # the entries are named, the addresses past them are no one's
        k = len(t.starts)
        assert rule[addrs == t.plt.starts[1]][0] == k + 1
        assert (rule[addrs >= t.plt.ends[-1]] == -1).all()


def _loaded_table(rows: list[tuple[int, int, str]], plt_at: int, plt_n: int) -> SymTable:
    """A table as load() leaves it from (start, size, name) rows inserted in this order, one pass."""
    order = sorted(range(len(rows)), key=lambda i: rows[i][0])
    strings = b""
    at = []
    for _s, _z, name in rows:
        at.append(len(strings))
        strings += name.encode() + b"\0"
    starts = np.asarray([rows[i][0] for i in order], U)
    raw = starts + np.asarray([rows[i][1] for i in order], U)
    t = SymTable(starts, raw.copy(), np.asarray([at[i] for i in order], np.int64),
                 np.full(len(rows), STB_GLOBAL, np.uint8), strings, demangle=False)
    perftree.fixup_end(t.starts, t.ends, np.ones(len(rows), bool))
    ins = np.empty(len(rows), np.int64)
    ins[np.asarray(order)] = np.arange(len(rows))
    t.loaded = (ins, (len(rows),), raw)
    t.plt = Plt(np.uint64(plt_at) + np.arange(plt_n, dtype=U) * U(16), 16, lambda k: f"f{k}")
    return t


def test_a_layout_the_rule_does_not_fit_rebuilds_the_tree() -> None:
    # a symbol below _init: the rule does not hold, the rebuilt tree answers
    t = _loaded_table([(0x100, 0x10, "low"), (0x1000, 0, "_init"), (0x2000, 0x40, "main")], 0x1020, 8)
    addrs = np.asarray([0x1004, 0x1028, 0x10A8, 0x1100], U)
    assert (perftree.plt_rule(t, addrs) == -2).all()
    tree = perftree.build(t)
    assert t.resolve(addrs).tolist() == [tree.find(int(a)) for a in addrs.tolist()]
    # with it gone, the rule and the tree agree; the rule answers only inside _init's reach
    t2 = _loaded_table([(0x1000, 0, "_init"), (0x2000, 0x40, "main"), (0x2040, 0x80, "outer"), (0x2050, 0x10, "inner")],
                       0x1020, 8)
    assert (perftree.plt_rule(t2, addrs) != -2).all()
    assert perftree.plt_rule(t2, np.asarray([0x2048], U)).tolist() == [-2]
    both = np.asarray([0x1004, 0x1028, 0x10A8, 0x2068], U)  # the last inside outer and inner: the tree
    assert t2.resolve(both).tolist() == [perftree.build(t2).find(int(a)) for a in both.tolist()]
    assert t2.name(int(t2.resolve(both)[1])) == "f0@plt"
    # past TREE_MAX nothing is rebuilt: not known, left to perf script
    t2._tree = None
    old, perftree.TREE_MAX = perftree.TREE_MAX, 3
    try:
        assert t2.resolve(both).tolist()[:3] == [perftree.build(t2).find(int(a)) for a in both.tolist()[:3]]
        assert t2.resolve(both).tolist()[3] == -2
    finally:
        perftree.TREE_MAX = old
