"""StreamSetObjectRangeIndex: stream id -> sorted map start offset -> object id.

AutoMQ issue 2731 / PR 2710. Filled lazily: whenever a reader loads an object's index
block, every range of every stream in that object goes in (so one cold read also warms
the other streams that share its objects). A lookup is a floor search: the object whose
range of the stream starts at or before the offset, which is where a search of the
ordered SSO list may begin (every earlier object holds only smaller offsets).

Bounded like AutoMQ's Guava cache: at most ``max_streams`` streams (the least recently
touched goes first) and a stream untouched for ``ttl_ms`` expires; updates and
searches touch a stream. Expiry is checked on every call, from the oldest stream,
so each call pays O(1) amortized for it.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterable
from typing import Protocol

from sortedcontainers import SortedDict

from storage_stub.tiered.format import StreamRange


class MonotonicClock(Protocol):
    def monotonic_ns(self) -> int: ...


class SystemMonotonicClock:
    __slots__ = ()

    def monotonic_ns(self) -> int:
        return time.monotonic_ns()


class _StreamOffsets:
    __slots__ = ("offsets", "touched_ns")

    def __init__(self, now_ns: int) -> None:
        self.offsets: SortedDict = SortedDict()
        self.touched_ns = now_ns


class StreamSetObjectRangeIndex:
    """The lazily filled, bounded range index. Costs: ``search`` O(log(ranges of the
    stream)); ``update`` O(ranges x log(ranges of their stream)); ``invalidate``
    O(log(ranges of the stream)); memory O(indexed ranges)."""

    __slots__ = ("_clock", "_max_streams", "_streams", "_ttl_ns", "evicted", "expired")

    def __init__(self, max_streams: int, ttl_ms: int, clock: MonotonicClock | None = None) -> None:
        if max_streams < 1:
            raise ValueError(f"max_streams must be >= 1, got {max_streams}")
        if ttl_ms < 1:
            raise ValueError(f"ttl_ms must be >= 1, got {ttl_ms}")
        self._max_streams = max_streams
        self._ttl_ns = ttl_ms * 1_000_000
        self._clock: MonotonicClock = clock if clock is not None else SystemMonotonicClock()
        # Least recently touched first: expiry and eviction pop from the front.
        self._streams: OrderedDict[int, _StreamOffsets] = OrderedDict()
        self.evicted = 0
        self.expired = 0

    def __len__(self) -> int:
        """Streams indexed now (after dropping the expired ones)."""
        self._expire(self._clock.monotonic_ns())
        return len(self._streams)

    def __contains__(self, stream_id: object) -> bool:
        self._expire(self._clock.monotonic_ns())
        return stream_id in self._streams

    def ranges_indexed(self) -> int:
        return sum(len(entry.offsets) for entry in self._streams.values())

    def update(self, object_id: int, ranges: Iterable[StreamRange]) -> None:
        """Record that ``object_id`` holds ``ranges`` (every stream of a loaded object)."""
        now = self._clock.monotonic_ns()
        self._expire(now)
        streams = self._streams
        for stream_id, start_offset, _end_offset in ranges:
            entry = streams.get(stream_id)
            if entry is None:
                entry = streams[stream_id] = _StreamOffsets(now)
            else:
                entry.touched_ns = now
                streams.move_to_end(stream_id)
            entry.offsets[start_offset] = object_id
        while len(streams) > self._max_streams:
            streams.popitem(last=False)
            self.evicted += 1

    def search(self, stream_id: int, offset: int) -> tuple[int, int] | None:
        """``(start offset, object id)`` of the range of ``stream_id`` with the greatest
        start at or before ``offset``; None when the stream has no range indexed there."""
        now = self._clock.monotonic_ns()
        self._expire(now)
        entry = self._streams.get(stream_id)
        if entry is None:
            return None
        entry.touched_ns = now
        self._streams.move_to_end(stream_id)
        offsets = entry.offsets
        index = offsets.bisect_right(offset) - 1
        if index < 0:
            return None
        start_offset, object_id = offsets.peekitem(index)
        return int(start_offset), int(object_id)

    def search_after(self, stream_id: int, offset: int) -> tuple[int, int] | None:
        """``(start offset, object id)`` of the range of ``stream_id`` with the smallest
        start after ``offset``; None if none is indexed. Does not touch the stream."""
        self._expire(self._clock.monotonic_ns())
        entry = self._streams.get(stream_id)
        if entry is None:
            return None
        offsets = entry.offsets
        index = offsets.bisect_right(offset)
        if index >= len(offsets):
            return None
        start_offset, object_id = offsets.peekitem(index)
        return int(start_offset), int(object_id)

    def invalidate(self, stream_id: int, start_offset: int, object_id: int) -> None:
        """Forget ``start_offset -> object_id`` (an object that left the image)."""
        entry = self._streams.get(stream_id)
        if entry is None or entry.offsets.get(start_offset) != object_id:
            return
        del entry.offsets[start_offset]
        if not entry.offsets:
            del self._streams[stream_id]

    def remove_object(self, object_id: int, ranges: Iterable[StreamRange]) -> None:
        """Forget every entry of ``object_id`` among ``ranges`` (the ranges it held)."""
        for stream_id, start_offset, _end_offset in ranges:
            self.invalidate(stream_id, start_offset, object_id)

    def clear(self) -> None:
        self._streams.clear()

    def _expire(self, now_ns: int) -> None:
        streams = self._streams
        deadline = now_ns - self._ttl_ns
        while streams:
            stream_id, entry = next(iter(streams.items()))
            if entry.touched_ns > deadline:
                return
            del streams[stream_id]
            self.expired += 1
