"""perf 6.1's symbol tree of one file, rebuilt to find what its lookups find (formats layer).

perf keeps a file's symbols in a red-black tree keyed by start address (tools/perf/util/
symbol.c; the balancing is lib/rbtree.c's) and names an address by walking down from the root:
left when the address is below a node's start, right when it is at or past its end, else that
node. Where two symbols hold one address (a symbol without a size stretched to the next one,
over the PLT entries added after it; sized symbols overlapping) the first holder on that walk
wins, or none is met and perf prints ``[unknown]``: the answer depends on the tree's shape.

For the few files where a sampled address is held twice, the tree is rebuilt as perf builds
it, in its order, with the same rebalancing:

- the ``.symtab`` pass inserted in table order (an equal start goes right of the ones already
  in), then its fixups: a symbol without a size ends where the next one in the tree starts
  (``symbols__fixup_end``), then of the symbols at one address all but one are erased
  (``symbols__fixup_duplicate``, walking in address order);
- the ``.dynsym`` pass the same way, its fixups over the whole tree;
- the PLT entries, inserted in ``.rela.plt`` order.

Everything else is named by ``SymTable.lookup`` (sorted arrays), which answers the same where a
single symbol holds the address.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from profiler.formats.elfsyms import SymTable

PAGE = 4096
TREE_MAX = 50_000  # symbols and PLT entries: a larger tree is not rebuilt (~1 s of Python per 100,000)


class Tree:
    """Nodes are the table's symbols (their index in it, address order) and its PLT entries
    (``len(table) + k``); -1 is no node."""

    def __init__(self, starts: list[int], ends: list[int]) -> None:
        n = len(starts)
        self.st = starts
        self.en = ends
        self.left = [-1] * n
        self.right = [-1] * n
        self.parent = [-1] * n
        self.red = [False] * n
        self.root = -1

    # -- lib/rbtree.c, as perf links it
    def _change_child(self, old: int, new: int, parent: int) -> None:
        if parent < 0:
            self.root = new
        elif self.left[parent] == old:
            self.left[parent] = new
        else:
            self.right[parent] = new

    def _rotate_set_parents(self, old: int, new: int, red: bool) -> None:
        """``new`` takes ``old``'s place and colour, ``old`` becomes its child of colour ``red``."""
        parent = self.parent[old]
        self.parent[new] = parent
        self.red[new] = self.red[old]
        self.parent[old] = new
        self.red[old] = red
        self._change_child(old, new, parent)

    def insert_all(self, nodes: list[int]) -> None:
        """``__symbols__insert`` of each node in turn: down from the root by start (an equal
        start goes right), then ``rb_insert_color``."""
        left, right, parent, red, st = self.left, self.right, self.parent, self.red, self.st
        for x in nodes:
            key = st[x]
            p = -1
            node = self.root
            go_left = False
            while node >= 0:
                p = node
                if key < st[node]:
                    node = left[node]
                    go_left = True
                else:
                    node = right[node]
                    go_left = False
            parent[x] = p
            left[x] = right[x] = -1
            red[x] = True
            if p < 0:
                self.root = x
            elif go_left:
                left[p] = x
            else:
                right[p] = x
            self._insert_color(x)

    def _insert_color(self, node: int) -> None:
        left, right, parent_of, red = self.left, self.right, self.parent, self.red
        parent = parent_of[node]
        while True:
            if parent < 0:
                red[node] = False
                return
            if not red[parent]:
                return
            g = parent_of[parent]
            tmp = right[g]
            if parent != tmp:  # parent is g's left child
                if tmp >= 0 and red[tmp]:  # case 1: colour flips
                    red[tmp] = red[parent] = False
                    node = g
                    parent = parent_of[node]
                    red[node] = True
                    continue
                tmp = right[parent]
                if node == tmp:  # case 2: left rotate at parent
                    tmp = left[node]
                    right[parent] = tmp
                    left[node] = parent
                    if tmp >= 0:
                        parent_of[tmp] = parent
                        red[tmp] = False
                    parent_of[parent] = node
                    red[parent] = True
                    parent = node
                    tmp = right[node]
                left[g] = tmp  # case 3: right rotate at g
                right[parent] = g
                if tmp >= 0:
                    parent_of[tmp] = g
                    red[tmp] = False
                self._rotate_set_parents(g, parent, True)
                return
            tmp = left[g]
            if tmp >= 0 and red[tmp]:
                red[tmp] = red[parent] = False
                node = g
                parent = parent_of[node]
                red[node] = True
                continue
            tmp = left[parent]
            if node == tmp:  # right rotate at parent
                tmp = right[node]
                left[parent] = tmp
                right[node] = parent
                if tmp >= 0:
                    parent_of[tmp] = parent
                    red[tmp] = False
                parent_of[parent] = node
                red[parent] = True
                parent = node
                tmp = left[node]
            right[g] = tmp  # left rotate at g
            left[parent] = g
            if tmp >= 0:
                parent_of[tmp] = g
                red[tmp] = False
            self._rotate_set_parents(g, parent, True)
            return

    def erase(self, node: int) -> None:
        """``rb_erase``: a node with two children is replaced by its successor."""
        left, right, parent_of, red = self.left, self.right, self.parent, self.red
        child = right[node]
        tmp = left[node]
        rebalance = -1
        if tmp < 0:
            pp, pred = parent_of[node], red[node]
            self._change_child(node, child, pp)
            if child >= 0:
                parent_of[child] = pp
                red[child] = pred
            elif not pred:
                rebalance = pp
        elif child < 0:
            parent_of[tmp] = parent_of[node]
            red[tmp] = red[node]
            self._change_child(node, tmp, parent_of[node])
        else:
            successor = child
            tmp = left[child]
            if tmp < 0:
                parent = successor
                child2 = right[successor]
            else:
                while tmp >= 0:
                    parent = successor
                    successor = tmp
                    tmp = left[tmp]
                child2 = right[successor]
                left[parent] = child2
                right[successor] = child
                parent_of[child] = successor
            tmp = left[node]
            left[successor] = tmp
            parent_of[tmp] = successor
            pp, pred = parent_of[node], red[node]
            self._change_child(node, successor, pp)
            if child2 >= 0:
                parent_of[child2] = parent
                red[child2] = False
            elif not red[successor]:
                rebalance = parent
            parent_of[successor] = pp
            red[successor] = pred
        left[node] = right[node] = parent_of[node] = -1
        if rebalance >= 0:
            self._erase_color(rebalance)

    def _erase_color(self, parent: int) -> None:
        left, right, parent_of, red = self.left, self.right, self.parent, self.red
        node = -1
        while True:
            sibling = right[parent]
            if node != sibling:  # node is parent's left child
                if red[sibling]:  # case 1: left rotate at parent
                    tmp1 = left[sibling]
                    right[parent] = tmp1
                    left[sibling] = parent
                    parent_of[tmp1] = parent
                    red[tmp1] = False
                    self._rotate_set_parents(parent, sibling, True)
                    sibling = tmp1
                tmp1 = right[sibling]
                if tmp1 < 0 or not red[tmp1]:
                    tmp2 = left[sibling]
                    if tmp2 < 0 or not red[tmp2]:  # case 2: sibling colour flip
                        red[sibling] = True
                        if red[parent]:
                            red[parent] = False
                        else:
                            node = parent
                            parent = parent_of[node]
                            if parent >= 0:
                                continue
                        return
                    tmp1 = right[tmp2]  # case 3: right rotate at sibling
                    left[sibling] = tmp1
                    right[tmp2] = sibling
                    right[parent] = tmp2
                    if tmp1 >= 0:
                        parent_of[tmp1] = sibling
                        red[tmp1] = False
                    tmp1 = sibling
                    sibling = tmp2
                tmp2 = left[sibling]  # case 4: left rotate at parent, colour flips
                right[parent] = tmp2
                left[sibling] = parent
                parent_of[tmp1] = sibling
                red[tmp1] = False
                if tmp2 >= 0:
                    parent_of[tmp2] = parent
                self._rotate_set_parents(parent, sibling, False)
                return
            sibling = left[parent]
            if red[sibling]:  # right rotate at parent
                tmp1 = right[sibling]
                left[parent] = tmp1
                right[sibling] = parent
                parent_of[tmp1] = parent
                red[tmp1] = False
                self._rotate_set_parents(parent, sibling, True)
                sibling = tmp1
            tmp1 = left[sibling]
            if tmp1 < 0 or not red[tmp1]:
                tmp2 = right[sibling]
                if tmp2 < 0 or not red[tmp2]:
                    red[sibling] = True
                    if red[parent]:
                        red[parent] = False
                    else:
                        node = parent
                        parent = parent_of[node]
                        if parent >= 0:
                            continue
                    return
                tmp1 = left[tmp2]  # left rotate at sibling
                right[sibling] = tmp1
                left[tmp2] = sibling
                left[parent] = tmp2
                if tmp1 >= 0:
                    parent_of[tmp1] = sibling
                    red[tmp1] = False
                tmp1 = sibling
                sibling = tmp2
            tmp2 = right[sibling]  # right rotate at parent, colour flips
            left[parent] = tmp2
            right[sibling] = parent
            parent_of[tmp1] = sibling
            red[tmp1] = False
            if tmp2 >= 0:
                parent_of[tmp2] = parent
            self._rotate_set_parents(parent, sibling, False)
            return

    def find(self, ip: int) -> int:
        """``symbols__find``: the first node on the walk down that holds ``ip``, else -1."""
        left, right, st, en = self.left, self.right, self.st, self.en
        n = self.root
        while n >= 0:
            if ip < st[n]:
                n = left[n]
            elif ip > en[n] or (ip == en[n] and ip != st[n]):
                n = right[n]
            else:
                return n
        return -1


def fixup_end(starts: np.ndarray, ends: np.ndarray, alive: np.ndarray) -> None:
    """``symbols__fixup_end`` over the nodes in the tree (``alive``, address order), in place:
    a node without a size ends where the next one starts, the last one a page past its page."""
    idx = np.flatnonzero(alive)
    if not len(idx):
        return
    s, e = starts[idx], ends[idx]
    nxt = np.empty_like(s)
    nxt[:-1] = s[1:]
    nxt[-1] = (s[-1] + np.uint64(PAGE - 1)) // np.uint64(PAGE) * np.uint64(PAGE) + np.uint64(PAGE)
    ends[idx] = np.where(e == s, nxt, e)


def build(t: SymTable) -> Tree:
    """The tree perf 6.1 holds for ``t`` once loaded (``t.loaded``: the symbols' order, how many
    each pass inserted, their ends before the fixups), its PLT entries included."""
    from profiler.formats.elfsyms import _better

    assert t.loaded is not None
    order, passes, raw_ends = t.loaded
    n = len(t.starts)
    starts = t.starts
    ends = raw_ends.copy()
    alive = np.zeros(n, bool)
    tree = Tree(starts.tolist() + t.plt.starts.tolist(), [])
    done = 0
    for count in passes:
        seq = order[done : done + count]
        done += count
        tree.insert_all(seq.tolist())
        alive[seq] = True
        if not count:
            continue
        fixup_end(starts, ends, alive)
        idx = np.flatnonzero(alive)
        s = starts[idx]
        # symbols__fixup_duplicate: at each address, the first kept so far against the next
        same = np.flatnonzero(s[1:] == s[:-1])
        cur = -1
        for k in same.tolist():
            a, b = int(idx[k]), int(idx[k + 1])
            if cur < 0 or starts[cur] != starts[b]:
                cur = a
            win = _better(t, cur, b, ends)
            lose = b if win == cur else cur
            tree.erase(lose)
            alive[lose] = False
            cur = win
    tree.insert_all(list(range(n, n + len(t.plt))))
    tree.en = ends.tolist() + t.plt.ends.tolist()
    return tree


def plt_rule(t: SymTable, a: np.ndarray) -> np.ndarray:
    """perf's answers without the tree, for the usual layout: the table's lowest symbol X
    (``_init``, stretched to the next symbol over ``.plt``) holds every PLT entry, and there
    are two or more. X, the tree's leftmost node, has no left child, so at most one red leaf
    on its right; the PLT entries go in last, one after another into the gap right of X, and
    the second one's rebalancing (a rotation at X or above it) leaves X a leaf, an ancestor
    of none of them. A walk for an address in an entry meets the entry, never X; one below the
    first entry (``.init``, the PLT's header) ends beside X and finds it; one past the entries
    (``.plt.got``, ``.plt.sec``) meets neither: ``[unknown]``. -2 where the rule does not
    apply (the layout is not that one; an address outside X's start to the next symbol's)."""
    out = np.full(len(a), -2, np.int64)
    ps, pe = t.plt.starts, t.plt.ends
    if len(ps) < 2 or not len(t.starts):
        return out
    lo = t.starts[0]
    x = int(t.lookup(np.asarray([lo], np.uint64))[0])
    if x < 0 or x >= len(t.starts) or t.starts[x] != lo:
        return out
    higher = np.flatnonzero(t.starts > lo)
    nxt = t.starts[higher[0]] if len(higher) else np.uint64((1 << 64) - 1)
    xe = t.ends[x]
    if ps[0] < lo or pe[-1] > min(xe, nxt):
        return out
    k = np.searchsorted(ps, a, side="right").astype(np.int64) - 1
    kk = np.maximum(k, 0)
    in_plt = (k >= 0) & (a < pe[kk])
    below = a < ps[0]
    x_holds = (a < xe) | ((a == lo) & (xe == lo))
    got = np.where(in_plt, len(t.starts) + kk, np.where(below & x_holds, x, -1))
    return np.where((a >= lo) & (a < nxt), got, -2).astype(np.int64)
