"""Reads of the tiered store: cold reads anywhere in a stream return exactly what was
stored, with the range index and filters on or off; filters keep excluded objects
unloaded; tail reads finish in few batches; the image survives a round trip."""

from __future__ import annotations

import pathlib

import pytest

from storage_stub.config import StorageConfig
from storage_stub.tiered import (
    DiskObjectStore,
    InMemoryObjectStore,
    MetadataImage,
    ObjectStore,
    RangeData,
    StreamObjectMeta,
    TieredStore,
)
from storage_stub.tiered.format import encode_object
from storage_stub.tiered.image import object_key
from tests.tiered.conftest import Writer, fresh_store, ledger_offset, memory_config

STREAMS = range(6)
SSOS = 24
INDEX_ON = memory_config()
INDEX_OFF = memory_config(s3StreamSetObjectRangeIndexEnabled=False)


async def _spread_over_ssos(store: TieredStore) -> Writer:
    """24 SSOs x 6 streams: stream 0 in every SSO, others in some; new ledgers now and
    then, so offsets jump."""
    writer = Writer(store)
    for k in range(SSOS):
        streams = [s for s in STREAMS if s == 0 or (k + s) % (s + 1) == 0]
        await writer.sso(streams, entries=3, new_ledger=[s for s in streams if k % 7 == s])
    return writer


def _windows(offsets: list[int]) -> dict[str, tuple[int, int]]:
    middle = offsets[len(offsets) // 2]
    return {
        "start": (offsets[0], offsets[0] + 4),
        "middle": (middle - 2, middle + 5),
        "tail": (offsets[-3], offsets[-1] + 1),
        "whole": (0, offsets[-1] + 1),
        "past the end": (offsets[-1] + 1, offsets[-1] + 100),
    }


@pytest.mark.parametrize("config", [INDEX_ON, INDEX_OFF], ids=["index", "full-scan"])
async def test_cold_reads_at_start_middle_and_tail_return_the_stored_entries_in_order(
    object_store: ObjectStore, config: StorageConfig
) -> None:
    writer = await _spread_over_ssos(TieredStore(object_store, config))
    for stream in STREAMS:
        for name, (start, end) in _windows(writer.offsets(stream)).items():
            store = fresh_store(object_store, writer.store.image, config)
            got = await store.read(stream, start, end)
            assert got == writer.expected(stream, start, end), (stream, name)
    assert len(writer.store.image.stream_set_objects) == SSOS


async def test_index_and_full_scan_give_the_same_answers_for_every_window() -> None:
    inner = InMemoryObjectStore()
    writer = await _spread_over_ssos(TieredStore(inner))
    offsets = writer.offsets(0)
    indexed = fresh_store(inner, writer.store.image, INDEX_ON)
    scanning = fresh_store(inner, writer.store.image, INDEX_OFF)
    for start in offsets[::5]:
        for length in (1, 7, 40):
            assert await indexed.read(0, start, start + length) == await scanning.read(
                0, start, start + length
            )


async def test_reads_of_gaps_unknown_streams_and_empty_windows_return_nothing() -> None:
    writer = Writer(TieredStore(InMemoryObjectStore()))
    await writer.sso([1], entries=3)
    await writer.sso([1], entries=3, new_ledger=[1])
    store = writer.store
    gap_start, gap_end = ledger_offset(1, 3), ledger_offset(2, 0)
    assert await store.read(1, gap_start, gap_end) == []
    assert await store.read(1, gap_start, gap_end + 1) == [(gap_end, b"s1-l2-e0")]
    assert await store.read(99, 0, 1 << 40) == []
    assert await store.read(1, 5, 5) == []
    assert await store.read(1, ledger_offset(3, 0), ledger_offset(4, 0)) == []


async def test_a_cold_read_loads_few_index_blocks_and_a_full_scan_loads_them_all() -> None:
    inner = InMemoryObjectStore()
    writer = Writer(TieredStore(inner))
    for _ in range(60):
        await writer.sso(STREAMS, entries=1)
    offsets = writer.offsets(3)
    indexed = fresh_store(inner, writer.store.image, INDEX_ON)
    scanning = fresh_store(inner, writer.store.image, INDEX_OFF)

    await indexed.read(3, offsets[0], offsets[0] + 1)
    await scanning.read(3, offsets[0], offsets[0] + 1)

    assert scanning.stats()["indexLoads"] == 60
    assert indexed.stats()["indexLoads"] < 60 // 5


async def test_a_tail_read_finishes_within_two_loading_batches() -> None:
    inner = InMemoryObjectStore()
    writer = Writer(TieredStore(inner))
    for _ in range(80):
        await writer.sso(STREAMS, entries=2)
    for stream in STREAMS:
        offsets = writer.offsets(stream)
        store = fresh_store(inner, writer.store.image, INDEX_ON)
        got = await store.read(stream, offsets[-2], offsets[-1] + 1)
        assert got == writer.expected(stream, offsets[-2], offsets[-1] + 1)
        stats = store.stats()
        assert stats["loadBatches"] <= 2, stats
        assert stats["indexLoads"] <= 12, stats


async def test_objects_whose_filter_excludes_the_stream_are_never_loaded() -> None:
    writer = Writer(TieredStore(InMemoryObjectStore()))
    busy, quiet = 0, 1
    for k in range(30):
        await writer.sso([busy, quiet] if k in (0, 29) else [busy, *range(10, 20)])
    store = writer.store
    await store.read(busy, 0, 1 << 40)  # loads every object: each gets a filter
    locator = store.locator
    ids = [meta.object_id for meta in store.image.stream_set_objects.objects]
    excluded = [i for i in ids if not locator.blooms.might_contain(i, quiet)]
    loads_before = {i: locator.index_loads_of(i) for i in ids}
    assert len(excluded) >= 25  # 28 objects lack the stream; 1% false positives allowed

    got = await store.read(quiet, 0, 1 << 40)

    assert got == writer.expected(quiet, 0, 1 << 40)
    assert all(locator.index_loads_of(i) == loads_before[i] for i in excluded)
    assert store.stats()["bloomSkips"] >= len(excluded)


async def test_one_read_teaches_the_range_index_every_stream_of_the_objects_it_loads() -> None:
    inner = InMemoryObjectStore()
    writer = Writer(TieredStore(inner))
    for _ in range(50):
        await writer.sso(STREAMS, entries=1)
    store = fresh_store(inner, writer.store.image, INDEX_ON)
    first = writer.offsets(0)
    await store.read(0, first[25], first[25] + 1)
    assert store.stats()["rangeIndexStreams"] == len(STREAMS)
    loads = store.stats()["indexLoads"]

    other = writer.offsets(4)
    got = await store.read(4, other[25], other[25] + 1)

    assert got == writer.expected(4, other[25], other[25] + 1)
    assert store.stats()["indexLoads"] - loads <= 2


async def test_the_image_round_trips_through_json_and_a_reopened_disk_store(
    tmp_path: pathlib.Path,
) -> None:
    writer = await _spread_over_ssos(TieredStore(DiskObjectStore(tmp_path / "objects")))
    await writer.store.compact(max_sso_count=5, split_threshold_bytes=200)
    saved = writer.store.image.to_json()

    reopened = TieredStore(
        DiskObjectStore(tmp_path / "objects"), image=MetadataImage.from_json(saved)
    )

    for stream in STREAMS:
        assert await reopened.read(stream, 0, 1 << 40) == writer.expected(stream, 0, 1 << 40)
    assert reopened.image.to_json() == saved
    expected_keys = sorted(f"obj-{i:016x}" for i in reopened.image.all_object_ids())
    assert await reopened.object_store.keys() == expected_keys


async def test_uploads_that_overlap_or_go_back_are_refused_and_change_nothing() -> None:
    writer = Writer(TieredStore(InMemoryObjectStore()))
    await writer.sso([1], entries=3)
    store = writer.store
    before = store.image.to_json()

    with pytest.raises(ValueError, match="goes back"):
        await store.upload([(1, 2, [b"again"])])
    with pytest.raises(ValueError, match="goes back"):
        await store.upload([(2, 10, [b"a", b"b"]), (2, 11, [b"overlap"])])
    with pytest.raises(ValueError, match="no entries"):
        await store.upload([(3, 0, [])])

    assert store.image.to_json() == before
    assert store.stats()["objectPuts"] == 1


async def test_a_stream_alternating_between_ssos_and_stream_objects_reads_back_whole() -> None:
    """Compaction here only ever splits a stream's oldest data, but the image allows a
    stream object between two SSO ranges of its stream: reads must cross both ways."""
    inner = InMemoryObjectStore()
    store = TieredStore(inner)
    writer = Writer(store)
    for k in range(12):
        await writer.sso([0, 1, 2], entries=2)
        if k % 4 == 1:  # a stream object of stream 0, written by hand between two SSOs
            start = writer.offsets(0)[-1] + 1
            payloads = [b"so-%d" % (start + i) for i in range(3)]
            object_id = store.image.allocate_object_id()
            data = encode_object([RangeData(0, start, payloads)])
            await inner.put(object_key(object_id), data)
            image = store.image
            image.stream_objects[0] = (
                *image.stream_objects.get(0, ()),
                StreamObjectMeta(object_id, 0, start, start + 3, len(data)),
            )
            image.streams[0] = (image.streams[0][0], start + 3)
            writer.record(0, start, payloads)
    offsets = writer.offsets(0)
    windows = [(0, 1 << 40)] + [(offsets[i], offsets[i] + 6) for i in range(0, len(offsets), 3)]
    for config in (INDEX_ON, INDEX_OFF):
        fresh = fresh_store(inner, store.image, config)
        for _ in range(2):  # the second time the range index is warm
            for start, end in windows:
                assert await fresh.read(0, start, end) == writer.expected(0, start, end)
