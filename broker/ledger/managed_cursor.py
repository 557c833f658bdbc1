"""ManagedCursor: a subscription's durable place in a managed ledger.

State: the mark-delete position (everything at or before it is acknowledged), the
individually deleted positions after it (out-of-order acks), the ack sets of batched
entries some of whose messages are acknowledged (Pulsar's ``batchDeletedIndexes``), and
the read position (the next entry to dispatch), and the properties a mark-delete may
carry (Pulsar's ``markDelete(position, properties)``: the deduplication cursor keeps its
snapshot of sequence ids there). All but the read position are persisted on every
acknowledgement before it is reported done; the read position is not: a recovered cursor
reads again from just after its mark-delete position, as in Pulsar.

An acknowledgement is applied in memory at once (dispatch must not hand the entry out
again meanwhile) and reported done only once a metadata write that includes it is
durable. A write that fails takes back every change it carried: the state returns to
the last durable one, with the changes made after the failed write began applied again
for the next write. So an ack answered with an error had no effect, and its retry is a
real change that gets written.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import Any, Protocol

import orjson

from broker.cache.stream import TopicEvents
from broker.ledger.entry import Entry
from broker.ledger.errors import ManagedLedgerError
from broker.ledger.metadata_keys import cursor_key_prefix
from broker.ledger.position import Position
from broker.ledger.range_set import PositionRangeSet
from broker.tasks import join
from storage_stub.bookie.api import BookieError, MetadataStore

#: the cursor of Pulsar's message deduplication (``PersistentTopic.DEDUPLICATION_CURSOR_NAME``):
#: its mark-delete is the position of the last snapshot of producers' sequence ids, which
#: its properties hold
DEDUPLICATION_CURSOR_NAME = "pulsar.dedup"
#: cursors the broker keeps for itself: not subscriptions, not checked for caching (as
#: Pulsar leaves them out of its topic's subscriptions); they do hold trimming back
SYSTEM_CURSORS = frozenset({DEDUPLICATION_CURSOR_NAME})


class LedgerSpan(Protocol):
    """One bookie ledger of a managed ledger, as a cursor counts its entries."""

    @property
    def ledger_id(self) -> int: ...
    @property
    def entries(self) -> int: ...


class CursorLedger(Protocol):
    """The managed ledger as its cursors (and the dispatchers reading through them) see
    it. ``ManagedLedger`` is the one implementation; it recovers its cursors, so this
    module declares what it needs of it rather than importing it back."""

    @property
    def name(self) -> str: ...
    @property
    def metadata(self) -> MetadataStore: ...
    @property
    def events(self) -> TopicEvents: ...
    @property
    def cursors(self) -> dict[str, ManagedCursor]: ...
    @property
    def last_confirmed(self) -> Position: ...
    @property
    def ledgers(self) -> Sequence[LedgerSpan]: ...
    def first_position(self) -> Position: ...
    def previous_position(self, position: Position) -> Position: ...
    def next_position(self, position: Position) -> Position: ...
    def normalize(self, position: Position) -> Position: ...
    def is_readable(self, position: Position) -> bool: ...
    def number_of_entries_after(self, position: Position) -> int: ...
    async def read_entries(self, start: Position, max_entries: int, reader: str) -> list[Entry]: ...
    async def read_positions(self, positions: Iterable[Position], reader: str) -> list[Entry]: ...
    def add_entries_listener(self, listener: Callable[[], None]) -> None: ...
    def remove_entries_listener(self, listener: Callable[[], None]) -> None: ...
    def activate_cursor(self, cursor: ManagedCursor) -> None: ...
    def deactivate_cursor(self, cursor: ManagedCursor) -> None: ...
    def cursor_moved(self, cursor: ManagedCursor) -> None: ...


class _BatchAck:
    """Messages of a batched entry acknowledged: ``remaining`` has a bit set for each
    message still unacknowledged (Pulsar's ack set)."""

    __slots__ = ("position", "remaining")

    def __init__(self, position: Position, remaining: int) -> None:
        self.position = position
        self.remaining = remaining


#: an acknowledgement kept until a write includes it: (version, individual positions,
#: the cumulative position, or a batch-index ack)
_Change = tuple[int, "list[Position] | Position | _BatchAck"]
#: what a write stored: mark-delete, deleted ranges, consumed counter, ack sets
_State = tuple[Position, list[tuple[int, int, int]], int, list[tuple[int, int, int]]]


async def _wait_through_cancel(future: asyncio.Future[None]) -> bool:
    """Wait until ``future`` is done even if the caller is cancelled meanwhile; True if
    it was (the caller re-raises the cancellation once its own work is settled)."""
    cancelled = False
    while not future.done():
        try:
            await asyncio.wait((future,))
        except asyncio.CancelledError:
            cancelled = True
    return cancelled


class ManagedCursor:
    """A durable cursor. Acknowledgement bookkeeping is synchronous; ``persist`` makes it
    durable, coalescing concurrent calls: at most one write in flight, and every change
    made meanwhile goes out together in the next one."""

    __slots__ = (
        "_changes",
        "_deleted",
        "_durable",
        "_durable_properties",
        "_next_write",
        "_persisted_version",
        "_read_position",
        "_version",
        "_write",
        "_write_version",
        "batch_deleted",
        "individually_deleted",
        "ledger",
        "mark_delete_position",
        "messages_consumed_counter",
        "name",
        "properties",
    )

    def __init__(self, ledger: CursorLedger, name: str, mark_delete: Position) -> None:
        self.ledger = ledger
        self.name = name
        self.mark_delete_position = mark_delete
        self.individually_deleted = PositionRangeSet()
        #: batched entries partly acknowledged: position -> mask of the messages still
        #: unacknowledged; an entry leaves once acknowledged whole
        self.batch_deleted: dict[Position, int] = {}
        self._read_position = ledger.next_position(mark_delete)
        self.messages_consumed_counter = 0
        #: bumped by every change of the acknowledgement state
        self._version = 0
        #: the version the last successful write carried
        self._persisted_version = 0
        #: what that write stored
        self._durable: _State = (mark_delete, [], 0, [])
        #: acknowledgements not yet durable, oldest first
        self._changes: list[_Change] = []
        #: the write in flight and the version it carries
        self._write: asyncio.Future[None] | None = None
        self._write_version = 0
        #: the write that will carry the changes made while one is in flight
        self._next_write: asyncio.Future[None] | None = None
        self._deleted = False
        #: what the last mark-delete with properties set (written with every write)
        self.properties: dict[str, int] = {}
        self._durable_properties: dict[str, int] = {}

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
    async def create(cls, ledger: CursorLedger, name: str, start: str | Position) -> ManagedCursor:
        """A new durable cursor whose first entry to read is ``start``: ``"earliest"``,
        ``"latest"`` (the next entry written) or a position. Registered on the ledger
        only once it is durable."""
        if start == "earliest":
            mark_delete = ledger.previous_position(ledger.first_position())
        elif start == "latest":
            mark_delete = ledger.last_confirmed
        else:
            assert isinstance(start, Position)
            mark_delete = ledger.previous_position(ledger.normalize(start))
        cursor = cls(ledger, name, mark_delete)
        await ledger.metadata.put(cursor.key, cursor._encode(mark_delete, [], 0, []))
        ledger.cursors[name] = cursor
        return cursor

    @classmethod
    async def recover(cls, ledger: CursorLedger, name: str) -> ManagedCursor:
        raw = await ledger.metadata.get(cursor_key_prefix(ledger.name) + name)
        if raw is None:
            raise KeyError(name)
        state = orjson.loads(raw)
        cursor = cls(ledger, name, Position(*state["markDelete"]))
        ranges = [
            (int(lid), int(first), int(last)) for lid, first, last in state["individuallyDeleted"]
        ]
        batch = [
            (int(lid), int(eid), int(mask, 16)) for lid, eid, mask in state.get("batchDeleted", ())
        ]
        cursor._durable = (cursor.mark_delete_position, ranges, int(state["consumed"]), batch)
        cursor._durable_properties = {
            str(name): int(value) for name, value in state.get("properties", {}).items()
        }
        cursor._restore_durable()
        cursor._advance_mark_delete(moved=False)
        return cursor

    async def delete(self) -> None:
        """Delete the cursor's record, then forget it; a failed delete changes nothing.
        Writes still queued afterwards write nothing."""
        await self._alone(self.ledger.metadata.delete(self.key))
        self._deleted = True
        self.ledger.cursors.pop(self.name, None)
        self.ledger.deactivate_cursor(self)

    async def _alone(self, write: Coroutine[Any, Any, None]) -> None:
        """Run ``write`` (a put or delete of the record) once no other write is in flight,
        as the write in flight: an ack meanwhile waits for it, so no older state can land
        after it. Raises what ``write`` raises."""
        while self._write is not None or self._next_write is not None:
            await self._settle()
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._write = done
        self._write_version = self._version
        task = asyncio.ensure_future(write)
        try:
            cancelled = await _wait_through_cancel(task)
        finally:
            self._write = None
        error = task.exception()
        if error is None:
            done.set_result(None)
        else:
            done.set_exception(error)
            done.exception()  # nobody but this caller needs it
        if cancelled:
            raise asyncio.CancelledError
        if error is not None:
            raise error

    async def _settle(self) -> None:
        """Wait for the write in flight (or the next one) to end, whatever its outcome."""
        pending = self._write or self._next_write
        if pending is not None:
            await asyncio.wait((pending,))

    @staticmethod
    def _encode(
        mark_delete: Position,
        ranges: list[tuple[int, int, int]],
        consumed: int,
        batch: list[tuple[int, int, int]],
        properties: dict[str, int] | None = None,
    ) -> bytes:
        state: dict[str, Any] = {
            "markDelete": list(mark_delete),
            "individuallyDeleted": ranges,
            "consumed": consumed,
        }
        if batch:
            # ack sets as hex: a batch may hold more messages than a JSON number has bits
            state["batchDeleted"] = [[lid, eid, f"{mask:x}"] for lid, eid, mask in batch]
        if properties:
            state["properties"] = properties
        return orjson.dumps(state)

    def _batch_state(self) -> list[tuple[int, int, int]]:
        return [(p.ledger_id, p.entry_id, mask) for p, mask in self.batch_deleted.items()]

    async def persist(self) -> None:
        """Make the acknowledgement state as of now durable. Returns once a write that
        includes every change made so far is done; raises the storage error if the write
        that carried them failed (those changes are then taken back). Concurrent callers
        share writes."""
        wanted = self._version
        if self._persisted_version >= wanted:
            return
        write = self._write
        if write is not None and self._write_version >= wanted:
            await join(write)
            return
        if self._next_write is not None:
            await join(self._next_write)
            return
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._next_write = mine
        # this caller writes for everyone who joins ``mine``: a cancellation of it waits
        # until the write has ended, so that ``mine`` always settles with the truth
        cancelled = False
        while self._write is not None:
            cancelled |= await _wait_through_cancel(self._write)
        self._next_write = None
        self._write = mine
        try:
            cancelled |= await self._write_now(mine)
        finally:
            self._write = None
        if cancelled:
            raise asyncio.CancelledError
        await mine

    async def _write_now(self, done: asyncio.Future[None]) -> bool:
        """Write the current state; settle ``done`` with the outcome. True if the caller
        was cancelled meanwhile."""
        version = self._write_version = self._version
        mark_delete = self.mark_delete_position
        ranges = list(self.individually_deleted.ranges())
        consumed = self.messages_consumed_counter
        batch = self._batch_state()
        properties = self.properties
        if self._deleted:
            done.set_result(None)
            return False
        put = asyncio.ensure_future(
            self.ledger.metadata.put(
                self.key, self._encode(mark_delete, ranges, consumed, batch, properties)
            )
        )
        cancelled = await _wait_through_cancel(put)
        error = put.exception()
        if error is None:
            self._persisted_version = version
            self._durable = (mark_delete, ranges, consumed, batch)
            self._durable_properties = properties
            changes = self._changes
            while changes and changes[0][0] <= version:
                changes.pop(0)
            done.set_result(None)
        else:
            self._take_back(version)
            done.set_exception(error)
            done.exception()  # the callers re-raise it; nobody else must
        return cancelled

    def _take_back(self, failed_version: int) -> None:
        """A write of ``failed_version`` failed: return to the durable state, then apply
        again the changes made after that write began (the next write carries them)."""
        later = [change for change in self._changes if change[0] > failed_version]
        self._changes = later
        self._restore_durable()
        for _, change in later:
            if isinstance(change, Position):
                self._apply_cumulative(change)
            elif isinstance(change, _BatchAck):
                self._apply_batch(change.position, change.remaining)
            else:
                self._apply_individual(change)
        self._advance_mark_delete(moved=True)

    def _restore_durable(self) -> None:
        mark_delete, ranges, consumed, batch = self._durable
        self.mark_delete_position = mark_delete
        self.individually_deleted = PositionRangeSet.from_ranges(ranges)
        self.messages_consumed_counter = consumed
        self.batch_deleted = {Position(lid, eid): mask for lid, eid, mask in batch}
        self.properties = self._durable_properties

    # ------------------------------------------------------------------ acks

    def is_acknowledged(self, position: Position) -> bool:
        return position <= self.mark_delete_position or self.individually_deleted.contains(position)

    def acknowledge(self, positions: list[Position]) -> int:
        """Individual acks; returns how many positions were newly acknowledged.
        O(k log r) for k positions and r deleted ranges, plus mark-delete movement.
        Durable once ``persist`` returns; ``positions`` is kept until then (not copied)."""
        added = self._apply_individual(positions)
        # nothing new, but some of them may be acknowledged by a change not yet durable:
        # then this ack stands or falls with that change's write (and is applied again
        # should that write fail), so it is a change of its own
        if added or self._changes:
            self._version += 1
            self._changes.append((self._version, positions))
        return added

    def acknowledge_batch(self, position: Position, remaining: int) -> int:
        """Acknowledge messages of a batched entry: ``remaining`` has a bit set for each
        message the ack leaves unacknowledged; merged with what the cursor holds (AND),
        as Pulsar's cursor merges ack sets. Returns what is left unacknowledged (0: the
        caller acknowledges the entry whole; the cursor records nothing for it). Durable
        once ``persist`` returns. O(1)."""
        if self.is_acknowledged(position):
            return 0
        before = self.batch_deleted.get(position)
        left = (remaining if before is None else before) & remaining
        # as in ``acknowledge``: no change, but riding on a change not yet durable
        if left and (left != before or self._changes):
            self._apply_batch(position, left)
            self._version += 1
            self._changes.append((self._version, _BatchAck(position, left)))
        return left

    def _apply_batch(self, position: Position, remaining: int) -> None:
        if not self.is_acknowledged(position):
            self.batch_deleted[position] = self.batch_deleted.get(position, remaining) & remaining

    def _apply_individual(self, positions: Iterable[Position]) -> int:
        """Apply individual acks. The entry just after mark-delete, while nothing is
        acknowledged out of order, moves mark-delete on to it, as adding it to
        ``individually_deleted`` and advancing over it would: acks in order (a client
        acking what it receives) cost no range set work. O(k log r) for k positions
        and r deleted ranges, O(k) in order, plus the mark-delete movement."""
        added = 0
        first_mark_delete = mark_delete = self.mark_delete_position
        deleted = self.individually_deleted
        batch = self.batch_deleted
        is_readable = self.ledger.is_readable
        for position in positions:
            if batch:
                batch.pop(position, None)
            if position <= mark_delete or not is_readable(position):
                continue
            if not deleted and position[1] == mark_delete[1] + 1 and position[0] == mark_delete[0]:
                mark_delete = position
                added += 1
            elif deleted.add(position):
                added += 1
        if added:
            self.messages_consumed_counter += added
            self.mark_delete_position = mark_delete
            self._advance_mark_delete(moved=mark_delete is not first_mark_delete)
        return added

    def acknowledge_cumulative(self, position: Position) -> int:
        """Acknowledge everything up to and including ``position``; returns how many
        positions were newly acknowledged. Durable once ``persist`` returns."""
        acknowledged = self._apply_cumulative(position)
        if acknowledged >= 0 or self._changes:  # as in ``acknowledge``
            self._version += 1
            self._changes.append((self._version, position))
        return max(acknowledged, 0)

    async def mark_delete(self, position: Position, properties: dict[str, int]) -> None:
        """Pulsar's ``markDelete(position, properties)``: acknowledge everything up to
        ``position`` and replace the cursor's properties, durably; the storage error if
        the write failed (then neither changed). O(1) plus the write."""
        self.properties = properties
        self._apply_cumulative(position)
        self._version += 1
        self._changes.append((self._version, position))
        await self.persist()

    def _apply_cumulative(self, position: Position) -> int:
        """-1 when nothing moved."""
        if position <= self.mark_delete_position or not self.ledger.is_readable(position):
            return -1
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
        batch = self.batch_deleted
        if batch:
            for position in [p for p in batch if p <= mark_delete]:
                del batch[position]
        if moved:
            ledger.cursor_moved(self)

    def nth_unacknowledged(self, n: int) -> Position | None:
        """The ``n``-th (from 1) confirmed entry after the mark-delete position that is
        not acknowledged whole (Pulsar's ``getNthEntry`` excluding individually deleted
        entries); None when fewer remain; the mark-delete position for 0 (a skip of
        none). O(#ledgers + deleted ranges crossed), whatever
        ``n``: counted a ledger and a deleted range at a time, not an entry at a time
        (a peek or skip of a client's count, up to 2^31 - 1, walked that much of the
        backlog without yielding: 200,000 entries held the loop 0.26 s)."""
        if n > self.backlog():
            return None
        deleted = self.individually_deleted
        mark_delete = self.mark_delete_position
        if n < 1:
            return mark_delete
        for info in self.ledger.ledgers:
            ledger_id = info.ledger_id
            if ledger_id < mark_delete.ledger_id:
                continue
            # the entries [start, info.entries) of this ledger, less its deleted ranges
            start = mark_delete.entry_id + 1 if ledger_id == mark_delete.ledger_id else 0
            for first, last in deleted.ranges_of(ledger_id) if deleted else ():
                if last < start:
                    continue
                gap = min(first, info.entries) - start
                if n <= gap:
                    return Position(ledger_id, start + n - 1)
                n -= max(gap, 0)
                start = max(start, last + 1)
            left = info.entries - start
            if n <= left:
                return Position(ledger_id, start + n - 1)
            n -= max(left, 0)
        return None

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
        move past them. Reads stay within one ledger per storage call. A storage error
        after some entries were read returns those (the read position is just past
        them); a rewind or reset while reading drops everything read before it."""
        ledger = self.ledger
        result: list[Entry] = []
        while len(result) < max_entries and self.has_more_entries():
            start = self.read_position
            try:
                entries = await ledger.read_entries(start, max_entries - len(result), self.name)
            except (BookieError, ManagedLedgerError):
                if result:
                    return result
                raise
            if not entries:
                break
            if self.read_position != start:
                # the position moved while reading (a rewind, a reset, an ack past it):
                # what this call read so far is stale as well; read from the new one
                result.clear()
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
        state is replaced (everything before it acknowledged, nothing after). The new
        state is written first and applied only once durable: a failed reset changes
        nothing. Acks not yet durable are superseded by it."""
        position = self.ledger.normalize(position)
        mark_delete = self.ledger.previous_position(position)
        if self._deleted:
            return
        consumed = self.messages_consumed_counter
        properties = self.properties
        await self._alone(
            self.ledger.metadata.put(
                self.key, self._encode(mark_delete, [], consumed, [], properties)
            )
        )
        self._version += 1
        self._persisted_version = self._version
        self._durable = (mark_delete, [], consumed, [])
        self._durable_properties = properties
        self._changes.clear()
        self.mark_delete_position = mark_delete
        self.individually_deleted = PositionRangeSet()
        self.batch_deleted = {}
        self._read_position = position
        self.ledger.cursor_moved(self)
