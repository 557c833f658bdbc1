"""Small helpers over the per-ledger cache API for the design tests."""

from __future__ import annotations

from broker.cache.api import EntryCache
from broker.cache.entry import CachedEntry


def put(
    cache: EntryCache,
    ledger: int,
    entry: int,
    data: bytes | memoryview | None = None,
    reads: int = 0,
    size: int = 0,
) -> CachedEntry | None:
    """Insert one entry on the write path; what the cache holds there afterwards."""
    payloads = None if data is None else [data]
    cache.insert(ledger, entry, payloads, [len(data) if data is not None else size], reads)
    return held(cache, ledger, entry)


def held(cache: EntryCache, ledger: int, entry: int) -> CachedEntry | None:
    """What the cache holds at a position, without counting a read."""
    for cached in cache.cached_entries():
        if (cached.ledger_id, cached.entry_id) == (ledger, entry):
            return cached
    return None


def read_one(cache: EntryCache, ledger: int, entry: int) -> CachedEntry | None:
    """A one-entry range read: the hit (counted, marked accessed), or None."""
    hits: list[CachedEntry] = []
    cache.get_range(ledger, entry, entry, hits)
    return hits[0] if hits else None


def cached_ids(cache: EntryCache) -> list[int]:
    return [e.entry_id for e in cache.cached_entries()]
