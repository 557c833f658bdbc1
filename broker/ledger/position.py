"""Positions in a managed ledger: (ledger id, entry id), ordered as Pulsar orders them."""

from __future__ import annotations

from typing import NamedTuple


class Position(NamedTuple):
    """A point in a managed ledger. Tuple ordering is Pulsar's ordering.

    ``entry_id`` may be -1: "before the first entry of this ledger" (a mark-delete
    position that has acknowledged nothing yet).
    """

    ledger_id: int
    entry_id: int

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"


def parse_position(text: str) -> Position:
    """Parse ``"L:E"`` (both non-negative integers). ValueError on anything else."""
    ledger, sep, entry = text.partition(":")
    if (
        not sep
        or not ledger.isdigit()
        or not entry.isdigit()
        or not ledger.isascii()
        or not entry.isascii()
    ):
        raise ValueError(f"bad message id {text!r}: expected 'ledgerId:entryId'")
    return Position(int(ledger), int(entry))
