"""What the ledger layer caches under each design, and when it invalidates.

The cache classes hold and evict; these policies decide, per managed ledger, which added
entries and which storage reads go into the cache and (legacy) when entries are dropped
because every active reader has passed them. Each is O(1) per event except where noted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from broker.ledger.position import Position

if TYPE_CHECKING:
    from broker.ledger.managed_cursor import ManagedCursor
    from broker.ledger.managed_ledger import ManagedLedger


class CachePolicy(Protocol):
    def added_entry_reads(self, ledger: ManagedLedger) -> int | None:
        """Expected reads for entries just added, or None not to cache them."""
        ...

    def storage_read_reads(self, ledger: ManagedLedger, cursor: ManagedCursor) -> int:
        """Expected reads for entries ``cursor`` reads from storage; 0: don't cache."""
        ...

    def cursor_moved(self, ledger: ManagedLedger, cursor: ManagedCursor | None) -> None:
        """``cursor``'s read or mark-delete position changed (None: the set of active
        cursors changed)."""
        ...

    def refresh(self, ledger: ManagedLedger) -> None:
        """Periodic upkeep (the stats period), for rules Pulsar evaluates periodically."""
        ...


class Pip430Policy:
    """Added entries: one expected read per active cursor, and cached for a while after
    the last active cursor left. Storage reads: one per active cursor at or before the
    reader. No invalidation: expected reads and the removal queue do that work."""

    __slots__ = ()

    def added_entry_reads(self, ledger: ManagedLedger) -> int | None:
        return len(ledger.active_cursors) if ledger.caching_added_entries() else None

    def storage_read_reads(self, ledger: ManagedLedger, cursor: ManagedCursor) -> int:
        """Active cursors at or before the reader, itself included; 0 for a reader that
        is not active (its reads are not cached), as in Pulsar. O(1)."""
        return ledger.active_container.number_at_or_before(cursor)

    def cursor_moved(self, ledger: ManagedLedger, cursor: ManagedCursor | None) -> None:
        pass

    def refresh(self, ledger: ManagedLedger) -> None:
        pass


class SegmentedPolicy:
    """PIP-174: the write path feeds the ring while a cursor is active; nothing else."""

    __slots__ = ()

    def added_entry_reads(self, ledger: ManagedLedger) -> int | None:
        return 0 if ledger.active_cursors else None

    def storage_read_reads(self, ledger: ManagedLedger, cursor: ManagedCursor) -> int:
        return 0

    def cursor_moved(self, ledger: ManagedLedger, cursor: ManagedCursor | None) -> None:
        pass

    def refresh(self, ledger: ManagedLedger) -> None:
        pass


@dataclass(slots=True)
class LegacyPolicy:
    """Pulsar before PIP-430. A cursor is active when it has consumers and is at most
    ``backlogged_threshold`` entries behind; added entries are cached while one is;
    when the slowest active reader moves, everything before it is invalidated (its
    mark-delete position with ``by_mark_delete``). Storage reads are cached only for
    cursors chosen by the backlog-caching rule, which is evaluated periodically."""

    by_mark_delete: bool = False
    backlogged_threshold: int = 1000
    min_backlog_cursors: int = 0
    min_backlog_entries: int = 1000
    max_backlog_between: int = 1000
    _slowest: Position | None = None
    _slowest_cursor: ManagedCursor | None = None
    _has_active: bool = False
    _stale: bool = True
    _cache_reads: frozenset[str] = frozenset()

    def _active(self, ledger: ManagedLedger) -> list[ManagedCursor]:
        """Cursors with consumers and at most the threshold of entries still to read
        (Pulsar counts from the read position, not unacked messages).
        O(#active cursors x #ledgers)."""
        threshold = self.backlogged_threshold
        return [c for c in ledger.active_cursors if c.entries_to_read() <= threshold]

    def added_entry_reads(self, ledger: ManagedLedger) -> int | None:
        """Cached while a non-backlogged cursor is active (as of the last recompute).
        New entries can make a cursor backlogged: the next move re-evaluates."""
        self._stale = True
        return 0 if self._has_active else None

    def storage_read_reads(self, ledger: ManagedLedger, cursor: ManagedCursor) -> int:
        return 1 if cursor.name in self._cache_reads else 0

    def _reader_position(self, ledger: ManagedLedger, cursor: ManagedCursor) -> Position:
        if self.by_mark_delete:
            return ledger.next_position(cursor.mark_delete_position)
        return cursor.read_position

    def cursor_moved(self, ledger: ManagedLedger, cursor: ManagedCursor | None) -> None:
        """Invalidate up to the slowest active reader when it changed. O(1) when the
        moved cursor cannot change it and nothing was added since the last evaluation;
        else O(#active cursors x #ledgers)."""
        if (
            cursor is not None
            and not self._stale
            and self._slowest is not None
            and cursor is not self._slowest_cursor
            and self._reader_position(ledger, cursor) >= self._slowest
        ):
            return
        self._recompute(ledger)

    def _recompute(self, ledger: ManagedLedger) -> None:
        self._stale = False
        active = self._active(ledger)
        self._has_active = bool(active)
        if not active:
            self._slowest_cursor = None
            if self._slowest is not None:
                self._slowest = None
                ledger.cache.clear()
                if ledger.trace is not None:
                    # the slowest-reader rule with no reader left: everything
                    ledger.trace.invalidate(ledger.name, -1, None, -1)
            return
        slowest_cursor = min(active, key=lambda c: self._reader_position(ledger, c))
        slowest = self._reader_position(ledger, slowest_cursor)
        self._slowest_cursor = slowest_cursor
        if slowest != self._slowest:
            self._slowest = slowest
            ledger.cache.invalidate_entries(slowest.ledger_id, slowest.entry_id)
            if ledger.trace is not None:
                # everything before the slowest reader: at or before (ledger, entry - 1)
                ledger.trace.invalidate(ledger.name, slowest.ledger_id, None, slowest.entry_id - 1)

    def refresh(self, ledger: ManagedLedger) -> None:
        """Pulsar's backlog-caching rule: a cursor with at least ``min_backlog_entries``
        of backlog has its reads cached when at least ``min_backlog_cursors`` cursors
        (itself included) have backlogs within ``max_backlog_between`` of its own.
        O(#cursors^2), as in Pulsar. Also re-evaluates which cursors are backlogged."""
        self._recompute(ledger)
        if self.min_backlog_cursors < 1:
            self._cache_reads = frozenset()
            return
        backlogs = {c.name: c.backlog() for c in ledger.cursors.values()}
        chosen = set()
        for name, backlog in backlogs.items():
            if backlog < self.min_backlog_entries:
                continue
            close = sum(
                1 for other in backlogs.values() if abs(other - backlog) <= self.max_backlog_between
            )
            if close >= self.min_backlog_cursors:
                chosen.add(name)
        self._cache_reads = frozenset(chosen)
