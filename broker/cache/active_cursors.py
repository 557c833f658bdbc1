"""ActiveManagedCursorContainer: the active cursors of a managed ledger, sorted by
position, answering "how many cursors are at or before this one" in O(1).

A doubly linked list sorted by position (head = slowest). Cursors at the same position
form a group that shares one counter object holding the number of cursors at or before
that position, so a count query is one map lookup and one attribute read. Moving a cursor
adjusts the counters of the groups it passes, so add, remove and move cost O(distance
moved) in nodes; the list is walked from the end nearest to where the work is.

The same design as Pulsar's ActiveManagedCursorContainerImpl (PIP-430), written for
brokerlab. Cursors are keys (the designs use cursor names); positions are anything
ordered (``(ledger id, entry id)`` tuples). PIP-430's expected read counts ask it for the
readers at or before a reader (``broker/cache/pip430.py``); the legacy rules use it for
the slowest active reader (``broker/cache/legacy.py``).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Any


class CursorCounter:
    """Cursors at or before the position of the group sharing this object."""

    __slots__ = ("value",)

    def __init__(self, value: int) -> None:
        self.value = value


class _Node:
    __slots__ = ("counter", "cursor", "next", "position", "prev")

    def __init__(self, cursor: Hashable, position: Any) -> None:
        self.cursor = cursor
        self.position = position
        self.counter = CursorCounter(0)
        self.prev: _Node | None = None
        self.next: _Node | None = None


class ActiveManagedCursorContainer:
    """Costs: ``number_at_or_before`` and ``slowest_position`` O(1); ``add`` O(distance
    from the tail); ``remove`` O(distance to the tail); ``move`` O(nodes between the old
    and the new position); ``check_consistency`` O(n) (tests)."""

    __slots__ = ("_head", "_nodes", "_tail")

    def __init__(self) -> None:
        self._head: _Node | None = None
        self._tail: _Node | None = None
        self._nodes: dict[Hashable, _Node] = {}

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, cursor: Hashable) -> bool:
        return cursor in self._nodes

    def __iter__(self) -> Iterator[Hashable]:
        node = self._head
        while node is not None:
            yield node.cursor
            node = node.next

    def slowest_position(self) -> Any:
        """Position of the slowest cursor, None when empty. O(1)."""
        return self._head.position if self._head is not None else None

    def position_of(self, cursor: Hashable) -> Any:
        return self._nodes[cursor].position

    def number_at_or_before(self, cursor: Hashable) -> int:
        """Cursors at the same position as ``cursor`` or before it (itself included);
        0 for a cursor not tracked. O(1)."""
        node = self._nodes.get(cursor)
        return node.counter.value if node is not None else 0

    # ------------------------------------------------------------------ updates

    def add(self, cursor: Hashable, position: Any) -> None:
        """Track ``cursor`` at ``position``. O(distance from the tail)."""
        if cursor in self._nodes:
            raise ValueError(f"cursor {cursor!r} is already tracked")
        node = _Node(cursor, position)
        self._nodes[cursor] = node
        # find the last node at or before position, walking back from the tail; every
        # group after position gains one cursor at-or-before
        after = self._tail
        last_counter: CursorCounter | None = None
        while after is not None and after.position > position:
            if after.counter is not last_counter:
                after.counter.value += 1
                last_counter = after.counter
            after = after.prev
        self._link_after(node, after)

    def remove(self, cursor: Hashable) -> None:
        """Stop tracking ``cursor``. O(distance to the tail)."""
        node = self._nodes.pop(cursor)
        # every group from this one on loses one cursor at-or-before
        current = node.next
        last_counter: CursorCounter | None = node.counter
        node.counter.value -= 1
        while current is not None:
            if current.counter is not last_counter:
                current.counter.value -= 1
                last_counter = current.counter
            current = current.next
        self._unlink(node)

    def move(self, cursor: Hashable, position: Any) -> None:
        """Move ``cursor`` to ``position``. O(nodes between the two positions)."""
        node = self._nodes[cursor]
        old = node.position
        if position == old:
            return
        if position > old:
            # leaving the old group and passing every group up to position: each of them
            # no longer has this cursor at or before it
            node.counter.value -= 1
            passed: CursorCounter | None = node.counter
            before = node
            current = node.next
            while current is not None and current.position <= position:
                if current.position < position and current.counter is not passed:
                    current.counter.value -= 1
                    passed = current.counter
                before = current
                current = current.next
            anchor = before if before is not node else node.prev
            self._unlink(node)
            node.position = position
            # joining a group at position keeps its counter (the cursor was counted)
            self._link_after(node, anchor, counted=True)
        else:
            # passing every group above position back to (not including) the old group:
            # each gains this cursor at or before it
            after = node.prev
            last_counter: CursorCounter | None = node.counter
            while after is not None and after.position > position:
                if after.counter is not last_counter:
                    after.counter.value += 1
                    last_counter = after.counter
                after = after.prev
            self._unlink(node)
            node.position = position
            self._link_after(node, after)

    # ------------------------------------------------------------------ list surgery

    def _link_after(self, node: _Node, prev: _Node | None, counted: bool = False) -> None:
        """Insert ``node`` after ``prev`` (None: at the head) and give it its group's
        counter. A node joining an existing group adds itself to the shared count unless
        ``counted`` (the group already counted it, moving forward)."""
        following = self._head if prev is None else prev.next
        node.prev = prev
        node.next = following
        if prev is None:
            self._head = node
        else:
            prev.next = node
        if following is None:
            self._tail = node
        else:
            following.prev = node
        if prev is not None and prev.position == node.position:
            node.counter = prev.counter
            if not counted:
                node.counter.value += 1
        elif following is not None and following.position == node.position:
            node.counter = following.counter
            if not counted:
                node.counter.value += 1
        else:
            node.counter = CursorCounter((prev.counter.value if prev is not None else 0) + 1)

    def _unlink(self, node: _Node) -> None:
        if node.prev is None:
            self._head = node.next
        else:
            node.prev.next = node.next
        if node.next is None:
            self._tail = node.prev
        else:
            node.next.prev = node.prev
        node.prev = node.next = None

    # ------------------------------------------------------------------ tests

    def check_consistency(self) -> None:
        """Raise AssertionError if order, links, groups or counters are wrong. O(n)."""
        seen = 0
        previous: _Node | None = None
        node = self._head
        positions = []
        while node is not None:
            assert node.prev is previous, "broken back link"
            if previous is not None:
                assert previous.position <= node.position, "not sorted"
                same = previous.position == node.position
                assert (previous.counter is node.counter) == same, "group counter not shared"
            positions.append(node.position)
            seen += 1
            previous = node
            node = node.next
        assert previous is self._tail, "tail is not the last node"
        assert seen == len(self._nodes), "map and list disagree"
        node = self._head
        while node is not None:
            assert self._nodes.get(node.cursor) is node, "map names another node"
            expected = sum(1 for p in positions if p <= node.position)
            assert node.counter.value == expected, (
                f"count at {node.position}: {node.counter.value} != {expected}"
            )
            node = node.next
