"""The legacy per-ledger design on Pulsar's scenarios: the default eviction policy's
proportional selection, the timestamp loop's early stop, refusal at max, all-or-nothing
range reads, duplicate inserts."""

from __future__ import annotations

from broker.cache.config import CacheConfig
from broker.cache.entry import CachedEntry
from broker.cache.legacy import LegacyEntryCacheManager, LegacyRangeEntryCache
from broker.clock import ManualClock
from tests.cache.entries import put


def make(
    max_size: int = 1 << 30, watermark: float = 0.9
) -> tuple[LegacyEntryCacheManager, ManualClock]:
    clock = ManualClock()
    config = CacheConfig(max_size_bytes=max_size, eviction_watermark=watermark)
    return LegacyEntryCacheManager(config, clock), clock


def fill(cache: LegacyRangeEntryCache, size: int, entry_size: int = 10) -> None:
    for entry_id in range(size // entry_size):
        put(cache, 1, entry_id, None, 0, size=entry_size)


def test_default_policy_takes_the_largest_caches_holding_half_and_frees_proportionally() -> None:
    manager, _ = make()
    sizes = {"a": 600, "b": 500, "c": 400, "d": 300, "e": 200}
    caches = {name: manager.get_entry_cache(name) for name in sizes}
    for name, size in sizes.items():
        fill(caches[name], size)
    # a + b = 1100 >= half of 2000: only they give up entries, 6:5, lowest first
    freed = manager.evict_entries(550)
    assert {name: cache.size for name, cache in caches.items()} == {
        "a": 300,
        "b": 250,
        "c": 400,
        "d": 300,
        "e": 200,
    }
    assert freed == 550
    assert caches["a"].cached_entries()[0].entry_id == 30, "lowest positions went first"


def test_one_dominant_cache_pays_for_everyone() -> None:
    manager, _ = make()
    big, small = manager.get_entry_cache("big"), manager.get_entry_cache("small")
    fill(big, 1000)
    fill(small, 100)
    manager.evict_entries(100)
    assert (big.size, small.size) == (900, 100)


def test_timestamp_loop_stops_at_the_first_newer_entry_even_if_older_ones_follow() -> None:
    manager, clock = make()
    cache = manager.get_entry_cache("t")
    put(cache, 1, 0, b"old", 0)
    clock.advance_ms(500)
    put(cache, 1, 1, b"newer", 0)
    clock.advance_ms(600)
    # a replayed entry inserted late, at a lower position than what is cached
    put(cache, 0, 5, b"late", 0)
    clock.advance_ms(500)
    # cutoff = now - 1000 ms: "old" (1600 ms) and "newer" (1100 ms) are expired, "late"
    # (500 ms) is not, and it sits at the lowest position: the loop stops right there
    assert manager.evict_expired() == 0
    assert [e.data for e in cache.cached_entries()] == [b"late", b"old", b"newer"]


def test_inserts_are_refused_once_the_cache_is_full() -> None:
    manager, _ = make(max_size=100)
    cache = manager.get_entry_cache("t")
    for entry_id in range(10):
        assert put(cache, 1, entry_id, b"0123456789", 0) is not None
    assert put(cache, 1, 10, b"x", 0) is None
    assert manager.size == 100 and manager.needs_eviction()


def test_range_reads_are_all_or_nothing() -> None:
    manager, _ = make()
    cache = manager.get_entry_cache("t")
    for entry_id in (0, 1, 2, 4):
        put(cache, 3, entry_id, b"e", 0)
    hits: list[CachedEntry] = []
    assert cache.get_range(3, 0, 4, hits) == [(0, 4)] and hits == []
    assert manager.counters.hits == 0
    assert cache.get_range(3, 0, 2, hits) == [] and [h.entry_id for h in hits] == [0, 1, 2]
    assert manager.counters.hits == 3


def test_a_second_insert_of_a_cached_position_is_not_inserted() -> None:
    # EntryCacheManagerTest.doubleInsert
    manager, _ = make(max_size=10, watermark=0.8)
    cache = manager.get_entry_cache("t")
    put(cache, 1, 1, b"abcd", 0)
    first = put(cache, 1, 0, b"xyz", 0)
    assert manager.size == 7
    assert put(cache, 1, 0, b"other", 0) is first
    assert manager.size == 7 and manager.counters.inserted == 2


def test_invalidation_up_to_a_position_spans_ledgers() -> None:
    manager, _ = make()
    cache = manager.get_entry_cache("t")
    for ledger_id in (1, 2):
        for entry_id in range(3):
            put(cache, ledger_id, entry_id, b"x", 0)
    assert cache.invalidate_entries(2, 1) == 4
    assert [(e.ledger_id, e.entry_id) for e in cache.cached_entries()] == [(2, 1), (2, 2)]
    assert manager.counters.evicted_invalidated == 4 and manager.size == 2
