"""Ack sets of batched entries live in the cursor: durable with it, taken back with a
failed write, dropped once the entry is acknowledged whole."""

from __future__ import annotations

import asyncio

import pytest

from broker.ledger.managed_cursor import ManagedCursor
from broker.ledger.position import Position
from storage_stub.bookie.api import StorageFaultError
from tests.ledger.conftest import OpenLedger, Stores
from tests.ledger.test_metadata_faults import FlakyMetadata


async def test_an_ack_set_is_durable_and_merged_as_pulsar_merges_them(
    open_ledger: OpenLedger,
) -> None:
    ledger = await open_ledger()
    first = await ledger.add_entries([b"batch0", b"batch1"])
    cursor = await ManagedCursor.create(ledger, "s", "earliest")
    entry = Position(first.ledger_id, 0)
    assert cursor.acknowledge_batch(entry, 0b1110) == 0b1110  # message 0 acked
    assert cursor.acknowledge_batch(entry, 0b1011) == 0b1010  # and message 2
    await cursor.persist()
    await ledger.close()

    reopened = await open_ledger()
    recovered = reopened.cursors["s"]
    assert recovered.batch_deleted == {entry: 0b1010}
    assert not recovered.is_acknowledged(entry)
    # the rest of the batch: nothing left, the caller acks the entry whole
    assert recovered.acknowledge_batch(entry, 0b0101) == 0
    recovered.acknowledge([entry])
    await recovered.persist()
    assert recovered.batch_deleted == {}
    assert recovered.is_acknowledged(entry)


async def test_a_failed_write_takes_an_ack_set_back(
    stores: Stores, open_ledger: OpenLedger
) -> None:
    flaky = FlakyMetadata()
    stores.metadata = flaky
    ledger = await open_ledger()
    first = await ledger.add_entries([b"a", b"b"])
    cursor = await ManagedCursor.create(ledger, "s", "earliest")
    entry = Position(first.ledger_id, 1)
    cursor.acknowledge_batch(entry, 0b110)
    await cursor.persist()
    flaky.failing = True
    cursor.acknowledge_batch(entry, 0b011)
    assert cursor.batch_deleted == {entry: 0b010}
    with pytest.raises(StorageFaultError):
        await cursor.persist()
    assert cursor.batch_deleted == {entry: 0b110}, "back to what was durable"
    flaky.failing = False
    cursor.acknowledge_batch(entry, 0b011)  # the retry is a change that gets written
    await cursor.persist()
    assert (await open_ledger()).cursors["s"].batch_deleted == {entry: 0b010}


async def test_a_cumulative_ack_past_a_partly_acked_batch_drops_its_ack_set(
    open_ledger: OpenLedger,
) -> None:
    ledger = await open_ledger()
    first = await ledger.add_entries([b"x", b"y", b"z"])
    cursor = await ManagedCursor.create(ledger, "s", "earliest")
    middle = Position(first.ledger_id, 1)
    cursor.acknowledge_batch(middle, 0b01)
    cursor.acknowledge_cumulative(Position(first.ledger_id, 2))
    await cursor.persist()
    assert cursor.batch_deleted == {}
    assert (await open_ledger()).cursors["s"].batch_deleted == {}


class HeldMetadata(FlakyMetadata):
    """Puts wait at ``gate`` once it is set up, and fail while ``failing``."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()

    async def put(self, key: str, value: bytes) -> None:
        if self.gate is not None:
            self.entered.set()
            await self.gate.wait()
        await super().put(key, value)


async def test_an_ack_set_made_during_a_failing_write_is_applied_again_after_it(
    stores: Stores, open_ledger: OpenLedger
) -> None:
    held = HeldMetadata()
    stores.metadata = held
    ledger = await open_ledger()
    first = await ledger.add_entries([b"a", b"b"])
    cursor = await ManagedCursor.create(ledger, "s", "earliest")
    carried = Position(first.ledger_id, 0)
    later = Position(first.ledger_id, 1)
    cursor.acknowledge_batch(carried, 0b10)
    held.gate = asyncio.Event()
    held.failing = True
    failing = asyncio.create_task(cursor.persist())
    await held.entered.wait()  # the write is in flight
    cursor.acknowledge_batch(later, 0b01)  # made after that write began
    held.gate.set()
    with pytest.raises(StorageFaultError):
        await failing
    # the failed write's change is gone; the later one stands, for the next write
    assert cursor.batch_deleted == {later: 0b01}
    held.failing = False
    await cursor.persist()
    assert (await open_ledger()).cursors["s"].batch_deleted == {later: 0b01}
