"""The cache eviction timer, the async edge of the (synchronous) cache designs: one
``tick`` of the cache event stream every ``managedLedgerCacheEvictionIntervalMs``, each
design running its timestamp pass and, above its trigger, its size pass. (Size passes
after inserts run inside the designs, right after the inserting event.)

**Difference from Pulsar**, in cost only: Pulsar's timer runs every interval. Here the
timer sleeps through the rounds that would do nothing, those at or before
:meth:`CacheEventStream.quiet_until_ns` (until the oldest cached entry expires; for
good while nothing is cached), and wakes for the first round after it, on the same
grid of intervals: a round that acts runs when it would have. Each wake-up of an
otherwise idle event loop cost about 0.2 ms of CPU on the 2-core machine of
``bench wire`` (a bare uvloop with a 10 ms timer spent 2% of a core), so the rounds
that only found nothing expired were most of an idle broker's CPU and about a tenth of
its CPU per message in ``bench wire``'s batched rows. The timer still wakes at least
every ``MAX_QUIET_S``, so that a setting or a clock that changed meanwhile is seen
within it."""

from __future__ import annotations

import asyncio

from broker.cache.stream import CacheEventStream

#: the longest the timer sleeps through rounds that would do nothing
MAX_QUIET_S = 1.0


class CacheEvictor:
    __slots__ = ("_interval_s", "_stream")

    def __init__(self, stream: CacheEventStream, interval_ms: int) -> None:
        self._stream = stream
        self._interval_s = interval_ms / 1000

    def next_delay_s(self) -> float:
        """How long to sleep after a round: one interval, or as many as the rounds in a
        row that would do nothing, plus one (at most ``MAX_QUIET_S``). O(1) plus the
        stream's ``quiet_until_ns``."""
        interval = self._interval_s
        if interval <= 0:
            return interval
        stream = self._stream
        until = stream.quiet_until_ns()
        if until is None:
            return interval
        quiet_s = (until - stream.now_ns()) / 1e9
        if quiet_s < interval:
            return interval
        most = max(int(MAX_QUIET_S / interval), 1)
        return min(int(quiet_s / interval) + 1, most) * interval

    async def run(self) -> None:
        """The timer: the rounds of every interval that may act, until cancelled."""
        delay = self._interval_s
        while True:
            await asyncio.sleep(delay)
            self._stream.tick()
            delay = self.next_delay_s()
