"""Message deduplication of one topic, as Pulsar's broker-side ``MessageDeduplication``.

Per producer name, two sequence ids: the highest *pushed* (checked and on its way to
storage) and the highest *persisted* (stored). A message whose sequence id is above its
producer's pushed one is new; at or below the persisted one it is a duplicate, which the
producer session acknowledges without storing it (the receipt names message id -1:-1, as
Pulsar's); between the two, whether it is one cannot be told while the first copy is in
flight, and the session answers an error so that the client resends it later (Pulsar's
``MessageDupUnknownException``, a PersistenceError on the wire). The sequence id checked
is the send's lowest and the one recorded its highest (a batch carries both); of a
chunked message only the last chunk is checked and recorded.

Durability, as in Pulsar: every ``brokerDeduplicationEntriesInterval`` entries stored, a
snapshot of the persisted map (at most ``brokerDeduplicationMaxNumberOfProducers``
producers) goes into the properties of the cursor ``pulsar.dedup`` with a mark-delete at
the last entry stored; recovery loads the snapshot and replays the entries after it
(producer name and highest sequence id of each entry's metadata). Every receipted entry
is in the bookie before its receipt leaves, so the state survives a kill -9 of the
broker. Like any cursor, ``pulsar.dedup`` holds trimming back to its last snapshot (a
snapshot is also taken when ``brokerDeduplicationSnapshotIntervalSeconds`` passed with
entries after the last one). A producer gone for
``brokerDeduplicationProducerInactivityTimeoutMinutes`` is forgotten.

Deduplication is on for a topic when its topic policy says so, else its namespace's,
else ``brokerDeduplicationEnabled``; :meth:`MessageDeduplication.check_status` turns it on
(create or recover the cursor, replay) or off (delete the cursor, forget everything).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from broker.clock import Clock
from broker.ledger.entry import EntryFormatError, metadata_of, plain_fields
from broker.ledger.managed_cursor import DEDUPLICATION_CURSOR_NAME, ManagedCursor
from broker.ledger.managed_ledger import ManagedLedger
from broker.ledger.position import Position
from broker.tasks import TaskOwner
from storage_stub.bookie.api import BookieError

log = logging.getLogger(__name__)

#: what :meth:`MessageDeduplication.check` says of a message (Pulsar's MessageDupStatus)
NOT_DUP = 0
DUP = 1
UNKNOWN = 2

#: entries a recovery reads at a time (Pulsar's replay reads 100)
_REPLAY_BATCH = 100


@dataclass(frozen=True, slots=True)
class DeduplicationConfig:
    #: brokerDeduplicationEnabled: the default of topics whose policies say nothing
    enabled: bool = False
    #: brokerDeduplicationEntriesInterval: entries stored between snapshots
    entries_interval: int = 1000
    #: brokerDeduplicationMaxNumberOfProducers: producers a snapshot keeps
    max_producers: int = 10000
    #: brokerDeduplicationProducerInactivityTimeoutMinutes, in seconds
    inactivity_timeout_s: float = 360 * 60.0
    #: brokerDeduplicationSnapshotIntervalSeconds: a snapshot at least this often while
    #: entries come (0: only every ``entries_interval`` entries)
    snapshot_interval_s: float = 120.0


class MessageDeduplication:
    """The deduplication state of one topic. ``status`` is Pulsar's: Disabled,
    Recovering, Enabled, Removing or Failed (topic stats' ``deduplicationStatus``).
    The checks are O(1) dict operations; a snapshot is O(producers) and one cursor
    write, in the background."""

    __slots__ = (
        "_due",
        "_inactive",
        "_last_snapshot_ms",
        "_snapshot_counter",
        "_snapshotting",
        "_tasks",
        "_transition",
        "clock",
        "config",
        "cursor",
        "ledger",
        "persisted",
        "pushed",
        "status",
    )

    def __init__(self, ledger: ManagedLedger, config: DeduplicationConfig, clock: Clock) -> None:
        self.ledger = ledger
        self.config = config
        self.clock = clock
        self.status = "Disabled"
        self.cursor: ManagedCursor | None = None
        #: producer name -> highest sequence id checked and on its way to storage
        self.pushed: dict[str, int] = {}
        #: producer name -> highest sequence id stored
        self.persisted: dict[str, int] = {}
        #: producer name -> when it was last seen (wall ms), for producers not connected
        self._inactive: dict[str, int] = {}
        self._snapshot_counter = 0
        self._snapshotting = False
        #: the snapshot waiting for the one being written: (position, map)
        self._due: tuple[Position, dict[str, int]] | None = None
        self._last_snapshot_ms = 0
        self._transition = asyncio.Lock()
        self._tasks = TaskOwner(f"deduplication {ledger.name}")

    @property
    def enabled(self) -> bool:
        return self.status == "Enabled"

    # ------------------------------------------------------------------ status

    async def initialize(self, should_be_enabled: bool) -> None:
        """At topic load: recover the state if deduplication is on; delete a cursor left
        by an earlier time it was on if it is off (as Pulsar does at initialization)."""
        if should_be_enabled:
            await self.check_status(True)
        elif DEDUPLICATION_CURSOR_NAME in self.ledger.cursors:
            await self.ledger.cursors[DEDUPLICATION_CURSOR_NAME].delete()

    async def check_status(self, should_be_enabled: bool) -> None:
        """Turn deduplication on or off to match ``should_be_enabled`` (a policy
        changed); nothing if it matches already. Transitions run one at a time. A
        storage error leaves status Failed and is raised (the next check retries)."""
        async with self._transition:
            if should_be_enabled and self.status != "Enabled":
                self.status = "Recovering"
                try:
                    cursor = self.ledger.cursors.get(DEDUPLICATION_CURSOR_NAME)
                    if cursor is None:
                        cursor = await ManagedCursor.create(
                            self.ledger, DEDUPLICATION_CURSOR_NAME, "latest"
                        )
                    self.cursor = cursor
                    await self._replay(cursor)
                except BaseException:
                    self.status = "Failed"
                    raise
                self.status = "Enabled"
                log.info("topic %s: deduplication enabled", self.ledger.name)
            elif not should_be_enabled and self.status != "Disabled":
                self.status = "Removing"
                await self._settle_snapshots()
                try:
                    cursor = self.ledger.cursors.get(DEDUPLICATION_CURSOR_NAME)
                    if cursor is not None:
                        await cursor.delete()
                except BaseException:
                    self.status = "Failed"
                    raise
                self.cursor = None
                self.pushed.clear()
                self.persisted.clear()
                self._inactive.clear()
                self.status = "Disabled"
                log.info("topic %s: deduplication disabled", self.ledger.name)

    async def _replay(self, cursor: ManagedCursor) -> None:
        """Rebuild the maps: the snapshot in the cursor's properties, then every entry
        after its mark-delete. O(producers + entries after the snapshot)."""
        pushed, persisted, inactive = self.pushed, self.persisted, self._inactive
        pushed.clear()
        persisted.clear()
        inactive.clear()
        now = self.clock.wall_ms()
        for name, sequence_id in cursor.properties.items():
            pushed[name] = persisted[name] = sequence_id
            inactive[name] = now
        cursor.rewind()
        replayed = 0
        last: Position | None = None
        while cursor.has_more_entries():
            entries = await cursor.read_entries(_REPLAY_BATCH)
            if not entries:
                break
            for entry in entries:
                sender = producer_of(entry.data)
                if sender is not None:
                    name, sequence_id = sender
                    pushed[name] = persisted[name] = sequence_id
                    inactive[name] = now
            replayed += len(entries)
            last = entries[-1].position
        log.info("topic %s: deduplication replayed %d entries", self.ledger.name, replayed)
        self._snapshot_counter = replayed
        self._last_snapshot_ms = now
        if last is not None and replayed >= self.config.entries_interval:
            self._snapshot_counter = 0
            await self._snapshot(last)

    # ------------------------------------------------------------------ produce path

    def check(self, producer: str, sequence_id: int, highest: int) -> int:
        """NOT_DUP (recorded as pushed), DUP or UNKNOWN for a send of ``producer`` with
        these sequence ids. Call only when :attr:`enabled`. O(1)."""
        pushed = self.pushed.get(producer)
        if pushed is not None and sequence_id <= pushed:
            persisted = self.persisted.get(producer)
            if persisted is not None and sequence_id <= persisted:
                return DUP
            return UNKNOWN
        self.pushed[producer] = highest if highest > sequence_id else sequence_id
        return NOT_DUP

    def persisted_one(self, producer: str, highest: int) -> None:
        """A send checked NOT_DUP is stored. O(1)."""
        self.persisted[producer] = highest

    def entries_stored(self, count: int, ledger_id: int, last_entry_id: int) -> None:
        """``count`` entries were stored, the last at ``ledger_id:last_entry_id``: a
        snapshot in the background every ``entries_interval`` entries. O(1), O(producers)
        when one is due."""
        self._snapshot_counter += count
        if self._snapshot_counter >= self.config.entries_interval:
            self._snapshot_counter = 0
            self._start_snapshot(Position(ledger_id, last_entry_id))

    def failed(self, producer: str) -> None:
        """A write of ``producer``'s failed (nothing of it stored): what it pushed goes
        back to what is stored, so its resends are new again (Pulsar resets the pushed
        map when it unfences the topic). O(1)."""
        persisted = self.persisted.get(producer)
        if persisted is None:
            self.pushed.pop(producer, None)
        else:
            self.pushed[producer] = persisted

    def last_sequence_id(self, producer: str) -> int:
        """PRODUCER_SUCCESS's ``last_sequence_id``: the highest sequence id pushed by a
        producer of this name, -1 if none (always -1 while deduplication is off). O(1)."""
        return self.pushed.get(producer, -1)

    def producer_added(self, producer: str) -> None:
        if self.enabled:
            self._inactive.pop(producer, None)

    def producer_removed(self, producer: str) -> None:
        if self.enabled:
            self._inactive[producer] = self.clock.wall_ms()

    # ------------------------------------------------------------------ upkeep

    async def upkeep(self) -> None:
        """The stats period: forget producers inactive for longer than the timeout
        (then snapshot without them), and take a snapshot when the interval has passed
        with entries after the last one. O(inactive producers)."""
        if not self.enabled:
            self._inactive.clear()
            return
        now = self.clock.wall_ms()
        oldest = now - self.config.inactivity_timeout_s * 1000
        gone = [name for name, seen in self._inactive.items() if seen < oldest]
        for name in gone:
            del self._inactive[name]
            self.pushed.pop(name, None)
            self.persisted.pop(name, None)
            log.info("topic %s: forgetting deduplication of producer %s", self.ledger.name, name)
        cursor = self.cursor
        if cursor is None:
            return
        if gone:
            await self._snapshot(cursor.mark_delete_position)
            return
        interval_ms = self.config.snapshot_interval_s * 1000
        last = self.ledger.last_confirmed
        due = interval_ms > 0 and now - self._last_snapshot_ms >= interval_ms
        if due and last > cursor.mark_delete_position:
            self._snapshot_counter = 0
            await self._snapshot(last)

    def _start_snapshot(self, position: Position) -> None:
        """A snapshot of the map as of now (the last entry stored is at ``position``),
        written in the background; one write at a time, and a snapshot due meanwhile
        replaces any other waiting (the latest one is written next). O(producers)."""
        if self.cursor is None:
            return
        self._due = (position, self._snapshot_map())
        if not self._snapshotting:
            self._snapshotting = True
            self._tasks.spawn(self._write_snapshots(), f"dedup snapshot {self.ledger.name}")

    async def _snapshot(self, position: Position) -> None:
        """A snapshot now, waited for."""
        self._start_snapshot(position)
        await self._tasks.settled()

    def _snapshot_map(self) -> dict[str, int]:
        """The persisted map, at most ``max_producers`` of it. O(producers)."""
        limit = self.config.max_producers
        snapshot: dict[str, int] = {}
        for name, sequence_id in self.persisted.items():
            if len(snapshot) >= limit:
                break
            snapshot[name] = sequence_id
        return snapshot

    async def _write_snapshots(self) -> None:
        """Write the snapshots due, the latest each time, as the cursor's properties
        with its mark-delete at their position. A failure is logged: the next snapshot
        carries everything (and recovery replays what no snapshot covers)."""
        try:
            while (due := self._due) is not None and (cursor := self.cursor) is not None:
                self._due = None
                position, snapshot = due
                try:
                    await cursor.mark_delete(position, snapshot)
                    self._last_snapshot_ms = self.clock.wall_ms()
                except BookieError as error:
                    log.warning(
                        "topic %s: deduplication snapshot at %s failed: %s",
                        self.ledger.name,
                        position,
                        error,
                    )
        finally:
            self._snapshotting = False

    async def _settle_snapshots(self) -> None:
        await self._tasks.settled()

    async def close(self) -> None:
        """The topic closes: a snapshot being written ends first."""
        await self._tasks.settled()
        await self._tasks.close()

    async def kill(self) -> None:
        """The broker is killed: nothing more is written."""
        await self._tasks.close()


def producer_of(data: bytes) -> tuple[str, int] | None:
    """The producer name and highest sequence id of a stored entry (of its metadata:
    the highest of ``sequence_id`` and ``highest_sequence_id``), None for an entry that
    is not in Pulsar's format. O(metadata size)."""
    try:
        plain = plain_fields(data)
        if plain is not None:
            return plain[0], plain[1]
        metadata = metadata_of(data)
    except EntryFormatError:
        return None
    sequence_id = metadata.sequence_id
    highest = metadata.highest_sequence_id
    return metadata.producer_name, highest if highest > sequence_id else sequence_id
