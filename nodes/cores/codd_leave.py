"""CoDD's leave protocol (Figs. 5-6), an object :class:`nodes.cores.codd.CoddCore`
owns: a leaving node asks the root, which lets it go when no other change is under way;
the child of most overlap with the node's own documents (the heir) takes its place, the
other children re-join under the heir, and the node, a leaf by then, is removed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from nodes.cores.codd_reorganize import popcount
from nodes.cores.interface import Action, Send

if TYPE_CHECKING:
    from nodes.cores.codd import CoddCore


class Leave:
    """A node's part in leaves: its own leave and, at the root, starting one. Whether
    the node leaves (``_leaving``) and has left (``_left``) the core keeps: every part
    asks."""

    def __init__(self, core: CoddCore) -> None:
        self.core = core
        self._rest: list[str] = []  # the children still to re-join under the heir
        self.heir: str | None = None  # the child that takes a leaving node's place
        self.cid: int | None = None  # the root's number of this node's leave
        self.pending = False  # ask to leave again once re-joined

    def ask(self) -> list[Action]:
        """Ask the root to leave (once placed)."""
        core = self.core
        if core.parent is None:  # not placed yet, or an orphan: once (re-)placed
            self.pending = True
            return []
        self._rest = []
        return [Send(core.root, core._tree_msg("leave_req", node=core.broker,
                                               members=sorted(core.subtree())))]

    def on_leave_req(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        changes = self.core.changes
        changes.gone.add(p["node"])
        return changes.enqueue("leave", dict(p))

    def start(self, p: dict[str, Any]) -> list[Action]:
        """The root lets a node go."""
        core = self.core
        return [Send(p["node"], core._tree_msg("leave_go", cid=core.changes.cid))]

    def on_leave_go(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        core = self.core
        self.cid = p["cid"]
        if core.parent is None:  # orphaned since it asked: again once re-joined
            self.pending = True
            return [Send(core.root, core._tree_msg("done", cid=p["cid"]))]
        live = [c for c in core.children if c not in core._lost]
        if not live:
            return self.ready()
        if self.heir is not None and self.heir not in core.children:
            # Asked again after a failure held up the first try, whose heir has taken
            # this node's place already: the rest re-join under it (a second heir would
            # leave the parent a child over its fanout).
            self._rest = sorted(live)
            return self.next()
        own = core._win(core.own_bits)
        heir = max(live, key=lambda c: (popcount(core._win(core.children[c].sent) & own),
                                        len(core.children[c].members), c))
        self._rest = sorted(c for c in live if c != heir)
        self.heir = heir
        return [Send(heir, core._tree_msg("addresult", parent=core.parent, purpose="leave",
                                          cid=self.cid))]

    def next(self) -> list[Action]:
        """The next child re-joins with seed set {the heir}; when none is left, this
        node, now a leaf (but for children found silent), is removed."""
        core = self.core
        while self._rest:
            c = self._rest.pop(0)
            if c not in core.children:  # purged meanwhile (it failed)
                continue
            want = format(core._win(core.children[c].sent), "x")
            return [Send(self.heir, core._tree_msg("add", node=c, want=want,
                                                   purpose="leave", cid=self.cid))]
        return self.ready()

    def ready(self) -> list[Action]:
        """This node is a leaf: the root removes it."""
        core = self.core
        core._left = True
        return [Send(core.root, core._tree_msg("leave_ready", node=core.broker,
                                               cid=self.cid))]

    def on_leave_ready(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        return self.core._on_remove(link, p)
