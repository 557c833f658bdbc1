"""``ManagedCursor.nth_unacknowledged`` (peek's and skip's position): the n-th entry
after the mark-delete position not acknowledged, counted a ledger and a deleted range at
a time, so a client's count (up to 2^31 - 1) costs no walk over that much backlog."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.ledger.managed_cursor import ManagedCursor
from broker.ledger.position import Position
from tests.harness import python_calls
from tests.ledger.test_cursor_ack_runs import _ledger_with


def walked(cursor: ManagedCursor, n: int) -> Position | None:
    """The rule, an entry at a time: each confirmed entry after the mark-delete
    position, in order, that is not acknowledged counts one (0: the mark-delete
    position itself, where a skip of none leaves the cursor)."""
    ledger = cursor.ledger
    position = cursor.mark_delete_position
    if n == 0:
        return position
    while True:
        position = ledger.normalize(ledger.next_position(position))
        if not ledger.is_readable(position):
            return None
        if not cursor.is_acknowledged(position):
            n -= 1
            if n == 0:
                return position


async def _scenario(entries: int, per_ledger: int, acked: list[int], cumulative: int) -> None:
    ledger, positions = await _ledger_with(entries, per_ledger)
    cursor = await ManagedCursor.create(ledger, "sub", "earliest")
    if cumulative >= 0:
        cursor.acknowledge_cumulative(positions[cumulative])
    cursor.acknowledge([positions[index] for index in acked])
    for n in range(0, cursor.backlog() + 3):
        deleted = str(cursor.individually_deleted)
        assert cursor.nth_unacknowledged(n) == walked(cursor, n), (n, deleted)
    await ledger.close()


@settings(max_examples=150, deadline=None)
@given(data=st.data(), entries=st.integers(1, 24), per_ledger=st.integers(1, 7))
def test_the_nth_unacknowledged_entry_is_the_one_an_entry_by_entry_walk_finds(
    data: st.DataObject, entries: int, per_ledger: int
) -> None:
    acked = data.draw(st.lists(st.integers(0, entries - 1), max_size=entries))
    cumulative = data.draw(st.integers(-1, entries - 1))
    asyncio.run(_scenario(entries, per_ledger, acked, cumulative))


def test_a_count_deep_in_the_backlog_costs_no_walk_over_it() -> None:
    """The Python calls to find the 20,000th of 20,000 entries with every tenth acked:
    an entry at a time, about 100,000."""

    async def scenario() -> None:
        ledger, _ = await _ledger_with(0, 100_000)
        first = await ledger.add_entries([b"m"] * 22_000)
        cursor = await ManagedCursor.create(ledger, "sub", "earliest")
        cursor.acknowledge([Position(first.ledger_id, i) for i in range(0, 22_000, 10)])
        found, calls = python_calls(lambda: cursor.nth_unacknowledged(19_800))
        assert found == Position(first.ledger_id, 21_999)
        assert calls < 10_000, calls
        await ledger.close()

    asyncio.run(scenario())
