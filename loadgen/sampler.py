"""The measured run's samples: every interval, rates, backlog, latency percentiles and
the broker's hit ratio (and its cache and storage counters' growth)."""

from __future__ import annotations

from typing import Any

from loadgen.client import BrokerError
from loadgen.progress import ProgressDisplay
from loadgen.recorder import CounterDeltas, flatten
from loadgen.run import Run

_SHADOW = "shadows."


class Sampler:
    """Every interval: rates, backlog, latency percentiles and the broker's hit ratio."""

    def __init__(self, run: Run, interval_s: float, progress: ProgressDisplay | None) -> None:
        self.run = run
        self.interval_s = interval_s
        self.progress = progress
        self.series: dict[str, list[Any]] = {}
        self.cache = CounterDeltas()
        self.storage = CounterDeltas()
        self._last_published = 0
        self._last_consumed = 0
        self._last_time = 0.0
        self.last_cache: dict[str, Any] = {}
        self.last_storage: dict[str, Any] = {}
        self.counted: dict[str, Any] = {}
        #: each shadow design's hit ratio per interval, as long as ``series["time"]``
        #: (``None`` in an interval without reads, or before the shadow appeared)
        self.shadow_hit_ratio: dict[str, list[float | None]] = {}

    def _append(self, name: str, value: Any) -> None:
        self.series.setdefault(name, []).append(value)

    async def baseline(self) -> None:
        """Counters at the start of the measured run; growth is counted from here."""
        await self._broker_sample()
        self.cache.reset_totals()
        self.storage.reset_totals()
        self._last_time = self.run.now_s()

    async def _broker_sample(self) -> dict[str, float] | None:
        client = self.run.admin
        if client is None or self.run.stats_error is not None:
            return None
        try:
            # one instant: asked separately, reads completing between the two answers set
            # the cache's misses apart from the storage's entries read
            cache, storage = await client.stats()
        except BrokerError:
            return None
        self.last_cache, self.last_storage = cache, storage
        self.storage.observe(flatten(storage))
        return self.cache.observe(flatten(cache))

    def _append_shadows(self, delta: dict[str, float] | None) -> None:
        """Each shadow's hit ratio over the interval, from its counters' growth
        (``shadows.<design>.hits`` and ``.misses`` in the flattened cache stats)."""
        intervals = len(self.series["time"])
        names = [
            key[len(_SHADOW) : -len(".hits")]
            for key in delta or ()
            if key.startswith(_SHADOW) and key.endswith(".hits")
        ]
        for name in names:
            self.shadow_hit_ratio.setdefault(name, [None] * (intervals - 1))
        for name, ratios in self.shadow_hit_ratio.items():
            ratio = None
            if delta is not None:
                hits = delta.get(f"{_SHADOW}{name}.hits", 0)
                reads = hits + delta.get(f"{_SHADOW}{name}.misses", 0)
                ratio = round(hits / reads, 4) if reads else None
            ratios.append(ratio)

    async def sample(self, elapsed_s: float, duration_s: float) -> None:
        run = self.run
        counters = run.counters
        now = run.now_s()
        seconds = max(now - self._last_time, 1e-9)
        self._last_time = now
        published = counters.published_messages - self._last_published
        consumed = counters.consumed_messages - self._last_consumed
        self._last_published = counters.published_messages
        self._last_consumed = counters.consumed_messages
        # the totals of the results are the counts the rates were computed from
        self.counted = counters.as_dict()
        self._append("time", round(elapsed_s, 3))
        self._append("publishRate", round(published / seconds, 1))
        self._append("consumeRate", round(consumed / seconds, 1))
        self._append("backlog", run.backlog())
        delta = await self._broker_sample()
        hit_ratio = None
        if delta is not None:
            reads = delta.get("hits", 0) + delta.get("misses", 0)
            hit_ratio = round(delta.get("hits", 0) / reads, 4) if reads else None
        self._append("hitRatio", hit_ratio)
        self._append_shadows(delta)
        for prefix, latency in (
            ("publishLatency", run.publish),
            ("endToEndLatency", run.end_to_end),
        ):
            for suffix, value in latency.close_interval().items():
                self._append(prefix + suffix[0].upper() + suffix[1:], value)
        if self.progress is not None:
            self.progress.update(
                elapsed_s=elapsed_s,
                publish_rate=published / seconds,
                consume_rate=consumed / seconds,
                backlog=run.backlog(),
                hit_ratio=hit_ratio,
                publish_p99=self.series["publishLatency99pct"][-1],
                end_to_end_p99=self.series["endToEndLatency99pct"][-1],
            )
