"""ManagedLedger: a topic's log as a sequence of bookie ledgers, with its cursors.

The one read path of the broker lives here: the topic's cache events answer a read with
the live design's hits, the ranges to read from storage, and the ranges to wait for
from storage reads already in flight; what storage returns goes back as ``filled``.
Every change the cache designs care about (adds, reads, trims, close) is an event on
the topic's :class:`~broker.cache.stream.TopicEvents`.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import functools
import logging
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import EllipsisType

import orjson

from broker.cache.api import CursorCheck
from broker.cache.stream import TopicEvents
from broker.clock import Clock
from broker.ledger.entry import Entry
from broker.ledger.errors import ManagedLedgerError, ReadsThrottled
from broker.ledger.live_entries import LiveEntries
from broker.ledger.managed_cursor import SYSTEM_CURSORS, ManagedCursor
from broker.ledger.metadata_keys import cursor_key_prefix, metadata_key
from broker.ledger.offload import TieredStorage, offset_of, stream_id_of
from broker.ledger.pending_reads import PendingRead, PendingReads
from broker.ledger.position import Position
from broker.ledger.read_limiter import ReadLimiter, TooManyReads, estimated_read_size
from broker.tasks import TaskOwner, join
from storage_stub.bookie.api import Bookie, BookieError, MetadataStore, total_size, when_done

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ManagedLedgerConfig:
    max_entries_per_ledger: int = 50000
    max_size_per_ledger_bytes: int = 2048 * 1024 * 1024
    min_rollover_ms: int = 10 * 60_000
    max_rollover_ms: int = 240 * 60_000


class LedgerInfo:
    """What the managed ledger knows of one of its bookie ledgers."""

    __slots__ = (
        "bookie_deleted",
        "created_ms",
        "entries",
        "ledger_id",
        "offloaded",
        "offloaded_ms",
        "size",
    )

    def __init__(
        self,
        ledger_id: int,
        entries: int,
        size: int,
        created_ms: int,
        offloaded: bool = False,
        offloaded_ms: int = 0,
        bookie_deleted: bool = False,
    ) -> None:
        self.ledger_id = ledger_id
        self.entries = entries
        self.size = size
        self.created_ms = created_ms
        self.offloaded = offloaded
        #: when the offload completed (the deletion lag runs from here)
        self.offloaded_ms = offloaded_ms
        #: the bookie's copy was deleted after the offload deletion lag
        self.bookie_deleted = bookie_deleted

    def changed(self, **fields: object) -> LedgerInfo:
        """A copy with ``fields`` (attribute names) replaced."""
        copy = LedgerInfo(
            self.ledger_id,
            self.entries,
            self.size,
            self.created_ms,
            self.offloaded,
            self.offloaded_ms,
            self.bookie_deleted,
        )
        for name, value in fields.items():
            setattr(copy, name, value)
        return copy

    def to_json(self, open_: bool) -> dict[str, object]:
        return {
            "id": self.ledger_id,
            "entries": self.entries,
            "size": self.size,
            "created": self.created_ms,
            "offloaded": self.offloaded,
            "offloadedMs": self.offloaded_ms,
            "bookieDeleted": self.bookie_deleted,
            "open": open_,
        }


def _nothing() -> None:
    """The default ``on_touch``: a ledger no broker's upkeep watches."""


class ManagedLedger:
    """A topic's log. Entries are appended to the current (open) bookie ledger, which is
    rolled over when full; ledgers that every cursor has consumed are trimmed.

    Concurrent ``add_entries`` calls are allowed: the bookie assigns ids, and the ledger
    makes entries visible (``last_confirmed``) only once every earlier entry is durable.
    """

    def __init__(
        self,
        name: str,
        bookie: Bookie,
        metadata: MetadataStore,
        events: TopicEvents,
        config: ManagedLedgerConfig,
        clock: Clock,
    ) -> None:
        self.name = name
        self.bookie = bookie
        self.metadata = metadata
        #: the topic's cache events: the live cache design, its shadows, the trace
        self.events = events
        self.config = config
        self.clock = clock
        self._ledgers: dict[int, LedgerInfo] = {}
        self._ledger_ids: list[int] = []  # ascending
        self._current: LedgerInfo | None = None
        self.last_confirmed = Position(-1, -1)
        self.entries_added_counter = 0
        self.cursors: dict[str, ManagedCursor] = {}
        # first entry id -> (last entry id, bytes) of adds complete but not yet contiguous
        self._completed: dict[int, tuple[int, int]] = {}
        self._listeners: list[Callable[[], None]] = []
        self._inflight = 0
        self._inflight_entries = 0
        self._drained = asyncio.Event()
        self._drained.set()
        self._rollover: asyncio.Future[None] | None = None
        self._tasks = TaskOwner(f"managed ledger {name}")
        self._metadata_lock = asyncio.Lock()
        self._closed = False
        self.pending_reads = PendingReads(
            self._read_storage, self._tasks, events.filled, events.fill_failed
        )
        #: the entries read and still held somewhere (receiver queues of several
        #: subscriptions): reads share them
        self.live_entries = LiveEntries()
        #: the tiered store offloaded ledgers are read from (None: no tiered storage)
        self.tiered: TieredStorage | None = None
        #: the broker's limit on reads in flight (None: no limit)
        self.read_limiter: ReadLimiter | None = None
        self.stream_id = stream_id_of(name)
        #: something happened that the broker's upkeep must look at (adds, cursor moves,
        #: consumers coming or going, offloads); the upkeep clears it when it puts the
        #: topic to sleep, and ``on_touch`` runs when it is set again (the service wakes
        #: the topic). A new ledger starts touched: the upkeep looks at it once.
        self.touched = True
        self.on_touch: Callable[[], None] = _nothing
        #: the retention policy trimming follows (Pulsar's RetentionPolicies): consumed
        #: ledgers are kept while younger than ``retention_time_ms`` and while what
        #: remains is within ``retention_size_bytes``; -1: no limit (both -1: kept
        #: forever). 0 and 0: deleted once consumed.
        self.retention_time_ms = 0
        self.retention_size_bytes = 0
        #: trim a ledger no cursor reads too (a retention policy was set on the topic or
        #: its namespace); otherwise data nobody subscribed to is kept
        self.trim_without_cursors = False

    # ------------------------------------------------------------------ lifecycle

    async def open(self) -> None:
        """Load the ledger list, recover the last ledger as a new owner would (close it at
        its last durable entry), drop empty ledgers, start a new ledger for writes, recover
        the cursors and trim what they have all consumed."""
        raw = await self.metadata.get(metadata_key(self.name))
        empty: list[int] = []
        if raw is not None:
            for record in orjson.loads(raw)["ledgers"]:
                ledger_id = int(record["id"])
                if record["open"]:
                    last = await self.bookie.recover_and_close(ledger_id)
                    meta = await self.bookie.ledger_metadata(ledger_id)
                    info = LedgerInfo(ledger_id, last + 1, meta.length, int(record["created"]))
                else:
                    info = LedgerInfo(
                        ledger_id,
                        int(record["entries"]),
                        int(record["size"]),
                        int(record["created"]),
                        bool(record["offloaded"]),
                        int(record.get("offloadedMs", 0)),
                        bool(record.get("bookieDeleted", False)),
                    )
                if info.entries == 0:
                    empty.append(ledger_id)
                    continue
                self._ledgers[ledger_id] = info
                self._ledger_ids.append(ledger_id)
                self.entries_added_counter += info.entries
        if self._ledger_ids:
            # a broker taking a topic over asks the bookie for the last entry of its last
            # ledger (BookKeeper's getLastEntryInLedger: the last-entry cache or a seek on
            # the index); a ledger whose bookie copy was deleted after its offload has
            # only the count its record keeps (it is closed: that count is final)
            last_info = self._ledgers[self._ledger_ids[-1]]
            if last_info.bookie_deleted:
                last = last_info.entries - 1
            else:
                last = await self.bookie.get_last_entry_in_ledger(last_info.ledger_id)
            self.last_confirmed = Position(last_info.ledger_id, last)
        prefix = cursor_key_prefix(self.name)
        if raw is None:
            # a new topic: cursor records left behind by a deletion of an earlier topic
            # of this name (deleted after its own record, the commit point) are not its own
            for key in await self.metadata.keys_with_prefix(prefix):
                await self.metadata.delete(key)
            await self._create_ledger()
        else:
            try:
                await self._create_ledger()
            except BookieError as error:
                # a topic that exists still serves reads (a full disk makes the bookie
                # read-only); adds try to create a ledger again
                log.warning("topic %s: no ledger for writes yet: %s", self.name, error)
            else:
                await self._delete_ledgers(empty)  # the list just written no longer names them
        for key in await self.metadata.keys_with_prefix(prefix):
            cursor = await ManagedCursor.recover(self, key[len(prefix) :])
            self.cursors[cursor.name] = cursor
        try:
            await self.trim_consumed_ledgers()
        except BookieError as error:
            log.warning("topic %s: trimming at load failed, will retry: %s", self.name, error)

    async def close(self) -> None:
        """Stop accepting writes, wait for adds in flight, close the current ledger."""
        if self._closed:
            return
        self._closed = True
        if self._rollover is not None:
            await join(self._rollover)
        await self._drained.wait()
        await self._tasks.close()
        # a cursor write in flight (an ack being made durable) ends before the topic is
        # handed over, so the next owner recovers the cursor with it; then any change
        # not yet written goes out, as Pulsar persists cursors when it closes them
        for cursor in list(self.cursors.values()):
            try:
                await cursor.persist()
            except BookieError as error:
                log.warning(
                    "topic %s: cursor %s not persisted at close: %s", self.name, cursor.name, error
                )
        try:
            current = self._current
            if current is not None:
                await self.bookie.close_ledger(current.ledger_id)
                if current.entries == 0:
                    await self._update_metadata(remove=(current.ledger_id,), current=None)
                    await self._delete_ledgers((current.ledger_id,))
                else:
                    await self._update_metadata(current=None)
        finally:
            # whatever storage said, the topic is unloaded: a new owner recovers the
            # ledger from the last metadata written
            self.events.unloaded()

    async def abandon(self) -> None:
        """Stop as a killed broker stops: no more writes or reads, the current ledger
        left open and no metadata written. The next owner recovers the ledger (the
        bookie closes it at its last durable entry, which fences later adds) and the
        cursors from their last written positions."""
        self._closed = True
        await self._tasks.close()

    async def delete(self) -> None:
        """Delete this managed ledger: close it, then delete its record (the commit
        point: a failure before it leaves the topic as it was, only unloaded), then,
        best effort, its cursors' records and its ledgers. A cursor record left behind
        is removed when a topic of the same name is created; a ledger left behind is
        unreachable."""
        await self.close()
        await self.metadata.delete(metadata_key(self.name))
        cursors = list(self.cursors.values())
        self.cursors.clear()
        try:
            for cursor in cursors:
                await self.metadata.delete(cursor.key)
        except BookieError as error:
            log.warning("topic %s deleted; a cursor record stays behind: %s", self.name, error)
        await self._delete_ledgers(self._ledger_ids)
        self._ledgers.clear()
        self._ledger_ids.clear()

    async def _delete_ledgers(self, ledger_ids: Iterable[int]) -> None:
        """Delete bookie ledgers no metadata names any more, best effort (one left
        behind is unreachable, only its space is lost)."""
        for ledger_id in list(ledger_ids):
            try:
                await self.bookie.delete_ledger(ledger_id)
            except BookieError as error:
                log.warning("topic %s: ledger %d left behind: %s", self.name, ledger_id, error)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def adds_in_flight(self) -> int:
        """Adds started and not yet durable (or failed)."""
        return self._inflight

    def touch(self) -> None:
        """Tell the broker's upkeep this ledger has something to look at. O(1), and
        allocation-free once touched (the hot paths call it on every add and move)."""
        if not self.touched:
            self.touched = True
            self.on_touch()

    # ------------------------------------------------------------------ writes

    async def add_entries(
        self, entries: Sequence[bytes], counts: Sequence[int] | None = None
    ) -> Position:
        """Append entries durably and return the position of the first one. ``counts``:
        each entry's messages as its producer's front end checked them (the cache keeps
        them, so that a read of the cached entry does not parse its metadata again);
        None when not checked.

        Raises the bookie's error if storage fails; nothing is then stored.
        """
        while True:
            if self._rollover is not None:
                await join(self._rollover)
                continue
            if self._closed:
                raise ManagedLedgerError(f"managed ledger {self.name} is closed")
            info = self._current
            # adds in flight count against the ledger's quota, so it is never overfilled
            if info is None or self._is_full(info, self._inflight_entries):
                await self._roll_over()
                continue
            break
        count = len(entries)
        self._inflight += 1
        self._inflight_entries += count
        self._drained.clear()
        # The bookie's write runs to its end even if this caller is cancelled (a client
        # that leaves): the bookie may hold the entries already, and an add never
        # counted would leave a hole that keeps every later entry unreadable. So it is
        # counted by a callback of the write, and the caller waits on a future of its
        # own, which its cancellation may cancel.
        try:
            write = self.bookie.start_add(info.ledger_id, entries)
        except BaseException:
            self._not_in_flight(count)
            raise
        added: asyncio.Future[Position] = write.get_loop().create_future()
        when_done(write, functools.partial(self._written, info, entries, counts, added))
        return await added

    def _written(
        self,
        info: LedgerInfo,
        entries: Sequence[bytes],
        counts: Sequence[int] | None,
        added: asyncio.Future[Position],
        write: asyncio.Future[int],
    ) -> None:
        """The end of a write: counted, then ``added`` (whose waiter may have gone)
        resolves with the first entry's position or the bookie's error."""
        self._not_in_flight(len(entries))
        if write.cancelled():  # not by the bookie's contract; passed on all the same
            added.cancel()
            return
        error = write.exception()
        if error is not None:
            if not added.done():
                added.set_exception(error)
            return
        try:
            position = self._added(info, entries, write.result(), counts)
        except BaseException as bug:
            if added.done():
                raise  # nobody waits to be told: the loop's handler reports it
            added.set_exception(bug)
            return
        if not added.done():
            added.set_result(position)

    def _not_in_flight(self, count: int) -> None:
        self._inflight -= 1
        self._inflight_entries -= count
        if self._inflight == 0:
            self._drained.set()

    def _added(
        self,
        info: LedgerInfo,
        entries: Sequence[bytes],
        last: int,
        counts: Sequence[int] | None = None,
    ) -> Position:
        first = last - len(entries) + 1
        ledger_id = info.ledger_id
        self.events.added(ledger_id, first, entries, counts)
        self._complete(info, first, last, total_size(entries))
        if self._rollover is None and not self._closed and self._is_full(info):
            self._tasks.spawn(self._roll_over_in_background(info), name=f"rollover {self.name}")
        return Position(ledger_id, first)

    def _complete(self, info: LedgerInfo, first: int, last: int, nbytes: int) -> None:
        """Advance ``last_confirmed`` over every contiguous completed add."""
        if first != info.entries:
            self._completed[first] = (last, nbytes)
            return
        added = 0
        while True:
            info.entries = last + 1
            info.size += nbytes
            added += last - first + 1
            following = self._completed.pop(last + 1, None)
            if following is None:
                break
            first = last + 1
            last, nbytes = following
        self.entries_added_counter += added
        self.last_confirmed = Position(info.ledger_id, info.entries - 1)
        self.touch()
        for listener in self._listeners:
            listener()

    # the cursor events: none once the ledger is closed (its cache units are gone)

    def activate_cursor(self, cursor: ManagedCursor) -> None:
        """A consumer subscribed on ``cursor`` (each time one does)."""
        if not self._closed:
            self.touch()
            self.events.activated(
                cursor.name,
                cursor.read_position,
                cursor.mark_delete_position,
                cursor.entries_to_read(),
            )

    def deactivate_cursor(self, cursor: ManagedCursor) -> None:
        """``cursor`` lost its last consumer, or was deleted."""
        if not self._closed:
            self.touch()
            self.events.deactivated(cursor.name)

    def cursor_moved(self, cursor: ManagedCursor) -> None:
        """``cursor``'s read or mark-delete position changed. O(1) here."""
        if not self._closed:
            self.touch()
            self.events.moved(cursor.name, cursor.read_position, cursor.mark_delete_position)

    def check_cursors(self, has_consumers: Callable[[str], bool]) -> None:
        """The periodic check of every cursor but the broker's own (the stats period):
        consumers and entries to read. O(#cursors x #ledgers)."""
        if not self._closed:
            self.events.checked(
                [
                    CursorCheck(name, has_consumers(name), cursor.entries_to_read())
                    for name, cursor in self.cursors.items()
                    if name not in SYSTEM_CURSORS
                ]
            )

    def _is_full(self, info: LedgerInfo, pending_entries: int = 0) -> bool:
        """Pulsar's rule: over the entry or size quota and older than the minimum rollover
        time, or older than the maximum rollover time; an empty ledger is never full."""
        config = self.config
        entries = info.entries + pending_entries
        if entries == 0:
            return False
        age_ms = self.clock.wall_ms() - info.created_ms
        if age_ms >= config.max_rollover_ms:
            return True
        quota = (
            entries >= config.max_entries_per_ledger
            or info.size >= config.max_size_per_ledger_bytes
        )
        return quota and age_ms >= config.min_rollover_ms

    async def settled(self) -> None:
        """Wait for the background work the ledger's adds started (rollovers) to end."""
        await self._tasks.settled()

    async def maybe_roll_over(self) -> None:
        """Roll the current ledger over if it is full or older than the max rollover time;
        or wait for the rollover under way (the one an add that filled the ledger
        started), so a caller finds the ledgers as the rollover leaves them. A storage
        failure of that one is not raised here: whoever started it reports it, and the
        next add tries again (upkeep goes on to the other topics)."""
        rollover = self._rollover
        if rollover is not None:
            with contextlib.suppress(BookieError):
                await join(rollover)
            return
        info = self._current
        if info is not None and not self._closed and self._is_full(info):
            await self._roll_over()

    async def _roll_over(self) -> None:
        if self._rollover is not None:
            await join(self._rollover)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._rollover = future
        try:
            await self._drained.wait()
            old = self._current
            if old is not None:
                await self.bookie.close_ledger(old.ledger_id)
                self._current = None
            await self._create_ledger()
        except BaseException as error:
            # the adds waiting for this rollover fail with it; the next add tries again
            future.set_exception(error)
            future.exception()  # retrieved: the waiters re-raise it
            raise
        else:
            future.set_result(None)
        finally:
            self._rollover = None

    async def _roll_over_in_background(self, full: LedgerInfo) -> None:
        """The rollover an add that filled ``full`` starts: a storage failure is logged,
        and the next add tries again. Nothing if ``full`` is no longer the current ledger
        or a rollover is under way by the time this runs (an add or ``maybe_roll_over``
        rolled it over first): rolling over the ledger that replaced it would leave an
        empty one behind."""
        if self._current is not full or self._rollover is not None:
            return
        try:
            await self._roll_over()
        except BookieError as error:
            log.warning("topic %s: rollover failed, the next add retries: %s", self.name, error)

    async def _create_ledger(self) -> None:
        """Create a ledger and make it the current one once the topic's metadata names
        it (as Pulsar's managed ledger does): entries added to a ledger the metadata
        does not name would be lost by a crash. On failure the new ledger is deleted."""
        ledger_id = await self.bookie.create_ledger()
        info = LedgerInfo(ledger_id, 0, 0, self.clock.wall_ms())
        try:
            await self._update_metadata(add=info, current=info)
        except BaseException:
            await self._delete_ledgers((ledger_id,))
            raise
        if self.last_confirmed.ledger_id < 0:
            self.last_confirmed = Position(ledger_id, -1)

    async def _update_metadata(
        self,
        *,
        add: LedgerInfo | None = None,
        remove: Collection[int] = (),
        changes: Mapping[int, Mapping[str, object]] | None = None,
        current: LedgerInfo | EllipsisType | None = ...,
    ) -> None:
        """Write the ledger list as it is after this change (``add`` a ledger,
        ``remove`` some, ``changes`` of fields by ledger id, a new ``current`` ledger),
        and apply the change in memory only once the write is durable: a failed write
        changes nothing. Writes are serialized. O(#ledgers)."""
        async with self._metadata_lock:
            new_current = self._current if current is ... else current
            open_id = -1 if new_current is None else new_current.ledger_id
            changes = changes or {}
            records = []
            for lid in self._ledger_ids:
                if lid in remove:
                    continue
                info = self._ledgers[lid]
                if lid in changes:
                    info = info.changed(**changes[lid])
                records.append(info.to_json(open_=lid == open_id))
            if add is not None:
                records.append(add.to_json(open_=add.ledger_id == open_id))
            await self.metadata.put(metadata_key(self.name), orjson.dumps({"ledgers": records}))
            for lid in remove:
                self._forget_ledger(lid)
            for lid, fields in changes.items():
                changed = self._ledgers.get(lid)  # None: trimmed meanwhile
                for name, value in fields.items() if changed is not None else ():
                    setattr(changed, name, value)
            if add is not None:
                self._ledgers[add.ledger_id] = add
                self._ledger_ids.append(add.ledger_id)
            self._current = new_current

    # ------------------------------------------------------------------ listeners

    def add_entries_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` whenever new entries become readable."""
        self._listeners.append(listener)

    def remove_entries_listener(self, listener: Callable[[], None]) -> None:
        with contextlib.suppress(ValueError):
            self._listeners.remove(listener)

    # ------------------------------------------------------------------ positions

    @property
    def ledgers(self) -> list[LedgerInfo]:
        return [self._ledgers[lid] for lid in self._ledger_ids]

    @property
    def current_ledger(self) -> LedgerInfo | None:
        return self._current

    def first_position(self) -> Position:
        """The first position that exists or will exist. O(#ledgers)."""
        for lid in self._ledger_ids:
            if self._ledgers[lid].entries > 0 or self._ledgers[lid] is self._current:
                return Position(lid, 0)
        return Position(self.last_confirmed.ledger_id, 0)

    def previous_position(self, position: Position) -> Position:
        """The mark-delete position that makes ``position`` the next to read."""
        return Position(position.ledger_id, position.entry_id - 1)

    def next_position(self, position: Position) -> Position:
        """The position after ``position``, crossing to the next ledger with entries when
        ``position`` is the last entry of a closed ledger. O(log #ledgers)."""
        ledger_id, entry_id = position
        info = self._ledgers.get(ledger_id)
        if info is not None and (info is self._current or entry_id + 1 < info.entries):
            return Position(ledger_id, entry_id + 1)
        ids = self._ledger_ids
        index = bisect.bisect_right(ids, ledger_id)
        while index < len(ids):
            following = self._ledgers[ids[index]]
            if following.entries > 0 or following is self._current:
                return Position(following.ledger_id, 0)
            index += 1
        return Position(ledger_id, entry_id + 1)

    def normalize(self, position: Position) -> Position:
        """``position`` if it names an entry that exists or will be the next written;
        otherwise the first such position after it, and never past the next write
        position (as Pulsar clamps a start or reset position beyond the end)."""
        next_write = self.next_position(self.last_confirmed)
        if position > next_write:
            return next_write
        info = self._ledgers.get(position.ledger_id)
        if info is not None and (info is self._current or position.entry_id < info.entries):
            return position
        return self.next_position(Position(position.ledger_id, max(position.entry_id - 1, -1)))

    def is_readable(self, position: Position) -> bool:
        """True if the entry at ``position`` exists and is confirmed."""
        info = self._ledgers.get(position.ledger_id)
        return info is not None and 0 <= position.entry_id < info.entries

    def number_of_entries_after(self, position: Position) -> int:
        """Confirmed entries strictly after ``position``. O(#ledgers)."""
        total = 0
        for lid in reversed(self._ledger_ids):
            if lid < position.ledger_id:
                break
            info = self._ledgers[lid]
            if lid == position.ledger_id:
                total += max(info.entries - position.entry_id - 1, 0)
            else:
                total += info.entries
        return total

    def total_size(self) -> int:
        return sum(info.size for info in self._ledgers.values())

    def size_after(self, position: Position) -> int:
        """Approximate bytes after ``position`` (whole ledgers pro rata). O(#ledgers)."""
        total = 0.0
        for lid in reversed(self._ledger_ids):
            if lid < position.ledger_id:
                break
            info = self._ledgers[lid]
            if lid == position.ledger_id and info.entries:
                remaining = max(info.entries - position.entry_id - 1, 0)
                total += info.size * remaining / info.entries
            elif lid != position.ledger_id:
                total += info.size
        return int(total)

    # ------------------------------------------------------------------ reads

    async def read_entries(self, start: Position, max_entries: int, reader: str) -> list[Entry]:
        """Read up to ``max_entries`` confirmed entries from ``start`` within its ledger
        for the cursor ``reader``. Empty if nothing is readable at ``start``."""
        info = self._ledgers.get(start.ledger_id)
        if info is None or start.entry_id >= info.entries or max_entries <= 0:
            return []
        first = max(start.entry_id, 0)
        last = min(first + max_entries - 1, info.entries - 1)
        return await self._read_range(info.ledger_id, first, last, reader, False)

    async def read_positions(self, positions: Iterable[Position], reader: str) -> list[Entry]:
        """Read the given positions (sorted) for ``reader``'s replay queue through the
        same path, one range read per contiguous run. Positions that no longer exist are
        skipped."""
        result: list[Entry] = []
        run_ledger = -1
        run_first = run_last = 0
        for ledger_id, entry_id in positions:
            if not self.is_readable(Position(ledger_id, entry_id)):
                continue
            if ledger_id == run_ledger and entry_id == run_last + 1:
                run_last = entry_id
                continue
            if run_ledger >= 0:
                result += await self._read_range(run_ledger, run_first, run_last, reader, True)
            run_ledger, run_first, run_last = ledger_id, entry_id, entry_id
        if run_ledger >= 0:
            result += await self._read_range(run_ledger, run_first, run_last, reader, True)
        return result

    async def _read_range(
        self, ledger_id: int, first: int, last: int, reader: str, replay: bool
    ) -> list[Entry]:
        """One range read: the live design's hits now, its own storage reads started,
        reads in flight joined; entries in order. ManagedLedgerError once closed."""
        if self._closed:
            raise ManagedLedgerError(f"managed ledger {self.name} is closed")
        limiter = self.read_limiter
        if limiter is None or not limiter.enabled:
            return await self._read_range_now(ledger_id, first, last, reader, replay)
        info = self._ledgers.get(ledger_id)
        size = estimated_read_size(
            last - first + 1, info.size if info else 0, info.entries if info else 0
        )
        try:
            taken = await limiter.acquire(size)
        except TooManyReads as error:
            raise ReadsThrottled(str(error)) from error
        try:
            return await self._read_range_now(ledger_id, first, last, reader, replay)
        finally:
            limiter.release(taken)

    async def _read_range_now(
        self, ledger_id: int, first: int, last: int, reader: str, replay: bool
    ) -> list[Entry]:
        """The read itself, its permits (if limited) taken."""
        if self._closed:
            raise ManagedLedgerError(f"managed ledger {self.name} is closed")
        plan = self.events.read(reader, ledger_id, first, last, replay)
        # take the payloads of the hits now: eviction may drop them while we await storage;
        # an entry another subscription's receiver queue holds is shared, not copied (one
        # subscription has nobody to share with: its reads skip the index)
        entry = self.live_entries.entry if len(self.cursors) > 1 else Entry
        served = [
            entry(Position(ledger_id, c.entry_id), c.data, c.messages)  # type: ignore[arg-type]
            for c in plan.hits
        ]
        if not plan.own and not plan.joined:
            return served
        parts: list[tuple[int, int, PendingRead]] = []
        for own_first, own_last in plan.own:
            parts.append(
                (own_first, own_last, self.pending_reads.start(ledger_id, own_first, own_last))
            )
        for joined_first, joined_last in plan.joined:
            parts += self.pending_reads.covering(ledger_id, joined_first, joined_last)
        fetched: dict[int, Entry] = {entry.position.entry_id: entry for entry in served}
        for part_first, part_last, pending in parts:
            datas = await join(pending.future)
            offset = part_first - pending.first
            for entry_id in range(part_first, part_last + 1):
                fetched[entry_id] = entry(Position(ledger_id, entry_id), datas[offset])
                offset += 1
        return [fetched[entry_id] for entry_id in range(first, last + 1)]

    async def _read_storage(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        """Entries from the bookie, or from the tiered store once the ledger is
        offloaded (even while the bookie still has a copy)."""
        info = self._ledgers.get(ledger_id)
        if info is None or not info.offloaded or self.tiered is None:
            return await self.bookie.read_entries(ledger_id, first, last)
        pairs = await self.tiered.read(
            self.stream_id, offset_of(ledger_id, first), offset_of(ledger_id, last) + 1
        )
        if len(pairs) != last - first + 1:
            raise ManagedLedgerError(
                f"tiered storage returned {len(pairs)} entries for {ledger_id}:{first}..{last}"
            )
        return [data for _, data in pairs]

    # ------------------------------------------------------------------ offload

    def offload_candidates(self, up_to: Position | None = None) -> list[LedgerInfo]:
        """Closed ledgers with entries, not yet offloaded, wholly at or before ``up_to``
        (every one with None), oldest first. O(#ledgers)."""
        chosen = []
        for lid in self._ledger_ids:
            info = self._ledgers[lid]
            if info is self._current or info.entries == 0 or info.offloaded:
                continue
            if up_to is not None and (lid, info.entries - 1) > up_to:
                break
            chosen.append(info)
        return chosen

    def size_not_offloaded(self) -> int:
        """Bytes in closed ledgers still only in the bookie. O(#ledgers)."""
        return sum(
            info.size
            for info in self._ledgers.values()
            if info is not self._current and not info.offloaded
        )

    async def entries_to_offload(
        self, infos: list[LedgerInfo]
    ) -> list[tuple[int, int, list[bytes]]]:
        """(stream id, first offset, entries) of each ledger, read from the bookie."""
        ranges = []
        for info in infos:
            entries = await self.bookie.read_entries(info.ledger_id, 0, info.entries - 1)
            ranges.append((self.stream_id, offset_of(info.ledger_id, 0), entries))
        return ranges

    async def mark_offloaded(self, infos: list[LedgerInfo]) -> None:
        """The ledgers are in the tiered store now: reads go there from here on."""
        now = self.clock.wall_ms()
        await self._update_metadata(
            changes={info.ledger_id: {"offloaded": True, "offloaded_ms": now} for info in infos}
        )
        self.touch()  # the deletion lag of the bookie copies starts now

    async def delete_offloaded_from_bookie(self, lag_ms: int) -> int:
        """Delete the bookie copies of ledgers offloaded at least ``lag_ms`` ago."""
        now = self.clock.wall_ms()
        doomed = [
            info
            for info in self._ledgers.values()
            if info.offloaded and not info.bookie_deleted and now - info.offloaded_ms >= lag_ms
        ]
        if doomed:
            await self._update_metadata(
                changes={info.ledger_id: {"bookie_deleted": True} for info in doomed}
            )
            await self._delete_ledgers(info.ledger_id for info in doomed)
        return len(doomed)

    def next_timed_work_ms(self, offload_deletion_lag_ms: int) -> int | None:
        """The wall time (ms) at which time alone gives this ledger upkeep work, with no
        add or cursor move: the current ledger reaching the maximum rollover age, or an
        offloaded ledger's bookie copy its deletion lag. None: never. O(#ledgers)."""
        due: int | None = None
        current = self._current
        if current is not None and current.entries > 0 and not self._closed:
            due = current.created_ms + self.config.max_rollover_ms
        for info in self._ledgers.values():
            if info.offloaded and not info.bookie_deleted:
                deletion = info.offloaded_ms + offload_deletion_lag_ms
                due = deletion if due is None else min(due, deletion)
        if (
            self.retention_time_ms >= 0
            and self._ledger_ids
            and (self.cursors or self.trim_without_cursors)
        ):
            oldest = self._ledgers[self._ledger_ids[0]]
            slowest = self.slowest_mark_delete()
            consumed = slowest is None or slowest >= Position(oldest.ledger_id, oldest.entries - 1)
            if oldest is not current and consumed:  # kept for its retention time: look again
                expiry = oldest.created_ms + self.retention_time_ms + 1
                due = expiry if due is None else min(due, expiry)
        return due

    def first_not_offloaded(self) -> Position:
        """The first position whose ledger is not offloaded."""
        for lid in self._ledger_ids:
            if not self._ledgers[lid].offloaded:
                return Position(lid, 0)
        return self.next_position(self.last_confirmed)

    # ------------------------------------------------------------------ trimming

    def slowest_mark_delete(self) -> Position | None:
        if not self.cursors:
            return None
        return min(cursor.mark_delete_position for cursor in self.cursors.values())

    async def trim_consumed_ledgers(self) -> list[int]:
        """Delete closed ledgers that every cursor has consumed and the retention policy
        lets go, oldest first; return their ids. As Pulsar's ``internalTrimLedgers``: a
        consumed ledger goes when it is older than the retention time or when what stays
        without it is still at least the retention size; the first one kept stops the
        trim. A ledger's age runs from its creation (Pulsar's, from its close).

        With no cursor nothing is trimmed unless ``trim_without_cursors`` (brokerlab
        keeps data nobody subscribed to, unless a retention policy was set). O(#ledgers)."""
        slowest = self.slowest_mark_delete()
        if self._closed or (slowest is None and not self.trim_without_cursors):
            return []
        time_ms, size_bytes = self.retention_time_ms, self.retention_size_bytes
        if time_ms < 0 and size_bytes < 0:
            return []  # kept forever
        now = self.clock.wall_ms()
        total = self.total_size()
        doomed: list[int] = []
        to_delete = 0
        for lid in self._ledger_ids:
            info = self._ledgers[lid]
            if info is self._current:
                break
            if slowest is not None and (
                lid > slowest.ledger_id
                or (lid == slowest.ledger_id and slowest.entry_id < info.entries - 1)
            ):
                break  # not consumed by every cursor
            to_delete += info.size
            expired = time_ms >= 0 and now - info.created_ms > time_ms
            over_size = size_bytes >= 0 and total - to_delete >= size_bytes
            if not (expired or over_size):
                break
            doomed.append(lid)
        if not doomed:
            return []
        await self._update_metadata(remove=doomed)
        for lid in doomed:
            if not self._closed:  # a close meanwhile has unloaded the designs' units
                self.events.trimmed(lid)
        await self._delete_ledgers(doomed)
        return doomed

    def _forget_ledger(self, ledger_id: int) -> None:
        self._ledgers.pop(ledger_id, None)
        self._ledger_ids.remove(ledger_id)
