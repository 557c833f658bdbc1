"""The object stores (in memory and on disk alike, instrumented) and the object layout."""

from __future__ import annotations

import pathlib

import pytest
from pydantic import ValidationError

from storage_stub.bookie.api import StorageFaultError
from storage_stub.config import StorageConfig
from storage_stub.tiered import (
    CorruptObjectError,
    InMemoryObjectStore,
    InstrumentedObjectStore,
    NoSuchObjectError,
    ObjectStore,
    TieredStore,
    open_object_store,
)
from storage_stub.tiered.format import (
    BLOCK_MAX_BYTES,
    FOOTER,
    ObjectIndex,
    RangeData,
    encode_object,
    index_location,
)
from storage_stub.tiered.instruments import ObjectFaultInjector, ObjectLatencyModel


async def test_both_stores_put_get_ranges_and_delete_alike(object_store: ObjectStore) -> None:
    await object_store.put("obj-1", b"0123456789")
    await object_store.put("obj-2", b"")

    assert await object_store.get("obj-1") == b"0123456789"
    assert await object_store.get_range("obj-1", 2, 5) == b"234"
    assert await object_store.get_range("obj-1", 8, 100) == b"89"
    assert await object_store.get("obj-2") == b""
    assert await object_store.keys() == ["obj-1", "obj-2"]
    await object_store.delete("obj-1")
    await object_store.delete("obj-1")
    with pytest.raises(NoSuchObjectError):
        await object_store.get("obj-1")
    with pytest.raises(ValueError, match="invalid object key"):
        await object_store.put("../escape", b"x")


async def test_every_call_is_counted_and_a_faulted_call_changes_nothing() -> None:
    faults = ObjectFaultInjector()
    store = InstrumentedObjectStore(InMemoryObjectStore(), faults=faults)
    await store.put("obj-1", b"abcdef")
    await store.get("obj-1")
    await store.get_range("obj-1", 1, 3)
    faults.set("objectPut", error_rate=1.0)
    with pytest.raises(StorageFaultError):
        await store.put("obj-1", b"zzz")
    faults.set("objectGet", error_rate=1.0)
    with pytest.raises(StorageFaultError):
        await store.get("obj-1")
    faults.clear()

    assert await store.get("obj-1") == b"abcdef"
    counters = store.counters.snapshot()
    assert counters["objectPuts"] == 2 and counters["objectPutErrors"] == 1
    assert counters["objectGets"] == 4 and counters["objectGetErrors"] == 1
    assert counters["bytesRead"] == 6 + 2 + 6
    assert counters["bytesWritten"] == 6


def test_object_latency_comes_from_storage_conf_and_bad_specs_are_refused() -> None:
    config = StorageConfig(objectGetLatency="fixed:20", objectPutLatency="uniform:50:80")
    model = ObjectLatencyModel.from_config(config)
    assert model.snapshot() == {
        "objectGet": "fixed:20",
        "objectPut": "uniform:50:80",
        "objectDelete": "uniform:50:80",
    }
    assert ObjectLatencyModel.from_config(StorageConfig()).snapshot() == {}
    with pytest.raises(ValidationError, match="objectGetLatency"):
        StorageConfig(objectGetLatency="slow")


async def test_open_object_store_follows_storage_mode(tmp_path: pathlib.Path) -> None:
    disk = open_object_store(StorageConfig(), tmp_path / "objects")
    await disk.put("obj-1", b"x")
    assert (tmp_path / "objects" / "obj-1").read_bytes() == b"x"
    memory = open_object_store(StorageConfig(storageMode="memory"), None)
    assert isinstance(memory.inner, InMemoryObjectStore)
    with pytest.raises(ValueError, match="directory"):
        open_object_store(StorageConfig(), None)


def test_an_object_lists_its_blocks_by_stream_and_merges_adjacent_ones_into_ranges() -> None:
    data = encode_object(
        [
            RangeData(1, 10, [b"a", b"bb"]),
            RangeData(1, 1 << 32, [b"c"]),
            RangeData(5, 0, [b"d" * 10]),
        ]
    )
    position, length = index_location("k", data, len(data))
    index = ObjectIndex.parse(0, "k", data[position : position + length])

    assert [(b.stream_id, b.start_offset, b.end_offset) for b in index.blocks] == [
        (1, 10, 12),
        (1, 1 << 32, (1 << 32) + 1),
        (5, 0, 1),
    ]
    assert index.stream_ids() == [1, 5]
    assert [tuple(r) for r in index.ranges()] == [
        (1, 10, 12),
        (1, 1 << 32, (1 << 32) + 1),
        (5, 0, 1),
    ]
    assert index.blocks_of(3) == []


async def test_a_large_range_is_cut_into_blocks_and_a_short_read_fetches_one() -> None:
    entry = b"e" * 100_000
    store = TieredStore(InMemoryObjectStore())
    await store.upload([(1, 0, [entry] * 30)])  # ~3 MB: several blocks
    object_id = store.image.stream_set_objects.objects[0].object_id
    size = store.image.stream_set_objects.objects[0].size
    index = await store.locator.load_index(object_id, size, learn=False)
    assert len(index.blocks) >= 3
    assert all(block.length <= BLOCK_MAX_BYTES + 100_004 for block in index.blocks)
    assert [tuple(r) for r in index.ranges()] == [(1, 0, 30)]

    before = store.stats()["bytesRead"]
    assert await store.read(1, 29, 30) == [(29, entry)]
    assert store.stats()["bytesRead"] - before < 2 * BLOCK_MAX_BYTES


def test_a_damaged_footer_is_reported_as_corruption() -> None:
    data = bytearray(encode_object([RangeData(1, 0, [b"x"])]))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptObjectError, match="bad footer"):
        index_location("k", bytes(data), len(data))
    with pytest.raises(CorruptObjectError, match="shorter"):
        index_location("k", b"abc", 3)
    assert FOOTER.size == 16
