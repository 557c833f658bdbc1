"""ManagedLedger: visibility of concurrent adds, rollover, recovery, the read path."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from broker.cache.config import CacheConfig
from broker.cache.pip430 import Pip430EntryCacheManager
from broker.ledger.managed_cursor import ManagedCursor
from broker.ledger.position import Position
from storage_stub.bookie.memory import InMemoryBookie
from tests.ledger.conftest import OpenLedger, Stores


class GatedBookie(InMemoryBookie):
    """The in-memory bookie, except that chosen adds wait on a gate after their ids
    are assigned, so a test can complete adds out of order."""

    def __init__(self) -> None:
        super().__init__()
        self.gates: list[asyncio.Event] = []

    async def add_entries(self, ledger_id: int, entries: Sequence[bytes]) -> int:
        last = await super().add_entries(ledger_id, entries)
        if self.gates:
            await self.gates.pop(0).wait()
        return last


async def test_entries_become_visible_only_when_every_earlier_add_is_durable(
    stores: Stores, open_ledger: OpenLedger
) -> None:
    gated = GatedBookie()
    stores.bookie = gated
    ledger = await open_ledger()
    gate = asyncio.Event()
    gated.gates.append(gate)
    slow = asyncio.create_task(ledger.add_entries([b"a", b"b"]))
    await asyncio.sleep(0)  # let the slow add take its ids
    fast = await ledger.add_entries([b"c"])
    assert fast.entry_id == 2
    assert ledger.last_confirmed.entry_id == -1, "entry 2 must wait for entries 0 and 1"
    gate.set()
    assert (await slow).entry_id == 0
    assert ledger.last_confirmed.entry_id == 2
    assert ledger.entries_added_counter == 3


async def test_full_ledger_rolls_over_and_recovery_keeps_every_entry(
    stores: Stores, open_ledger: OpenLedger
) -> None:
    ledger = await open_ledger(max_entries=10)
    cursor = await ManagedCursor.create(ledger, "s", "earliest")
    adds = [ledger.add_entries([b"x%d" % i for i in range(4)]) for _ in range(10)]
    firsts = await asyncio.gather(*adds)
    await ledger.maybe_roll_over()
    assert len({p.ledger_id for p in firsts}) >= 3
    assert ledger.entries_added_counter == 40
    entries = await cursor.read_entries(100)
    assert len(entries) == 40
    await ledger.close()

    reopened = await open_ledger(max_entries=10)
    assert [info.entries for info in reopened.ledgers if info.entries] == [
        info.entries for info in ledger.ledgers if info.entries
    ]
    again = await reopened.cursors["s"].read_entries(100)
    assert [e.data for e in again] == [e.data for e in entries]


async def test_a_crashed_owner_ledger_is_recovered_at_its_last_entry(
    stores: Stores, open_ledger: OpenLedger
) -> None:
    ledger = await open_ledger()
    await ledger.add_entries([b"1", b"2", b"3"])
    # no close(): the process "dies" with the ledger open
    recovered = await open_ledger()
    assert recovered.last_confirmed == Position(ledger.last_confirmed.ledger_id, 2)
    old = await stores.bookie.ledger_metadata(ledger.last_confirmed.ledger_id)
    assert old.closed and old.last_entry_id == 2
    position = await recovered.add_entries([b"4"])
    assert position.ledger_id > ledger.last_confirmed.ledger_id


async def test_reads_ask_the_cache_first_and_storage_only_for_the_gaps(
    stores: Stores, open_ledger: OpenLedger
) -> None:
    ledger = await open_ledger()
    first = await ledger.add_entries([b"e%d" % i for i in range(10)])
    manager = Pip430EntryCacheManager(CacheConfig(), stores.clock)
    cache = manager.get_entry_cache(ledger.name)
    ledger.cache = cache
    for entry_id in (2, 3, 7):
        cache.insert(first.ledger_id, entry_id, b"e%d" % entry_id, 1)
    entries = await ledger.read_entries(Position(first.ledger_id, 0), 10, expected_reads=2)
    assert [e.data for e in entries] == [b"e%d" % i for i in range(10)]
    assert [e.position.entry_id for e in entries] == list(range(10))
    # three gaps (0-1, 4-6, 8-9): 7 entries from storage, 3 from the cache
    assert (manager.counters.misses, manager.counters.hits) == (7, 3)
    assert all(e.cached is not None for e in entries), "every entry read is now cached"
    assert [e.cached.expected_reads for e in entries if e.cached] == [2, 2, 1, 1, 2, 2, 2, 1, 2, 2]
    # a second read touches storage no more
    again = await ledger.read_entries(Position(first.ledger_id, 0), 10)
    assert [e.data for e in again] == [e.data for e in entries]
    assert (manager.counters.misses, manager.counters.hits) == (7, 13)


class SlowReadBookie(InMemoryBookie):
    """Reads wait on a gate, so a test can act while the ledger awaits storage."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.reads = 0

    async def read_entries(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        self.reads += 1
        await self.gate.wait()
        return await super().read_entries(ledger_id, first, last)


async def test_hits_evicted_while_the_gaps_are_read_are_still_served(
    stores: Stores, open_ledger: OpenLedger
) -> None:
    slow = SlowReadBookie()
    stores.bookie = slow
    ledger = await open_ledger()
    first = await ledger.add_entries([b"e%d" % i for i in range(4)])
    manager = Pip430EntryCacheManager(CacheConfig(), stores.clock)
    ledger.cache = manager.get_entry_cache(ledger.name)
    ledger.cache.insert(first.ledger_id, 0, b"e0", 0)
    ledger.cache.insert(first.ledger_id, 1, b"e1", 0)
    read = asyncio.create_task(ledger.read_entries(Position(first.ledger_id, 0), 4))
    await asyncio.sleep(0)  # the read has taken its hits and waits for entries 2-3
    manager.evict_entries(10**9)
    assert manager.size == 0
    slow.gate.set()
    assert [e.data for e in await read] == [b"e0", b"e1", b"e2", b"e3"]


async def test_a_start_or_reset_position_past_the_end_is_clamped_to_the_next_write(
    stores: Stores, open_ledger: OpenLedger
) -> None:
    ledger = await open_ledger()
    first = await ledger.add_entries([b"a", b"b", b"c"])
    beyond = Position(first.ledger_id, 1000)
    cursor = await ManagedCursor.create(ledger, "future", beyond)
    await ledger.add_entries([b"d", b"e"])
    assert [e.data for e in await cursor.read_entries(10)] == [b"d", b"e"]
    await cursor.reset(Position(first.ledger_id + 50, 0))
    await ledger.add_entries([b"f"])
    assert [e.data for e in await cursor.read_entries(10)] == [b"f"]
    assert cursor.backlog() == 1


async def test_readers_sharing_one_storage_read_do_not_double_expected_reads(
    stores: Stores, open_ledger: OpenLedger
) -> None:
    slow = SlowReadBookie()
    stores.bookie = slow
    ledger = await open_ledger()
    first = await ledger.add_entries([b"e%d" % i for i in range(5)])
    manager = Pip430EntryCacheManager(CacheConfig(), stores.clock)
    ledger.cache = manager.get_entry_cache(ledger.name)
    start = Position(first.ledger_id, 0)
    reads = [asyncio.create_task(ledger.read_entries(start, 5, expected_reads=2)) for _ in range(2)]
    await asyncio.sleep(0)
    slow.gate.set()
    for task in reads:
        assert len(await task) == 5
    assert slow.reads == 1, "one storage read served both"
    cached = manager.get_entry_cache(ledger.name).cached_entries()
    assert [e.expected_reads for e in cached] == [2] * 5
