"""Injected object-store faults fail the call and leave the store as it was: the next
read after the fault clears returns exactly what was stored."""

from __future__ import annotations

import pytest

from storage_stub.bookie.api import StorageFaultError
from storage_stub.tiered import (
    InMemoryObjectStore,
    InstrumentedObjectStore,
    MetadataImage,
    TieredStore,
)
from storage_stub.tiered.image import object_key
from storage_stub.tiered.instruments import ObjectFaultInjector
from tests.tiered.conftest import Writer, memory_config

STREAMS = range(4)


class SecondPutFails(InMemoryObjectStore):
    """Fails the second put after ``arm()`` (a compaction's merged SSO after its SO)."""

    __slots__ = ("puts_to_failure",)

    def __init__(self) -> None:
        super().__init__()
        self.puts_to_failure = 0

    def arm(self) -> None:
        self.puts_to_failure = 2

    async def put(self, key: str, data: bytes) -> None:
        if self.puts_to_failure:
            self.puts_to_failure -= 1
            if not self.puts_to_failure:
                raise StorageFaultError("objectPut", "second put refused")
        await super().put(key, data)


async def _written(
    faults: ObjectFaultInjector, ssos: int = 25, inner: InMemoryObjectStore | None = None
) -> Writer:
    inner = inner if inner is not None else InMemoryObjectStore()
    store = TieredStore(InstrumentedObjectStore(inner, faults=faults))
    writer = Writer(store)
    for k in range(ssos):
        await writer.sso(STREAMS, entries=2, new_ledger=[3] if k == 10 else [])
    return writer


def _objects_and_streams(image: MetadataImage) -> tuple[object, ...]:
    """The image but its next object id (a failed put's id is never reused)."""
    return image.stream_set_objects.objects, image.stream_objects, image.streams


async def _all_reads_match(writer: Writer) -> None:
    for stream in STREAMS:
        offsets = writer.offsets(stream)
        third = len(offsets) // 3
        for start, end in (
            (0, 1 << 40),
            (offsets[third], offsets[2 * third]),
            (offsets[-2], 1 << 40),
        ):
            assert await writer.store.read(stream, start, end) == writer.expected(
                stream, start, end
            )


async def test_an_object_get_fault_fails_the_read_without_corrupting_state() -> None:
    faults = ObjectFaultInjector(seed=3)
    writer = await _written(faults)
    store = writer.store
    faults.set("objectGet", error_rate=1.0)

    with pytest.raises(StorageFaultError):
        await store.read(2, 0, 1 << 40)

    assert store.stats()["objectGetErrors"] >= 1
    faults.clear()
    await _all_reads_match(writer)


async def test_reads_under_intermittent_get_faults_either_fail_or_return_the_truth() -> None:
    faults = ObjectFaultInjector(seed=11)
    writer = await _written(faults)
    faults.set("objectGet", error_rate=0.05)
    outcomes = {"failed": 0, "answered": 0}
    for attempt in range(60):
        stream = attempt % 4
        offsets = writer.offsets(stream)
        start = offsets[(attempt * 7) % len(offsets)]
        try:
            got = await writer.store.read(stream, start, start + 5)
        except StorageFaultError:
            outcomes["failed"] += 1
            continue
        outcomes["answered"] += 1
        assert got == writer.expected(stream, start, start + 5)
    assert outcomes["failed"] and outcomes["answered"]
    faults.clear()
    await _all_reads_match(writer)


async def test_a_failed_upload_changes_nothing_and_the_stream_continues() -> None:
    faults = ObjectFaultInjector()
    writer = await _written(faults, ssos=3)
    store = writer.store
    before = store.image.to_json()
    faults.set("objectPut", error_rate=1.0)

    with pytest.raises(StorageFaultError):
        await store.upload([(0, writer.offsets(0)[-1] + 1, [b"lost"])])

    faults.clear()
    assert _objects_and_streams(store.image) == _objects_and_streams(
        MetadataImage.from_json(before)
    )
    await writer.sso(STREAMS)
    await _all_reads_match(writer)


@pytest.mark.parametrize("operation", ["objectGet", "objectPut"])
async def test_a_failed_compaction_changes_nothing_and_its_leftovers_are_cleaned_later(
    operation: str,
) -> None:
    faults = ObjectFaultInjector()
    inner = SecondPutFails()
    writer = await _written(faults, ssos=12, inner=inner)
    store = writer.store
    before = store.image.to_json()
    if operation == "objectPut":
        inner.arm()  # the stream object is written, then the merged SSO fails
    else:
        faults.set(operation, error_rate=1.0)

    with pytest.raises(StorageFaultError):
        await store.compact(max_sso_count=3, split_threshold_bytes=200)

    faults.clear()
    assert _objects_and_streams(store.image) == _objects_and_streams(
        MetadataImage.from_json(before)
    )
    await _all_reads_match(writer)
    await store.compact(max_sso_count=3, split_threshold_bytes=200)
    assert store.stats()["streamSetObjects"] <= 3
    assert store.stats()["orphanObjects"] == 0
    keys = await store.object_store.keys()
    assert keys == sorted(object_key(i) for i in store.image.all_object_ids())
    await _all_reads_match(writer)


def test_fault_rules_name_object_operations_only() -> None:
    faults = ObjectFaultInjector()
    with pytest.raises(ValueError, match=r"unknown storage operation 'readEntries'.*objectGet"):
        faults.set("readEntries", error_rate=1.0)
    with pytest.raises(ValueError, match="error_rate"):
        faults.set("objectGet", error_rate=2.0)
    faults.set("objectDelete", error_rate=0.5, delay_ms=1.0)
    assert faults.snapshot() == {
        "objectDelete": {"errorRate": 0.5, "delayMs": 1.0, "injectedErrors": 0}
    }
    assert memory_config().objectGetLatency == "0"
