"""The dashboard's history: what a broker's dashboard charts, sampled on the broker's
clock for the whole run, so a page opened at any time draws the run from its start.

A :class:`DashboardSampler` reads one broker's counters every
``brokerlabDashboardSampleIntervalMs`` of the loop's time (virtual time in a virtual run)
into a :class:`SeriesHistory`, stamped with the broker clock's wall time. A row holds
counters since the run started (messages, cache hits and misses of the live design and
of every shadow, evictions, storage reads) and gauges (cache size, limit, watermark, the
event loop's longest lag since the row before):
rates are differences of counters over the time between two rows, so a thinned history
still gives the right mean rate over each of its (longer) intervals.
"""

from __future__ import annotations

import asyncio
import logging
from array import array
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from broker.clock import Clock

if TYPE_CHECKING:
    from broker.cache import CacheEventStream
    from broker.dispatch.service import BrokerService
    from storage_stub.bookie import Storage

log = logging.getLogger(__name__)

#: the first step between the rows kept before the fully kept part (it doubles as the
#: run grows, see SeriesHistory)
OLDER_STEP_MS = 10_000

#: the columns of every row, then two per shadow (``shadow.<name>.hits``, ``.misses``)
COLUMNS = (
    "timeMs",
    "produced",
    "dispatched",
    "hits",
    "misses",
    "joined",
    "sizeBytes",
    "maxSizeBytes",
    "watermarkBytes",
    "evictedTtl",
    "evictedSize",
    "evictedInvalidated",
    "bookieEntriesRead",
    "tieredEntriesRead",
    "lastEntryCacheHits",
    "lastEntryCacheMisses",
    "getFloorCalls",
    "tieredIndexLoads",
    "loopLagMaxUs",
)


class SeriesHistory:
    """Rows of integers at increasing times (the first item of a row), the whole run in
    bounded memory: every row of the last ``recent_ms`` (by the newest row's time; at most
    ``max_recent`` of them, the bound should time stand still), and before that rows at
    least ``step_ms`` apart, never more than ``max_older`` of them.
    ``step_ms`` starts at ``older_step_ms`` and doubles whenever the older rows would
    outgrow ``max_older``: they are thinned to rows at least the new step apart, the
    first row (the run's start) always kept.

    Memory: the recent rows (``recent_ms`` / the sampling interval, at most ``max_recent``)
    plus ``max_older``.
    ``add`` is O(1) amortised: a row enters and leaves the recent part once; a thinning
    costs O(max_older) and leaves at most max_older / 2 + 1 rows (rows at least a step
    apart keep at most every other one at twice the step), so the next comes after at
    least max_older / 2 - 1 more rows kept."""

    __slots__ = ("_older", "_recent", "max_older", "max_recent", "recent_ms", "step_ms")

    def __init__(
        self,
        recent_ms: int,
        max_older: int,
        older_step_ms: int = OLDER_STEP_MS,
        max_recent: int | None = None,
    ) -> None:
        if max_older < 4:
            raise ValueError("keep at least 4 older rows")
        if older_step_ms <= 0:
            raise ValueError("the older rows' step must be positive")
        self.recent_ms = recent_ms
        self.max_recent = max(1, max_recent) if max_recent is not None else None
        self.max_older = max_older
        self.step_ms = older_step_ms
        self._recent: deque[array[int]] = deque()
        self._older: list[array[int]] = []

    def __len__(self) -> int:
        return len(self._older) + len(self._recent)

    def add(self, row: array[int]) -> None:
        """Append a row (its time not before the last row's). O(1) amortised."""
        recent = self._recent
        recent.append(row)
        oldest_recent = row[0] - self.recent_ms
        most = self.max_recent or len(recent)
        while len(recent) > 1 and (recent[0][0] < oldest_recent or len(recent) > most):
            self._keep_older(recent.popleft())

    def _keep_older(self, row: array[int]) -> None:
        older = self._older
        if older and row[0] - older[-1][0] < self.step_ms:
            return
        older.append(row)
        if len(older) > self.max_older:
            self._thin()

    def _thin(self) -> None:
        """Double the step until the older rows fit in half their bound. O(max_older)."""
        older = self._older
        while len(older) > self.max_older // 2 + 1:
            self.step_ms *= 2
            kept = [older[0]]
            for row in older[1:]:
                if row[0] - kept[-1][0] >= self.step_ms:
                    kept.append(row)
            older[:] = kept

    def rows(self, since_ms: int | None = None) -> list[array[int]]:
        """The rows in time order; with ``since_ms``, only those after it (O(those))."""
        if since_ms is None:
            return [*self._older, *self._recent]
        newer: list[array[int]] = []
        for part in (self._recent, self._older):
            for row in reversed(part):
                if row[0] <= since_ms:
                    newer.reverse()
                    return newer
                newer.append(row)
        newer.reverse()
        return newer

    def first_time_ms(self) -> int | None:
        """The time of the first row kept (the run's start), None before any."""
        if self._older:
            return self._older[0][0]
        return self._recent[0][0] if self._recent else None


class SampledBroker(Protocol):
    """What the sampler reads of a broker (``broker.cluster.BrokerNode``)."""

    @property
    def service(self) -> BrokerService | None: ...

    @property
    def incarnation(self) -> int: ...

    @property
    def cache_stream(self) -> CacheEventStream | None: ...


class DashboardSampler:
    """Samples one broker's dashboard series into ``history`` every ``interval_ms``.

    A row's time is the clock's wall time at the first sample plus the monotonic time
    since: rows stay in order whatever the wall clock does meanwhile (a step by NTP).

    The message totals are the service's, which starts from zero with every incarnation:
    the sampler adds the previous incarnations' last sampled totals, so the columns only
    grow over the run (what an incarnation counted after its last sample is not seen).
    A sample is O(shadows)."""

    __slots__ = (
        "_base",
        "_epoch",
        "_incarnation",
        "_last",
        "_loop_lag_us",
        "_shadows",
        "broker",
        "clock",
        "history",
        "interval_ms",
        "storage",
        "watermark",
    )

    def __init__(
        self,
        broker: SampledBroker,
        storage: Storage,
        clock: Clock,
        interval_ms: int,
        history: SeriesHistory,
        watermark: float,
    ) -> None:
        self.broker = broker
        self.storage = storage
        self.clock = clock
        self.interval_ms = interval_ms
        self.history = history
        self.watermark = watermark
        self._incarnation = 0
        #: (produced, dispatched) of the previous incarnations, and last sampled
        self._base = (0, 0)
        self._last = (0, 0)
        self._shadows: tuple[str, ...] | None = None
        #: (wall ms, monotonic ns) at the first sample
        self._epoch: tuple[int, int] | None = None
        #: the event loop's longest lag since the last sample (:meth:`note_loop_lag`)
        self._loop_lag_us = 0

    @property
    def shadows(self) -> tuple[str, ...]:
        """The shadow designs' names, in column order (known from the first sample)."""
        return self._shadows or ()

    def columns(self) -> list[str]:
        names = list(COLUMNS)
        for shadow in self.shadows:
            names += [f"shadow.{shadow}.hits", f"shadow.{shadow}.misses"]
        return names

    def _totals(self) -> tuple[int, int]:
        broker = self.broker
        service = broker.service
        if broker.incarnation != self._incarnation:
            self._incarnation = broker.incarnation
            self._base = (self._base[0] + self._last[0], self._base[1] + self._last[1])
            self._last = (0, 0)
        if service is not None:
            self._last = (service.totals.produced, service.totals.dispatched)
        return self._base[0] + self._last[0], self._base[1] + self._last[1]

    def note_loop_lag(self, seconds: float) -> None:
        """The loop-lag watcher (``broker.http.metrics.watch_loop_lag``) saw the loop run
        its timer this late: the next row's ``loopLagMaxUs`` is the longest since the
        last row. O(1)."""
        self._loop_lag_us = max(self._loop_lag_us, int(seconds * 1e6))

    def now_ms(self) -> int:
        """The time of a sample taken now (see the class)."""
        clock = self.clock
        if self._epoch is None:
            self._epoch = (clock.wall_ms(), clock.monotonic_ns())
        wall_ms, monotonic_ns = self._epoch
        return wall_ms + (clock.monotonic_ns() - monotonic_ns) // 1_000_000

    def sample(self) -> None:
        """Add a row for now; nothing before the broker's first start."""
        stream = self.broker.cache_stream
        if stream is None:
            return
        if self._shadows is None:
            self._shadows = tuple(shadow.name for shadow in stream.shadows)
        produced, dispatched = self._totals()
        counters = stream.live.manager.counters
        max_size = max(0, stream.live.config.max_size_bytes)
        storage = self.storage
        bookie = storage.counters
        tiered = storage.tiered
        row = array(
            "q",
            (
                self.now_ms(),
                produced,
                dispatched,
                counters.hits,
                counters.misses,
                counters.joined,
                counters.size,
                max_size,
                int(max_size * self.watermark),
                counters.evicted_ttl,
                counters.evicted_size,
                counters.evicted_invalidated,
                bookie.readEntries.entries,
                tiered.entries_read,
                storage.last_entry_cache.hits,
                storage.last_entry_cache.misses,
                bookie.getFloor.calls,
                tiered.store.locator.counters.indexLoads,
                self._loop_lag_us,
            ),
        )
        self._loop_lag_us = 0
        for shadow in stream.shadows:
            row.append(shadow.manager.counters.hits)
            row.append(shadow.manager.counters.misses)
        self.history.add(row)

    def ticks(self) -> Iterator[float]:
        """The loop times of the samples after now: on a fixed grid, so sampling does not
        drift; a tick missed (a busy loop) is skipped, not made up."""
        loop = asyncio.get_running_loop()
        interval_s = self.interval_ms / 1000
        start = loop.time()
        n = 0
        while True:
            n = max(n + 1, int((loop.time() - start) / interval_s) + 1)
            yield start + n * interval_s

    async def run(self) -> None:
        """Sample now and then every interval until cancelled."""
        loop = asyncio.get_running_loop()
        self.sample()
        for tick in self.ticks():
            await asyncio.sleep(max(0.0, tick - loop.time()))
            self.sample()
