"""The disabled cache (``managedLedgerCacheSizeMB=0``): every read goes to storage."""

from __future__ import annotations

from typing import Any

from broker.cache.api import MissingRange


class _Counters:
    __slots__ = ("miss_bytes", "misses")

    def __init__(self) -> None:
        self.misses = 0
        self.miss_bytes = 0


class DisabledEntryCache:
    """Holds nothing; every lookup is a miss. All operations O(1)."""

    __slots__ = ("_counters", "_name")

    def __init__(self, name: str, counters: _Counters) -> None:
        self._name = name
        self._counters = counters

    @property
    def name(self) -> str:
        return self._name

    def insert(self, ledger_id: int, entry_id: int, data: bytes, expected_reads: int) -> bool:
        return False

    def get_range(
        self, ledger_id: int, first: int, last: int, hits: list[tuple[int, bytes]]
    ) -> list[MissingRange]:
        return [(first, last)]

    def record_storage_read(self, entries: int, nbytes: int) -> None:
        self._counters.misses += entries
        self._counters.miss_bytes += nbytes

    def invalidate_all_entries(self, ledger_id: int) -> None:
        pass

    def clear(self) -> None:
        pass


class DisabledEntryCacheManager:
    """Hands out :class:`DisabledEntryCache` instances sharing one set of counters."""

    implementation = "disabled"

    def __init__(self) -> None:
        self._counters = _Counters()
        self._caches: dict[str, DisabledEntryCache] = {}

    def get_entry_cache(self, name: str) -> DisabledEntryCache:
        cache = self._caches.get(name)
        if cache is None:
            cache = self._caches[name] = DisabledEntryCache(name, self._counters)
        return cache

    def remove_entry_cache(self, name: str) -> None:
        self._caches.pop(name, None)

    def stats(self) -> dict[str, Any]:
        return {
            "implementation": self.implementation,
            "maxSizeBytes": 0,
            "sizeBytes": 0,
            "entries": 0,
            "hits": 0,
            "misses": self._counters.misses,
            "hitBytes": 0,
            "missBytes": self._counters.miss_bytes,
            "inserted": 0,
            "evicted": {"ttl": 0, "size": 0, "invalidated": 0},
            "evictionRuns": 0,
            "shadows": {},
        }
