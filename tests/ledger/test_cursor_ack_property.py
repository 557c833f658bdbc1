"""Property: any interleaving of individual and cumulative acks leaves mark-delete at the
first unacknowledged position minus one and the backlog equal to the unacked count, and
a recovered cursor agrees."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.cache import DEFAULT_DESIGN, CacheConfig, create_stream
from broker.clock import ManualClock
from broker.ledger.managed_cursor import ManagedCursor
from broker.ledger.managed_ledger import ManagedLedger, ManagedLedgerConfig
from broker.ledger.position import Position
from storage_stub.bookie.memory import InMemoryBookie, InMemoryMetadataStore

Ack = tuple[str, int]


def acks(entries: int) -> st.SearchStrategy[list[Ack]]:
    one = st.tuples(st.sampled_from(["individual", "cumulative"]), st.integers(0, entries - 1))
    return st.lists(one, max_size=60)


async def _scenario(entries: int, per_ledger: int, operations: list[Ack]) -> None:
    bookie, metadata = InMemoryBookie(), InMemoryMetadataStore()
    cache = create_stream(DEFAULT_DESIGN, CacheConfig(max_size_bytes=0), ManualClock())

    async def open_ledger() -> ManagedLedger:
        ledger = ManagedLedger(
            "persistent://t/ns/prop",
            bookie,
            metadata,
            cache.load_topic("persistent://t/ns/prop"),
            ManagedLedgerConfig(max_entries_per_ledger=per_ledger, min_rollover_ms=0),
            ManualClock(),
        )
        await ledger.open()
        return ledger

    ledger = await open_ledger()
    cursor = await ManagedCursor.create(ledger, "sub", "earliest")
    positions: list[Position] = []
    for index in range(entries):
        positions.append(await ledger.add_entries([b"m%d" % index]))
        await ledger.maybe_roll_over()
    before_first = cursor.mark_delete_position

    acked: set[int] = set()
    for kind, index in operations:
        if kind == "individual":
            cursor.acknowledge([positions[index]])
            acked.add(index)
        else:
            cursor.acknowledge_cumulative(positions[index])
            acked.update(range(index + 1))
        await cursor.persist()

        first_unacked = next((i for i in range(entries) if i not in acked), entries)
        expected = before_first if first_unacked == 0 else positions[first_unacked - 1]
        assert cursor.mark_delete_position == expected
        assert cursor.backlog() == entries - len(acked)
        for i, position in enumerate(positions):
            assert cursor.is_acknowledged(position) == (i in acked)

    await ledger.close()
    recovered = (await open_ledger()).cursors["sub"]
    assert recovered.mark_delete_position == cursor.mark_delete_position
    assert recovered.backlog() == entries - len(acked)
    unread = [e.position for e in await recovered.read_entries(entries + 1)]
    assert unread == [p for i, p in enumerate(positions) if i not in acked]


@settings(max_examples=150, deadline=None)
@given(data=st.data(), entries=st.integers(1, 25), per_ledger=st.integers(1, 6))
def test_any_interleaving_of_acks_keeps_mark_delete_and_backlog_exact(
    data: st.DataObject, entries: int, per_ledger: int
) -> None:
    operations = data.draw(acks(entries))
    asyncio.run(_scenario(entries, per_ledger, operations))
