"""Concurrent catch-up reads of overlapping ranges share one storage read."""

from __future__ import annotations

import asyncio

import pytest

from broker.ledger.pending_reads import PendingReads
from broker.tasks import TaskOwner
from storage_stub.bookie.api import StorageFaultError
from storage_stub.bookie.memory import InMemoryBookie


class RecordingBookie(InMemoryBookie):
    """The in-memory bookie, recording reads and holding them until released."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[tuple[int, int]] = []
        self.release = asyncio.Event()
        self.fail = False

    async def read_entries(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        self.reads.append((first, last))
        await self.release.wait()
        if self.fail:
            raise StorageFaultError("readEntries")
        return await super().read_entries(ledger_id, first, last)


async def make() -> tuple[RecordingBookie, PendingReads, TaskOwner, int]:
    bookie = RecordingBookie()
    ledger_id = await bookie.create_ledger()
    await bookie.add_entries(ledger_id, [b"e%d" % i for i in range(20)])
    owner = TaskOwner("test")
    return bookie, PendingReads(bookie.read_entries, owner), owner, ledger_id


async def test_overlapping_reads_in_flight_share_one_storage_read() -> None:
    bookie, reads, owner, ledger_id = await make()
    first = asyncio.create_task(reads.read(ledger_id, 0, 9))
    await asyncio.sleep(0)  # let the first read start
    second = asyncio.create_task(reads.read(ledger_id, 5, 14))
    inside = asyncio.create_task(reads.read(ledger_id, 2, 3))
    await asyncio.sleep(0)
    bookie.release.set()
    assert await first == [b"e%d" % i for i in range(10)]
    assert await second == [b"e%d" % i for i in range(5, 15)]
    assert await inside == [b"e2", b"e3"]
    assert bookie.reads == [(0, 9), (10, 14)], "only the gap 10-14 was read again"
    assert reads.shared_entries == 5 + 2
    await owner.close()


async def test_a_failed_shared_read_fails_every_waiter_and_is_forgotten() -> None:
    bookie, reads, owner, ledger_id = await make()
    bookie.fail = True
    first = asyncio.create_task(reads.read(ledger_id, 0, 4))
    await asyncio.sleep(0)
    second = asyncio.create_task(reads.read(ledger_id, 0, 4))
    await asyncio.sleep(0)
    bookie.release.set()
    for task in (first, second):
        with pytest.raises(StorageFaultError):
            await task
    bookie.fail = False
    assert await reads.read(ledger_id, 0, 1) == [b"e0", b"e1"]
    assert bookie.reads == [(0, 4), (0, 1)]
    await owner.close()
