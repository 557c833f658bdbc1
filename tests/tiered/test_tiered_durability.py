"""Issue #14 for the tiered store: an upload or compaction answered done is durable, one
answered with an error changed nothing (image, range index, filters) and its retry
works, and a crash at any step leaves a durable image whose every object exists, so
every range uploaded before it reads back after a restart.

Real files: objects under ``tmp_path``, the image in a RocksDB metadata store that is
closed without a flush and reopened, as a ``kill -9`` and restart would leave it."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from storage_stub.bookie.api import MetadataStore, StorageFaultError
from storage_stub.bookie.counters import OpCounters
from storage_stub.bookie.faults import FaultInjector
from storage_stub.bookie.instrumented import InstrumentedMetadataStore
from storage_stub.bookie.latency import LatencyModel
from storage_stub.bookie.metadata_store import RocksMetadataStore
from storage_stub.bookie.rocks import RocksDatabase
from storage_stub.config import StorageConfig
from storage_stub.tiered import DiskObjectStore, InstrumentedObjectStore
from storage_stub.tiered.image import object_key
from storage_stub.tiered.instruments import ObjectFaultInjector
from storage_stub.tiered.persisted import PersistedTieredStore
from tests.tiered.conftest import Writer

STREAMS = range(4)
#: the stream with the most data: compaction moves it to a stream object of its own
BIG = 3
SPLIT_BYTES = 1_000
SSOS = 5


class Crash(BaseException):
    """The process dies here: no handler of the store runs, nothing is cleaned up."""


class CrashPlan:
    """Numbers the durable steps (object puts and deletes, metadata puts) as they happen
    and crashes at step ``at``: before it runs, or right after it is done."""

    def __init__(self, at: int | None = None, after: bool = False) -> None:
        self.at = at
        self.after = after
        self.steps: list[str] = []

    async def step(self, name: str, do: Callable[[], Awaitable[None]]) -> None:
        index = len(self.steps)
        self.steps.append(name)
        if index == self.at and not self.after:
            raise Crash(f"before {name}")
        await do()
        if index == self.at and self.after:
            raise Crash(f"after {name}")


class CrashingObjectStore(DiskObjectStore):
    __slots__ = ("plan",)

    def __init__(self, directory: pathlib.Path, plan: CrashPlan) -> None:
        super().__init__(directory)
        self.plan = plan

    async def put(self, key: str, data: bytes) -> None:
        await self.plan.step("objectPut", lambda: DiskObjectStore.put(self, key, data))

    async def delete(self, key: str) -> None:
        await self.plan.step("objectDelete", lambda: DiskObjectStore.delete(self, key))


class CrashingMetadataStore:
    def __init__(self, inner: RocksMetadataStore, plan: CrashPlan) -> None:
        self._inner = inner
        self.plan = plan

    async def get(self, key: str) -> bytes | None:
        return await self._inner.get(key)

    async def put(self, key: str, value: bytes) -> None:
        await self.plan.step("metadataPut", lambda: self._inner.put(key, value))

    async def delete(self, key: str) -> None:
        await self._inner.delete(key)

    async def keys_with_prefix(self, prefix: str) -> list[str]:
        return await self._inner.keys_with_prefix(prefix)


class Site:
    """A broker's tiered storage on disk: the object directory and the metadata database.
    ``open`` starts a broker on it; ``kill`` drops that broker as ``kill -9`` would."""

    def __init__(self, root: pathlib.Path) -> None:
        self.objects = root / "objects"
        self.metadata_path = root / "metadata"
        self.metadata_faults = FaultInjector()
        self.object_faults = ObjectFaultInjector()
        self._db: RocksDatabase | None = None
        self._metadata: RocksMetadataStore | None = None

    async def open(self, plan: CrashPlan | None = None) -> PersistedTieredStore:
        assert self._db is None, "kill the running broker first"
        self._db = RocksDatabase(self.metadata_path, name="metadata")
        self._metadata = RocksMetadataStore(self._db, sync=True)
        metadata: MetadataStore = self._metadata
        objects = DiskObjectStore(self.objects)
        if plan is not None:
            metadata = CrashingMetadataStore(self._metadata, plan)
            objects = CrashingObjectStore(self.objects, plan)
        return await PersistedTieredStore.open(
            InstrumentedObjectStore(objects, faults=self.object_faults),
            StorageConfig(s3StreamSetObjectCompactionStreamSplitSize=SPLIT_BYTES),
            InstrumentedMetadataStore(
                metadata, faults=self.metadata_faults, latency=LatencyModel(), counters=OpCounters()
            ),
        )

    async def kill(self) -> None:
        """Synced writes are in the WAL; nothing else is flushed."""
        assert self._db is not None and self._metadata is not None
        await self._metadata.close()
        self._db.close(flush=False)
        self._db = self._metadata = None

    async def restart(self) -> PersistedTieredStore:
        await self.kill()
        return await self.open()


@pytest.fixture
async def site(tmp_path: pathlib.Path) -> AsyncIterator[Site]:
    site = Site(tmp_path)
    yield site
    if site._db is not None:
        await site.kill()


async def uploaded(store: PersistedTieredStore, ssos: int = SSOS) -> Writer:
    writer = Writer(store)  # it only calls upload
    for k in range(ssos):
        await writer.sso(
            STREAMS, entries={0: 2, 1: 2, 2: 2, BIG: 40}, new_ledger=[1] if k == 2 else []
        )
    return writer


async def assert_reads_everything(store: PersistedTieredStore, writer: Writer) -> None:
    for stream in STREAMS:
        offsets = writer.offsets(stream)
        middle = offsets[len(offsets) // 2]
        for start, end in ((0, 1 << 40), (middle, middle + 3), (offsets[-1], 1 << 40)):
            assert await store.read(stream, start, end) == writer.expected(stream, start, end)


async def assert_objects_are_the_images(store: PersistedTieredStore) -> None:
    """Every object the image names exists, and no other."""
    keys = await store.store.object_store.keys()
    assert keys == sorted(object_key(i) for i in store.store.image.all_object_ids())


def locator_state(store: PersistedTieredStore) -> tuple[object, ...]:
    locator = store.store.locator
    index = locator.range_index
    return len(index), index.ranges_indexed(), len(locator.blooms), locator.blooms.bytes


def image_stats(store: PersistedTieredStore) -> dict[str, int]:
    stats = store.stats()
    keys = ("objects", "streamSetObjects", "streamObjects", "streams", "compactions")
    return {key: stats[key] for key in keys}


# ---------------------------------------------------------------- failed persists


async def test_an_upload_whose_image_persist_fails_changes_nothing_and_its_retry_succeeds(
    site: Site,
) -> None:
    store = await site.open()
    writer = await uploaded(store, ssos=2)
    image_before = store.store.image.to_json()
    stats_before = image_stats(store)
    extent_before = store.store.stream_extent(0)
    ranges = [(0, writer.offsets(0)[-1] + 1, [b"next-0", b"next-1"])]
    site.metadata_faults.set("metadataPut", error_rate=1.0)

    with pytest.raises(StorageFaultError):
        await store.upload(ranges)

    assert store.store.image.to_json() == image_before
    assert image_stats(store) == stats_before
    assert store.store.stream_extent(0) == extent_before
    await assert_objects_are_the_images(store)  # the object it wrote is deleted
    await assert_reads_everything(store, writer)

    site.metadata_faults.clear()
    await store.upload(ranges)  # the retry is not refused as going back
    writer.record(*ranges[0])
    await assert_reads_everything(store, writer)

    store = await site.restart()
    await assert_reads_everything(store, writer)
    await assert_objects_are_the_images(store)


async def test_an_upload_whose_persist_and_cleanup_both_fail_leaves_its_object_for_later(
    site: Site,
) -> None:
    store = await site.open()
    writer = await uploaded(store, ssos=2)
    image_before = store.store.image.to_json()
    site.metadata_faults.set("metadataPut", error_rate=1.0)
    site.object_faults.set("objectDelete", error_rate=1.0)

    with pytest.raises(StorageFaultError):
        await store.upload([(1, writer.offsets(1)[-1] + 1, [b"lost"])])

    assert store.store.image.to_json() == image_before
    assert store.stats()["orphanObjects"] == 1
    site.metadata_faults.clear()
    site.object_faults.clear()
    await writer.sso(STREAMS)  # a new id: the pending delete cannot hit it
    await store.compact(max_sso_count=1)  # which deletes the leftover, then reads them all
    await assert_reads_everything(store, writer)
    assert store.stats()["orphanObjects"] == 0
    store = await site.restart()  # the restart collects the leftover
    await assert_objects_are_the_images(store)
    await assert_reads_everything(store, writer)


async def test_a_compaction_whose_image_persist_fails_changes_nothing_and_reads_still_work(
    site: Site,
) -> None:
    store = await site.open()
    writer = await uploaded(store)
    await assert_reads_everything(store, writer)  # warms the range index and filters
    image_before = store.store.image.to_json()
    stats_before = image_stats(store)
    locator_before = locator_state(store)
    site.metadata_faults.set("metadataPut", error_rate=1.0)

    with pytest.raises(StorageFaultError):
        await store.compact(max_sso_count=1)

    assert store.store.image.to_json() == image_before
    assert image_stats(store) == stats_before
    assert locator_state(store) == locator_before
    await assert_objects_are_the_images(store)  # the merged objects are deleted
    await assert_reads_everything(store, writer)

    site.metadata_faults.clear()
    result = await store.compact(max_sso_count=1)
    assert result.merged_objects == SSOS and result.stream_object_ids
    await assert_reads_everything(store, writer)
    await assert_objects_are_the_images(store)
    store = await site.restart()
    await assert_reads_everything(store, writer)


# ------------------------------------------------------------------------ crashes

#: the durable steps of ``compact(max_sso_count=1)`` over SSOS objects, in their order
COMPACTION_STEPS = ["objectPut", "objectPut", "metadataPut"] + ["objectDelete"] * SSOS
UPLOAD_STEPS = ["objectPut", "metadataPut"]


def _crash_points(steps: list[str]) -> list[Any]:
    return [
        pytest.param(at, after, id=f"{'after' if after else 'before'}-{at}-{name}")
        for at, name in enumerate(steps)
        for after in (False, True)
    ]


async def _restarted(site: Site, writer: Writer) -> PersistedTieredStore:
    """After the crash: a restart finds every object its image names (the garbage is
    collected) and every range uploaded before the crash."""
    await site.kill()
    store = await site.open()
    await assert_objects_are_the_images(store)
    await assert_reads_everything(store, writer)
    return store


async def _works_on(store: PersistedTieredStore, writer: Writer) -> None:
    writer.store = store
    await writer.sso(STREAMS)
    await store.compact(max_sso_count=1)
    await assert_reads_everything(store, writer)
    await assert_objects_are_the_images(store)


@pytest.mark.parametrize(("at", "after"), _crash_points(COMPACTION_STEPS))
async def test_a_crash_at_any_step_of_a_compaction_loses_no_uploaded_range(
    site: Site, at: int, after: bool
) -> None:
    plan = CrashPlan()
    store = await site.open(plan)
    writer = await uploaded(store)
    plan.steps.clear()
    plan.at, plan.after = at, after

    with pytest.raises(Crash):
        await store.compact(max_sso_count=1)

    assert plan.steps == COMPACTION_STEPS[: at + 1]
    store = await _restarted(site, writer)
    persist = COMPACTION_STEPS.index("metadataPut")
    done = at > persist or (at == persist and after)
    assert store.stats()["streamSetObjects"] == (1 if done else SSOS)
    assert store.stats()["streamObjects"] == (1 if done else 0)
    await _works_on(store, writer)


@pytest.mark.parametrize(("at", "after"), _crash_points(UPLOAD_STEPS))
async def test_a_crash_at_any_step_of_an_upload_leaves_it_whole_or_absent(
    site: Site, at: int, after: bool
) -> None:
    plan = CrashPlan()
    store = await site.open(plan)
    writer = await uploaded(store, ssos=2)
    plan.steps.clear()
    plan.at, plan.after = at, after
    start = writer.offsets(2)[-1] + 1

    with pytest.raises(Crash):
        await store.upload([(2, start, [b"maybe"])])

    assert plan.steps == UPLOAD_STEPS[: at + 1]
    done = at == UPLOAD_STEPS.index("metadataPut") and after
    if done:
        writer.record(2, start, [b"maybe"])
    store = await _restarted(site, writer)
    assert await store.read(2, start, start + 1) == ([(start, b"maybe")] if done else [])
    await _works_on(store, writer)


async def test_garbage_a_restart_cannot_delete_never_takes_the_id_of_a_new_object(
    site: Site,
) -> None:
    plan = CrashPlan()
    store = await site.open(plan)
    writer = await uploaded(store, ssos=2)
    plan.at, plan.after = len(plan.steps), True  # the next object put is done, then a crash
    with pytest.raises(Crash):
        await store.upload([(0, writer.offsets(0)[-1] + 1, [b"never answered"])])
    await site.kill()
    site.object_faults.set("objectDelete", error_rate=1.0)

    store = await site.open()  # keeps the garbage object: its delete fails

    assert store.stats()["orphanObjects"] == 1
    site.object_faults.clear()
    writer.store = store
    await writer.sso(STREAMS)  # under a new id, not the garbage's
    await store.compact(max_sso_count=1)  # deletes the garbage first
    await assert_reads_everything(store, writer)
    await assert_objects_are_the_images(store)


async def test_an_upload_retried_after_it_was_done_is_done_without_writing_again(
    site: Site,
) -> None:
    """An offload whose upload was done but whose ledger mark failed (or whose broker was
    killed before it) uploads the same ledgers again: that is not going back."""
    store = await site.open()
    writer = await uploaded(store, ssos=2)
    done = [(0, writer.offsets(0)[-1] + 1, [b"done-0", b"done-1"]), (1, 1 << 40, [b"done"])]
    object_id = await store.upload(done)
    for stream, start, payloads in done:
        writer.record(stream, start, payloads)
    image = store.store.image.to_json()
    puts = store.stats()["objectPuts"]

    assert await store.upload(done) == object_id
    assert store.store.image.to_json() == image
    assert store.stats()["objectPuts"] == puts

    await store.compact(max_sso_count=1)  # the entries move to other objects
    store = await site.restart()
    assert await store.upload(done) in store.store.image.all_object_ids()
    new = (2, writer.offsets(2)[-1] + 1, [b"new"])
    await store.upload([*done, new])  # the new range is written, the others left out
    writer.record(*new)
    await assert_reads_everything(store, writer)
    with pytest.raises(ValueError, match="goes back"):
        await store.upload([(0, done[0][1], [b"other", b"entries"])])
