"""The cache PIP-430 replaced: per-ledger range caches, each evicting on its own.

- Inserts are refused once the broker-wide cache is full (size >= max).
- The timestamp loop (every ``managedLedgerCacheEvictionIntervalMs``) visits every
  ledger's cache and removes entries from its lowest position while they are older than
  the TTL, stopping at the first newer one: it assumes position order is time order.
- The size eviction (above 0.98 x max, down to the watermark) is Pulsar's default
  policy: sort caches by size, take the largest until they hold half the total, and have
  each free its share of the target in proportion to its size, lowest positions first.
- Range reads are all or nothing: a partly cached range is read whole from storage.
- The ledger invalidates entries up to its slowest active reader (see
  ``invalidates_up_to_slowest_reader``); which reads get cached follows the cursor's
  active and backlog-caching state, decided by the ledger layer.
"""

from __future__ import annotations

from time import thread_time_ns

from sortedcontainers import SortedDict

from broker.cache.api import MissingRange
from broker.cache.base import LedgerCacheBase, ManagerBase, owned_payload
from broker.cache.config import CacheConfig
from broker.cache.entry import CachedEntry
from broker.cache.stats import CacheCounters
from broker.clock import Clock

#: the default eviction policy considers the largest caches holding this share of the total
SHARE_OF_SIZE_CONSIDERED = 0.5


class LegacyRangeEntryCache(LedgerCacheBase):
    """One managed ledger's entries ordered by position. Costs (n entries): insert
    O(log n); get O(1); get_range over k ids O(k); evicting r entries O(r log n)."""

    __slots__ = ("_entries", "_manager", "_name", "size")

    def __init__(self, name: str, manager: LegacyEntryCacheManager) -> None:
        self._name = name
        self._manager = manager
        self._entries: SortedDict = SortedDict()  # (ledger id, entry id) -> CachedEntry
        self.size = 0

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
        """Cache an entry unless the cache is full or the position is cached (the first
        insert wins). Expected reads are not tracked by this design."""
        manager = self._manager
        if manager.disabled or manager.counters.size >= manager.config.max_size_bytes:
            return None
        key = (ledger_id, entry_id)
        existing: CachedEntry | None = self._entries.get(key)
        if existing is not None:
            return existing
        if data is not None:
            data = owned_payload(data, manager.copy_entries)
            size = len(data)
        entry = CachedEntry(self, ledger_id, entry_id, data, size, 0, manager.clock.monotonic_ns())
        self._entries[key] = entry
        self.size += size
        counters = manager.counters
        counters.size += size
        counters.entries += 1
        counters.inserted += 1
        return entry

    def get(self, ledger_id: int, entry_id: int) -> CachedEntry | None:
        entry: CachedEntry | None = self._entries.get((ledger_id, entry_id))
        counters = self._manager.counters
        if entry is None:
            counters.misses += 1
            return None
        counters.hits += 1
        counters.hit_bytes += entry.size
        return entry

    def get_range(
        self, ledger_id: int, first: int, last: int, hits: list[CachedEntry]
    ) -> list[MissingRange]:
        """All or nothing: the hits only if every entry of the range is cached, else the
        whole range is missing. O(last - first)."""
        lookup = self._entries.get
        found: list[CachedEntry] = []
        for entry_id in range(first, last + 1):
            entry: CachedEntry | None = lookup((ledger_id, entry_id))
            if entry is None:
                return [(first, last)]
            found.append(entry)
        counters = self._manager.counters
        counters.hits += len(found)
        counters.hit_bytes += sum(e.size for e in found)
        hits.extend(found)
        return []

    def add_expected_read(self, ledger_id: int, entry_id: int) -> None:
        pass

    def invalidate_entries(self, ledger_id: int, entry_id: int) -> int:
        """Drop every entry before ``(ledger_id, entry_id)``; returns how many."""
        doomed = list(self._entries.irange(maximum=(ledger_id, entry_id), inclusive=(True, False)))
        for key in doomed:
            self._remove(key)
        self._manager.counters.evicted_invalidated += len(doomed)
        return len(doomed)

    def invalidate_all_entries(self, ledger_id: int) -> int:
        doomed = list(
            self._entries.irange(
                minimum=(ledger_id, 0), maximum=(ledger_id + 1, 0), inclusive=(True, False)
            )
        )
        for key in doomed:
            self._remove(key)
        self._manager.counters.evicted_invalidated += len(doomed)
        return len(doomed)

    def clear(self) -> None:
        removed = len(self._entries)
        for key in list(self._entries):
            self._remove(key)
        self._manager.counters.evicted_invalidated += removed

    def evict_before_timestamp(self, cutoff_ns: int) -> int:
        """Remove from the lowest position while entries are at or before ``cutoff_ns``;
        stop at the first newer one. Returns how many were removed."""
        entries = self._entries
        removed = 0
        while entries:
            key, entry = entries.peekitem(0)
            if entry.timestamp_ns > cutoff_ns:
                break
            self._remove(key)
            removed += 1
            listener = self._manager.evict_listener
            if listener is not None:
                listener(entry, "ttl")
        return removed

    def evict_lowest(self, size_to_free: int) -> tuple[int, int]:
        """Remove from the lowest position until ``size_to_free`` bytes are freed.
        Returns (entries removed, bytes freed)."""
        entries = self._entries
        freed = removed = 0
        while entries and freed < size_to_free:
            key, entry = entries.peekitem(0)
            freed += entry.size
            removed += 1
            self._remove(key)
            listener = self._manager.evict_listener
            if listener is not None:
                listener(entry, "size")
        return removed, freed

    def cached_entries(self) -> list[CachedEntry]:
        return list(self._entries.values())

    def _remove(self, key: tuple[int, int]) -> None:
        entry: CachedEntry = self._entries.pop(key)
        entry.removed = True
        entry.data = None
        self.size -= entry.size
        counters = self._manager.counters
        counters.size -= entry.size
        counters.entries -= 1


class LegacyEntryCacheManager(ManagerBase[LegacyRangeEntryCache]):
    """The broker-wide side of the legacy design. The timestamp loop costs O(#caches)
    per tick even when nothing expires; the size eviction O(#caches log #caches)."""

    implementation = "legacy"
    invalidates_up_to_slowest_reader = True

    def __init__(self, config: CacheConfig, clock: Clock) -> None:
        super().__init__(config, clock, lambda name: LegacyRangeEntryCache(name, self))

    def needs_eviction(self) -> bool:
        return not self.disabled and self.counters.size > self.config.trigger_bytes

    def evict_expired(self) -> int:
        """The timestamp loop over every cache. Returns entries removed."""
        cutoff = self.clock.monotonic_ns() - self.config.ttl_ns
        removed = 0
        for cache in self._caches.values():
            removed += cache.evict_before_timestamp(cutoff)
        self.counters.evicted_ttl += removed
        return removed

    def evict_to_watermark(self) -> int:
        if not self.needs_eviction():
            return 0
        return self.evict_entries(self.counters.size - self.config.watermark_bytes)

    def evict_entries(self, size_to_free: int) -> int:
        """Pulsar's default eviction policy; returns bytes freed."""
        self.counters.eviction_runs += 1
        caches = sorted(
            (cache for cache in self._caches.values() if cache.size > 0),
            key=lambda cache: cache.size,
            reverse=True,
        )
        total = sum(cache.size for cache in caches)
        selected: list[LegacyRangeEntryCache] = []
        selected_size = 0
        for cache in caches:
            if selected_size >= total * SHARE_OF_SIZE_CONSIDERED:
                break
            selected.append(cache)
            selected_size += cache.size
        freed = removed = 0
        for cache in selected:
            share = size_to_free * cache.size // selected_size if selected_size else 0
            count, nbytes = cache.evict_lowest(share)
            removed += count
            freed += nbytes
        self.counters.evicted_size += removed
        return freed

    def do_cache_eviction(self) -> None:
        """The timestamp loop over every ledger, then the size pass if still above the
        trigger. Its CPU time goes to ``eviction_cpu_ns``."""
        started = thread_time_ns()
        self.evict_expired()
        self.evict_to_watermark()
        self.counters.eviction_cpu_ns += thread_time_ns() - started
