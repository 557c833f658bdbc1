"""Shadow caches count the reads the live cache counts, even when readers overlap."""

from __future__ import annotations

from broker.cache import create_entry_cache_manager
from broker.cache.config import CacheConfig
from broker.cache.entry import CachedEntry
from broker.clock import ManualClock


def test_two_readers_missing_the_same_entry_are_two_misses_in_every_shadow() -> None:
    """Two cursors ask for an entry nobody holds; the ledger reads it once from storage
    (its reads are deduplicated) and hands it to both. Live counts two misses; so must
    each shadow, or the designs would be compared on different reads."""
    manager = create_entry_cache_manager(
        "pip430", CacheConfig(max_size_bytes=1 << 20), ManualClock(), shadows=["legacy"]
    )
    cache = manager.get_entry_cache("persistent://t/ns/a")
    for _ in range(2):  # both readers look before the storage read completes
        hits: list[CachedEntry] = []
        assert cache.get_range(1, 0, 0, hits) == [(0, 0)]
    for _ in range(2):  # the shared storage read completes: each reader offers the entry
        cache.insert_from_read(1, 0, b"x" * 100, 1)
        cache.record_storage_read(1, 100)
    stats = manager.stats()
    assert stats["misses"] == 2
    assert stats["shadows"]["legacy"]["misses"] == 2
    assert stats["shadows"]["legacy"]["hits"] + stats["shadows"]["legacy"]["misses"] == (
        stats["hits"] + stats["misses"]
    )
