"""ManagedLedger: visibility of concurrent adds, rollover, recovery, the read path."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from broker.ledger import entry as entry_module
from broker.ledger.entry import encode_batch, encode_message
from broker.ledger.managed_cursor import ManagedCursor
from broker.ledger.position import Position
from storage_stub.bookie.api import StorageFaultError
from storage_stub.bookie.memory import InMemoryBookie
from tests.ledger.conftest import OpenLedger, Stores


class GatedBookie(InMemoryBookie):
    """The in-memory bookie, except that chosen adds wait on a gate after their ids
    are assigned, so a test can complete adds out of order."""

    def __init__(self) -> None:
        super().__init__()
        self.gates: list[asyncio.Event] = []

    def start_add(self, ledger_id: int, entries: Sequence[bytes]) -> asyncio.Future[int]:
        stored = super().start_add(ledger_id, entries)
        if not self.gates:
            return stored
        return asyncio.ensure_future(self._after(self.gates.pop(0), stored.result()))

    @staticmethod
    async def _after(gate: asyncio.Event, last: int) -> int:
        await gate.wait()
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


class SlowCloseBookie(InMemoryBookie):
    """The in-memory bookie whose ledger closes wait on ``gate`` once it is set up."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: asyncio.Event | None = None
        self.closing = asyncio.Event()

    async def close_ledger(self, ledger_id: int) -> int:
        self.closing.set()
        if self.gate is not None:
            await self.gate.wait()
        return await super().close_ledger(ledger_id)


async def test_maybe_roll_over_waits_for_the_rollover_an_add_started(
    stores: Stores, open_ledger: OpenLedger
) -> None:
    bookie = SlowCloseBookie()
    stores.bookie = bookie
    ledger = await open_ledger(max_entries=2)
    bookie.gate = asyncio.Event()
    first = await ledger.add_entries([b"a", b"b"])  # fills the ledger: a rollover starts
    await bookie.closing.wait()  # the rollover closes the full ledger, held at the gate
    waiting = asyncio.create_task(ledger.maybe_roll_over())
    next_add = asyncio.create_task(ledger.add_entries([b"c"]))  # waits for it as well
    await asyncio.wait((waiting, next_add), timeout=0)
    assert not waiting.done()
    bookie.gate.set()
    await waiting
    ledger_ids = [info.ledger_id for info in ledger.ledgers]
    assert len(ledger_ids) == 2 and ledger_ids[0] == first.ledger_id
    assert (await next_add) == Position(ledger_ids[1], 0)
    await ledger.close()


async def test_adds_that_fill_ledgers_back_to_back_leave_one_empty_ledger_at_most(
    stores: Stores, open_ledger: OpenLedger
) -> None:
    """In-memory adds complete without yielding, so the rollovers the filling adds start
    run only after later adds rolled the ledger over themselves: each must then do
    nothing rather than roll over the ledger that replaced the full one."""
    ledger = await open_ledger(max_entries=2)
    positions = [await ledger.add_entries([b"x%d" % i]) for i in range(6)]
    await ledger.settled()
    assert [(p.ledger_id, p.entry_id) for p in positions] == [
        (positions[0].ledger_id + i // 2, i % 2) for i in range(6)
    ]
    assert [info.entries for info in ledger.ledgers] == [2, 2, 2, 0]
    await ledger.close()


class FailingCloseBookie(SlowCloseBookie):
    """Closes fail (after the gate) while ``failing`` is set."""

    failing = False

    async def close_ledger(self, ledger_id: int) -> int:
        if not self.failing:
            return await super().close_ledger(ledger_id)
        self.closing.set()
        if self.gate is not None:
            await self.gate.wait()
        raise StorageFaultError("closeLedger")


async def test_a_failed_rollover_under_way_is_not_raised_by_maybe_roll_over(
    stores: Stores, open_ledger: OpenLedger
) -> None:
    """Upkeep waits for the rollover an add started; if it fails, the add's rollover
    logs it and the next add retries, and upkeep goes on to its other topics."""
    bookie = FailingCloseBookie()
    stores.bookie = bookie
    ledger = await open_ledger(max_entries=2)
    bookie.failing = True
    bookie.gate = asyncio.Event()
    await ledger.add_entries([b"a", b"b"])  # fills the ledger: its rollover will fail
    await bookie.closing.wait()  # the rollover is under way, held at the gate
    upkeep = asyncio.create_task(ledger.maybe_roll_over())
    bookie.gate.set()
    await upkeep  # waited for it and raised nothing
    await ledger.settled()
    bookie.failing = False
    position = await ledger.add_entries([b"c"])  # retried: a new ledger
    assert [info.entries for info in ledger.ledgers] == [2, 1]
    assert position == Position(ledger.ledgers[1].ledger_id, 0)
    await ledger.close()


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


class RecordingBookie(InMemoryBookie):
    """The in-memory bookie, recording the ranges read."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[tuple[int, int]] = []

    async def read_entries(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        self.reads.append((first, last))
        return await super().read_entries(ledger_id, first, last)


#: past PIP-430's continue-caching grace of a freshly loaded topic (2 x the 1 s TTL)
AFTER_GRACE_MS = 2_500


async def test_reads_ask_the_cache_first_and_storage_only_for_the_gaps(
    stores: Stores, open_ledger: OpenLedger
) -> None:
    bookie = RecordingBookie()
    stores.bookie = bookie
    cache = stores.use_design("pip430")
    ledger = await open_ledger()
    stores.clock.advance_ms(AFTER_GRACE_MS)  # adds are not cached: nobody reads them
    first = await ledger.add_entries([b"e%d" % i for i in range(10)])
    lid = first.ledger_id
    # "r" reads 2-3 and 7 from storage; they are cached for the one active reader
    ledger.events.activated("r", (lid, 0), (lid, -1), 10)
    await ledger.read_entries(Position(lid, 2), 2, "r")
    await ledger.read_entries(Position(lid, 7), 1, "r")
    ledger.events.activated("s", (lid, 0), (lid, -1), 10)
    entries = await ledger.read_entries(Position(lid, 0), 10, "s")
    assert [e.data for e in entries] == [b"e%d" % i for i in range(10)]
    assert [e.position.entry_id for e in entries] == list(range(10))
    # three gaps (0-1, 4-6, 8-9) went to storage, three entries came from the cache
    assert bookie.reads == [(2, 3), (7, 7), (0, 1), (4, 6), (8, 9)]
    counters = cache.live.manager.counters
    assert (counters.misses, counters.hits) == (3 + 7, 3)
    cached = cache.live.units[ledger.name].cache.cached_entries()
    # both readers are at or before the gaps: two expected reads; the first three kept one
    assert [e.expected_reads for e in cached] == [2, 2, 1, 1, 2, 2, 2, 1, 2, 2]
    again = await ledger.read_entries(Position(lid, 0), 10, "s")
    assert [e.data for e in again] == [e.data for e in entries]
    assert (counters.misses, counters.hits) == (10, 13), "the second read touches no storage"


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
    cache = stores.use_design("pip430")
    ledger = await open_ledger()
    first = await ledger.add_entries([b"e0", b"e1"])  # cached: the topic just loaded
    stores.clock.advance_ms(AFTER_GRACE_MS)
    await ledger.add_entries([b"e2", b"e3"])  # not cached
    read = asyncio.create_task(ledger.read_entries(Position(first.ledger_id, 0), 4, "r"))
    await asyncio.sleep(0)  # the read has taken its hits and waits for entries 2-3
    manager = cache.live.manager
    manager.evict_entries(10**9)  # type: ignore[attr-defined]
    assert manager.counters.size == 0
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


async def test_readers_sharing_one_storage_read_count_one_miss_and_one_expected_read_each(
    stores: Stores, open_ledger: OpenLedger
) -> None:
    slow = SlowReadBookie()
    stores.bookie = slow
    cache = stores.use_design("pip430")
    ledger = await open_ledger()
    first = await ledger.add_entries([b"e%d" % i for i in range(5)])
    lid = first.ledger_id
    cache.live.units[ledger.name].cache.clear()  # the entries must come from storage
    for reader in ("a", "b"):
        ledger.events.activated(reader, (lid, 0), (lid, -1), 5)
    start = Position(lid, 0)
    reads = [asyncio.create_task(ledger.read_entries(start, 5, reader)) for reader in ("a", "b")]
    await asyncio.sleep(0)
    slow.gate.set()
    for task in reads:
        assert len(await task) == 5
    assert slow.reads == 1, "one storage read served both"
    counters = cache.live.manager.counters
    # Pulsar counts the miss once, in the read that went to storage; the reader that
    # waited for it counts neither a hit nor a miss
    assert (counters.misses, counters.hits) == (5, 0)
    cached = cache.live.units[ledger.name].cache.cached_entries()
    assert [e.expected_reads for e in cached] == [2] * 5, "two readers at or before: 2, not 4"


@pytest.mark.parametrize("design", ["pip430", "legacy"])
async def test_a_cached_entry_keeps_the_message_count_its_producer_checked(
    stores: Stores, open_ledger: OpenLedger, monkeypatch: pytest.MonkeyPatch, design: str
) -> None:
    # the binary protocol's produce path checks each entry's metadata (check_entry): the
    # dispatcher reads the count from the cached entry instead of parsing it again
    stores.use_design(design)
    ledger = await open_ledger()
    datas = [
        encode_batch([(b"m%d" % i, None, None, 0) for i in range(3)], 1),
        encode_message(b"x", 1),
    ]
    lid = (await ledger.add_entries([encode_message(b"first", 1)])).ledger_id
    ledger.events.activated("s", (lid, 0), (lid, -1), 5)  # adds are cached for it
    checked = await ledger.add_entries(datas, [3, 1])
    unchecked = await ledger.add_entries(datas)  # an add whose counts nobody checked

    def parse(data: bytes) -> object:
        raise AssertionError("the metadata was parsed again")

    with monkeypatch.context() as patched:
        patched.setattr(entry_module, "_plain_or_metadata", parse)
        entries = await ledger.read_entries(checked, 2, "s")
        assert [e.messages for e in entries] == [3, 1] and all(e.trusted for e in entries)
    # the others are parsed on first use, as before
    entries = await ledger.read_entries(unchecked, 2, "s")
    assert [e.messages for e in entries] == [3, 1] and all(e.trusted for e in entries)
