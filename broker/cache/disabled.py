"""The disabled cache: every read goes to storage. Used for ``managedLedgerCacheSizeMB=0``
whatever the design, as Pulsar's ``EntryCacheDisabled``, which reads straight from
BookKeeper: concurrent readers do not share storage reads."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from broker.cache.api import QUIET_FOREVER, MissingRange
from broker.cache.entry import CachedEntry
from broker.cache.stats import CacheCounters


class DisabledEntryCache:
    """Holds nothing; every lookup misses. All operations O(1)."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

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
        pass

    def insert_from_read(
        self,
        ledger_id: int,
        entry_id: int,
        data: bytes | memoryview | None,
        size: int,
        expected_reads: int,
    ) -> None:
        pass

    def get_range(
        self, ledger_id: int, first: int, last: int, hits: list[CachedEntry]
    ) -> list[MissingRange]:
        return [(first, last)]

    def mark_read(self, ledger_id: int, entry_id: int) -> None:
        pass

    def add_expected_read(self, ledger_id: int, entry_id: int) -> None:
        pass

    def invalidate_entries(self, ledger_id: int, entry_id: int) -> int:
        return 0

    def invalidate_all_entries(self, ledger_id: int) -> int:
        return 0

    def clear(self) -> None:
        pass

    def cached_entries(self) -> list[CachedEntry]:
        return []


class DisabledEntryCacheManager:
    """Hands out :class:`DisabledEntryCache` instances; counts misses."""

    implementation = "disabled"
    shares_pending_reads = False

    def __init__(self) -> None:
        self.counters = CacheCounters()
        self.evict_listener: Callable[[CachedEntry, str], None] | None = None

    def get_entry_cache(self, name: str) -> DisabledEntryCache:
        return DisabledEntryCache(name)

    def remove_entry_cache(self, name: str) -> None:
        pass

    def after_insert(self) -> None:
        pass

    def do_cache_eviction(self) -> None:
        pass

    def quiet_until_ns(self) -> int | None:
        """Nothing is ever cached: no round acts."""
        return QUIET_FOREVER

    def stats(self) -> dict[str, Any]:
        return self.counters.snapshot(self.implementation, 0)
