"""The cache eviction timer, the async edge of the (synchronous) cache designs: one
``tick`` of the cache event stream every ``managedLedgerCacheEvictionIntervalMs``, each
design running its timestamp pass and, above its trigger, its size pass. (Size passes
after inserts run inside the designs, right after the inserting event.)"""

from __future__ import annotations

import asyncio

from broker.cache.stream import CacheEventStream


class CacheEvictor:
    __slots__ = ("_interval_s", "_stream")

    def __init__(self, stream: CacheEventStream, interval_ms: int) -> None:
        self._stream = stream
        self._interval_s = interval_ms / 1000

    async def run(self) -> None:
        """The timer: one eviction round per interval, until cancelled."""
        while True:
            await asyncio.sleep(self._interval_s)
            self._stream.tick()
