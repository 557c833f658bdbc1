"""The range index (floor search, bounded streams, TTL on a driven clock) and the bloom
filters (capped bytes, least recently used dropped first), alone and in a store."""

from __future__ import annotations

from rbloom import Bloom

from broker.clock import ManualClock
from storage_stub.tiered import InMemoryObjectStore, StreamSetObjectRangeIndex, TieredStore
from storage_stub.tiered.bloom import KEY_BYTES, StreamIdBloomFilters
from storage_stub.tiered.format import StreamRange
from tests.tiered.conftest import Writer, fresh_store, memory_config

MINUTE_MS = 60_000


def test_search_finds_the_object_of_the_greatest_range_start_at_or_before_the_offset() -> None:
    index = StreamSetObjectRangeIndex(max_streams=10, ttl_ms=MINUTE_MS, clock=ManualClock())
    index.update(4, [StreamRange(1, 0, 100), StreamRange(2, 50, 60)])
    index.update(9, [StreamRange(1, 100, 180)])
    index.update(12, [StreamRange(1, 1 << 33, (1 << 33) + 5)])  # after a ledger jump

    assert index.search(1, 0) == (0, 4)
    assert index.search(1, 99) == (0, 4)
    assert index.search(1, 100) == (100, 9)
    assert index.search(1, 5000) == (100, 9)  # in the gap: the search starts there
    assert index.search(1, 1 << 33) == (1 << 33, 12)
    assert index.search(2, 10) is None
    assert index.search(3, 10) is None
    assert index.search_after(1, 100) == (1 << 33, 12)
    assert index.search_after(1, 1 << 33) is None

    index.invalidate(1, 100, object_id=99)  # not its object: kept
    assert index.search(1, 150) == (100, 9)
    index.remove_object(9, [StreamRange(1, 100, 180)])
    assert index.search(1, 150) == (0, 4)


def test_the_index_holds_at_most_max_streams_dropping_the_least_recently_touched() -> None:
    index = StreamSetObjectRangeIndex(max_streams=3, ttl_ms=MINUTE_MS, clock=ManualClock())
    index.update(1, [StreamRange(s, 0, 10) for s in (1, 2, 3)])
    assert index.search(1, 5) is not None  # touches stream 1: stream 2 is now the oldest

    index.update(2, [StreamRange(4, 0, 10)])

    assert len(index) == 3
    assert 2 not in index
    assert {1, 3, 4} == {s for s in range(1, 5) if s in index}
    assert index.evicted == 1


def test_streams_untouched_for_the_ttl_expire_and_touched_ones_stay() -> None:
    clock = ManualClock()
    index = StreamSetObjectRangeIndex(max_streams=100, ttl_ms=10 * MINUTE_MS, clock=clock)
    index.update(1, [StreamRange(s, 0, 10) for s in (1, 2)])

    clock.advance_ms(6 * MINUTE_MS)
    assert index.search(1, 0) == (0, 1)  # stream 1 touched at minute 6
    clock.advance_ms(5 * MINUTE_MS)  # minute 11: stream 2 is 11 minutes old

    assert 2 not in index
    assert 1 in index
    clock.advance_ms(5 * MINUTE_MS)
    assert len(index) == 0
    assert index.expired == 2


async def test_a_store_keeps_its_range_index_within_max_streams_and_ttl() -> None:
    clock = ManualClock()
    inner = InMemoryObjectStore()
    writer = Writer(TieredStore(inner))
    for _ in range(12):
        await writer.sso(range(8), entries=1)
    config = memory_config(
        s3StreamSetObjectRangeIndexMaxStreams=3, s3StreamSetObjectRangeIndexTtlMs=MINUTE_MS
    )
    store = fresh_store(inner, writer.store.image, config, clock)

    for stream in range(8):
        assert await store.read(stream, 0, 1 << 40) == writer.expected(stream, 0, 1 << 40)
        assert store.stats()["rangeIndexStreams"] <= 3
    assert store.stats()["rangeIndexEvicted"] > 0

    clock.advance_ms(MINUTE_MS)
    assert store.stats()["rangeIndexStreams"] == 0
    assert await store.read(5, 0, 1 << 40) == writer.expected(5, 0, 1 << 40)


def _filter_bytes(streams: int) -> int:
    return Bloom(streams, 0.01).size_in_bits // 8 + KEY_BYTES


def test_bloom_filters_past_their_byte_cap_drop_the_least_recently_used() -> None:
    size = _filter_bytes(100)
    filters = StreamIdBloomFilters(max_bytes=3 * size)
    for object_id in range(3):
        filters.add(object_id, range(object_id * 100, object_id * 100 + 100))
    assert filters.might_contain(0, 50)  # object 0 used: object 1 is now the LRU one

    filters.add(3, range(300, 400))

    assert filters.bytes == 3 * size
    assert 1 not in filters
    assert [o for o in range(4) if o in filters] == [0, 2, 3]
    assert filters.evicted == 1
    assert filters.might_contain(1, 12345)  # no filter: it might hold anything
    assert not filters.might_contain(3, 50)  # a stream it does not hold (false pos. 1%)


def test_bloom_filters_removed_free_their_bytes_and_a_zero_cap_keeps_none() -> None:
    filters = StreamIdBloomFilters(max_bytes=1 << 20)
    filters.add(1, [5, 6])
    filters.add(2, [7])
    filters.remove(1)
    assert filters.bytes == _filter_bytes(1)
    assert len(filters) == 1

    none_kept = StreamIdBloomFilters(max_bytes=0)
    none_kept.add(1, [5])
    assert len(none_kept) == 0
    too_big = StreamIdBloomFilters(max_bytes=_filter_bytes(10))
    too_big.add(1, range(10_000))
    assert len(too_big) == 0


async def test_a_store_keeps_its_filters_within_the_byte_cap() -> None:
    inner = InMemoryObjectStore()
    writer = Writer(TieredStore(inner))
    for _ in range(20):
        await writer.sso(range(50), entries=1)
    cap = 5 * _filter_bytes(50)
    store = fresh_store(inner, writer.store.image, memory_config(s3StreamIdBloomFilterMaxBytes=cap))

    assert await store.read(3, 0, 1 << 40) == writer.expected(3, 0, 1 << 40)

    stats = store.stats()
    assert stats["bloomFilters"] == 5
    assert stats["bloomFilterBytes"] <= cap
    assert stats["bloomFiltersEvicted"] == 15
