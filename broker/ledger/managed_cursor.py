"""ManagedCursor: a subscription's durable place in a managed ledger.

State: the mark-delete position (everything at or before it is acknowledged), the
individually deleted positions after it (out-of-order acks), and the read position (the
next entry to dispatch). Mark-delete and individual deletes are persisted on every
acknowledgement before it is reported done; the read position is not: a recovered
cursor reads again from just after its mark-delete position, as in Pulsar.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import orjson

from broker.ledger.entry import Entry
from broker.ledger.managed_ledger import ManagedLedger, cursor_key_prefix
from broker.ledger.position import Position
from broker.ledger.range_set import PositionRangeSet


class ManagedCursor:
    """A durable cursor. Acknowledgement bookkeeping is synchronous; ``persist`` makes it
    durable, coalescing concurrent calls into as few metadata writes as possible."""

    __slots__ = (
        "_dirty_version",
        "_persist_lock",
        "_persisted_version",
        "_read_position",
        "individually_deleted",
        "ledger",
        "mark_delete_position",
        "messages_consumed_counter",
        "name",
    )

    def __init__(self, ledger: ManagedLedger, name: str, mark_delete: Position) -> None:
        self.ledger = ledger
        self.name = name
        self.mark_delete_position = mark_delete
        self.individually_deleted = PositionRangeSet()
        self._read_position = ledger.next_position(mark_delete)
        self.messages_consumed_counter = 0
        self._persist_lock = asyncio.Lock()
        self._dirty_version = 0
        self._persisted_version = 0

    # ------------------------------------------------------------------ lifecycle

    @property
    def read_position(self) -> Position:
        """The next entry to dispatch. Setting it tells the topic's cache events."""
        return self._read_position

    @read_position.setter
    def read_position(self, position: Position) -> None:
        if position != self._read_position:
            self._read_position = position
            self.ledger.cursor_moved(self)

    @property
    def key(self) -> str:
        return cursor_key_prefix(self.ledger.name) + self.name

    @classmethod
    async def create(cls, ledger: ManagedLedger, name: str, start: str | Position) -> ManagedCursor:
        """A new durable cursor whose first entry to read is ``start``: ``"earliest"``,
        ``"latest"`` (the next entry written) or a position."""
        if start == "earliest":
            mark_delete = ledger.previous_position(ledger.first_position())
        elif start == "latest":
            mark_delete = ledger.last_confirmed
        else:
            assert isinstance(start, Position)
            mark_delete = ledger.previous_position(ledger.normalize(start))
        cursor = cls(ledger, name, mark_delete)
        await cursor.persist()
        ledger.cursors[name] = cursor
        return cursor

    @classmethod
    async def recover(cls, ledger: ManagedLedger, name: str) -> ManagedCursor:
        raw = await ledger.metadata.get(cursor_key_prefix(ledger.name) + name)
        if raw is None:
            raise KeyError(name)
        state = orjson.loads(raw)
        cursor = cls(ledger, name, Position(*state["markDelete"]))
        cursor.individually_deleted = PositionRangeSet.from_ranges(state["individuallyDeleted"])
        cursor.messages_consumed_counter = int(state["consumed"])
        cursor._advance_mark_delete(moved=False)
        return cursor

    async def delete(self) -> None:
        self.ledger.cursors.pop(self.name, None)
        self.ledger.deactivate_cursor(self)
        async with self._persist_lock:
            await self.ledger.metadata.delete(self.key)

    async def persist(self) -> None:
        """Make the current acknowledgement state durable. Concurrent callers share
        writes: a caller returns once a write that includes its changes is done."""
        self._dirty_version += 1
        wanted = self._dirty_version
        async with self._persist_lock:
            if self._persisted_version >= wanted:
                return
            version = self._dirty_version
            state = {
                "markDelete": list(self.mark_delete_position),
                "individuallyDeleted": list(self.individually_deleted.ranges()),
                "consumed": self.messages_consumed_counter,
            }
            await self.ledger.metadata.put(self.key, orjson.dumps(state))
            self._persisted_version = version

    # ------------------------------------------------------------------ acks

    def is_acknowledged(self, position: Position) -> bool:
        return position <= self.mark_delete_position or self.individually_deleted.contains(position)

    def acknowledge(self, positions: Iterable[Position]) -> int:
        """Individual acks; returns how many positions were newly acknowledged.
        O(k log r) for k positions and r deleted ranges, plus mark-delete movement."""
        added = 0
        mark_delete = self.mark_delete_position
        deleted = self.individually_deleted
        for position in positions:
            if (
                position > mark_delete
                and self.ledger.is_readable(position)
                and deleted.add(position)
            ):
                added += 1
        if added:
            self.messages_consumed_counter += added
            self._advance_mark_delete(moved=False)
        return added

    def acknowledge_cumulative(self, position: Position) -> int:
        """Acknowledge everything up to and including ``position``; returns how many
        positions were newly acknowledged."""
        if position <= self.mark_delete_position or not self.ledger.is_readable(position):
            return 0
        before = self.ledger.number_of_entries_after(self.mark_delete_position) - len(
            self.individually_deleted
        )
        self.mark_delete_position = position
        self.individually_deleted.remove_up_to(position)
        self._advance_mark_delete()
        after = self.backlog()
        self.messages_consumed_counter += before - after
        return before - after

    def _advance_mark_delete(self, moved: bool = True) -> None:
        """Move mark-delete over individually deleted ranges that now follow it, and the
        read position past it; tell the cache events once if either moved (``moved``:
        the caller already moved mark-delete)."""
        ledger = self.ledger
        deleted = self.individually_deleted
        mark_delete = self.mark_delete_position
        if deleted:
            while True:
                following = ledger.next_position(mark_delete)
                end = deleted.range_starting_at(following)
                if end is None:
                    break
                mark_delete = Position(following.ledger_id, end)
                deleted.remove_up_to(mark_delete)
                moved = True
            self.mark_delete_position = mark_delete
        if self._read_position <= mark_delete:
            self._read_position = ledger.next_position(mark_delete)
            moved = True
        if moved:
            ledger.cursor_moved(self)

    def backlog(self) -> int:
        """Confirmed entries not yet acknowledged. O(#ledgers)."""
        return self.ledger.number_of_entries_after(self.mark_delete_position) - len(
            self.individually_deleted
        )

    # ------------------------------------------------------------------ reads

    def entries_to_read(self) -> int:
        """Confirmed entries at or after the read position, not acknowledged (Pulsar's
        ``ManagedCursor.getNumberOfEntries``). O(#ledgers + deleted ranges after it)."""
        ledger = self.ledger
        read_position = self._read_position
        after = ledger.number_of_entries_after(ledger.previous_position(read_position))
        return after - self.individually_deleted.count_from(read_position)

    def has_more_entries(self) -> bool:
        position = self.ledger.normalize(self.read_position)
        self.read_position = position
        return self.ledger.is_readable(position)

    async def read_entries(self, max_entries: int) -> list[Entry]:
        """Read up to ``max_entries`` unacknowledged entries from the read position and
        move past them. Reads stay within one ledger per storage call."""
        ledger = self.ledger
        result: list[Entry] = []
        while len(result) < max_entries and self.has_more_entries():
            start = self.read_position
            entries = await ledger.read_entries(start, max_entries - len(result), self.name)
            if not entries:
                break
            if self.read_position != start:
                # a rewind or reset happened while reading: drop this batch
                continue
            self.read_position = ledger.next_position(entries[-1].position)
            deleted = self.individually_deleted
            mark_delete = self.mark_delete_position
            for entry in entries:
                if entry.position > mark_delete and not (
                    deleted and deleted.contains(entry.position)
                ):
                    result.append(entry)
        return result

    def rewind(self) -> None:
        """Read again from the first unacknowledged entry."""
        self.read_position = self.ledger.next_position(self.mark_delete_position)

    async def reset(self, position: Position) -> None:
        """Move the cursor so that ``position`` is the next entry read; acknowledgement
        state is replaced (everything before it acknowledged, nothing after)."""
        position = self.ledger.normalize(position)
        self.mark_delete_position = self.ledger.previous_position(position)
        self.individually_deleted = PositionRangeSet()
        self._read_position = position
        self.ledger.cursor_moved(self)
        await self.persist()
