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

NEVER = 1 << 62


@dataclasses.dataclass
class BoundResult:
    size_bytes: int
    hits: int
    misses: int
    hit_bytes: int
    miss_bytes: int

    @property
    def hit_ratio(self) -> float:
        reads = self.hits + self.misses
        return self.hits / reads if reads else 0.0

    @property
    def byte_hit_ratio(self) -> float:
        total = self.hit_bytes + self.miss_bytes
        return self.hit_bytes / total if total else 0.0

    def as_row(self) -> dict[str, Any]:
        row = dataclasses.asdict(self)
        row["design"] = "belady"
        row["hit_ratio"] = self.hit_ratio
        row["byte_hit_ratio"] = self.byte_hit_ratio
        return row


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
    return BoundResult(capacity, hits, misses, hit_bytes, miss_bytes)
