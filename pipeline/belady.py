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
from collections.abc import Iterable
from typing import Any

from pipeline.outcome import CacheOutcome

NEVER = 1 << 62


@dataclasses.dataclass(kw_only=True)
class BoundResult(CacheOutcome):
    size_bytes: int

    def as_row(self) -> dict[str, Any]:
        return {**super().as_row(), "design": "belady"}


def belady(rows: Iterable[dict[str, Any]], capacity: int) -> BoundResult:
    """Rows in (``broker``, ``seq``) order with ``kind`` (add, read or restart), ``key``
    (the entry), ``size`` and ``next_read`` (the seq of the entry's next read, None if
    never); a row without ``broker`` is broker 0's."""
    cached: dict[int, tuple[int, int]] = {}  # key -> (next read, size)
    heap: list[tuple[int, int]] = []  # (-next read, key); stale items skipped
    used = hits = misses = hit_bytes = miss_bytes = 0
    broker = None
    for row in rows:
        if row.get("broker", 0) != broker or row["kind"] == "restart":
            # another broker's cache, or this one's again empty
            broker = row.get("broker", 0)
            cached.clear()
            heap.clear()
            used = 0
            if row["kind"] == "restart":
                continue
        key, size = row["key"], row["size"]
        if row["kind"] == "read":
            if key in cached:
                hits += 1
                hit_bytes += size
            else:
                misses += 1
                miss_bytes += size
        upcoming = row["next_read"]
        held = cached.pop(key, None)
        if held is not None:
            used -= held[1]
        if upcoming is None or size > capacity:
            continue
        cached[key] = (upcoming, size)
        used += size
        heapq.heappush(heap, (-upcoming, key))
        while used > capacity:
            negative, victim = heapq.heappop(heap)
            current = cached.get(victim)
            if current is None or current[0] != -negative:
                continue  # stale: evicted already, or its next read moved
            del cached[victim]
            used -= current[1]
    return BoundResult(
        size_bytes=capacity, hits=hits, misses=misses, hit_bytes=hit_bytes, miss_bytes=miss_bytes
    )
