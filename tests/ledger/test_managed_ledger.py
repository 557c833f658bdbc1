"""ManagedLedger: visibility of concurrent adds, rollover, recovery, the read path."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from broker.cache.api import MissingRange
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


class DictCache:
    """A minimal cache to observe the read path: serves what it holds, records misses."""

    def __init__(self) -> None:
        self.entries: dict[tuple[int, int], bytes] = {}
        self.storage_reads: list[tuple[int, int]] = []

    @property
    def name(self) -> str:
        return "dict"

    def insert(self, ledger_id: int, entry_id: int, data: bytes, expected_reads: int) -> bool:
        self.entries[(ledger_id, entry_id)] = data
        return True

    def get_range(
        self, ledger_id: int, first: int, last: int, hits: list[tuple[int, bytes]]
    ) -> list[MissingRange]:
        missing: list[MissingRange] = []
        for entry_id in range(first, last + 1):
            data = self.entries.get((ledger_id, entry_id))
            if data is not None:
                hits.append((entry_id, data))
            elif missing and missing[-1][1] == entry_id - 1:
                missing[-1] = (missing[-1][0], entry_id)
            else:
                missing.append((entry_id, entry_id))
        return missing

    def record_storage_read(self, entries: int, nbytes: int) -> None:
        self.storage_reads.append((entries, nbytes))

    def invalidate_all_entries(self, ledger_id: int) -> None:
        self.entries = {k: v for k, v in self.entries.items() if k[0] != ledger_id}

    def clear(self) -> None:
        self.entries.clear()


async def test_reads_ask_the_cache_first_and_storage_only_for_the_gaps(
    stores: Stores, open_ledger: OpenLedger
) -> None:
    ledger = await open_ledger()
    first = await ledger.add_entries([b"e%d" % i for i in range(10)])
    cache = DictCache()
    ledger.cache = cache
    cache.insert(first.ledger_id, 2, b"e2", 1)
    cache.insert(first.ledger_id, 3, b"e3", 1)
    cache.insert(first.ledger_id, 7, b"e7", 1)
    entries = await ledger.read_entries(Position(first.ledger_id, 0), 10, expected_reads=2)
    assert [e.data for e in entries] == [b"e%d" % i for i in range(10)]
    assert [e.position.entry_id for e in entries] == list(range(10))
    # three gaps: 0-1, 4-6, 8-9 -> three storage reads of 2 + 3 + 2 entries
    assert [count for count, _ in cache.storage_reads] == [2, 3, 2]
    # what was read is now cached: a second read touches storage no more
    cache.storage_reads.clear()
    again = await ledger.read_entries(Position(first.ledger_id, 0), 10)
    assert [e.data for e in again] == [e.data for e in entries]
    assert cache.storage_reads == []
