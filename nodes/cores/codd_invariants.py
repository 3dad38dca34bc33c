"""CoDD's tree invariants, checked over every node's state (for tests and at the end of
a run): :func:`tree_problems`."""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nodes.cores.codd import CoddCore


def tree_problems(cores: Mapping[str, CoddCore], dead: Set[str] = frozenset(),
                  settled: bool = True) -> list[str]:
    """Where the tree the cores hold breaks CoDD's invariants (empty: none), at a
    quiescent moment (no change under way). Nodes in ``dead`` (crashed) and nodes that
    left the overlay are not checked.

    ``settled`` (no failure waiting to be found or repaired): every live node but the
    root has a live parent that lists it, no live node lists a child that is dead or
    names another parent, the fanout is respected, there is no cycle, and every child
    entry holds exactly the child's subtree, with ``where`` and the bit masks agreeing.

    Not ``settled`` (failures may be pending: a dead child not yet found silent, an
    orphan waiting to re-join, an entry for a node whose move a failure cut, a leave
    given up half way with its heir beside it): every entry equal to the child's own
    view where the tree is whole (a live child that names its live parent), and parent
    pointers without cycles."""
    problems: list[str] = []
    root = next(iter(cores.values())).root
    dead = frozenset(dead) | {n for n, c in cores.items() if c.departed}
    live = {n: c for n, c in cores.items() if n not in dead and (
        n == root or (c.attached and not c._left))}

    def whole(n: str, child: str) -> bool:
        return child in live and live[child].parent == n

    for n, c in live.items():
        if settled and len(c.children) > c.fanout and c.tree == "codd":
            problems.append(f"{n}: {len(c.children)} children > fanout {c.fanout}")
        if settled:
            if n != root and (c.parent not in live or n not in live[c.parent].children):
                problems.append(f"{n}: its parent {c.parent} is gone or does not list it")
            problems += [f"{n}: lists {k}, dead or another's child" for k in c.children
                         if not whole(n, k)]
        seen, x = set(), n  # walk up: the root, or the top of a cut-off subtree
        while x in live and x != root and x not in seen:
            seen.add(x)
            x = live[x].parent
        if x in seen:
            problems.append(f"{n}: a cycle of parents")
        elif settled and x != root:
            problems.append(f"{n}: no path to the root")
    if problems:
        return problems

    def subtree(n: str) -> dict[str, Any]:
        out = {n: cores[n].query_json}
        for child in cores[n].children:
            if whole(n, child):
                out.update(subtree(child))
        return out

    for n, c in live.items():
        for child, ch in c.children.items():
            if not whole(n, child):
                continue
            want = live[child].subtree() if not settled else subtree(child)
            if ch.members != want:
                problems.append(f"{n}: child {child}'s filter holds {sorted(ch.members)}, "
                                f"its subtree is {sorted(want)}")
            mask = sum(1 << c._bit_of[m] for m, q in want.items() if q is None)
            if ch.mask != mask or any(c.where.get(m) != child for m in want):
                problems.append(f"{n}: child {child}'s bits or member index disagree")
        if set(c.where) != {m for ch in c.children.values() for m in ch.members}:
            problems.append(f"{n}: member index has entries of no child")
    return problems
