"""PIP-174: one broker-wide cache of N segments used as a ring.

Entries are written into the current segment; when it is full the next segment becomes
current and is cleared first, so eviction is a rotation, never a per-topic scan. Only the
write path inserts (what producers add); reads probe the segments newest first; a range
read is served whole or not at all.

Copy mode (``managedLedgerCacheCopyEntries=true``) writes each payload into the
segment's preallocated buffer with an index (ledger, entry) -> (offset, size) and copies
it out on a hit; reference mode keeps the payload objects themselves.

The proposal's per-topic invalidations were no-ops; brokerlab drops the index entries of
invalidated positions (so a trimmed or deleted ledger is never served) while their space,
as in the proposal, is reclaimed only when the segment rotates.
"""

from __future__ import annotations

from time import thread_time_ns
from typing import Any

from broker.cache.api import MissingRange
from broker.cache.base import LedgerCacheBase, ManagerBase
from broker.cache.config import CacheConfig
from broker.cache.entry import CachedEntry
from broker.cache.stats import CacheCounters
from broker.clock import Clock

GIB = 1 << 30


class SegmentEntry(CachedEntry):
    """A cached entry with its place in a segment (copy mode reads the bytes there)."""

    __slots__ = ("offset", "segment")

    offset: int
    segment: Segment


class Segment:
    """A buffer (copy mode), a fill offset and an index. Clearing is O(entries)."""

    __slots__ = ("buffer", "by_ledger", "index", "used")

    def __init__(self, size: int, copy: bool) -> None:
        self.buffer = bytearray(size) if copy else None
        self.index: dict[tuple[int, int], SegmentEntry] = {}
        self.by_ledger: dict[int, set[int]] = {}
        self.used = 0


class SegmentedEntryCache(LedgerCacheBase):
    """One managed ledger's view of the shared ring. Costs: insert O(1) (a rotation
    O(entries of the cleared segment)); get O(segments); get_range over k ids
    O(k x segments) worst case."""

    __slots__ = ("_ledgers", "_manager", "_name")

    def __init__(self, name: str, manager: SegmentedEntryCacheManager) -> None:
        self._name = name
        self._manager = manager
        self._ledgers: set[int] = set()

    @property
    def _counters(self) -> CacheCounters:
        return self._manager.counters

    def insert(
        self,
        ledger_id: int,
        entry_id: int,
        data: bytes | memoryview | None,
        expected_reads: int,
        size: int = -1,
    ) -> CachedEntry | None:
        """Write path insert. None when the entry is larger than a segment."""
        entry = self._manager._insert(self, ledger_id, entry_id, data, size)
        if entry is not None:
            self._ledgers.add(ledger_id)
        return entry

    def insert_from_read(
        self,
        ledger_id: int,
        entry_id: int,
        data: bytes | memoryview | None,
        expected_reads: int,
        size: int = -1,
    ) -> CachedEntry | None:
        """Reads from storage are not cached by this design."""
        return None

    def get(self, ledger_id: int, entry_id: int) -> CachedEntry | None:
        entry = self._manager._lookup(ledger_id, entry_id)
        counters = self._manager.counters
        if entry is None:
            counters.misses += 1
            return None
        counters.hits += 1
        counters.hit_bytes += entry.size
        return self._manager._copy_out(entry)

    def get_range(
        self, ledger_id: int, first: int, last: int, hits: list[CachedEntry]
    ) -> list[MissingRange]:
        """All or nothing, as the proposal's range reads."""
        manager = self._manager
        found: list[SegmentEntry] = []
        for entry_id in range(first, last + 1):
            entry = manager._lookup(ledger_id, entry_id)
            if entry is None:
                return [(first, last)]
            found.append(entry)
        counters = manager.counters
        counters.hits += len(found)
        counters.hit_bytes += sum(e.size for e in found)
        hits.extend(manager._copy_out(e) for e in found)
        return []

    def add_expected_read(self, ledger_id: int, entry_id: int) -> None:
        pass

    def invalidate_entries(self, ledger_id: int, entry_id: int) -> int:
        removed = 0
        for lid in [lid for lid in self._ledgers if lid < ledger_id]:
            removed += self.invalidate_all_entries(lid)  # counts its own
        dropped = self._manager._drop_where(ledger_id, lambda eid: eid < entry_id)
        self._manager.counters.evicted_invalidated += dropped
        return removed + dropped

    def invalidate_all_entries(self, ledger_id: int) -> int:
        self._ledgers.discard(ledger_id)
        removed = self._manager._drop_where(ledger_id, lambda eid: True)
        self._manager.counters.evicted_invalidated += removed
        return removed

    def clear(self) -> None:
        for ledger_id in list(self._ledgers):
            self.invalidate_all_entries(ledger_id)

    def cached_entries(self) -> list[CachedEntry]:
        manager = self._manager
        result: list[CachedEntry] = []
        for segment in manager.segments:
            for (lid, _), entry in segment.index.items():
                if lid in self._ledgers:
                    result.append(manager._copy_out(entry))
        return sorted(result, key=lambda e: (e.ledger_id, e.entry_id))


class SegmentedEntryCacheManager(ManagerBase[SegmentedEntryCache]):
    """The ring. Eviction is rotation on insert; there is no timer work at all."""

    implementation = "segmented"

    def __init__(self, config: CacheConfig, clock: Clock, segments: int = 0) -> None:
        super().__init__(config, clock, lambda name: SegmentedEntryCache(name, self))
        count = segments or max(2, config.max_size_bytes // GIB)
        self.segment_size = config.max_size_bytes // count if not self.disabled else 0
        self.segments = [
            Segment(self.segment_size, self.copy_entries)
            for _ in range(count if not self.disabled else 0)
        ]
        self.current = 0

    def needs_eviction(self) -> bool:
        return False

    def evict_expired(self) -> int:
        """The ring has no TTL: nothing expires."""
        return 0

    def evict_to_watermark(self) -> int:
        """The ring never exceeds its segments: there is no size pass."""
        return 0

    def do_cache_eviction(self) -> None:
        """Nothing to do: the ring evicts by rotating when a segment fills."""

    # ------------------------------------------------------------------ internals

    def _lookup(self, ledger_id: int, entry_id: int) -> SegmentEntry | None:
        """Probe the segments newest first."""
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
    ) -> CachedEntry | None:
        if self.disabled:
            return None
        if data is not None:
            size = len(data)
        if size > self.segment_size:
            return None
        existing = self._lookup(ledger_id, entry_id)
        if existing is not None:
            return existing
        segment = self.segments[self.current]
        if segment.used + size > self.segment_size:
            self._rotate()
            segment = self.segments[self.current]
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
        segment.index[(ledger_id, entry_id)] = entry
        segment.by_ledger.setdefault(ledger_id, set()).add(entry_id)
        counters = self.counters
        counters.size += size
        counters.entries += 1
        counters.inserted += 1
        return entry

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
        segment.by_ledger.clear()
        self.counters.eviction_cpu_ns += thread_time_ns() - started
        segment.used = 0

    def _drop_where(self, ledger_id: int, doomed: Any) -> int:
        removed = 0
        for segment in self.segments:
            ids = segment.by_ledger.get(ledger_id)
            if not ids:
                continue
            for eid in [eid for eid in ids if doomed(eid)]:
                ids.discard(eid)
                entry = segment.index.pop((ledger_id, eid))
                entry.removed = True
                entry.data = None
                self.counters.size -= entry.size
                self.counters.entries -= 1
                removed += 1
            if not ids:
                del segment.by_ledger[ledger_id]
        return removed
