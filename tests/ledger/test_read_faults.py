"""Storage reads that fail, or that a close cancels, and reads racing a close: every
entry read from storage is one miss and nothing else is, no reader is left waiting, and
no cache event follows the topic's unload."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from broker.cache import CacheConfig, CacheEventStream, create_stream
from broker.ledger.managed_cursor import ManagedCursor
from broker.ledger.managed_ledger import ManagedLedger, ManagedLedgerError
from broker.ledger.position import Position
from storage_stub.bookie.api import StorageFaultError
from storage_stub.bookie.memory import InMemoryBookie
from tests.ledger.conftest import OpenLedger, Stores

AFTER_GRACE_MS = 2_500  # adds are no longer cached: reads go to storage


class GatedBookie(InMemoryBookie):
    """Reads wait for a gate of their own once ``hold`` is set; counts entries read.
    ``close_ledger`` and ``delete_ledger`` can be held too."""

    def __init__(self) -> None:
        super().__init__()
        self.hold = False
        self.gates: list[asyncio.Future[None]] = []
        self.gate_added = asyncio.Event()
        self.entries_read = 0
        self.closing = asyncio.Event()
        self.close_gate: asyncio.Event | None = None
        self.deleting = asyncio.Event()
        self.delete_gate: asyncio.Event | None = None
        self.gated_ledger = -1

    async def read_entries(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        if self.hold:
            gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self.gates.append(gate)
            self.gate_added.set()
            await gate
        datas = await super().read_entries(ledger_id, first, last)
        self.entries_read += len(datas)
        return datas

    async def gates_at_least(self, count: int) -> None:
        while len(self.gates) < count:
            self.gate_added.clear()
            await self.gate_added.wait()

    async def close_ledger(self, ledger_id: int) -> int:
        self.closing.set()
        if self.close_gate is not None:
            await self.close_gate.wait()
        return await super().close_ledger(ledger_id)

    async def delete_ledger(self, ledger_id: int) -> None:
        if self.delete_gate is not None and ledger_id == self.gated_ledger:
            self.deleting.set()
            await self.delete_gate.wait()
        await super().delete_ledger(ledger_id)


class EventLog:
    """A trace that keeps the names of the cache events, in order."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def __getattr__(self, name: str) -> Callable[..., None]:
        def record(*args: Any) -> None:
            self.events.append(name)

        return record


async def _ledger(
    stores: Stores, open_ledger: OpenLedger, design: str, size: int | None = None
) -> tuple[GatedBookie, CacheEventStream, EventLog, ManagedLedger, int]:
    bookie = GatedBookie()
    stores.bookie = bookie
    log = EventLog()
    config = CacheConfig() if size is None else CacheConfig(max_size_bytes=size)
    stores.cache = create_stream(design, config, stores.clock, trace=lambda clock: log)  # type: ignore[arg-type,return-value]
    ledger = await open_ledger(max_entries=5)
    stores.clock.advance_ms(AFTER_GRACE_MS)
    first = await ledger.add_entries([b"e%d" % i for i in range(5)])
    # the add filled the ledger: rolled over before a test gates closes
    await ledger.maybe_roll_over()
    await ledger.settled()
    bookie.closing.clear()
    return bookie, stores.cache, log, ledger, first.ledger_id


UNSHARED = [("segmented", None), ("pip430", 0)]  # the ring, and any design at size 0


async def _two_held_reads(
    bookie: GatedBookie, ledger: ManagedLedger, lid: int
) -> tuple[asyncio.Task[list[Any]], asyncio.Task[list[Any]]]:
    """Two readers of entries 0..4, each one's storage read held at its own gate."""
    bookie.hold = True
    first = asyncio.create_task(ledger.read_entries(Position(lid, 0), 5, "a"))
    second = asyncio.create_task(ledger.read_entries(Position(lid, 0), 5, "b"))
    await bookie.gates_at_least(2)
    return first, second


@pytest.mark.parametrize(("design", "size"), UNSHARED)
async def test_unshared_reads_count_the_reads_that_returned_when_one_fails(
    stores: Stores, open_ledger: OpenLedger, design: str, size: int | None
) -> None:
    bookie, cache, _, ledger, lid = await _ledger(stores, open_ledger, design, size)
    first, second = await _two_held_reads(bookie, ledger, lid)
    bookie.gates[0].set_exception(StorageFaultError("readEntries"))
    with pytest.raises(StorageFaultError):
        await first
    bookie.gates[1].set_result(None)
    assert len(await second) == 5
    assert cache.live.manager.counters.misses == bookie.entries_read == 5


@pytest.mark.parametrize(("design", "size"), UNSHARED)
async def test_unshared_reads_count_the_reads_that_returned_when_a_close_cancels_one(
    stores: Stores, open_ledger: OpenLedger, design: str, size: int | None
) -> None:
    bookie, cache, _, ledger, lid = await _ledger(stores, open_ledger, design, size)
    first, second = await _two_held_reads(bookie, ledger, lid)
    bookie.gates[0].set_result(None)
    assert len(await first) == 5
    await ledger.close()  # cancels the second storage read
    with pytest.raises(asyncio.CancelledError):
        await second
    assert cache.live.manager.counters.misses == bookie.entries_read == 5


async def test_a_read_once_the_close_began_is_refused_and_tells_the_designs_nothing(
    stores: Stores, open_ledger: OpenLedger
) -> None:
    bookie, cache, log, ledger, lid = await _ledger(stores, open_ledger, "pip430")
    bookie.close_gate = asyncio.Event()
    closing = asyncio.create_task(ledger.close())
    await bookie.closing.wait()  # the close is under way, the unload not yet done
    before = list(log.events)
    for reader in ("a", "b"):
        with pytest.raises(ManagedLedgerError):
            await ledger.read_entries(Position(lid, 0), 5, reader)
    assert log.events == before
    assert cache.live.units[ledger.name].reads_in_flight == 0
    bookie.close_gate.set()
    await closing
    with pytest.raises(ManagedLedgerError):
        await ledger.read_entries(Position(lid, 0), 5, "c")
    assert log.events[-1] == "unload"


async def test_a_trim_racing_a_close_says_nothing_after_the_unload(
    stores: Stores, open_ledger: OpenLedger
) -> None:
    bookie, _, log, ledger, lid = await _ledger(stores, open_ledger, "legacy")
    cursor = await ManagedCursor.create(ledger, "s", "earliest")
    await ledger.maybe_roll_over()  # the full first ledger is closed: it can be trimmed
    await ledger.add_entries([b"next"])
    cursor.acknowledge_cumulative(Position(lid, 4))
    bookie.delete_gate = asyncio.Event()
    bookie.gated_ledger = lid
    trimming = asyncio.create_task(ledger.trim_consumed_ledgers())
    await bookie.deleting.wait()  # the trim waits on the bookie's delete
    await ledger.close()
    bookie.delete_gate.set()
    assert await trimming == [lid]
    assert log.events[-1] == "unload"


async def test_a_storage_read_cancelled_before_it_ran_fails_its_reader(
    stores: Stores, open_ledger: OpenLedger
) -> None:
    _, cache, log, ledger, lid = await _ledger(stores, open_ledger, "pip430")
    reader = asyncio.create_task(ledger.read_entries(Position(lid, 0), 5, "a"))
    await asyncio.sleep(0)  # one loop turn: the read's task exists and has not run
    assert log.events[-1] == "read"
    await ledger.close()  # cancels that task before its first step
    with pytest.raises(asyncio.CancelledError):
        await reader
    assert log.events[-2:] == ["fill_failed", "unload"]
    assert len(ledger.pending_reads) == 0, "no read left in flight"
    assert cache.live.manager.counters.misses == 0
