"""PIP-430's removal queue and range cache, on the scenarios of Pulsar's own tests
(RangeCacheRemovalQueueTest, RangeCacheTest, EntryCacheManagerTest) and a few more."""

from __future__ import annotations

import pytest

from broker.cache.config import CacheConfig
from broker.cache.entry import CachedEntry
from broker.cache.pip430 import Pip430EntryCacheManager, RangeEntryCache
from broker.clock import ManualClock
from tests.cache.entries import cached_ids, put, read_one

TTL_MS = 1000


def make(
    max_requeues: int = 5,
    extend_recently_accessed: bool = True,
    max_size: int = 1 << 30,
    watermark: float = 0.9,
) -> tuple[Pip430EntryCacheManager, RangeEntryCache, ManualClock]:
    clock = ManualClock()
    manager = Pip430EntryCacheManager(
        CacheConfig(
            max_size_bytes=max_size,
            eviction_watermark=watermark,
            eviction_time_threshold_ms=TTL_MS,
            extend_ttl_max_times=max_requeues,
            extend_ttl_of_recently_accessed=extend_recently_accessed,
        ),
        clock,
    )
    return manager, manager.get_entry_cache("persistent://t/ns/a"), clock


def three_entries(cache: RangeEntryCache) -> list[CachedEntry]:
    """Pulsar's size-pass fixture: e1 40 B accessed, e2 50 B with 3 expected reads,
    e3 30 B with none, inserted in that order."""
    e1 = put(cache, 1, 1, None, 0, size=40)
    e2 = put(cache, 1, 2, None, 3, size=50)
    e3 = put(cache, 1, 3, None, 0, size=30)
    assert e1 and e2 and e3
    assert read_one(cache, 1, 1) is e1  # accessed
    return [e1, e2, e3]


def test_size_pass_freeing_everything_requeues_once_then_removes_all() -> None:
    manager, cache, _ = make(max_requeues=1)
    three_entries(cache)
    assert manager.evict_entries(120) == 120
    assert cached_ids(cache) == [] and manager.size == 0


def test_size_pass_stops_once_enough_is_freed() -> None:
    manager, cache, _ = make(max_requeues=1)
    e1, e2, _ = three_entries(cache)
    assert manager.evict_entries(20) == 30
    assert cached_ids(cache) == [1, 2]
    assert (e1.requeue_count, e2.requeue_count) == (1, 1)
    assert not e1.accessed, "a requeue clears the accessed flag"


def test_size_pass_keeps_the_entry_with_expected_reads_longest() -> None:
    manager, cache, _ = make(max_requeues=5)
    three_entries(cache)
    assert manager.evict_entries(35) == 70
    assert cached_ids(cache) == [2]
    assert manager.counters.evicted_size == 2


def test_timestamp_pass_requeues_expected_reads_up_to_the_limit_then_removes() -> None:
    manager, cache, clock = make(max_requeues=1, extend_recently_accessed=False)
    entry = put(cache, 1, 0, b"payload", 2)
    assert entry is not None
    clock.advance_ms(TTL_MS + 1)
    assert manager.evict_expired() == 0
    assert entry.requeue_count == 1 and cached_ids(cache) == [0]
    clock.advance_ms(TTL_MS / 2)
    assert manager.evict_expired() == 0, "the requeue gave it a fresh TTL"
    clock.advance_ms(TTL_MS)
    assert manager.evict_expired() == 1
    assert cached_ids(cache) == [] and manager.counters.evicted_ttl == 1


def test_timestamp_pass_extends_recently_accessed_entries_like_an_lru() -> None:
    manager, cache, clock = make(max_requeues=0, extend_recently_accessed=True)
    entry = put(cache, 1, 0, b"x", 0)
    assert entry is not None and read_one(cache, 1, 0) is entry
    clock.advance_ms(TTL_MS + 1)
    assert manager.evict_expired() == 0
    assert not entry.accessed and entry.requeue_count == 1
    clock.advance_ms(TTL_MS + 1)
    assert manager.evict_expired() == 1


def test_recently_accessed_entries_are_not_extended_by_default_as_in_pulsar_5() -> None:
    assert CacheConfig().extend_ttl_of_recently_accessed is False
    clock = ManualClock()
    manager = Pip430EntryCacheManager(CacheConfig(eviction_time_threshold_ms=TTL_MS), clock)
    cache = manager.get_entry_cache("t")
    put(cache, 1, 0, b"x", 0)
    read_one(cache, 1, 0)
    clock.advance_ms(TTL_MS + 1)
    assert manager.evict_expired() == 1


def test_timestamp_pass_stops_at_the_first_unexpired_entry() -> None:
    # RangeCacheTest: "1", "22", "333" older than the cutoff, "4444" newer
    manager, cache, clock = make()
    for entry_id, payload in enumerate([b"1", b"22", b"333"]):
        put(cache, 1, entry_id, payload, 0)
    clock.advance_ms(TTL_MS + 1)
    put(cache, 1, 3, b"4444", 0)
    assert manager.evict_expired() == 3
    assert manager.size == 4 and cached_ids(cache) == [3]


def test_entries_removed_elsewhere_are_skipped_by_the_passes() -> None:
    manager, cache, clock = make()
    for entry_id in range(5):
        put(cache, 1, entry_id, b"ab", 0)
    assert cache.invalidate_entries(1, 3) == 3
    assert manager.counters.evicted_invalidated == 3
    assert read_one(cache, 1, 0) is None and read_one(cache, 1, 2) is None
    clock.advance_ms(TTL_MS + 1)
    assert manager.evict_expired() == 2, "only the two still cached are counted"
    assert len(manager.queue) == 0 and manager.size == 0


def test_a_second_insert_keeps_the_first_and_adds_its_expected_reads() -> None:
    # EntryCacheManagerTest.doubleInsert: max 10 B, watermark 0.8
    manager, cache, _ = make(max_size=10, watermark=0.8)
    put(cache, 1, 1, b"abcd", 1)
    first = put(cache, 1, 0, b"xyz", 2)
    assert manager.size == 7
    again = put(cache, 1, 0, b"other", 3)
    assert again is first and first is not None
    assert first.data == b"xyz" and first.expected_reads == 5
    assert manager.size == 7 and manager.counters.inserted == 2


def test_size_pass_triggers_above_98_percent_and_frees_to_the_watermark() -> None:
    manager, cache, _ = make(max_size=1000, watermark=0.5, max_requeues=0)
    for entry_id in range(98):
        put(cache, 1, entry_id, b"0123456789", 0)
    assert manager.size == 980 and not manager.needs_eviction()
    assert manager.evict_to_watermark() == 0
    put(cache, 1, 98, b"0123456789", 0)
    assert manager.needs_eviction()
    freed = manager.evict_to_watermark()
    assert manager.size <= 500 and freed == 990 - manager.size
    assert cached_ids(cache)[0] == 49, "the oldest entries went first"


def test_get_range_returns_hits_and_the_contiguous_missing_ranges() -> None:
    manager, cache, _ = make()
    for entry_id in (2, 3, 7, 9):
        put(cache, 5, entry_id, b"e%d" % entry_id, 0)
    hits: list[CachedEntry] = []
    missing = cache.get_range(5, 0, 10, hits)
    assert [h.entry_id for h in hits] == [2, 3, 7, 9]
    assert [h.data for h in hits] == [b"e2", b"e3", b"e7", b"e9"]
    assert missing == [(0, 1), (4, 6), (8, 8), (10, 10)]
    assert all(h.accessed for h in hits)
    assert (manager.counters.hits, manager.counters.hit_bytes) == (4, 8)
    assert cache.get_range(6, 0, 3, []) == [(0, 3)]


def test_disabled_at_size_zero() -> None:
    manager, cache, _ = make(max_size=0)
    assert put(cache, 1, 0, b"x", 1) is None
    assert cache.get_range(1, 0, 0, []) == [(0, 0)]
    assert manager.size == 0 and not manager.needs_eviction()


@pytest.mark.parametrize("copy", [True, False])
def test_copy_mode_owns_payloads_and_view_mode_keeps_the_view(copy: bool) -> None:
    clock = ManualClock()
    manager = Pip430EntryCacheManager(CacheConfig(copy_entries=copy), clock)
    cache = manager.get_entry_cache("t")
    buffer = bytearray(b"0123456789")
    entry = put(cache, 1, 0, memoryview(buffer)[2:5], 1)
    assert entry is not None and entry.size == 3
    buffer[2:5] = b"XYZ"
    assert bytes(entry.data or b"") == (b"234" if copy else b"XYZ")
    assert isinstance(entry.data, bytes) == copy


def test_expected_reads_count_down_on_reads_and_up_on_replays() -> None:
    manager, cache, _ = make(max_requeues=5)
    entry = put(cache, 1, 0, b"x", 2)
    assert entry is not None
    cache.mark_read(1, 0)
    cache.add_expected_read(1, 0)
    cache.mark_read(1, 0)
    cache.mark_read(1, 0)
    assert entry.expected_reads == 0
    assert manager.evict_entries(1) == 1, "no expected reads left: removed, not requeued"


def test_expected_read_counts_are_ignored_when_the_strategy_is_off() -> None:
    clock = ManualClock()
    manager = Pip430EntryCacheManager(CacheConfig(eviction_by_expected_read_count=False), clock)
    cache = manager.get_entry_cache("t")
    entry = put(cache, 1, 0, b"x", 5)
    assert entry is not None and entry.expected_reads == 0
    assert manager.evict_entries(1) == 1


@pytest.mark.parametrize(
    ("expected_reads", "accessed", "extend", "requeues"),
    [
        (0, False, True, 0),  # nothing keeps it
        (1, False, True, 2),  # one read left: kept up to the 2 requeues allowed
        (2, False, True, 2),
        (0, True, True, 1),  # accessed: one more TTL, the flag cleared with it
        (0, True, False, 0),  # ... unless extending accessed entries is off
        (1, True, True, 2),  # accessed first, then its expected read
    ],
)
def test_the_size_pass_keeps_an_entry_as_long_as_should_requeue_says(
    expected_reads: int, accessed: bool, extend: bool, requeues: int
) -> None:
    manager, cache, _ = make(max_requeues=2, extend_recently_accessed=extend)
    entry = put(cache, 1, 1, None, expected_reads, size=10)
    assert entry is not None
    if accessed:
        assert read_one(cache, 1, 1) is entry
    verdicts = []
    while manager.queue.should_requeue(entry) and len(verdicts) < 5:  # the predicate's
        verdicts.append(entry.requeue_count)  # answers, as the loop should see them
        entry.accessed = False
        entry.requeue_count += 1
    entry.accessed, entry.requeue_count = accessed, 0
    assert len(verdicts) == requeues
    assert manager.evict_entries(1 << 30) == 10  # free everything: it goes in the end
    assert entry.requeue_count == requeues and cached_ids(cache) == []


def test_the_timestamp_pass_gives_an_entry_with_reads_left_another_ttl() -> None:
    manager, cache, clock = make(max_requeues=2)
    kept = put(cache, 1, 1, None, 1, size=10)
    dropped = put(cache, 1, 2, None, 0, size=10)
    assert kept is not None and dropped is not None
    clock.advance_ms(TTL_MS + 1)
    assert manager.evict_expired() == 1
    assert cached_ids(cache) == [1] and kept.requeue_count == 1
    assert kept.timestamp_ns == clock.monotonic_ns()  # a new TTL from now
