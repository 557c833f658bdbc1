"""What a cache holds per entry, shared by every design."""

from __future__ import annotations

from typing import Any


class CachedEntry:
    """One cached entry: its payload (None in size-only shadows and replays), its size,
    and the bookkeeping eviction needs. ``expected_reads`` is Pulsar's expected read
    count: the cursors still expected to read this entry (it may go negative, as in
    Pulsar; only ``>= 1`` counts as remaining reads). PIP-430 sets it
    (``broker/cache/pip430.py``), the ``released`` and ``replay_added`` events move it
    (``broker/cache/unit.py``), the removal queue reads it (``removal_queue.py``)."""

    __slots__ = (
        "accessed",
        "cache",
        "data",
        "entry_id",
        "expected_reads",
        "ledger_id",
        "messages",
        "removed",
        "requeue_count",
        "size",
        "timestamp_ns",
    )

    def __init__(
        self,
        cache: Any,
        ledger_id: int,
        entry_id: int,
        data: bytes | memoryview | None,
        size: int,
        expected_reads: int,
        timestamp_ns: int,
    ) -> None:
        self.cache = cache
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        self.data = data
        self.size = size
        self.expected_reads = expected_reads
        self.timestamp_ns = timestamp_ns
        self.accessed = False
        self.requeue_count = 0
        self.removed = False
        #: messages in the entry, as the produce path checked them (0: not known; a
        #: read then parses the metadata, see ``broker.ledger.entry.Entry``)
        self.messages = 0

    def __repr__(self) -> str:
        return (
            f"CachedEntry({self.ledger_id}:{self.entry_id}, {self.size} B, "
            f"reads={self.expected_reads}, requeued={self.requeue_count})"
        )
