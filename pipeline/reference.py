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
from collections.abc import Iterable
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
    import libcachesim

    cache = None
    broker = None
    request = libcachesim.Request()
    hits = misses = hit_bytes = miss_bytes = 0
    for clock, row in enumerate(rows):
        if cache is None or row.get("broker", 0) != broker or row["kind"] == "restart":
            # another broker's cache, or this one's again empty
            broker = row.get("broker", 0)
            cache = getattr(libcachesim, policy)(capacity, hashpower=HASHPOWER)
            if row["kind"] == "restart":
                continue
        size = row["size"]
        request.obj_id = row["key"] & UINT64
        request.obj_size = size
        request.clock_time = clock
        hit = cache.get(request)
        if row["kind"] != "read":
            continue
        if hit:
            hits += 1
            hit_bytes += size
        else:
            misses += 1
            miss_bytes += size
    return ReferenceResult(
        design=policy,
        size_bytes=capacity,
        hits=hits,
        misses=misses,
        hit_bytes=hit_bytes,
        miss_bytes=miss_bytes,
    )
