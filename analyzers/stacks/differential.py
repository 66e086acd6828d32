"""The differential flame graph model (analyzers layer).

A tree sized by one capture, each frame carrying how much it grew or shrank against another.
"""

from __future__ import annotations

from profiler.analyzers.stacks.flame import Node, build_tree

__all__ = ["differential"]


def differential(
    before: dict[str, int],
    after: dict[str, int],
    before_work: float | None = None,
    after_work: float | None = None,
) -> tuple[Node, float]:
    """A tree sized by `after`, each frame carrying `delta` = after - before x scale.

    The scale normalises `before` to the same amount of work as `after`: by the work each
    capture did (operations: throughput x duration) when both are known, so that a frame whose
    cost per operation did not change shows no delta; else by total samples. Returns
    (tree, scale).
    """
    if before_work and after_work:
        scale = after_work / before_work
    else:
        tb = sum(before.values())
        scale = sum(after.values()) / tb if tb else 1.0
    root = build_tree(after)
    old = build_tree(before)
    _set_delta(root, old, scale)
    return root, scale


def _set_delta(new: Node, old: Node | None, scale: float) -> None:
    stack = [(new, old)]
    while stack:
        n, o = stack.pop()
        n.delta = n.total - (o.total * scale if o is not None else 0.0)
        for name, c in n.children.items():
            stack.append((c, o.children.get(name) if o is not None else None))
