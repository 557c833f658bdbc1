"""The entries of one managed ledger something holds now, found by position.

Every read builds Entry objects: from the cache's bytes on a hit, from fresh bytes on a
storage read. Subscriptions reading the same backlog each got their own Entry, Position
and, for storage reads, their own copy of the payload, and an HTTP consumer's receiver
queue keeps what it was handed until it is polled: 10,000 never-polled consumers on one
topic held 10,000 copies of each prefetched entry. A read of an entry some receiver
queue (or dispatch) still holds now hands out that same Entry: an entry is immutable
once written and ledger ids are never reused, so nobody can tell the difference, except
that its bytes, position and decoded metadata exist once.

Weak: an entry is dropped here when the last holder lets it go, so nothing is kept
longer than it would have been. A ledger with one subscription has nobody to share
with, and its reads skip this index (it would cost them a weak reference each).
"""

from __future__ import annotations

import weakref

from broker.ledger.entry import Entry
from broker.ledger.position import Position


class _EntryRef(weakref.ref[Entry]):
    """A weak reference that knows the position it is filed under."""

    __slots__ = ("position",)
    position: Position


class LiveEntries:
    """``entry``: O(1), one dict lookup, and for an entry nobody holds one Entry, one weak
    reference and one dict insert; the entry leaves in O(1) when its last holder drops
    it. Memory: about 130 bytes per entry held somewhere, none for the others (an empty
    table is released)."""

    __slots__ = ("_by_position", "_drop")

    def __init__(self) -> None:
        self._by_position: dict[Position, _EntryRef] = {}
        # one bound method for every reference's callback (not one per entry)
        self._drop = self._dropped

    def __len__(self) -> int:
        """Entries held somewhere now (O(1))."""
        return len(self._by_position)

    def entry(self, position: Position, data: bytes, messages: int = 0) -> Entry:
        """The Entry at ``position`` that something holds, else a new one of ``data``
        (the entry's bytes, as read; ``messages`` its count if known, see ``Entry``)."""
        by_position = self._by_position
        ref = by_position.get(position)
        if ref is not None:
            held = ref()
            if held is not None:
                return held
        entry = Entry(position, data, messages)
        ref = _EntryRef(entry, self._drop)
        ref.position = position
        by_position[position] = ref
        return entry

    def _dropped(self, ref: _EntryRef) -> None:
        by_position = self._by_position
        if by_position.get(ref.position) is ref:
            del by_position[ref.position]
            if not by_position:
                # a dict keeps its table when emptied: an idle topic keeps none
                self._by_position = {}
