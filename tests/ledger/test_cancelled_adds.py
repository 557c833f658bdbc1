"""An add whose caller is cancelled (a client that left) still ends in the ledger: the
bookie may hold the entries already, and an add never counted would leave a hole."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from broker.ledger.position import Position
from storage_stub.bookie.memory import InMemoryBookie
from tests.ledger.conftest import OpenLedger, Stores


class GatedBookie(InMemoryBookie):
    """Adds wait at ``gate`` (once it is set up) before they store."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: asyncio.Event | None = None
        self.waiting = 0
        self.both_waiting = asyncio.Event()

    def start_add(self, ledger_id: int, entries: Sequence[bytes]) -> asyncio.Future[int]:
        return asyncio.ensure_future(self._gated_add(ledger_id, entries))

    async def _gated_add(self, ledger_id: int, entries: Sequence[bytes]) -> int:
        if self.gate is not None:
            self.waiting += 1
            if self.waiting == 2:
                self.both_waiting.set()
            await self.gate.wait()
        return await asyncio.shield(super().start_add(ledger_id, entries))


async def test_a_cancelled_add_leaves_no_hole_before_later_adds(
    stores: Stores, open_ledger: OpenLedger
) -> None:
    bookie = GatedBookie()
    stores.bookie = bookie
    ledger = await open_ledger()
    await ledger.add_entries([b"a"])
    bookie.gate = asyncio.Event()
    cancelled = asyncio.create_task(ledger.add_entries([b"b"]))
    later = asyncio.create_task(ledger.add_entries([b"c"]))
    await bookie.both_waiting.wait()
    cancelled.cancel()
    bookie.gate.set()
    third = await later
    first_ledger = third.ledger_id
    # the cancelled add was stored and counted: the ledger reads through it
    assert ledger.last_confirmed == Position(first_ledger, 2)
    read = await ledger.read_entries(Position(first_ledger, 0), 10, "")
    assert [entry.data for entry in read] == [b"a", b"b", b"c"]
    await ledger.close()
