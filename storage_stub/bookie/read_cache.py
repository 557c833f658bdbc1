"""BookKeeper's read cache (DbLedgerStorage's ReadCache): entries read from the entry log,
copied into a ring of segments, with read-ahead of the entries that follow a miss.

Segments: max(2, size / 1 GiB), each size / segments bytes, buffers allocated on first
use. A put copies into the current segment; when it is full the next segment becomes
current and is cleared first. A get probes the segments newest first.
"""

from __future__ import annotations

GIB = 1 << 30


class _Segment:
    __slots__ = ("buffer", "index", "size", "used")

    def __init__(self, size: int) -> None:
        self.size = size
        self.buffer: bytearray | None = None
        self.index: dict[tuple[int, int], tuple[int, int]] = {}
        self.used = 0


class ReadCache:
    """Costs: put O(len(data)) (a rotation O(entries cleared)); get O(segments)."""

    __slots__ = ("_current", "_segments", "hits", "misses", "read_ahead", "segment_size")

    def __init__(self, max_bytes: int) -> None:
        count = max(2, max_bytes // GIB)
        self.segment_size = max_bytes // count
        self._segments = [_Segment(self.segment_size) for _ in range(count)]
        self._current = 0
        self.hits = 0
        self.misses = 0
        #: entries put by read-ahead (not asked for by the read that missed)
        self.read_ahead = 0

    def get(self, ledger_id: int, entry_id: int) -> bytes | None:
        key = (ledger_id, entry_id)
        segments = self._segments
        count = len(segments)
        for back in range(count):
            segment = segments[(self._current - back) % count]
            where = segment.index.get(key)
            if where is not None:
                assert segment.buffer is not None
                self.hits += 1
                offset, length = where
                return bytes(segment.buffer[offset : offset + length])
        self.misses += 1
        return None

    def put(self, ledger_id: int, entry_id: int, data: bytes) -> None:
        length = len(data)
        if length > self.segment_size:
            return
        segment = self._segments[self._current]
        if segment.used + length > segment.size:
            self._current = (self._current + 1) % len(self._segments)
            segment = self._segments[self._current]
            segment.index.clear()
            segment.used = 0
        if segment.buffer is None:
            segment.buffer = bytearray(segment.size)
        offset = segment.used
        segment.buffer[offset : offset + length] = data
        segment.index[(ledger_id, entry_id)] = (offset, length)
        segment.used += length

    def entries(self) -> int:
        return sum(len(segment.index) for segment in self._segments)
