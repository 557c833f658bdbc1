"""PIP-430: per-ledger range caches, one broker-wide removal queue, expected read counts.

The design as a unit (``broker/cache/unit.py`` drives it from the cache events):

- the structure: :class:`RangeEntryCache` per managed ledger (a dict per ledger id) and
  :class:`Pip430EntryCacheManager`, whose
  :class:`~broker.cache.removal_queue.RangeCacheRemovalQueue` holds every cached entry
  in insertion order; the timestamp pass (every ``managedLedgerCacheEvictionIntervalMs``)
  and the size pass (above 0.98 x max, down to ``managedLedgerCacheEvictionWatermark``)
  both run its one eviction loop from the head, so eviction never depends on how many
  topics the broker holds;
- the ledger side: :class:`ExpectedReadCounts` (``cacheEvictionByExpectedReadCount=true``,
  the default). The expected read count of a cached entry starts at

  * the number of active cursors (cursors with consumers) for an added entry; with no
    active cursor, added entries are still cached (count 0) for
    ``managedLedgerContinueCachingAddedEntriesAfterLastActiveCursorLeavesMillis`` after
    the last one left or the topic loaded;
  * the number of active cursors at or before the reader (the
    :class:`~broker.cache.active_cursors.ActiveManagedCursorContainer`) for an entry read
    from storage, evaluated when the storage read completes; 0: not cached;

  goes down by one when the entry is handed to a consumer (the ``released`` event) and up
  by one when it joins a replay queue (``replay_added``), both in
  :class:`~broker.cache.unit.TopicUnit`. The removal queue's rule keeps an entry with
  ``expected_reads >= 1`` for up to
  ``managedLedgerCacheEvictionExtendTTLOfEntriesWithRemainingExpectedReadsMaxTimes``
  more TTLs. No invalidation by cursor position: counts and the queue do that work.

With ``cacheEvictionByExpectedReadCount=false`` the structure stays (removal queue,
partial range reads) and the ledger side is the pre-PIP-430 rules, as the PIP says ("as
before"): :class:`~broker.cache.legacy.LegacyRules`, counts 0, no continue-caching grace.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from broker.cache.active_cursors import ActiveManagedCursorContainer
from broker.cache.api import QUIET_FOREVER, CursorCheck, MissingRange, Pos
from broker.cache.base import ManagerBase, owned_payload
from broker.cache.config import CacheConfig
from broker.cache.entry import CachedEntry
from broker.cache.removal_queue import RangeCacheRemovalQueue
from broker.clock import Clock


class RangeEntryCache:
    """The cached entries of one managed ledger, by ledger id then entry id.

    A plain dict per ledger: reads ask for ids (never "the first cached"), and eviction
    names the entry, so nothing on the hot path needs order. Costs (n = cached entries of
    one ledger): insert, get, evict O(1) per entry; get_range over k ids O(k); invalidate
    up to a position O(n) for that ledger; invalidate a ledger and clear O(entries
    removed).
    """

    __slots__ = ("_ledgers", "_manager", "_name")

    def __init__(self, name: str, manager: Pip430EntryCacheManager) -> None:
        self._name = name
        self._manager = manager
        self._ledgers: dict[int, dict[int, CachedEntry]] = {}

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
        """Cache consecutive entries from ``first``; a position already cached keeps its
        entry and gains ``expected_reads``. O(entries)."""
        manager = self._manager
        if manager.disabled:
            return
        entries = self._ledgers.get(ledger_id)
        if entries is None:
            entries = self._ledgers[ledger_id] = {}
        reads = expected_reads if manager.by_expected_reads else 0
        now = manager.clock.monotonic_ns()
        add = manager.queue.add
        copy = manager.copy_entries
        added = added_bytes = 0
        data: bytes | memoryview | None = None
        for offset, size in enumerate(sizes):
            entry_id = first + offset
            existing = entries.get(entry_id)
            if existing is not None:
                existing.expected_reads += reads
                continue
            if datas is not None:
                data = owned_payload(datas[offset], True) if copy else datas[offset]
            entry = CachedEntry(self, ledger_id, entry_id, data, size, reads, now)
            if counts is not None:
                entry.messages = counts[offset]
            entries[entry_id] = entry
            add(entry)
            added += 1
            added_bytes += size
        counters = manager.counters
        counters.size += added_bytes
        counters.entries += added
        counters.inserted += added

    def insert_from_read(
        self,
        ledger_id: int,
        entry_id: int,
        data: bytes | memoryview | None,
        size: int,
        expected_reads: int,
    ) -> None:
        """Cache an entry read from storage. A position already cached keeps its entry
        and its count (Pulsar's RangeCache refuses the duplicate). O(1)."""
        manager = self._manager
        if manager.disabled:
            return
        entries = self._ledgers.get(ledger_id)
        if entries is None:
            entries = self._ledgers[ledger_id] = {}
        elif entry_id in entries:
            return
        # ``insert`` for one entry, without its per-range setup: this runs once per entry
        # read from storage
        if data is not None and manager.copy_entries:
            data = owned_payload(data, True)
        reads = expected_reads if manager.by_expected_reads else 0
        entry = CachedEntry(
            self, ledger_id, entry_id, data, size, reads, manager.clock.monotonic_ns()
        )
        entries[entry_id] = entry
        manager.queue.add(entry)
        counters = manager.counters
        counters.size += size
        counters.entries += 1
        counters.inserted += 1

    def get_range(
        self, ledger_id: int, first: int, last: int, hits: list[CachedEntry]
    ) -> list[MissingRange]:
        """Append cached entries of ``first..last`` to ``hits`` (marked accessed), count
        them as hits, and return the contiguous missing sub-ranges (PIP-430 serves a
        partly cached range partly from the cache). O(last - first)."""
        entries = self._ledgers.get(ledger_id)
        if entries is None:
            return [(first, last)]
        missing: list[MissingRange] = []
        gap_start = -1
        hit_bytes = 0
        found = 0
        lookup = entries.get
        for entry_id in range(first, last + 1):
            entry = lookup(entry_id)
            if entry is None:
                if gap_start < 0:
                    gap_start = entry_id
                continue
            if gap_start >= 0:
                missing.append((gap_start, entry_id - 1))
                gap_start = -1
            entry.accessed = True
            hits.append(entry)
            hit_bytes += entry.size
            found += 1
        if gap_start >= 0:
            missing.append((gap_start, last))
        counters = self._manager.counters
        counters.hits += found
        counters.hit_bytes += hit_bytes
        return missing

    def mark_read(self, ledger_id: int, entry_id: int) -> None:
        """One expected read happened (the entry was handed to a consumer). O(1)."""
        entries = self._ledgers.get(ledger_id)
        if entries is not None and self._manager.by_expected_reads:
            entry = entries.get(entry_id)
            if entry is not None:
                entry.expected_reads -= 1

    def add_expected_read(self, ledger_id: int, entry_id: int) -> None:
        """One more read is expected (the entry joined a replay queue). O(1)."""
        entries = self._ledgers.get(ledger_id)
        if entries is not None and self._manager.by_expected_reads:
            entry = entries.get(entry_id)
            if entry is not None:
                entry.expected_reads += 1

    def invalidate_entries(self, ledger_id: int, entry_id: int) -> int:
        """Drop every entry strictly before ``(ledger_id, entry_id)``; returns how many."""
        removed = 0
        for lid in [lid for lid in self._ledgers if lid < ledger_id]:
            removed += self.invalidate_all_entries(lid)  # counts its own
        entries = self._ledgers.get(ledger_id)
        if entries is not None:
            doomed = [eid for eid in entries if eid < entry_id]
            for eid in doomed:
                self._drop(entries.pop(eid))
            removed += len(doomed)
            self._manager.counters.evicted_invalidated += len(doomed)
            if not entries:
                del self._ledgers[ledger_id]
        return removed

    def invalidate_all_entries(self, ledger_id: int) -> int:
        entries = self._ledgers.pop(ledger_id, None)
        if entries is None:
            return 0
        for entry in entries.values():
            self._drop(entry)
        self._manager.counters.evicted_invalidated += len(entries)
        return len(entries)

    def clear(self) -> None:
        for ledger_id in list(self._ledgers):
            self.invalidate_all_entries(ledger_id)

    def cached_entries(self) -> list[CachedEntry]:
        return [
            self._ledgers[lid][eid]
            for lid in sorted(self._ledgers)
            for eid in sorted(self._ledgers[lid])
        ]

    def _drop(self, entry: CachedEntry) -> None:
        """Account an entry already taken out of this cache's maps; the removal queue
        skips it when it reaches the head."""
        entry.removed = True
        entry.data = None
        counters = self._manager.counters
        counters.size -= entry.size
        counters.entries -= 1

    def _evict(self, entry: CachedEntry) -> None:
        """Remove an entry the removal queue chose. O(1). (:meth:`_drop`'s accounting is
        written out: this runs once per entry evicted.)"""
        entries = self._ledgers[entry.ledger_id]
        del entries[entry.entry_id]
        if not entries:
            del self._ledgers[entry.ledger_id]
        entry.removed = True
        entry.data = None
        counters = self._manager.counters
        counters.size -= entry.size
        counters.entries -= 1


class Pip430EntryCacheManager(ManagerBase[RangeEntryCache]):
    """The broker-wide side of PIP-430: the size limit and the removal queue's passes.

    Insert, get and requeue are O(1) on the queue; a pass costs O(entries it looks at),
    independent of the number of ledgers.
    """

    implementation = "pip430"

    def __init__(self, config: CacheConfig, clock: Clock) -> None:
        super().__init__(config, clock, lambda name: RangeEntryCache(name, self))
        self.by_expected_reads = config.eviction_by_expected_read_count
        self.queue = RangeCacheRemovalQueue(
            config.extend_ttl_max_times if self.by_expected_reads else 0,
            config.extend_ttl_of_recently_accessed,
        )

    def evict_expired(self) -> int:
        """The timestamp pass: entries older than the TTL, from the head. Returns
        entries removed."""
        now = self.clock.monotonic_ns()
        removed, _ = self.queue.evict_before(now - self.config.ttl_ns, now, self.evict_listener)
        self.counters.evicted_ttl += removed
        return removed

    def quiet_until_ns(self) -> int | None:
        """Until the entry at the head of the removal queue expires: both passes of a
        round start at the head and the timestamp pass stops at once at an entry not
        expired (``RemovalQueue.evict``), and the size pass has nothing to do below the
        trigger. None above it. O(1) amortized."""
        if self.needs_eviction():
            return None
        first = self.queue.first_timestamp_ns()
        return QUIET_FOREVER if first is None else first + self.config.ttl_ns

    def evict_entries(self, size_to_free: int) -> int:
        """The size pass: free at least ``size_to_free`` bytes (or everything that may
        go) from the head of the queue. Returns bytes freed."""
        self.counters.eviction_runs += 1
        removed, freed = self.queue.evict_size(
            size_to_free, self.clock.monotonic_ns(), self.evict_listener
        )
        self.counters.evicted_size += removed
        return freed

    def stats(self) -> dict[str, Any]:
        """The common counters, plus the cached entries still expected to be read
        (computed here, O(entries): an admin route, not a hot path)."""
        result = super().stats()
        result["entriesWithExpectedReads"] = sum(
            1 for entry in self.queue if not entry.removed and entry.expected_reads >= 1
        )
        return result


class ExpectedReadCounts:
    """PIP-430's ledger side for one managed ledger (``cacheEvictionByExpectedReadCount``).

    Every consumer that subscribes makes its cursor active (Pulsar 4.1's
    ``PersistentSubscription.addConsumerInternal``); the last one leaving makes it
    inactive. The backlog settings and the periodic check do nothing here, as in Pulsar,
    and cursors are ordered by read position: Pulsar's BrokerService turns
    ``cacheEvictionByMarkDeletedPosition`` off in this mode.
    All operations O(1) except cursor moves, O(nodes passed) in the container.
    """

    __slots__ = ("_active", "_clock", "_grace_ns", "_idle_since_ns")

    def __init__(self, config: CacheConfig, clock: Clock) -> None:
        self._clock = clock
        self._active = ActiveManagedCursorContainer()
        self._grace_ns = config.continue_caching_ms * 1_000_000
        #: the last active cursor left, or the topic loaded, at this time
        self._idle_since_ns = clock.monotonic_ns()

    def added_reads(self) -> int | None:
        """One expected read per active cursor; with none, count 0 during the grace
        after the last one left (or the load), else not cached."""
        active = len(self._active)
        if active:
            return active
        if self._clock.monotonic_ns() - self._idle_since_ns < self._grace_ns:
            return 0
        return None

    def storage_read_reads(self, reader: str) -> int:
        """Active cursors at or before the reader, itself included; 0 for a reader that
        is not active (its reads are not cached). O(1)."""
        return self._active.number_at_or_before(reader)

    def activated(
        self, cursor: str, read_position: Pos, mark_delete: Pos, entries_to_read: int
    ) -> None:
        if cursor not in self._active:
            self._active.add(cursor, read_position)

    def deactivated(self, cursor: str) -> None:
        if cursor in self._active:
            self._active.remove(cursor)
            if not self._active:
                self._idle_since_ns = self._clock.monotonic_ns()

    def moved(self, cursor: str, read_position: Pos, mark_delete: Pos) -> None:
        if cursor in self._active:
            self._active.move(cursor, read_position)

    def checked(self, cursors: Sequence[CursorCheck]) -> None:
        """Nothing: with expected read counts Pulsar skips the backlog checks."""
