"""Shadow caches: other designs run beside the live cache, size only, fed the same events.

Every insert, read, storage read, replay and invalidation that reaches the live cache
reaches each shadow too, with sizes instead of payloads. A shadow answers with its own
hits and misses: an entry it lacks is its miss and its storage read, after which it
caches the entry as its design would, whatever the live cache held. So on the very
traffic the broker served, the shadows show what each other design would have hit.

Two simplifications, both stated where users read the numbers: a shadow counts a read of
an entry when the entry is read (the live cache when it is handed to a consumer, which
follows at once); and ledger-level decisions stay the live design's (which storage reads
are offered with expected reads; legacy's invalidation up to the slowest reader).
"""

from __future__ import annotations

from typing import Any

from broker.cache.api import EntryCache, EntryCacheManager, MissingRange
from broker.cache.entry import CachedEntry


class ShadowedEntryCache:
    """The live cache of one managed ledger plus its shadows. Each operation costs its
    live cost plus the same operation on every shadow."""

    __slots__ = ("_live", "_pending", "_shadows")

    def __init__(self, live: EntryCache, shadows: list[EntryCache]) -> None:
        self._live = live
        self._shadows = shadows
        #: per shadow: positions it missed that the ledger is reading from storage now,
        #: with how many readers are waiting for each (each reader's read is a miss)
        self._pending: list[dict[tuple[int, int], int]] = [{} for _ in shadows]

    @property
    def name(self) -> str:
        return self._live.name

    def insert(
        self,
        ledger_id: int,
        entry_id: int,
        data: bytes | memoryview | None,
        expected_reads: int,
        size: int = -1,
    ) -> CachedEntry | None:
        if data is not None:
            size = len(data)
        for shadow in self._shadows:
            shadow.insert(ledger_id, entry_id, None, expected_reads, size)
        return self._live.insert(ledger_id, entry_id, data, expected_reads, size)

    def insert_from_read(
        self,
        ledger_id: int,
        entry_id: int,
        data: bytes | memoryview | None,
        expected_reads: int,
        size: int = -1,
    ) -> CachedEntry | None:
        if data is not None:
            size = len(data)
        key = (ledger_id, entry_id)
        for shadow, pending in zip(self._shadows, self._pending, strict=True):
            waiting = pending.get(key, 0)
            if waiting:
                if waiting == 1:
                    del pending[key]
                else:
                    pending[key] = waiting - 1
                shadow.record_storage_read(1, size)
                cached = shadow.insert_from_read(ledger_id, entry_id, None, expected_reads, size)
                if cached is not None:
                    cached.mark_read()
        return self._live.insert_from_read(ledger_id, entry_id, data, expected_reads, size)

    def get_range(
        self, ledger_id: int, first: int, last: int, hits: list[CachedEntry]
    ) -> list[MissingRange]:
        start = len(hits)
        missing = self._live.get_range(ledger_id, first, last, hits)
        live_hits = {entry.entry_id: entry for entry in hits[start:]}
        for shadow, pending in zip(self._shadows, self._pending, strict=True):
            shadow_hits: list[CachedEntry] = []
            for miss_first, miss_last in shadow.get_range(ledger_id, first, last, shadow_hits):
                for entry_id in range(miss_first, miss_last + 1):
                    live = live_hits.get(entry_id)
                    if live is None:
                        # settled when the ledger reads it (once per reader, as live)
                        position = (ledger_id, entry_id)
                        pending[position] = pending.get(position, 0) + 1
                        continue
                    # the live cache had it; this design would have read it from storage
                    shadow.record_storage_read(1, live.size)
                    reads = max(live.expected_reads, 0)
                    cached = shadow.insert_from_read(ledger_id, entry_id, None, reads, live.size)
                    if cached is not None:
                        cached.mark_read()
            for entry in shadow_hits:
                entry.mark_read()
        return missing

    def record_storage_read(self, entries: int, nbytes: int) -> None:
        self._live.record_storage_read(entries, nbytes)

    def add_expected_read(self, ledger_id: int, entry_id: int) -> None:
        self._live.add_expected_read(ledger_id, entry_id)
        for shadow in self._shadows:
            shadow.add_expected_read(ledger_id, entry_id)

    def invalidate_entries(self, ledger_id: int, entry_id: int) -> int:
        for shadow in self._shadows:
            shadow.invalidate_entries(ledger_id, entry_id)
        return self._live.invalidate_entries(ledger_id, entry_id)

    def invalidate_all_entries(self, ledger_id: int) -> int:
        for shadow in self._shadows:
            shadow.invalidate_all_entries(ledger_id)
        return self._live.invalidate_all_entries(ledger_id)

    def clear(self) -> None:
        for shadow in self._shadows:
            shadow.clear()
        for pending in self._pending:
            pending.clear()
        self._live.clear()


class ShadowedEntryCacheManager:
    """The live manager plus size-only managers of other designs."""

    def __init__(self, live: EntryCacheManager, shadows: dict[str, EntryCacheManager]) -> None:
        self.live = live
        self.shadows = shadows
        self.implementation = live.implementation
        self._caches: dict[str, ShadowedEntryCache] = {}

    def get_entry_cache(self, name: str) -> ShadowedEntryCache:
        cache = self._caches.get(name)
        if cache is None:
            cache = self._caches[name] = ShadowedEntryCache(
                self.live.get_entry_cache(name),
                [shadow.get_entry_cache(name) for shadow in self.shadows.values()],
            )
        return cache

    def remove_entry_cache(self, name: str) -> None:
        self._caches.pop(name, None)
        self.live.remove_entry_cache(name)
        for shadow in self.shadows.values():
            shadow.remove_entry_cache(name)

    def needs_eviction(self) -> bool:
        return self.live.needs_eviction() or any(s.needs_eviction() for s in self.shadows.values())

    def do_cache_eviction(self) -> None:
        self.live.do_cache_eviction()
        for shadow in self.shadows.values():
            shadow.do_cache_eviction()

    def stats(self) -> dict[str, Any]:
        result = self.live.stats()
        shown = ("hits", "misses", "hitBytes", "missBytes", "sizeBytes", "entries", "evicted")
        result["shadows"] = {
            name: {key: value for key, value in shadow.stats().items() if key in shown}
            for name, shadow in self.shadows.items()
        }
        return result
