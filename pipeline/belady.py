"""The optimal bound: Belady's farthest-next-use eviction, size aware, on the trace.

An entry can be cached when it is added (every design may cache the write path) or when
it is read; it is a hit when it is read while cached. Knowing every entry's next read
(computed by Spark with a window function, see ``pipeline.jobs``), the bound keeps the
entries read soonest: after each access the accessed entry is admitted and, while the
cache is over its size, the entry read farthest in the future is evicted, possibly the
one just admitted (a bypass). Entries never read again are not kept.

With equal sizes this is optimal (Belady's MIN with bypass); with sizes that vary it is
the standard size-aware heuristic, so a design could in principle beat it on a trace of
very uneven sizes. Cost: O(n log n) for n events, memory O(entries cached).

A trace of several brokers is several caches: the rows come broker by broker (next
reads are the same broker's), and each broker's cache, of the full capacity, starts
empty, as it does again at each of its ``restart`` rows. That a next read may come after
a restart does not matter: such entries are farther than any read before the restart,
so they are only ever evicted first, and the restart drops them. The bound of such a
trace is the sum of the brokers' bounds.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Iterable, Sequence
from typing import Any

from pipeline.outcome import CacheOutcome

NEVER = 1 << 62


@dataclasses.dataclass(kw_only=True)
class BoundResult(CacheOutcome):
    size_bytes: int

    def as_row(self) -> dict[str, Any]:
        return {**super().as_row(), "design": "belady"}


class _Cache:
    """One capacity's cache of the bound: what it holds, by next read."""

    __slots__ = ("cached", "capacity", "heap", "hit_bytes", "hits", "miss_bytes", "misses", "used")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.cached: dict[int, tuple[int, int]] = {}  # key -> (next read, size)
        self.heap: list[tuple[int, int]] = []  # (-next read, key); stale items skipped
        self.used = self.hits = self.misses = self.hit_bytes = self.miss_bytes = 0

    def empty(self) -> None:
        self.cached.clear()
        self.heap.clear()
        self.used = 0

    def access(self, read: bool, key: Any, size: int, upcoming: int | None) -> None:
        """One access: O(log n) amortized (each pushed item is popped at most once)."""
        cached = self.cached
        if read:
            if key in cached:
                self.hits += 1
                self.hit_bytes += size
            else:
                self.misses += 1
                self.miss_bytes += size
        held = cached.pop(key, None)
        if held is not None:
            self.used -= held[1]
        capacity = self.capacity
        if upcoming is None or size > capacity:
            return
        cached[key] = (upcoming, size)
        self.used += size
        heap = self.heap
        heapq.heappush(heap, (-upcoming, key))
        while self.used > capacity:
            negative, victim = heapq.heappop(heap)
            current = cached.get(victim)
            if current is None or current[0] != -negative:
                continue  # stale: evicted already, or its next read moved
            del cached[victim]
            self.used -= current[1]

    def result(self) -> BoundResult:
        return BoundResult(
            size_bytes=self.capacity,
            hits=self.hits,
            misses=self.misses,
            hit_bytes=self.hit_bytes,
            miss_bytes=self.miss_bytes,
        )


def belady(rows: Iterable[dict[str, Any]], capacity: int) -> BoundResult:
    """Rows in (``broker``, ``seq``) order with ``kind`` (add, read or restart), ``key``
    (the entry), ``size`` and ``next_read`` (the seq of the entry's next read, None if
    never); a row without ``broker`` is broker 0's."""
    run = BoundRun([capacity])
    run.feed(rows)
    return run.results()[0]


class BoundRun:
    """The bound at several capacities in one pass: rows (as :func:`belady` takes them)
    are fed in order, in as many calls as the caller likes (a batch at a time), each
    row to every capacity's cache. O(n log n) per capacity."""

    __slots__ = ("_broker", "_caches", "_started")

    def __init__(self, capacities: Sequence[int]) -> None:
        self._caches = [_Cache(capacity) for capacity in capacities]
        self._broker: Any = None
        self._started = False

    def feed(self, rows: Iterable[dict[str, Any]]) -> None:
        caches = self._caches
        for row in rows:
            kind = row["kind"]
            if not self._started or row.get("broker", 0) != self._broker or kind == "restart":
                # another broker's cache, or this one's again empty
                self._started = True
                self._broker = row.get("broker", 0)
                for cache in caches:
                    cache.empty()
                if kind == "restart":
                    continue
            read, key, size, upcoming = kind == "read", row["key"], row["size"], row["next_read"]
            for cache in caches:
                cache.access(read, key, size, upcoming)

    def feed_batch(self, batch: Any) -> None:
        """The rows of a record batch (``next_reads``' columns), column by column: what
        :meth:`feed` counts for the same rows as dicts, without a dict per row."""
        kinds = batch.column("kind").to_pylist()
        keys = batch.column("key").to_pylist()
        sizes = batch.column("size").to_pylist()
        upcoming = batch.column("next_read").to_pylist()
        names = batch.schema.names
        brokers = batch.column("broker").to_pylist() if "broker" in names else [0] * len(kinds)
        caches = self._caches
        for kind, key, size, next_read, broker in zip(
            kinds, keys, sizes, upcoming, brokers, strict=True
        ):
            if not self._started or broker != self._broker or kind == "restart":
                self._started = True
                self._broker = broker
                for cache in caches:
                    cache.empty()
                if kind == "restart":
                    continue
            read = kind == "read"
            for cache in caches:
                cache.access(read, key, size, next_read)

    def results(self) -> list[BoundResult]:
        """The counts so far, one result per capacity, in the order given."""
        return [cache.result() for cache in self._caches]
