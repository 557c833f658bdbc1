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
    """Rows in ``seq`` order with ``kind`` (add or read), ``key`` (the entry), ``size``
    and ``next_read`` (the seq of the entry's next read, None if never)."""
    cached: dict[int, tuple[int, int]] = {}  # key -> (next read, size)
    heap: list[tuple[int, int]] = []  # (-next read, key); stale items skipped
    used = hits = misses = hit_bytes = miss_bytes = 0
    for row in rows:
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
