"""PIP-430: per-ledger range caches and one broker-wide removal queue.

Every inserted entry joins the tail of a single FIFO queue. Eviction only ever looks at
the head of that queue, so its cost depends on how many entries it removes, never on how
many topics or ledgers the broker holds:

- the timestamp pass (every ``managedLedgerCacheEvictionIntervalMs``) takes expired
  entries off the head and stops at the first one that has not expired;
- the size pass (when the cache is over 0.98 x max) takes entries off the head until the
  cache is back under ``managedLedgerCacheEvictionWatermark`` x max.

Either pass gives an entry another TTL (requeues it at the tail) instead of removing it
when (``managedLedgerCacheEvictionExtendTTLOfRecentlyAccessed`` and it was read since the
last check) or (it has expected reads left and was requeued fewer than
``managedLedgerCacheEvictionExtendTTLOfEntriesWithRemainingExpectedReadsMaxTimes``
times). Entries removed by other means (invalidation) stay in the queue, flagged, and are
skipped when they reach the head.
"""

from __future__ import annotations

from collections import deque
from time import thread_time_ns
from typing import Any

from broker.cache.api import MissingRange
from broker.cache.base import LedgerCacheBase, ManagerBase, owned_payload
from broker.cache.config import CacheConfig
from broker.cache.entry import CachedEntry
from broker.cache.stats import CacheCounters
from broker.clock import Clock


class RangeEntryCache(LedgerCacheBase):
    """The cached entries of one managed ledger, by ledger id then entry id.

    A plain dict per ledger: reads ask for ids (never "the first cached"), and eviction
    names the entry, so nothing on the hot path needs order. Costs (n = cached entries of
    one ledger): insert, get, evict O(1); get_range over k ids O(k); invalidate up to a
    position O(n) for that ledger; invalidate a ledger and clear O(entries removed).
    """

    __slots__ = ("_ledgers", "_manager", "_name")

    def __init__(self, name: str, manager: Pip430EntryCacheManager) -> None:
        self._name = name
        self._manager = manager
        self._ledgers: dict[int, dict[int, CachedEntry]] = {}

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
        """Cache an entry and return it; a position already cached keeps its first entry
        and gains ``expected_reads``. ``data`` None caches only ``size`` (shadows)."""
        manager = self._manager
        if manager.disabled:
            return None
        entries = self._ledgers.get(ledger_id)
        if entries is None:
            entries = self._ledgers[ledger_id] = {}
        else:
            existing = entries.get(entry_id)
            if existing is not None:
                if manager.by_expected_reads:
                    existing.expected_reads += expected_reads
                return existing
        if data is not None:
            data = owned_payload(data, manager.copy_entries)
            size = len(data)
        entry = CachedEntry(
            self,
            ledger_id,
            entry_id,
            data,
            size,
            expected_reads if manager.by_expected_reads else 0,
            manager.clock.monotonic_ns(),
        )
        entries[entry_id] = entry
        manager.queue.append(entry)
        counters = manager.counters
        counters.size += size
        counters.entries += 1
        counters.inserted += 1
        return entry

    def insert_from_read(
        self,
        ledger_id: int,
        entry_id: int,
        data: bytes | memoryview | None,
        expected_reads: int,
        size: int = -1,
    ) -> CachedEntry | None:
        """Cache an entry read from storage when reads are still expected. A position
        already cached keeps its count: concurrent readers share one storage read, and
        the first reader's count already includes every cursor at or before it."""
        if expected_reads <= 0:
            return None
        entries = self._ledgers.get(ledger_id)
        existing = entries.get(entry_id) if entries is not None else None
        if existing is not None:
            return existing
        return self.insert(ledger_id, entry_id, data, expected_reads, size)

    def get(self, ledger_id: int, entry_id: int) -> CachedEntry | None:
        """The cached entry, marked accessed, counted as a hit or a miss. O(1)."""
        entries = self._ledgers.get(ledger_id)
        entry = entries.get(entry_id) if entries is not None else None
        counters = self._manager.counters
        if entry is None:
            counters.misses += 1
            return None
        entry.accessed = True
        counters.hits += 1
        counters.hit_bytes += entry.size
        return entry

    def get_range(
        self, ledger_id: int, first: int, last: int, hits: list[CachedEntry]
    ) -> list[MissingRange]:
        """Append cached entries of ``first..last`` to ``hits`` (marked accessed) and
        return the contiguous missing sub-ranges. Hits are counted here; misses when the
        ledger reports what it read from storage. O(last - first)."""
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

    def add_expected_read(self, ledger_id: int, entry_id: int) -> None:
        """One more read is expected for a cached position (it joined a replay queue)."""
        entries = self._ledgers.get(ledger_id)
        if entries is not None and self._manager.by_expected_reads:
            entry = entries.get(entry_id)
            if entry is not None:
                entry.expected_reads += 1

    def invalidate_entries(self, ledger_id: int, entry_id: int) -> int:
        """Drop every entry before ``(ledger_id, entry_id)``; returns how many."""
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

    def cached_size(self) -> int:
        """Bytes held by this cache. O(entries): for tests and stats, not hot paths."""
        return sum(e.size for entries in self._ledgers.values() for e in entries.values())

    def cached_entries(self) -> list[CachedEntry]:
        return [
            self._ledgers[lid][eid]
            for lid in sorted(self._ledgers)
            for eid in sorted(self._ledgers[lid])
        ]

    def _drop(self, entry: CachedEntry) -> None:
        """Account an entry already taken out of this cache's maps."""
        entry.removed = True
        entry.data = None
        counters = self._manager.counters
        counters.size -= entry.size
        counters.entries -= 1

    def _evict(self, entry: CachedEntry) -> None:
        """Remove an entry the removal queue chose. O(log n)."""
        entries = self._ledgers[entry.ledger_id]
        del entries[entry.entry_id]
        if not entries:
            del self._ledgers[entry.ledger_id]
        self._drop(entry)


class Pip430EntryCacheManager(ManagerBase[RangeEntryCache]):
    """The broker-wide side of PIP-430: the size limit, the removal queue, the passes.

    Insert, get and requeue are O(1) on the queue; a pass costs O(entries it looks at),
    independent of the number of ledgers.
    """

    implementation = "pip430"

    def __init__(self, config: CacheConfig, clock: Clock) -> None:
        super().__init__(config, clock, lambda name: RangeEntryCache(name, self))
        self.queue: deque[CachedEntry] = deque()
        self.by_expected_reads = config.eviction_by_expected_read_count
        self._extend_recently_accessed = config.extend_ttl_of_recently_accessed
        self._max_requeues = config.extend_ttl_max_times if self.by_expected_reads else 0

    def needs_eviction(self) -> bool:
        """True above 0.98 x max: the size pass has work."""
        return not self.disabled and self.counters.size > self.config.trigger_bytes

    def _should_requeue(self, entry: CachedEntry) -> bool:
        return (self._extend_recently_accessed and entry.accessed) or (
            entry.expected_reads >= 1 and entry.requeue_count < self._max_requeues
        )

    def evict_expired(self) -> int:
        """The timestamp pass: remove or requeue entries older than the TTL from the head,
        stop at the first that is not. Returns entries removed."""
        queue = self.queue
        now = self.clock.monotonic_ns()
        cutoff = now - self.config.ttl_ns
        removed = 0
        while queue:
            entry = queue[0]
            if entry.removed:
                queue.popleft()
                continue
            if entry.timestamp_ns >= cutoff:
                break
            queue.popleft()
            if self._should_requeue(entry):
                entry.timestamp_ns = now
                entry.accessed = False
                entry.requeue_count += 1
                queue.append(entry)
            else:
                entry.cache._evict(entry)
                removed += 1
                if self.evict_listener is not None:
                    self.evict_listener(entry, "ttl")
        self.counters.evicted_ttl += removed
        return removed

    def evict_to_watermark(self) -> int:
        """The size pass, when above the trigger: free down to the watermark from the head
        of the queue, requeueing what the rule keeps. Returns bytes freed."""
        if not self.needs_eviction():
            return 0
        to_free = self.counters.size - self.config.watermark_bytes
        return self.evict_entries(to_free)

    def evict_entries(self, size_to_free: int) -> int:
        """Free at least ``size_to_free`` bytes (or everything) from the head of the
        queue. Returns bytes freed."""
        queue = self.queue
        now = self.clock.monotonic_ns()
        freed = removed = 0
        self.counters.eviction_runs += 1
        while queue and freed < size_to_free:
            entry = queue.popleft()
            if entry.removed:
                continue
            if self._should_requeue(entry):
                entry.timestamp_ns = now
                entry.accessed = False
                entry.requeue_count += 1
                queue.append(entry)
            else:
                entry.cache._evict(entry)
                freed += entry.size
                removed += 1
                if self.evict_listener is not None:
                    self.evict_listener(entry, "size")
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

    def do_cache_eviction(self) -> None:
        """One eviction round as the broker's timer runs it: timestamp pass, then the
        size pass if still above the trigger. Its CPU time goes to ``eviction_cpu_ns``."""
        started = thread_time_ns()
        self.evict_expired()
        self.evict_to_watermark()
        self.counters.eviction_cpu_ns += thread_time_ns() - started
