"""Cache configuration: the broker.conf keys that shape every cache design."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """Pulsar's names, in Python case. Defaults are Pulsar 5.0's. Everything a design
    unit needs, its ledger-side rules included, so a replay can rebuild the live design
    from a trace's metadata alone."""

    #: managedLedgerCacheSizeMB in bytes; 0 disables caching
    max_size_bytes: int = 64 * 1024 * 1024
    #: managedLedgerCacheEvictionWatermark: a size pass frees down to this share of max
    eviction_watermark: float = 0.9
    #: managedLedgerCacheEvictionTimeThresholdMillis: the entry TTL
    eviction_time_threshold_ms: int = 1000
    #: managedLedgerCacheEvictionIntervalMs: period of the timestamp pass
    eviction_interval_ms: int = 10
    #: cacheEvictionByExpectedReadCount
    eviction_by_expected_read_count: bool = True
    #: managedLedgerCacheEvictionExtendTTLOfEntriesWithRemainingExpectedReadsMaxTimes
    extend_ttl_max_times: int = 5
    #: managedLedgerCacheEvictionExtendTTLOfRecentlyAccessed (false since Pulsar 5.0)
    extend_ttl_of_recently_accessed: bool = False
    #: managedLedgerCacheCopyEntries: own a copy of each payload instead of a view
    copy_entries: bool = False
    #: managedLedgerContinueCachingAddedEntriesAfterLastActiveCursorLeavesMillis;
    #: None means 2 x the TTL, as in Pulsar
    continue_caching_after_last_cursor_ms: int | None = None
    #: cacheEvictionByMarkDeletedPosition (legacy rules): invalidate up to the slowest
    #: mark-delete position instead of the slowest read position
    cache_eviction_by_mark_deleted_position: bool = False
    #: managedLedgerCursorBackloggedThreshold (legacy rules): a cursor with this many
    #: entries to read, or more, is backlogged (not active)
    cursor_backlogged_threshold: int = 1000
    #: managedLedgerMinimumBacklogCursorsForCaching (legacy rules); 0: off
    min_backlog_cursors_for_caching: int = 0
    #: managedLedgerMinimumBacklogEntriesForCaching (legacy rules)
    min_backlog_entries_for_caching: int = 1000
    #: managedLedgerMaxBacklogBetweenCursorsForCaching (legacy rules)
    max_backlog_between_cursors_for_caching: int = 1000
    #: brokerlab's managedLedgerCacheSegments (PIP-174 ring); 0: max(2, size / 1 GiB)
    segments: int = 0
    #: brokerlabCacheEntryLengthBytes: the size every entry counts as in the cache (and
    #: in the trace), whatever its payload; 0: its payload's. Pulsar's tests inject an
    #: ``EntryLengthFunction`` to this end (PR #24623's rolling-restart test: 8 KiB).
    entry_length: int = 0

    #: eviction starts above this share of max (a Pulsar constant)
    EVICTION_TRIGGER: float = 0.98

    @property
    def trigger_bytes(self) -> int:
        return int(self.max_size_bytes * self.EVICTION_TRIGGER)

    @property
    def watermark_bytes(self) -> int:
        return int(self.max_size_bytes * self.eviction_watermark)

    @property
    def ttl_ns(self) -> int:
        return self.eviction_time_threshold_ms * 1_000_000

    @property
    def continue_caching_ms(self) -> int:
        if self.continue_caching_after_last_cursor_ms is None:
            return 2 * self.eviction_time_threshold_ms
        return self.continue_caching_after_last_cursor_ms
