"""How managed ledgers map onto the tiered store: one stream per topic, offsets
``ledger id << 32 | entry id`` (increasing, contiguous within a ledger)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Protocol


class TieredStorage(Protocol):
    """What the ledger layer needs of the tiered store."""

    async def upload(self, ranges: Iterable[tuple[int, int, Sequence[bytes]]]) -> int: ...

    async def read(
        self, stream_id: int, start_offset: int, end_offset: int
    ) -> list[tuple[int, bytes]]: ...

    async def compact_if_needed(self) -> object:
        """Bound the number of stream set objects (compaction), if over the limit."""
        ...


def stream_id_of(ledger_name: str) -> int:
    """A stable 56-bit stream id for a managed ledger (collisions: about 1 in 2^28 at a
    million topics)."""
    return int.from_bytes(hashlib.blake2b(ledger_name.encode(), digest_size=7).digest(), "big")


def offset_of(ledger_id: int, entry_id: int) -> int:
    return (ledger_id << 32) | entry_id
