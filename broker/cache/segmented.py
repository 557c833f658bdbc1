"""PIP-174: one broker-wide cache of N segments used as a ring, as its pull request
(apache/pulsar #15955, ``SharedEntryCacheImpl``) built it.

Entries are written into the current segment; when it is full the next segment becomes
current and is cleared first, so eviction is a rotation, never a per-topic scan. Only the
write path inserts (what producers add, while the managed ledger has an active cursor:
the ledger side is :class:`~broker.cache.legacy.LegacyRules`, the managed ledger the ring
plugged into). Reads probe the segments newest first; a range read is served whole or
not at all; entries read from storage are not cached, and concurrent readers do not
share storage reads (the PR read straight from BookKeeper, without Pulsar's
PendingReadsManager).

As in the PR, invalidation (up to a position, a whole ledger, a topic's clear) and a
topic's unload do nothing: a segment's index keeps its entries until the segment is
reused. Ledger ids are never reused, so nothing stale is ever served.

Copy mode (``managedLedgerCacheCopyEntries=true``) writes each payload into the
segment's preallocated buffer with an index (ledger, entry) -> (offset, size) and copies
it out on a hit; reference mode keeps the payload objects themselves.
"""

from __future__ import annotations

from collections.abc import Sequence
from time import thread_time_ns

from broker.cache.api import QUIET_FOREVER, MissingRange
from broker.cache.base import ManagerBase
from broker.cache.config import CacheConfig
from broker.cache.entry import CachedEntry
from broker.clock import Clock

GIB = 1 << 30


class SegmentEntry(CachedEntry):
    """A cached entry with its place in a segment (copy mode reads the bytes there)."""

    __slots__ = ("offset", "segment")

    offset: int
    segment: Segment


class Segment:
    """A buffer (copy mode), a fill offset and an index. Clearing is O(entries)."""

    __slots__ = ("buffer", "index", "used")

    def __init__(self, size: int, copy: bool) -> None:
        self.buffer = bytearray(size) if copy else None
        self.index: dict[tuple[int, int], SegmentEntry] = {}
        self.used = 0


class SegmentedEntryCache:
    """One managed ledger's view of the shared ring. Costs: insert O(1) per entry (a
    rotation O(entries of the cleared segment)); get_range over k ids O(k x segments)
    worst case."""

    __slots__ = ("_manager", "_name")

    def __init__(self, name: str, manager: SegmentedEntryCacheManager) -> None:
        self._name = name
        self._manager = manager

    @property
    def name(self) -> str:
        return self._name

    def insert(
        self,
        ledger_id: int,
        first: int,
        datas: Sequence[bytes | memoryview] | None,
        sizes: Sequence[int],
        expected_reads: int,
        counts: Sequence[int] | None = None,
    ) -> None:
        """The write path; an entry larger than a segment is not cached. ``counts`` are
        not kept (a ring entry's payload may be a copy in its segment)."""
        insert = self._manager._insert
        for offset, size in enumerate(sizes):
            insert(self, ledger_id, first + offset, None if datas is None else datas[offset], size)

    def insert_from_read(
        self,
        ledger_id: int,
        entry_id: int,
        data: bytes | memoryview | None,
        size: int,
        expected_reads: int,
    ) -> None:
        """Reads from storage are not cached by this design."""

    def get_range(
        self, ledger_id: int, first: int, last: int, hits: list[CachedEntry]
    ) -> list[MissingRange]:
        """All or nothing, found as the PR's ``SharedEntryCacheManagerImpl.getRange``
        finds entries: the segments are walked newest to oldest once, and in each the
        walk goes on from the id it reached while that id is present; the first absent
        id moves it to the next older segment, never back to a newer one, and when that
        id is ``last`` the walk ends (the PR's loop condition). A range whose older part
        sits in an older segment than its newer part is therefore read from storage
        whole, although every entry is in the ring. A one-entry read probes every
        segment, as the PR's single-position ``get`` (the replay queue's reads; a
        one-entry range read of the dispatcher would walk as above, a difference kept
        because the event does not say which it was). O(range + segments)."""
        manager = self._manager
        if first == last:
            single = manager._lookup(ledger_id, first)
            if single is None:
                return [(first, last)]
            counters = manager.counters
            counters.hits += 1
            counters.hit_bytes += single.size
            hits.append(manager._copy_out(single))
            return []
        segments = manager.segments
        count = len(segments)
        found: list[SegmentEntry] = []
        entry_id = first
        for back in range(count):
            index = segments[(manager.current - back) % count].index
            while entry_id <= last:
                entry = index.get((ledger_id, entry_id))
                if entry is None:
                    break
                found.append(entry)
                entry_id += 1
            if entry_id == last:
                break
        if entry_id <= last:
            return [(first, last)]
        counters = manager.counters
        counters.hits += len(found)
        counters.hit_bytes += sum(e.size for e in found)
        hits.extend(manager._copy_out(e) for e in found)
        return []

    def mark_read(self, ledger_id: int, entry_id: int) -> None:
        """Expected reads are not tracked by this design."""

    def add_expected_read(self, ledger_id: int, entry_id: int) -> None:
        """Expected reads are not tracked by this design."""

    def invalidate_entries(self, ledger_id: int, entry_id: int) -> int:
        """A no-op, as in the PR: only rotation removes entries."""
        return 0

    def invalidate_all_entries(self, ledger_id: int) -> int:
        """A no-op, as in the PR: only rotation removes entries."""
        return 0

    def clear(self) -> None:
        """A no-op, as in the PR: only rotation removes entries."""

    def cached_entries(self) -> list[CachedEntry]:
        """This ledger's entries still in the ring, newest segment's copy of each."""
        manager = self._manager
        result: dict[tuple[int, int], CachedEntry] = {}
        for segment in manager.segments:
            for key, entry in segment.index.items():
                if entry.cache is self and key not in result:
                    result[key] = manager._copy_out(entry)
        return [result[key] for key in sorted(result)]


class SegmentedEntryCacheManager(ManagerBase[SegmentedEntryCache]):
    """The ring. Eviction is rotation on insert; there is no timer work at all."""

    implementation = "segmented"
    shares_pending_reads = False
    has_eviction_passes = False

    def __init__(self, config: CacheConfig, clock: Clock) -> None:
        super().__init__(config, clock, lambda name: SegmentedEntryCache(name, self))
        count = config.segments or max(2, config.max_size_bytes // GIB)
        self.segment_size = config.max_size_bytes // count if not self.disabled else 0
        self.segments = [
            Segment(self.segment_size, self.copy_entries)
            for _ in range(count if not self.disabled else 0)
        ]
        self.current = 0

    def remove_entry_cache(self, name: str) -> None:
        """A topic's unload leaves the ring as it is (the PR's ``removeEntryCache``)."""
        self._caches.pop(name, None)

    def needs_eviction(self) -> bool:
        return False

    def evict_expired(self) -> int:
        """The ring has no TTL: nothing expires."""
        return 0

    def evict_entries(self, size_to_free: int) -> int:
        """The ring never exceeds its segments: there is no size pass."""
        return 0

    def after_insert(self) -> None:
        """Nothing to do: the ring evicts by rotating when a segment fills."""

    def do_cache_eviction(self) -> None:
        """Nothing to do: the ring evicts by rotating when a segment fills."""

    def quiet_until_ns(self) -> int | None:
        """No round ever acts (see ``do_cache_eviction``)."""
        return QUIET_FOREVER

    # ------------------------------------------------------------------ internals

    def _lookup(self, ledger_id: int, entry_id: int) -> SegmentEntry | None:
        """Probe the segments newest first, as the PR's single-entry ``get``.
        O(segments)."""
        key = (ledger_id, entry_id)
        segments = self.segments
        count = len(segments)
        for back in range(count):
            entry = segments[(self.current - back) % count].index.get(key)
            if entry is not None:
                return entry
        return None

    def _insert(
        self,
        cache: SegmentedEntryCache,
        ledger_id: int,
        entry_id: int,
        data: bytes | memoryview | None,
        size: int,
    ) -> None:
        """Write into the current segment (rotating first when it is full); a position
        already in the current segment is kept (the PR's put-if-absent). O(1)."""
        if self.disabled or size > self.segment_size:
            return
        segment = self.segments[self.current]
        if segment.used + size > self.segment_size:
            self._rotate()
            segment = self.segments[self.current]
        key = (ledger_id, entry_id)
        if key in segment.index:
            return
        entry = SegmentEntry(cache, ledger_id, entry_id, None, size, 0, self.clock.monotonic_ns())
        entry.offset = segment.used
        entry.segment = segment
        buffer = segment.buffer
        if buffer is not None and data is not None:
            buffer[segment.used : segment.used + size] = data
            # a view of the copy; served as an owned copy (see _copy_out)
            entry.data = memoryview(buffer)[segment.used : segment.used + size]
        else:
            entry.data = data
        segment.used += size
        segment.index[key] = entry
        counters = self.counters
        counters.size += size
        counters.entries += 1
        counters.inserted += 1

    def _copy_out(self, entry: SegmentEntry) -> CachedEntry:
        """Copy mode: a fresh entry holding a copy of the bytes; reference mode: as is."""
        if entry.segment.buffer is None or entry.data is None:
            return entry
        return CachedEntry(
            None,
            entry.ledger_id,
            entry.entry_id,
            bytes(entry.data),
            entry.size,
            0,
            entry.timestamp_ns,
        )

    def _rotate(self) -> None:
        """Make the next segment current, clearing what it held (size evictions)."""
        started = thread_time_ns()
        self.current = (self.current + 1) % len(self.segments)
        segment = self.segments[self.current]
        evicted = len(segment.index)
        self.counters.size -= sum(e.size for e in segment.index.values())
        self.counters.entries -= evicted
        self.counters.evicted_size += evicted
        self.counters.eviction_runs += 1
        listener = self.evict_listener
        for entry in segment.index.values():
            entry.removed = True
            entry.data = None
            if listener is not None:
                listener(entry, "size")
        segment.index.clear()
        self.counters.eviction_cpu_ns += thread_time_ns() - started
        segment.used = 0
