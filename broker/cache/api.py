"""The cache seams, named as Pulsar names them: one ``EntryCache`` per managed ledger,
one ``EntryCacheManager`` per broker."""

from __future__ import annotations

from typing import Any, Protocol

#: An inclusive range of entry ids of one ledger that the cache did not hold.
MissingRange = tuple[int, int]


class EntryCache(Protocol):
    """The entries of one managed ledger that the broker holds in memory."""

    @property
    def name(self) -> str: ...

    def insert(self, ledger_id: int, entry_id: int, data: bytes, expected_reads: int) -> bool:
        """Cache an entry; False when it was not inserted (duplicate, disabled, full)."""
        ...

    def get_range(
        self, ledger_id: int, first: int, last: int, hits: list[tuple[int, bytes]]
    ) -> list[MissingRange]:
        """Append cached entries of ``first..last`` (inclusive) to ``hits`` in order and
        return the contiguous missing sub-ranges, in order."""
        ...

    def record_storage_read(self, entries: int, nbytes: int) -> None:
        """Account entries the ledger had to read from storage (cache misses)."""
        ...

    def invalidate_all_entries(self, ledger_id: int) -> None:
        """Drop every entry of ``ledger_id`` (the ledger was trimmed or deleted)."""
        ...

    def clear(self) -> None:
        """Drop every entry of this managed ledger (topic unloaded or deleted)."""
        ...


class EntryCacheManager(Protocol):
    """Broker-wide owner of the per-ledger caches and of the global size limit."""

    def get_entry_cache(self, name: str) -> EntryCache: ...

    def remove_entry_cache(self, name: str) -> None: ...

    def stats(self) -> dict[str, Any]:
        """Counters since start, in the shape of ``GET /admin/v2/broker-stats/cache``."""
        ...
