"""Concurrent reads of overlapping ranges share storage reads when the live design says
so (PIP-430 and the legacy cache, as Pulsar's PendingReadsManager), and not otherwise
(PIP-174's ring reads straight from storage); either way ``misses`` is the number of
entries read from storage."""

from __future__ import annotations

import asyncio

import pytest

from broker.cache import CacheEventStream
from broker.ledger.managed_ledger import ManagedLedger
from broker.ledger.position import Position
from storage_stub.bookie.api import StorageFaultError
from storage_stub.bookie.memory import InMemoryBookie
from tests.ledger.conftest import OpenLedger, Stores


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


async def _ledger(
    stores: Stores, open_ledger: OpenLedger, design: str
) -> tuple[RecordingBookie, CacheEventStream, ManagedLedger, int]:
    bookie = RecordingBookie()
    stores.bookie = bookie
    cache = stores.use_design(design)
    ledger = await open_ledger()
    stores.clock.advance_ms(2_500)  # past the continue-caching grace: adds not cached
    first = await ledger.add_entries([b"e%d" % i for i in range(20)])
    return bookie, cache, ledger, first.ledger_id


async def _three_overlapping_reads(
    bookie: RecordingBookie, ledger: ManagedLedger, lid: int
) -> list[list[bytes]]:
    def read(first: int, count: int, reader: str) -> asyncio.Task[list[bytes]]:
        async def data() -> list[bytes]:
            return [e.data for e in await ledger.read_entries(Position(lid, first), count, reader)]

        return asyncio.create_task(data())

    first = read(0, 10, "a")
    await asyncio.sleep(0)  # the first read is in flight
    second = read(5, 10, "b")
    inside = read(2, 2, "c")
    await asyncio.sleep(0)
    bookie.release.set()
    return [await first, await second, await inside]


@pytest.mark.parametrize("design", ["pip430", "legacy"])
async def test_overlapping_reads_in_flight_share_one_storage_read(
    stores: Stores, open_ledger: OpenLedger, design: str
) -> None:
    bookie, cache, ledger, lid = await _ledger(stores, open_ledger, design)
    results = await _three_overlapping_reads(bookie, ledger, lid)
    assert results == [
        [b"e%d" % i for i in range(10)],
        [b"e%d" % i for i in range(5, 15)],
        [b"e2", b"e3"],
    ]
    assert bookie.reads == [(0, 9), (10, 14)], "only the gap 10-14 was read again"
    counters = cache.live.manager.counters
    assert (counters.misses, counters.hits) == (15, 0), "one miss per entry read from storage"
    assert cache.live.units[ledger.name].reads_in_flight == 0


async def test_the_ring_reads_every_reader_s_range_from_storage(
    stores: Stores, open_ledger: OpenLedger
) -> None:
    bookie, cache, ledger, lid = await _ledger(stores, open_ledger, "segmented")
    await _three_overlapping_reads(bookie, ledger, lid)
    assert bookie.reads == [(0, 9), (5, 14), (2, 3)]
    counters = cache.live.manager.counters
    assert (counters.misses, counters.hits) == (10 + 10 + 2, 0)
    assert cache.live.units[ledger.name].reads_in_flight == 0


async def test_a_failed_shared_read_fails_every_waiter_and_counts_nothing(
    stores: Stores, open_ledger: OpenLedger
) -> None:
    bookie, cache, ledger, lid = await _ledger(stores, open_ledger, "pip430")
    bookie.fail = True
    start = Position(lid, 0)
    first = asyncio.create_task(ledger.read_entries(start, 5, "a"))
    await asyncio.sleep(0)
    second = asyncio.create_task(ledger.read_entries(start, 5, "b"))
    await asyncio.sleep(0)
    bookie.release.set()
    for task in (first, second):
        with pytest.raises(StorageFaultError):
            await task
    counters = cache.live.manager.counters
    assert (counters.misses, counters.hits) == (0, 0)
    assert cache.live.units[ledger.name].reads_in_flight == 0, "the failed read is forgotten"
    bookie.fail = False
    assert [e.data for e in await ledger.read_entries(start, 2, "a")] == [b"e0", b"e1"]
    assert bookie.reads == [(0, 4), (0, 1)]
    assert counters.misses == 2


class CountingBookie(InMemoryBookie):
    """The in-memory bookie counting entries read as the storage's counters do (when
    the read returns), and at that moment asking the loop to look at the cache's misses
    next: what any other callback (a stats request) would see."""

    def __init__(self) -> None:
        super().__init__()
        self.entries_read = 0
        self.seen: list[tuple[int, int]] = []
        self.misses = lambda: 0

    async def read_entries(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        await asyncio.sleep(0)  # a read that takes a loop turn, as a real one does
        entries = await super().read_entries(ledger_id, first, last)
        self.entries_read += len(entries)
        asyncio.get_running_loop().call_soon(self._look)
        return entries

    def _look(self) -> None:
        self.seen.append((self.entries_read, self.misses()))


@pytest.mark.parametrize("design", ["pip430", "legacy", "segmented"])
async def test_misses_are_counted_in_the_step_storage_counts_the_entries(
    stores: Stores, open_ledger: OpenLedger, design: str
) -> None:
    """Looked at together (one stats request, the load generator's snapshot), the
    cache's misses and storage's entries read are the same number, reads in flight or
    not: a storage read's entries are filled in the loop step that returned them, not a
    step later when its task's callbacks run."""
    bookie = CountingBookie()
    stores.bookie = bookie
    cache = stores.use_design(design)
    ledger = await open_ledger()
    stores.clock.advance_ms(2_500)  # past the continue-caching grace: adds not cached
    lid = (await ledger.add_entries([b"e%d" % i for i in range(20)])).ledger_id
    counters = cache.live.manager.counters
    bookie.misses = lambda: counters.misses
    reads = [
        ledger.read_entries(Position(lid, first), 5, reader)
        for first, reader in ((0, "a"), (5, "b"), (10, "c"))
    ]
    await asyncio.gather(*reads)
    assert bookie.entries_read == counters.misses == 15
    assert bookie.seen and all(read == misses for read, misses in bookie.seen), bookie.seen
