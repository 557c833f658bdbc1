"""Reference policies from libcachesim (LRU, S3-FIFO, ARC, W-TinyLFU) on the same
request stream, when the optional ``reference`` extra is installed.

They are general-purpose caches, not broker designs: every added entry goes through
them as a request whose result is not counted (so, like the broker designs, they can
keep what was just written), and every read is a counted request. Sizes are bytes.
As for the bound (``pipeline.belady``), each broker of a trace has a cache of its own,
of the full capacity, which starts again empty at each of the broker's restarts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from pipeline.outcome import CacheOutcome

POLICIES = ("LRU", "S3FIFO", "ARC", "WTinyLFU")
#: libcachesim's hash table: 2^20 buckets, not the default 2^24 that dominates small runs
HASHPOWER = 20
UINT64 = (1 << 64) - 1


def available() -> bool:
    try:
        import libcachesim  # noqa: F401
    except ImportError:
        return False
    return True


@dataclasses.dataclass(kw_only=True)
class ReferenceResult(CacheOutcome):
    design: str
    size_bytes: int


def simulate(rows: Iterable[dict[str, Any]], policy: str, capacity: int) -> ReferenceResult:
    """Rows in (``broker``, ``seq``) order with ``kind`` (add, read or restart), ``key``
    and ``size``; a row without ``broker`` is broker 0's."""
    run = ReferenceRun(policy, [capacity])
    run.feed(rows)
    return run.results()[0]


class ReferenceRun:
    """``policy`` at several capacities in one pass: rows (as :func:`simulate` takes
    them) are fed in order, in as many calls as the caller likes (a batch at a time),
    each row to every capacity's cache. Each capacity has a cache and a request of its
    own, so it counts what a run of that capacity alone counts. O(rows x capacities)
    calls into libcachesim."""

    __slots__ = (
        "_broker",
        "_caches",
        "_capacities",
        "_clock",
        "_counts",
        "_make",
        "_requests",
        "policy",
    )

    def __init__(self, policy: str, capacities: Sequence[int]) -> None:
        import libcachesim

        self._make = getattr(libcachesim, policy)
        self.policy = policy
        self._capacities = list(capacities)
        self._caches: list[Any] = []
        self._requests = [libcachesim.Request() for _ in capacities]
        #: per capacity: hits, misses, hit bytes, miss bytes
        self._counts = [[0, 0, 0, 0] for _ in capacities]
        self._broker: Any = None
        #: the request's time: the row's position in the stream (restarts included)
        self._clock = 0

    def feed(self, rows: Iterable[dict[str, Any]]) -> None:
        requests, counts = self._requests, self._counts
        for row in rows:
            clock = self._clock
            self._clock += 1
            kind = row["kind"]
            if not self._caches or row.get("broker", 0) != self._broker or kind == "restart":
                # another broker's caches, or this one's again empty
                self._broker = row.get("broker", 0)
                self._caches = [self._make(size, hashpower=HASHPOWER) for size in self._capacities]
                if kind == "restart":
                    continue
            size = row["size"]
            key = row["key"] & UINT64
            read = kind == "read"
            for cache, request, count in zip(self._caches, requests, counts, strict=True):
                request.obj_id = key
                request.obj_size = size
                request.clock_time = clock
                hit = cache.get(request)
                if not read:
                    continue
                if hit:
                    count[0] += 1
                    count[2] += size
                else:
                    count[1] += 1
                    count[3] += size

    def results(self) -> list[ReferenceResult]:
        """The counts so far, one result per capacity, in the order given."""
        return [
            ReferenceResult(
                design=self.policy,
                size_bytes=capacity,
                hits=hits,
                misses=misses,
                hit_bytes=hit_bytes,
                miss_bytes=miss_bytes,
            )
            for capacity, (hits, misses, hit_bytes, miss_bytes) in zip(
                self._capacities, self._counts, strict=True
            )
        ]
