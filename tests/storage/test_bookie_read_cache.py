"""The bookie read cache: off by default; a miss reads ahead the following entries of the
ledger; a rotation clears the oldest segment; answers always equal the entry log's."""

from __future__ import annotations

import pathlib

from storage_stub.bookie import open_storage
from storage_stub.bookie.read_cache import ReadCache
from storage_stub.config import StorageConfig


async def test_off_by_default(tmp_path: pathlib.Path) -> None:
    storage = await open_storage(StorageConfig(syncMode="none"), tmp_path)
    try:
        assert storage.read_cache is None
        assert storage.stats()["readCacheHits"] == 0
    finally:
        await storage.close()


async def test_a_miss_reads_ahead_so_the_following_reads_hit(tmp_path: pathlib.Path) -> None:
    config = StorageConfig(
        syncMode="none", dbStorage_readAheadCacheMaxSizeMb=1, dbStorage_readAheadCacheBatchSize=20
    )
    storage = await open_storage(config, tmp_path)
    try:
        bookie = storage.bookie
        ledger = await bookie.create_ledger()
        payloads = [b"entry-%03d" % i for i in range(50)]
        await bookie.add_entries(ledger, payloads)
        assert await bookie.read_entries(ledger, 0, 4) == payloads[:5]
        cache = storage.read_cache
        assert cache is not None
        assert (cache.misses, cache.read_ahead) == (5, 20)
        # entries 5..24 came with the read-ahead: served without touching the log
        assert await bookie.read_entries(ledger, 5, 24) == payloads[5:25]
        assert cache.hits == 20
        # past the read-ahead: a miss again, and the rest of the ledger read ahead
        assert await bookie.read_entries(ledger, 25, 30) == payloads[25:31]
        assert await bookie.read_entries(ledger, 31, 49) == payloads[31:]
        stats = storage.stats()
        assert stats["readCacheHits"] == cache.hits and stats["readAheadEntries"] == 39
    finally:
        await storage.close()


def test_rotation_clears_the_oldest_segment_and_reads_probe_newest_first() -> None:
    cache = ReadCache(4 * 100)  # 2 segments of 200 bytes
    for entry_id in range(4):  # fills segment 0 (4 x 50 bytes)
        cache.put(1, entry_id, bytes([entry_id]) * 50)
    for entry_id in range(4, 8):  # fills segment 1
        cache.put(1, entry_id, bytes([entry_id]) * 50)
    assert cache.get(1, 0) == bytes([0]) * 50
    cache.put(1, 8, b"x" * 50)  # rotates: segment 0 cleared
    assert cache.get(1, 0) is None and cache.get(1, 3) is None
    assert cache.get(1, 5) == bytes([5]) * 50 and cache.get(1, 8) == b"x" * 50
    assert cache.entries() == 5
    cache.put(1, 9, b"y" * 500)  # larger than a segment: not cached
    assert cache.get(1, 9) is None
