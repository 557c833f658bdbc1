"""Pulsar's managed-ledger cache rates (``pulsar_ml_cache_*``): per-second rates of the
cache counters over the last stats period, refreshed by the broker's upkeep."""

from __future__ import annotations

from typing import Any


class CacheRates:
    """Rates from two snapshots of the cache stats. ``refresh`` is O(1)."""

    __slots__ = (
        "_last",
        "evictions",
        "hits_rate",
        "hits_throughput",
        "misses_rate",
        "misses_throughput",
    )

    def __init__(self) -> None:
        self._last: dict[str, Any] | None = None
        self.hits_rate = 0.0
        self.misses_rate = 0.0
        self.hits_throughput = 0.0
        self.misses_throughput = 0.0
        #: size evictions (eviction runs) during the last period, as Pulsar reports
        self.evictions = 0

    def refresh(self, stats: dict[str, Any], elapsed_s: float) -> None:
        last = self._last
        self._last = stats
        if last is None or elapsed_s <= 0:
            return
        self.hits_rate = (stats["hits"] - last["hits"]) / elapsed_s
        self.misses_rate = (stats["misses"] - last["misses"]) / elapsed_s
        self.hits_throughput = (stats["hitBytes"] - last["hitBytes"]) / elapsed_s
        self.misses_throughput = (stats["missBytes"] - last["missBytes"]) / elapsed_s
        self.evictions = stats["evictionRuns"] - last["evictionRuns"]
