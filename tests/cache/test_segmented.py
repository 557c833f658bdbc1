"""PIP-174's ring: rotation clears the oldest segment, reads probe newest first, range
reads are all or nothing, only the write path inserts, copy and reference modes."""

from __future__ import annotations

import pytest

from broker.cache.config import CacheConfig
from broker.cache.entry import CachedEntry
from broker.cache.segmented import GIB, SegmentedEntryCacheManager
from broker.clock import ManualClock
from tests.cache.entries import put, read_one


def make(size: int = 300, segments: int = 3, copy: bool = False) -> SegmentedEntryCacheManager:
    config = CacheConfig(max_size_bytes=size, copy_entries=copy, segments=segments)
    return SegmentedEntryCacheManager(config, ManualClock())


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
        put(cache, 1, entry_id, b"%010d" % entry_id, 0)
    assert manager.size == 300 and manager.counters.evicted_size == 0
    put(cache, 1, 30, b"0123456789", 0)
    assert manager.counters.evicted_size == 10, "segment 0 (entries 0-9) was cleared"
    assert read_one(cache, 1, 5) is None
    hit = read_one(cache, 1, 15)
    assert hit is not None and hit.data == b"%010d" % 15
    assert manager.size == 210


def test_copy_mode_serves_copies_and_reference_mode_the_inserted_object() -> None:
    payload = b"abcdefghij"
    for copy in (True, False):
        manager = make(copy=copy)
        cache = manager.get_entry_cache("t")
        put(cache, 1, 0, payload, 0)
        hit = read_one(cache, 1, 0)
        assert hit is not None and hit.data == payload
        assert (hit.data is payload) == (not copy)
        if copy:
            segment = manager.segments[0]
            assert segment.buffer is not None and bytes(segment.buffer[:10]) == payload


def test_range_reads_are_all_or_nothing_and_walk_segments_newest_to_oldest_once() -> None:
    """The PR's getRange: from the newest segment back, each segment scanned from the id
    reached while it has it; never back to a newer segment. A range whose older part is
    in an older segment is not found whole, so it is read from storage whole."""
    manager = make()
    cache = manager.get_entry_cache("t")
    for entry_id in range(15):  # entries 0-9 in segment 0, 10-14 in segment 1 (current)
        put(cache, 2, entry_id, b"0123456789", 0)
    hits: list[CachedEntry] = []
    assert cache.get_range(2, 10, 14, hits) == [] and len(hits) == 5, "one segment"
    hits.clear()
    assert cache.get_range(2, 2, 7, hits) == [] and len(hits) == 6, "an older segment alone"
    hits.clear()
    # every entry is in the ring, but 5-9 sit in the older segment: the walk finds 10-14
    # absent from segment 1 at 5, reads 5-9 in segment 0 and never returns to segment 1
    assert cache.get_range(2, 5, 14, hits) == [(5, 14)] and hits == []
    assert all(read_one(cache, 2, entry_id) is not None for entry_id in range(5, 15))
    hits.clear()
    assert cache.get_range(2, 10, 15, hits) == [(10, 15)] and hits == []


def test_a_range_whose_only_absent_id_is_its_last_stops_there_as_in_the_pr() -> None:
    """The PR's loop ends once the walk stops at the range's last id, without looking
    for it in older segments: a quirk, kept. Segment 1 holds entries 10-19 and, put again
    there, entry 5; segment 0 holds 0-9. Reading 5-6 finds 5 in segment 1, stops at 6
    (its last id) and reads the range from storage, though 6 is in segment 0. A
    one-entry read is the PR's ``get``: every segment is probed."""
    manager = make()
    cache = manager.get_entry_cache("t")
    for entry_id in range(15):
        put(cache, 3, entry_id, b"0123456789", 0)
    assert manager.current == 1
    cache.insert(3, 5, [b"0123456789"], [10], 0)  # not yet in segment 1: written there
    assert (3, 5) in manager.segments[1].index and (3, 6) not in manager.segments[1].index
    hits: list[CachedEntry] = []
    assert cache.get_range(3, 5, 6, hits) == [(5, 6)] and hits == []
    assert cache.get_range(3, 6, 6, hits) == [] and len(hits) == 1, "get probes them all"
    hits.clear()
    assert cache.get_range(3, 6, 7, hits) == [] and len(hits) == 2, "both in segment 0"


def test_only_the_write_path_inserts() -> None:
    manager = make()
    cache = manager.get_entry_cache("t")
    cache.insert_from_read(1, 0, b"read", 4, 3)
    assert manager.size == 0 and cache.cached_entries() == []


def test_an_entry_larger_than_a_segment_is_not_cached() -> None:
    manager = make()
    cache = manager.get_entry_cache("t")
    assert put(cache, 1, 0, b"x" * 101, 0) is None
    assert manager.size == 0


def test_invalidation_and_unload_leave_the_ring_as_it_is_as_in_the_pr() -> None:
    """PIP-174's PR (apache/pulsar #15955): invalidateEntries, invalidateAllEntries and
    clear are no-ops and removeEntryCache leaves the segments alone; only rotation
    removes entries. Ledger ids are never reused, so nothing stale is served."""
    manager = make()
    cache = manager.get_entry_cache("t")
    for entry_id in range(5):
        put(cache, 1, entry_id, b"0123456789", 0)
    put(cache, 2, 0, b"0123456789", 0)
    assert cache.invalidate_entries(2, 0) == 0
    assert cache.invalidate_all_entries(1) == 0
    cache.clear()
    assert read_one(cache, 1, 4) is not None and read_one(cache, 2, 0) is not None
    manager.remove_entry_cache("t")
    reloaded = manager.get_entry_cache("t")
    assert read_one(reloaded, 1, 0) is not None, "a topic loaded again finds its entries"
    assert manager.size == 60 and manager.counters.evicted_invalidated == 0
