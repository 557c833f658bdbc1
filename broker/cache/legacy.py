"""The cache PIP-430 replaced (Pulsar 4.0 and before), as a unit.

The structure: per-ledger range caches, each evicting on its own.

- Inserts are refused once the broker-wide cache is full (size >= max).
- The timestamp loop (every ``managedLedgerCacheEvictionIntervalMs``) visits every
  ledger's cache and removes entries from its lowest position while they are older than
  the TTL, stopping at the first newer one: it assumes position order is time order.
- The size eviction (above 0.98 x max, down to the watermark) is Pulsar's default
  policy: sort caches by size, take the largest until they hold half the total, and have
  each free its share of the target in proportion to its size, lowest positions first.
- Range reads are all or nothing: a partly cached range is read whole from storage.

The ledger side, :class:`LegacyRules` (also the ledger side of PIP-430 with
``cacheEvictionByExpectedReadCount=false``, and of PIP-174's ring, which plugged into
the same managed ledger): which cursors are active, which adds and storage reads are
cached, and the invalidation up to the slowest active reader.
"""

from __future__ import annotations

from collections.abc import Sequence

from sortedcontainers import SortedDict

from broker.cache.active_cursors import ActiveManagedCursorContainer
from broker.cache.api import QUIET_FOREVER, CursorCheck, EntryCache, MissingRange, Pos
from broker.cache.base import ManagerBase, owned_payload
from broker.cache.config import CacheConfig
from broker.cache.entry import CachedEntry
from broker.clock import Clock

#: the default eviction policy considers the largest caches holding this share of the total
SHARE_OF_SIZE_CONSIDERED = 0.5


class LegacyRangeEntryCache:
    """One managed ledger's entries ordered by position. Costs (n entries): insert
    O(log n); get O(1); get_range over k ids O(k); evicting r entries O(r log n)."""

    __slots__ = ("_entries", "_manager", "_name", "size")

    def __init__(self, name: str, manager: LegacyEntryCacheManager) -> None:
        self._name = name
        self._manager = manager
        self._entries: SortedDict = SortedDict()  # (ledger id, entry id) -> CachedEntry
        self.size = 0

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
        """Cache entries while the cache is not full; a position already cached keeps
        its entry (the first insert wins). Expected reads are not tracked."""
        manager = self._manager
        if manager.disabled:
            return
        counters = manager.counters
        limit = manager.config.max_size_bytes
        cached = self._entries
        now = manager.clock.monotonic_ns()
        copy = manager.copy_entries
        for offset, size in enumerate(sizes):
            if counters.size >= limit:  # hasSpaceInCache(): refused when full
                return
            key = (ledger_id, first + offset)
            if key in cached:
                continue
            data = None if datas is None else owned_payload(datas[offset], copy)
            entry = cached[key] = CachedEntry(self, ledger_id, key[1], data, size, 0, now)
            if counts is not None:
                entry.messages = counts[offset]
            self.size += size
            counters.size += size
            counters.entries += 1
            counters.inserted += 1

    def insert_from_read(
        self,
        ledger_id: int,
        entry_id: int,
        data: bytes | memoryview | None,
        size: int,
        expected_reads: int,
    ) -> None:
        self.insert(ledger_id, entry_id, None if data is None else (data,), (size,), 0)

    def get_range(
        self, ledger_id: int, first: int, last: int, hits: list[CachedEntry]
    ) -> list[MissingRange]:
        """All or nothing: the hits only if every entry of the range is cached, else the
        whole range is missing and nothing counts as a hit. O(last - first)."""
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

    def mark_read(self, ledger_id: int, entry_id: int) -> None:
        """Expected reads are not tracked by this design."""

    def add_expected_read(self, ledger_id: int, entry_id: int) -> None:
        """Expected reads are not tracked by this design."""

    def invalidate_entries(self, ledger_id: int, entry_id: int) -> int:
        """Drop every entry strictly before ``(ledger_id, entry_id)``; returns how many."""
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

    def first_timestamp_ns(self) -> int | None:
        """The timestamp of the entry at the lowest position, where the timestamp loop
        starts (and stops, if it is not expired); None when empty. O(1)."""
        entries = self._entries
        if not entries:
            return None
        timestamp: int = entries.peekitem(0)[1].timestamp_ns
        return timestamp

    def evict_before_timestamp(self, cutoff_ns: int) -> int:
        """Remove from the lowest position while entries are at or before ``cutoff_ns``;
        stop at the first newer one. Returns how many were removed."""
        entries = self._entries
        removed = 0
        listener = self._manager.evict_listener
        while entries:
            key, entry = entries.peekitem(0)
            if entry.timestamp_ns > cutoff_ns:
                break
            self._remove(key)
            removed += 1
            if listener is not None:
                listener(entry, "ttl")
        return removed

    def evict_lowest(self, size_to_free: int) -> tuple[int, int]:
        """Remove from the lowest position until ``size_to_free`` bytes are freed.
        Returns (entries removed, bytes freed)."""
        entries = self._entries
        freed = removed = 0
        listener = self._manager.evict_listener
        while entries and freed < size_to_free:
            key, entry = entries.peekitem(0)
            freed += entry.size
            removed += 1
            self._remove(key)
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

    def __init__(self, config: CacheConfig, clock: Clock) -> None:
        super().__init__(config, clock, lambda name: LegacyRangeEntryCache(name, self))

    def quiet_until_ns(self) -> int | None:
        """Until the first of the caches' lowest entries expires (the timestamp loop
        removes an entry at or before now - TTL); None above the trigger.
        O(#caches), as a round's timestamp loop."""
        if self.needs_eviction():
            return None
        ttl = self.config.ttl_ns
        until = QUIET_FOREVER
        for cache in self._caches.values():
            first = cache.first_timestamp_ns()
            if first is not None and first + ttl - 1 < until:
                until = first + ttl - 1
        return until

    def evict_expired(self) -> int:
        """The timestamp loop over every cache. Returns entries removed."""
        cutoff = self.clock.monotonic_ns() - self.config.ttl_ns
        removed = 0
        for cache in self._caches.values():
            removed += cache.evict_before_timestamp(cutoff)
        self.counters.evicted_ttl += removed
        return removed

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


class LegacyRules:
    """Pulsar's managed-ledger rules before PIP-430, for one managed ledger.

    - *Active cursors* (``ManagedLedgerImpl.activeCursors``): a cursor is made active
      when a consumer subscribes and it has fewer than
      ``managedLedgerCursorBackloggedThreshold`` entries to read (strictly less:
      ``PersistentTopic.checkBackloggedCursor``), and inactive when its last consumer
      leaves. The same check runs for every cursor at each stats period
      (``statsUpdateFrequencyInSecs``, the ``checked`` event); cursor moves never re-check
      it. (Pulsar 4.1 compares with ``<=`` when expected read counts are off; the PIP
      says that mode behaves "as before", so ``<`` here too.)
    - *Adds* are cached (count 0) while any cursor is active.
    - *Storage reads* are cached only for cursors the backlog-caching rule chose at the
      last check (``checkCursorsToCacheEntries``; off with
      ``managedLedgerMinimumBacklogCursorsForCaching=0``, the default): a cursor with at
      least ``managedLedgerMinimumBacklogEntriesForCaching`` entries to read is chosen
      when at least that many *other* cursors have entries to read within
      ``managedLedgerMaxBacklogBetweenCursorsForCaching`` of its own. O(#cursors^2), as
      in Pulsar.
    - *Invalidation* (``invalidateEntriesUpToSlowestReaderPosition``): when the slowest
      active cursor's position changes, everything strictly before it is dropped; the
      position is the read position, or the mark-delete position with
      ``cacheEvictionByMarkDeletedPosition``. Deactivating a cursor applies it again;
      with no active cursor left, the ledger's cache is cleared.

    Costs: a move O(nodes passed) in the active container; a check O(#cursors^2) with
    backlog caching on, else O(#cursors).
    """

    __slots__ = (
        "_active",
        "_by_mark_delete",
        "_cache",
        "_cache_reads",
        "_config",
        "_positions",
    )

    def __init__(self, config: CacheConfig, cache: EntryCache) -> None:
        self._config = config
        self._cache = cache
        self._by_mark_delete = config.cache_eviction_by_mark_deleted_position
        self._active = ActiveManagedCursorContainer()
        #: every cursor's (read position, mark-delete position) as last reported
        self._positions: dict[str, tuple[Pos, Pos]] = {}
        self._cache_reads: frozenset[str] = frozenset()

    def added_reads(self) -> int | None:
        return 0 if len(self._active) else None

    def storage_read_reads(self, reader: str) -> int:
        return 1 if reader in self._cache_reads else 0

    def activated(
        self, cursor: str, read_position: Pos, mark_delete: Pos, entries_to_read: int
    ) -> None:
        """A consumer subscribed: ``checkBackloggedCursor`` for this cursor."""
        self._positions[cursor] = (read_position, mark_delete)
        self._check_backlogged(cursor, True, entries_to_read)

    def deactivated(self, cursor: str) -> None:
        self._set_inactive(cursor)

    def moved(self, cursor: str, read_position: Pos, mark_delete: Pos) -> None:
        self._positions[cursor] = (read_position, mark_delete)
        active = self._active
        if cursor not in active:
            return
        before = active.slowest_position()
        active.move(cursor, mark_delete if self._by_mark_delete else read_position)
        if active.slowest_position() != before:
            self._invalidate_up_to_slowest()

    def checked(self, cursors: Sequence[CursorCheck]) -> None:
        """The stats period: ``checkBackloggedCursors`` then
        ``checkCursorsToCacheEntries``."""
        for check in cursors:
            self._check_backlogged(check.name, check.has_consumers, check.entries_to_read)
        config = self._config
        if config.min_backlog_cursors_for_caching < 1:
            self._cache_reads = frozenset()
            return
        chosen = set()
        for check in cursors:
            backlog = check.entries_to_read
            if backlog < config.min_backlog_entries_for_caching:
                continue
            close = sum(
                1
                for other in cursors
                if other is not check
                and abs(other.entries_to_read - backlog)
                <= config.max_backlog_between_cursors_for_caching
            )
            if close >= config.min_backlog_cursors_for_caching:
                chosen.add(check.name)
        self._cache_reads = frozenset(chosen)

    def _check_backlogged(self, cursor: str, has_consumers: bool, entries_to_read: int) -> None:
        if has_consumers and entries_to_read < self._config.cursor_backlogged_threshold:
            if cursor not in self._active and cursor in self._positions:
                read_position, mark_delete = self._positions[cursor]
                self._active.add(cursor, mark_delete if self._by_mark_delete else read_position)
        else:
            self._set_inactive(cursor)

    def _set_inactive(self, cursor: str) -> None:
        if cursor in self._active:
            self._active.remove(cursor)
            self._invalidate_up_to_slowest()

    def _invalidate_up_to_slowest(self) -> None:
        slowest = self._active.slowest_position()
        if slowest is None:
            self._cache.clear()
        else:
            self._cache.invalidate_entries(*slowest)
