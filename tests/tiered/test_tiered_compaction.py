"""Compaction: fewer SSOs, large streams in their own objects, every read unchanged,
removed objects gone from the image, the object store, the filters and the index."""

from __future__ import annotations

import asyncio

from storage_stub.tiered import InMemoryObjectStore, TieredStore
from storage_stub.tiered.image import object_key
from tests.tiered.conftest import Writer, fresh_store, memory_config

BIG, SMALL = 7, range(3)


async def _written(store: TieredStore, ssos: int = 30) -> Writer:
    writer = Writer(store)
    for k in range(ssos):
        await writer.sso([*SMALL], entries=1, new_ledger=[1] if k == 12 else [])
        # the big stream shares SSOs with a small one, with far more data
        await writer.sso([BIG, 2], entries={BIG: 20 if k % 2 else 1, 2: 1})
    return writer


async def _everything(store: TieredStore, writer: Writer) -> None:
    for stream in (*SMALL, BIG):
        offsets = writer.offsets(stream)
        for start, end in (
            (0, 1 << 40),
            (offsets[0], offsets[0] + 3),
            (offsets[len(offsets) // 2], offsets[len(offsets) // 2] + 9),
            (offsets[-4], offsets[-1] + 1),
        ):
            assert await store.read(stream, start, end) == writer.expected(stream, start, end)


async def test_after_compaction_every_read_returns_the_same_entries_and_ssos_are_bounded() -> None:
    inner = InMemoryObjectStore()
    writer = await _written(TieredStore(inner))
    store = writer.store
    await _everything(store, writer)  # fills the range index and the filters
    removed = [meta.object_id for meta in store.image.stream_set_objects.objects[:53]]

    result = await store.compact(max_sso_count=8, split_threshold_bytes=2_000)

    stats = store.stats()
    assert stats["streamSetObjects"] <= 8
    assert result.merged_objects == 53
    assert [store.image.stream_objects[BIG][0].object_id] == list(result.stream_object_ids)
    assert stats["streamObjects"] == 1
    await _everything(store, writer)
    await _everything(fresh_store(inner, store.image, memory_config()), writer)
    keys = await store.object_store.keys()
    assert keys == sorted(object_key(i) for i in store.image.all_object_ids())
    assert all(object_id not in store.locator.blooms for object_id in removed)
    for stream in (*SMALL, BIG):
        for offset in writer.offsets(stream):
            found = store.locator.range_index.search(stream, offset)
            assert found is None or found[1] not in removed


async def test_compaction_again_after_more_uploads_keeps_every_entry() -> None:
    inner = InMemoryObjectStore()
    writer = await _written(TieredStore(inner), ssos=10)
    store = writer.store
    for round_ in range(4):
        await store.compact(max_sso_count=3, split_threshold_bytes=1_500)
        for _ in range(6):
            await writer.sso(
                [*SMALL, BIG],
                entries={0: 1, 1: 2, 2: 3, BIG: 30},
                new_ledger=[0] if round_ == 2 else [],
            )
        assert store.stats()["streamSetObjects"] <= 3 + 6
        await _everything(store, writer)
        await _everything(fresh_store(inner, store.image, memory_config()), writer)
    assert len(store.image.stream_objects[BIG]) >= 2


async def test_compaction_below_the_bound_changes_nothing() -> None:
    writer = await _written(TieredStore(InMemoryObjectStore()), ssos=3)
    before = writer.store.image.to_json()
    result = await writer.store.compact(max_sso_count=6)
    assert result.merged_objects == 0
    assert writer.store.image.to_json() == before


async def test_compaction_with_default_settings_uses_storage_conf() -> None:
    writer = await _written(
        TieredStore(
            InMemoryObjectStore(),
            memory_config(
                s3StreamSetObjectMaxNum=4,
                s3StreamSetObjectCompactionStreamSplitSize=200,
            ),
        ),
        ssos=5,
    )
    await writer.store.compact()
    assert writer.store.stats()["streamSetObjects"] <= 4
    assert BIG in writer.store.image.stream_objects
    await _everything(writer.store, writer)


class GatedStore(InMemoryObjectStore):
    """Ranged gets wait at a gate while it is closed (to hold a read mid-way)."""

    __slots__ = ("gate", "waiting")

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.gate.set()
        self.waiting = 0

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        if not self.gate.is_set():
            self.waiting += 1
            await self.gate.wait()
            self.waiting -= 1
        return await super().get_range(key, start, end)


async def test_a_read_racing_a_compaction_starts_again_and_returns_the_same_entries() -> None:
    inner = GatedStore()
    writer = await _written(TieredStore(inner), ssos=8)
    store = writer.store
    inner.gate.clear()
    read = asyncio.create_task(store.read(BIG, 0, 1 << 40))
    for _ in range(1000):  # let the read run up to the gate
        if inner.waiting:
            break
        await asyncio.sleep(0)
    assert inner.waiting

    # compaction reads whole objects (not gated), rewrites and deletes the old ones
    await store.compact(max_sso_count=2, split_threshold_bytes=1 << 30)
    inner.gate.set()

    assert await read == writer.expected(BIG, 0, 1 << 40)
    assert store.stats()["readRetries"] == 1
