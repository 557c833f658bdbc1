"""The cache seams, named as Pulsar names them: one ``EntryCache`` per managed ledger,
one ``EntryCacheManager`` per broker."""

from __future__ import annotations

from typing import Any, Protocol

from broker.cache.entry import CachedEntry

#: An inclusive range of entry ids of one ledger that the cache did not hold.
MissingRange = tuple[int, int]


class EntryCache(Protocol):
    """The entries of one managed ledger that the broker holds in memory."""

    @property
    def name(self) -> str: ...

    def insert(
        self,
        ledger_id: int,
        entry_id: int,
        data: bytes | memoryview | None,
        expected_reads: int,
        size: int = -1,
    ) -> CachedEntry | None:
        """Cache an entry and return what the cache holds for the position (the first
        insert wins; a repeat adds its expected reads); None if not cached."""
        ...

    def insert_from_read(
        self,
        ledger_id: int,
        entry_id: int,
        data: bytes | memoryview | None,
        expected_reads: int,
        size: int = -1,
    ) -> CachedEntry | None:
        """Offered every entry the ledger read from storage: cache it if this design caches
        reads and ``expected_reads`` (the ledger policy's verdict) is above zero."""
        ...

    def get_range(
        self, ledger_id: int, first: int, last: int, hits: list[CachedEntry]
    ) -> list[MissingRange]:
        """Append cached entries of ``first..last`` (inclusive) to ``hits`` in order and
        return the contiguous missing sub-ranges, in order."""
        ...

    def record_storage_read(self, entries: int, nbytes: int) -> None:
        """Account entries the ledger had to read from storage (cache misses)."""
        ...

    def add_expected_read(self, ledger_id: int, entry_id: int) -> None:
        """One more read is expected for this position, if cached (replay queue)."""
        ...

    def invalidate_entries(self, ledger_id: int, entry_id: int) -> int:
        """Drop every entry before ``(ledger_id, entry_id)``; returns how many."""
        ...

    def invalidate_all_entries(self, ledger_id: int) -> int:
        """Drop every entry of ``ledger_id`` (the ledger was trimmed or deleted)."""
        ...

    def clear(self) -> None:
        """Drop every entry of this managed ledger (topic unloaded or deleted)."""
        ...


class EntryCacheManager(Protocol):
    """Broker-wide owner of the per-ledger caches and of the global size limit."""

    implementation: str

    def get_entry_cache(self, name: str) -> EntryCache: ...

    def remove_entry_cache(self, name: str) -> None: ...

    def needs_eviction(self) -> bool:
        """True when the size pass has work (above 0.98 x max)."""
        ...

    def do_cache_eviction(self) -> None:
        """One round of the broker's eviction timer."""
        ...

    def stats(self) -> dict[str, Any]:
        """Counters since start, in the shape of ``GET /admin/v2/broker-stats/cache``."""
        ...
