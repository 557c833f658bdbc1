"""LiveEntries: a read of an entry something still holds hands out that same Entry; an
entry nobody holds is not kept."""

from __future__ import annotations

from broker.ledger.live_entries import LiveEntries
from broker.ledger.position import Position


def test_an_entry_held_somewhere_is_handed_out_again_not_copied() -> None:
    live = LiveEntries()
    held = live.entry(Position(3, 7), b"first read")
    again = live.entry(Position(3, 7), b"second read, same entry")
    other = live.entry(Position(3, 8), b"next entry")

    assert again is held and again.data == b"first read"
    assert other is not held and other.data == b"next entry"
    assert len(live) == 2


def test_an_entry_nobody_holds_is_forgotten_at_once() -> None:
    live = LiveEntries()
    entry = live.entry(Position(3, 7), b"first read")
    del entry  # its last holder lets it go: no collection needed

    assert len(live) == 0
    fresh = live.entry(Position(3, 7), b"read again")
    assert fresh.data == b"read again"
    assert len(live) == 1
