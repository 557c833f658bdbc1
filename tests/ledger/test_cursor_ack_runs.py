"""Individual acks of several positions in one call (a client's grouped ACK): in order,
out of order, repeated or across ledgers, they leave the cursor where acking them one by
one would, and a mark-delete moved by them is told to the topic's cache events."""

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


async def _ledger_with(entries: int, per_ledger: int) -> tuple[ManagedLedger, list[Position]]:
    cache = create_stream(DEFAULT_DESIGN, CacheConfig(max_size_bytes=0), ManualClock())
    ledger = ManagedLedger(
        "persistent://t/ns/runs",
        InMemoryBookie(),
        InMemoryMetadataStore(),
        cache.load_topic("persistent://t/ns/runs"),
        ManagedLedgerConfig(max_entries_per_ledger=per_ledger, min_rollover_ms=0),
        ManualClock(),
    )
    await ledger.open()
    positions = []
    for index in range(entries):
        positions.append(await ledger.add_entries([b"m%d" % index]))
        await ledger.maybe_roll_over()
    return ledger, positions


async def _scenario(entries: int, per_ledger: int, calls: list[list[int]]) -> None:
    ledger, positions = await _ledger_with(entries, per_ledger)
    together = await ManagedCursor.create(ledger, "together", "earliest")
    one_by_one = await ManagedCursor.create(ledger, "one-by-one", "earliest")
    for call in calls:
        named = [positions[index] for index in call]
        added = together.acknowledge(named)
        assert added == sum(one_by_one.acknowledge([position]) for position in named)
        assert together.mark_delete_position == one_by_one.mark_delete_position
        assert together.read_position == one_by_one.read_position
        assert together.backlog() == one_by_one.backlog()
        assert str(together.individually_deleted) == str(one_by_one.individually_deleted)
        for position in positions:
            assert together.is_acknowledged(position) == one_by_one.is_acknowledged(position)
    await together.persist()
    unread = [entry.position for entry in await together.read_entries(entries + 1)]
    assert unread == [p for p in positions if not one_by_one.is_acknowledged(p)]
    await ledger.close()


@settings(max_examples=150, deadline=None)
@given(data=st.data(), entries=st.integers(1, 20), per_ledger=st.integers(1, 6))
def test_acks_named_together_do_what_acking_them_one_by_one_does(
    data: st.DataObject, entries: int, per_ledger: int
) -> None:
    index = st.integers(0, entries - 1)
    calls = data.draw(st.lists(st.lists(index, max_size=12), max_size=8))
    asyncio.run(_scenario(entries, per_ledger, calls))


def test_acks_in_order_move_mark_delete_and_tell_the_cache_events_once() -> None:
    async def scenario() -> None:
        ledger, positions = await _ledger_with(10, 100)
        cursor = await ManagedCursor.create(ledger, "sub", "earliest")
        await cursor.read_entries(10)
        told: list[Position] = []
        original = ledger.cursor_moved

        def spy(moved: ManagedCursor) -> None:
            told.append(moved.mark_delete_position)
            original(moved)

        ledger.cursor_moved = spy  # type: ignore[method-assign]
        assert cursor.acknowledge(positions[:4]) == 4
        assert cursor.mark_delete_position == positions[3]
        assert not cursor.individually_deleted
        assert told == [positions[3]]
        assert cursor.acknowledge(positions[3:5]) == 1  # 3 again: not new
        assert told == [positions[3], positions[4]]
        assert cursor.backlog() == 5
        await ledger.close()

    asyncio.run(scenario())
