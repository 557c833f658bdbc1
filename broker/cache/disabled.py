"""The disabled cache: every read goes to storage. Used for ``managedLedgerCacheSizeMB=0``
and as the baseline a comparison starts from."""

from __future__ import annotations

from typing import Any

from broker.cache.api import MissingRange
from broker.cache.base import LedgerCacheBase
from broker.cache.entry import CachedEntry
from broker.cache.stats import CacheCounters


class DisabledEntryCache(LedgerCacheBase):
    """Holds nothing; every lookup is a miss. All operations O(1)."""

    __slots__ = ("_name", "_shared")

    def __init__(self, name: str, counters: CacheCounters) -> None:
        self._name = name
        self._shared = counters

    @property
    def _counters(self) -> CacheCounters:
        return self._shared

    def insert(
        self,
        ledger_id: int,
        entry_id: int,
        data: bytes | memoryview | None,
        expected_reads: int,
        size: int = -1,
    ) -> CachedEntry | None:
        return None

    def get_range(
        self, ledger_id: int, first: int, last: int, hits: list[CachedEntry]
    ) -> list[MissingRange]:
        return [(first, last)]

    def add_expected_read(self, ledger_id: int, entry_id: int) -> None:
        pass

    def invalidate_entries(self, ledger_id: int, entry_id: int) -> int:
        return 0

    def invalidate_all_entries(self, ledger_id: int) -> int:
        return 0

    def clear(self) -> None:
        pass


class DisabledEntryCacheManager:
    """Hands out :class:`DisabledEntryCache` instances sharing one set of counters."""

    implementation = "disabled"

    def __init__(self) -> None:
        self.counters = CacheCounters()
        self._caches: dict[str, DisabledEntryCache] = {}

    def get_entry_cache(self, name: str) -> DisabledEntryCache:
        cache = self._caches.get(name)
        if cache is None:
            cache = self._caches[name] = DisabledEntryCache(name, self.counters)
        return cache

    def remove_entry_cache(self, name: str) -> None:
        self._caches.pop(name, None)

    def needs_eviction(self) -> bool:
        return False

    def do_cache_eviction(self) -> None:
        pass

    def stats(self) -> dict[str, Any]:
        result = self.counters.snapshot(self.implementation, 0)
        result["shadows"] = {}
        return result
