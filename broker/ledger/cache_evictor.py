"""Eviction scheduling, the async edge of the (synchronous) cache: a timer task runs the
manager's eviction round every ``managedLedgerCacheEvictionIntervalMs``, and an insert
that pushes the cache over its trigger schedules a size pass right away. Passes run to
completion on the event loop, so at most one is ever in flight."""

from __future__ import annotations

import asyncio

from broker.cache.api import EntryCacheManager


class CacheEvictor:
    __slots__ = ("_interval_s", "_manager", "_scheduled")

    def __init__(self, manager: EntryCacheManager, interval_ms: int) -> None:
        self._manager = manager
        self._interval_s = interval_ms / 1000
        self._scheduled = False

    def after_insert(self) -> None:
        """Called after inserts: schedule one size pass if the cache is over its trigger.
        O(1); the pass itself runs soon after, outside the inserting call."""
        if not self._scheduled and self._manager.needs_eviction():
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._size_pass)

    def _size_pass(self) -> None:
        self._scheduled = False
        self._manager.do_cache_eviction()

    async def run(self) -> None:
        """The timer: one eviction round per interval, until cancelled."""
        while True:
            await asyncio.sleep(self._interval_s)
            self._manager.do_cache_eviction()
