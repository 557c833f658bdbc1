"""StreamIdBloomFilters: per object, a bloom filter of the stream ids it holds.

AutoMQ PR 2710's StreamIdBloomFilter: built once when an object's index block is
loaded (static afterwards), false-positive rate 0.01, consulted before loading an
object's index block again; all filters together are capped in bytes (AutoMQ: 20 MiB),
the least recently used dropped first; a filter leaves with its object. An object
without a filter "might contain" every stream. A filter costs about 1.2 bytes per
stream at 1% (rbloom: 9,000 streams -> 10,784 bytes), plus 8 bytes of key accounting.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from rbloom import Bloom

#: Bytes charged per filter on top of its bits (the object id key, as AutoMQ counts).
KEY_BYTES = 8


class StreamIdBloomFilters:
    """Costs: ``might_contain`` O(1) (k hashes) and an LRU touch; ``add`` O(streams);
    ``remove`` O(1); eviction O(filters dropped)."""

    __slots__ = ("_false_positive_rate", "_filters", "_max_bytes", "bytes", "evicted")

    def __init__(self, max_bytes: int, false_positive_rate: float = 0.01) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        if not 0.0 < false_positive_rate < 1.0:
            raise ValueError(
                f"false_positive_rate must be within (0, 1), got {false_positive_rate}"
            )
        self._max_bytes = max_bytes
        self._false_positive_rate = false_positive_rate
        # Least recently used first.
        self._filters: OrderedDict[int, tuple[Bloom, int]] = OrderedDict()
        self.bytes = 0
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._filters)

    def __contains__(self, object_id: object) -> bool:
        """Whether ``object_id`` has a filter (no LRU touch)."""
        return object_id in self._filters

    def might_contain(self, object_id: int, stream_id: int) -> bool:
        """False only when the object's filter excludes the stream for sure."""
        held = self._filters.get(object_id)
        if held is None:
            return True
        self._filters.move_to_end(object_id)
        return stream_id in held[0]

    def add(self, object_id: int, stream_ids: Sequence[int]) -> None:
        """Build the filter of ``object_id`` (no-op if it has one); evict LRU to the cap."""
        if object_id in self._filters or self._max_bytes == 0:
            return
        bloom = Bloom(max(1, len(stream_ids)), self._false_positive_rate)
        bloom.update(stream_ids)
        size = bloom.size_in_bits // 8 + KEY_BYTES
        if size > self._max_bytes:
            return
        self._filters[object_id] = (bloom, size)
        self.bytes += size
        while self.bytes > self._max_bytes:
            _, (_, dropped) = self._filters.popitem(last=False)
            self.bytes -= dropped
            self.evicted += 1

    def remove(self, object_id: int) -> None:
        held = self._filters.pop(object_id, None)
        if held is not None:
            self.bytes -= held[1]

    def clear(self) -> None:
        self._filters.clear()
        self.bytes = 0
