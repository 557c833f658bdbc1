"""What the designs share: the per-ledger cache's read-path and accounting plumbing, and
the manager's registry of per-ledger caches."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from broker.cache.config import CacheConfig
from broker.cache.entry import CachedEntry
from broker.cache.stats import CacheCounters
from broker.clock import Clock


class LedgerCacheBase:
    """The parts of a per-ledger cache every design answers the same way. Subclasses
    provide ``insert``; ``_counters`` is the manager's."""

    __slots__ = ()

    _name: str

    @property
    def _counters(self) -> CacheCounters:
        raise NotImplementedError

    @property
    def name(self) -> str:
        return self._name

    def insert(
        self,
        ledger_id: int,
        entry_id: int,
        data: bytes | memoryview | None,
        expected_reads: int,
        size: int = -1,
    ) -> CachedEntry | None:
        raise NotImplementedError

    def insert_from_read(
        self,
        ledger_id: int,
        entry_id: int,
        data: bytes | memoryview | None,
        expected_reads: int,
        size: int = -1,
    ) -> CachedEntry | None:
        """Cache an entry the ledger read from storage if a read of it is still expected
        (``expected_reads`` > 0; the ledger's policy decides), as a write-path insert."""
        if expected_reads <= 0:
            return None
        return self.insert(ledger_id, entry_id, data, expected_reads, size)

    def record_storage_read(self, entries: int, nbytes: int) -> None:
        counters = self._counters
        counters.misses += entries
        counters.miss_bytes += nbytes


def owned_payload(data: bytes | memoryview, copy: bool) -> bytes | memoryview:
    """``managedLedgerCacheCopyEntries``: an owned copy of a view (exact memory), or the
    object storage handed over (no copy; a view may pin a larger buffer)."""
    return bytes(data) if copy and not isinstance(data, bytes) else data


C = TypeVar("C")


class ManagerBase(Generic[C]):
    """Per-ledger caches by managed-ledger name, the counters, and the stats shape."""

    implementation = ""

    def __init__(self, config: CacheConfig, clock: Clock, new_cache: Callable[[str], C]) -> None:
        self.config = config
        self.clock = clock
        self.counters = CacheCounters()
        #: called with each entry evicted (by "ttl" or "size"), for the access trace;
        #: None (the default) costs one check per eviction
        self.evict_listener: Callable[[CachedEntry, str], None] | None = None
        self.disabled = config.max_size_bytes <= 0
        self.copy_entries = config.copy_entries
        self._new_cache = new_cache
        self._caches: dict[str, C] = {}

    def get_entry_cache(self, name: str) -> C:
        cache = self._caches.get(name)
        if cache is None:
            cache = self._caches[name] = self._new_cache(name)
        return cache

    def remove_entry_cache(self, name: str) -> None:
        cache = self._caches.pop(name, None)
        if cache is not None:
            cache.clear()  # type: ignore[attr-defined]

    @property
    def size(self) -> int:
        return self.counters.size

    def stats(self) -> dict[str, Any]:
        result = self.counters.snapshot(self.implementation, self.config.max_size_bytes)
        result["shadows"] = {}
        return result
