"""PIP-174's ring: rotation clears the oldest segment, reads probe newest first, range
reads are all or nothing, only the write path inserts, copy and reference modes."""

from __future__ import annotations

import pytest

from broker.cache.config import CacheConfig
from broker.cache.entry import CachedEntry
from broker.cache.segmented import GIB, SegmentedEntryCacheManager
from broker.clock import ManualClock


def make(size: int = 300, segments: int = 3, copy: bool = False) -> SegmentedEntryCacheManager:
    config = CacheConfig(max_size_bytes=size, copy_entries=copy)
    return SegmentedEntryCacheManager(config, ManualClock(), segments=segments)


def test_default_segment_count_follows_the_proposal() -> None:
    assert (
        len(
            SegmentedEntryCacheManager(CacheConfig(max_size_bytes=64 << 20), ManualClock()).segments
        )
        == 2
    )
    manager = SegmentedEntryCacheManager(CacheConfig(max_size_bytes=5 * GIB), ManualClock())
    assert len(manager.segments) == 5 and manager.segment_size == GIB


@pytest.mark.parametrize("copy", [True, False])
def test_a_full_ring_rotates_and_clears_the_oldest_segment(copy: bool) -> None:
    manager = make(copy=copy)  # 3 segments of 100 bytes
    cache = manager.get_entry_cache("t")
    for entry_id in range(30):  # 10 entries of 10 bytes fill a segment
        cache.insert(1, entry_id, b"%010d" % entry_id, 0)
    assert manager.size == 300 and manager.counters.evicted_size == 0
    cache.insert(1, 30, b"0123456789", 0)
    assert manager.counters.evicted_size == 10, "segment 0 (entries 0-9) was cleared"
    assert cache.get(1, 5) is None
    hit = cache.get(1, 15)
    assert hit is not None and hit.data == b"%010d" % 15
    assert manager.size == 210


def test_copy_mode_serves_copies_and_reference_mode_the_inserted_object() -> None:
    payload = b"abcdefghij"
    for copy in (True, False):
        manager = make(copy=copy)
        cache = manager.get_entry_cache("t")
        cache.insert(1, 0, payload, 0)
        hit = cache.get(1, 0)
        assert hit is not None and hit.data == payload
        assert (hit.data is payload) == (not copy)
        if copy:
            segment = manager.segments[0]
            assert segment.buffer is not None and bytes(segment.buffer[:10]) == payload


def test_range_reads_are_all_or_nothing_across_segments() -> None:
    manager = make()
    cache = manager.get_entry_cache("t")
    for entry_id in range(15):  # spans segments 0 and 1
        cache.insert(2, entry_id, b"0123456789", 0)
    hits: list[CachedEntry] = []
    assert cache.get_range(2, 5, 14, hits) == [] and len(hits) == 10
    hits.clear()
    assert cache.get_range(2, 10, 15, hits) == [(10, 15)] and hits == []


def test_only_the_write_path_inserts() -> None:
    manager = make()
    cache = manager.get_entry_cache("t")
    assert cache.insert_from_read(1, 0, b"read", 3) is None
    assert manager.size == 0


def test_an_entry_larger_than_a_segment_is_not_cached() -> None:
    manager = make()
    cache = manager.get_entry_cache("t")
    assert cache.insert(1, 0, b"x" * 101, 0) is None
    assert manager.size == 0


def test_invalidated_positions_are_never_served_though_space_waits_for_rotation() -> None:
    manager = make()
    cache = manager.get_entry_cache("t")
    for entry_id in range(5):
        cache.insert(1, entry_id, b"0123456789", 0)
    cache.insert(2, 0, b"0123456789", 0)
    assert cache.invalidate_entries(2, 0) == 5
    assert cache.get(1, 4) is None and cache.get(2, 0) is not None
    assert manager.size == 10 and manager.segments[0].used == 60
