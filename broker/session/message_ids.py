"""Message ids as clients name them: Pulsar's ids are Java longs carried in uint64
fields, and a client's start position uses two markers (earliest ``-1:-1``, latest
``Long.MAX_VALUE:Long.MAX_VALUE``). Each front end reads its own wire format (text
``L:E:I``, base64 or binary ``MessageIdData``) into these values."""

from __future__ import annotations

from typing import Literal

from broker.ledger.position import Position

#: ledger ids, entry ids and timestamps are Java longs in Pulsar
MAX_INT64 = 2**63 - 1
#: the batch index of a message id that names a whole entry
WHOLE_ENTRY = -1

Start = Position | Literal["earliest", "latest"]


def signed(value: int) -> int:
    """A uint64 field carrying a Java long (-1: Pulsar's earliest) back to its sign."""
    return value - (1 << 64) if value >= 1 << 63 else value


def start_of(ledger_id: int, entry_id: int) -> Start:
    """A client's start message id, both parts as the uint64 fields carry them:
    ``"earliest"`` (a negative ledger id), ``"latest"`` (ledger id Long.MAX_VALUE) or
    the position. O(1)."""
    ledger_id = signed(ledger_id)
    if ledger_id < 0:
        return "earliest"
    if ledger_id >= MAX_INT64:
        return "latest"
    return Position(ledger_id, signed(entry_id))
