"""GroupedSyncWriter: synced writes made together share one synced RocksDB write (one WAL
fsync), land in call order, and are reported durable only once that write returned."""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import threading
from collections.abc import AsyncIterator

import pytest
from rocksdict import WriteBatch

from storage_stub.bookie.api import StorageFaultError
from storage_stub.bookie.grouped_writes import GroupedSyncWriter
from storage_stub.bookie.rocks import RocksDatabase


@pytest.fixture
async def writer(tmp_path: pathlib.Path) -> AsyncIterator[GroupedSyncWriter]:
    rocks = RocksDatabase(tmp_path / "metadata", name="metadata")
    writer = GroupedSyncWriter(rocks, name="metadata")
    yield writer
    await writer.close()
    rocks.close()


def reopened(writer: GroupedSyncWriter) -> RocksDatabase:
    """The database as a restart finds it."""
    rocks = writer.rocks
    rocks.reopen_now()
    return rocks


async def turns() -> None:
    """Let the loop run what is ready now, and what that makes ready, a few times over."""
    for _ in range(3):
        await asyncio.sleep(0)


@contextlib.asynccontextmanager
async def held_thread(writer: GroupedSyncWriter) -> AsyncIterator[None]:
    """Keep the writer's thread busy with another job (as a reopen holds it) until the
    block ends: what the writer sends meanwhile waits behind it."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        held.set()
        release.wait()

    (thread,) = writer.rocks.writers
    parked = asyncio.get_running_loop().run_in_executor(thread, hold)
    try:
        await asyncio.to_thread(held.wait)
        yield
    finally:
        release.set()
        await parked


async def test_writes_made_in_one_turn_share_one_synced_write(writer: GroupedSyncWriter) -> None:
    writes = [writer.put("metadataPut", b"k%d" % i, b"v%d" % i) for i in range(100)]
    await asyncio.gather(*writes)

    assert (writer.syncs, writer.records) == (1, 100)
    db = reopened(writer).db
    assert [db.get(b"k%d" % i) for i in range(100)] == [b"v%d" % i for i in range(100)]


async def test_callers_woken_by_a_commit_join_the_next_group(writer: GroupedSyncWriter) -> None:
    """64 closers writing two records one after the other, as topics closing their
    ledgers then writing their managed-ledger records, and a write made while the
    first group is out: two fsyncs, not 129."""

    async def close(i: int) -> None:
        await writer.put("closeLedger", b"ledger-%d" % i, b"closed")
        await writer.put("metadataPut", b"ml-%d" % i, b"record")

    async with held_thread(writer):
        closers = asyncio.gather(*(close(i) for i in range(64)))
        await turns()  # the closers' first writes are sent, behind the held job
        late = writer.put("metadataPut", b"late", b"record")
    await closers
    await late

    assert (writer.syncs, writer.records) == (2, 129)


async def test_writes_land_in_call_order_and_a_multi_record_write_together(
    writer: GroupedSyncWriter,
) -> None:
    def stage_two(batch: WriteBatch, value: bytes) -> None:
        batch.put(b"a", value)
        batch.put(b"b", value)

    await asyncio.gather(
        writer.put("metadataPut", b"gone", b"1"),
        writer.delete("metadataDelete", b"gone"),
        writer.delete("metadataDelete", b"kept"),
        writer.put("metadataPut", b"kept", b"2"),
        writer.write("createLedger", stage_two, b"3"),
    )

    assert writer.syncs == 1
    db = reopened(writer).db
    assert (db.get(b"gone"), db.get(b"kept"), db.get(b"a"), db.get(b"b")) == (
        None,
        b"2",
        b"3",
        b"3",
    )


async def test_a_write_is_reported_durable_only_after_its_synced_write(
    writer: GroupedSyncWriter,
) -> None:
    async with held_thread(writer):
        write = writer.put("metadataPut", b"k", b"v")
        await turns()  # the staged write is sent, behind the held job
        assert not write.done()
        assert writer.rocks.db.get(b"k") is None
    await write
    assert writer.rocks.db.get(b"k") == b"v"


async def test_a_failed_synced_write_fails_each_write_naming_its_own_operation(
    writer: GroupedSyncWriter,
) -> None:
    writer.rocks.db.close()  # every write now fails in RocksDB
    writes = [
        writer.put("metadataPut", b"k", b"v"),
        writer.write("closeLedger", lambda batch, _: batch.put(b"l", b"x"), None),
        writer.delete("metadataDelete", b"k"),
    ]
    results = await asyncio.gather(*writes, return_exceptions=True)

    assert [type(result) for result in results] == [StorageFaultError] * 3
    assert [result.operation for result in results if isinstance(result, StorageFaultError)] == [
        "metadataPut",
        "closeLedger",
        "metadataDelete",
    ]
    assert writer.rocks.failed is not None
    assert writer.syncs == 0


async def test_after_close_writes_are_refused_and_nothing_was_left_pending(
    writer: GroupedSyncWriter,
) -> None:
    staged = writer.put("metadataPut", b"k", b"v")
    await writer.close()

    assert staged.done() and staged.exception() is None
    with pytest.raises(StorageFaultError):
        writer.put("metadataPut", b"k2", b"v")
