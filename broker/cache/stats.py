"""Cache counters, the same for every design, in the shape the API and metrics need."""

from __future__ import annotations

from typing import Any


class CacheCounters:
    """Counters since start; bumped on hot paths, so plain attributes."""

    __slots__ = (
        "entries",
        "evicted_invalidated",
        "evicted_size",
        "evicted_ttl",
        "eviction_cpu_ns",
        "eviction_runs",
        "hit_bytes",
        "hits",
        "inserted",
        "joined",
        "miss_bytes",
        "misses",
        "requested",
        "size",
    )

    def __init__(self) -> None:
        self.hits = 0
        self.hit_bytes = 0
        self.misses = 0
        self.miss_bytes = 0
        #: entries a reader waited for from a storage read another reader started
        #: (Pulsar counts them neither hit nor miss)
        self.joined = 0
        #: entries asked for by reads, hit, joined or read from storage
        self.requested = 0
        self.inserted = 0
        self.evicted_ttl = 0
        self.evicted_size = 0
        self.evicted_invalidated = 0
        self.eviction_runs = 0
        #: CPU time (this thread's clock) spent in eviction passes; not the cache clock,
        #: which may be virtual
        self.eviction_cpu_ns = 0
        self.entries = 0
        self.size = 0

    def carry_over(self, previous: CacheCounters) -> None:
        """Continue the totals of a broker's previous cache (a restart of a broker in a
        cluster): counts go on from there, contents (entries, size) do not."""
        for name in self.__slots__:
            if name not in ("entries", "size"):
                setattr(self, name, getattr(self, name) + getattr(previous, name))

    def snapshot(self, implementation: str, max_size: int) -> dict[str, Any]:
        return {
            "implementation": implementation,
            "maxSizeBytes": max_size,
            "sizeBytes": self.size,
            "entries": self.entries,
            "hits": self.hits,
            "misses": self.misses,
            "hitBytes": self.hit_bytes,
            "missBytes": self.miss_bytes,
            "joined": self.joined,
            "requested": self.requested,
            "inserted": self.inserted,
            "evicted": {
                "ttl": self.evicted_ttl,
                "size": self.evicted_size,
                "invalidated": self.evicted_invalidated,
            },
            "evictionRuns": self.eviction_runs,
            "evictionCpuSeconds": self.eviction_cpu_ns / 1e9,
            "entriesWithExpectedReads": 0,
        }
