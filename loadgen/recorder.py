"""What a run measures, the way the OpenMessaging Benchmark measures it.

Latencies go into HdrHistograms in microseconds (3 significant digits, up to an hour);
each sample interval has its own histogram, folded into the aggregate when the interval
closes, so per-interval and aggregated percentiles come from the same values. Counts are
plain integers bumped by producers and consumers; the sampler turns them into rates.
Reported latencies are milliseconds, as OMB reports them.
"""

from __future__ import annotations

from typing import Any

from hdrh.histogram import HdrHistogram

LOWEST_US = 1
HIGHEST_US = 3_600_000_000
DIGITS = 3

#: OMB's percentile names: (suffix, percentile)
PERCENTILES = (("50pct", 50.0), ("75pct", 75.0), ("95pct", 95.0), ("99pct", 99.0), ("999pct", 99.9))


def new_histogram() -> HdrHistogram:
    return HdrHistogram(LOWEST_US, HIGHEST_US, DIGITS)


class Latency:
    """One latency (publish, or end to end): the open interval and the aggregate, each
    with the exact sum of what it holds (its mean without a pass over the buckets)."""

    __slots__ = ("aggregate", "aggregate_sum", "interval", "interval_sum")

    def __init__(self) -> None:
        self.interval = new_histogram()
        self.aggregate = new_histogram()
        self.interval_sum = 0
        self.aggregate_sum = 0

    def record_us(self, value_us: float, count: int = 1) -> None:
        """Record ``count`` occurrences of ``value_us`` (clamped into the histogram's
        range: a clock step between the producer and the broker can make an end-to-end
        latency negative). O(1)."""
        value = int(value_us)
        if value < LOWEST_US:
            value = LOWEST_US
        elif value > HIGHEST_US:
            value = HIGHEST_US
        self.interval.record_value(value, count)
        self.interval_sum += value * count

    def close_interval(self) -> dict[str, float | None]:
        """Percentiles of the interval (ms), then fold it into the aggregate."""
        summary = summarize(self.interval, self.interval_sum)
        self.aggregate.add(self.interval)
        self.aggregate_sum += self.interval_sum
        self.interval.reset()
        self.interval_sum = 0
        return summary

    def summary(self) -> dict[str, float | None]:
        """Percentiles of the aggregate (ms)."""
        return summarize(self.aggregate, self.aggregate_sum)

    def max_ms(self) -> float | None:
        """The largest value recorded since the last :meth:`reset` (ms), the open
        interval's included; None when nothing was. O(1)."""
        if self.aggregate.get_total_count() + self.interval.get_total_count() == 0:
            return None
        largest = max(self.aggregate.get_max_value(), self.interval.get_max_value())
        return round(largest / 1000, 3)

    def reset(self) -> None:
        self.interval.reset()
        self.aggregate.reset()
        self.interval_sum = self.aggregate_sum = 0


def summarize(histogram: HdrHistogram, total_us: int | None = None) -> dict[str, float | None]:
    """``{"avg", "50pct", ..., "999pct", "max"}`` in ms; ``None`` when nothing was
    recorded (an interval with no traffic has no latency, not a zero one). ``total_us``:
    the exact sum of the recorded values, for the mean (None: from the buckets, a pass
    over all of them). The percentiles take one pass over the buckets together."""
    count = histogram.get_total_count()
    if count == 0:
        return {name: None for name in ("avg", *(suffix for suffix, _ in PERCENTILES), "max")}
    mean_us = total_us / count if total_us is not None else histogram.get_mean_value()
    result: dict[str, float | None] = {"avg": round(mean_us / 1000, 3)}
    values = histogram.get_percentile_to_value_dict([percentile for _, percentile in PERCENTILES])
    for suffix, percentile in PERCENTILES:
        result[suffix] = values[percentile] / 1000
    result["max"] = histogram.get_max_value() / 1000
    return result


class Counters:
    """Totals since the measured run started; producers and consumers bump them."""

    __slots__ = (
        "acked_messages",
        "consume_errors",
        "consumed_bytes",
        "consumed_messages",
        "nacked_messages",
        "publish_errors",
        "published_bytes",
        "published_messages",
        "redelivered_messages",
    )

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.published_messages = 0
        self.published_bytes = 0
        self.publish_errors = 0
        self.consumed_messages = 0
        self.consumed_bytes = 0
        self.redelivered_messages = 0
        self.consume_errors = 0
        self.acked_messages = 0
        self.nacked_messages = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "publishedMessages": self.published_messages,
            "publishedBytes": self.published_bytes,
            "publishErrors": self.publish_errors,
            "consumedMessages": self.consumed_messages,
            "consumedBytes": self.consumed_bytes,
            "redeliveredMessages": self.redelivered_messages,
            "consumeErrors": self.consume_errors,
            "ackedMessages": self.acked_messages,
            "nackedMessages": self.nacked_messages,
        }


def flatten(value: Any, prefix: str = "") -> dict[str, float]:
    """Numeric leaves of nested dicts as ``{"evicted.ttl": 3, ...}``."""
    result: dict[str, float] = {}
    if isinstance(value, dict):
        for key, item in value.items():
            result.update(flatten(item, f"{prefix}{key}."))
    elif isinstance(value, bool):
        pass
    elif isinstance(value, int | float):
        result[prefix[:-1]] = value
    return result


class CounterDeltas:
    """Sums the growth of a broker's counters across samples, surviving restarts: a
    counter that went down was reset (the broker restarted), so its new value is all
    growth since the reset."""

    __slots__ = ("_last", "total")

    def __init__(self) -> None:
        self._last: dict[str, float] = {}
        self.total: dict[str, float] = {}

    def observe(self, counters: dict[str, float]) -> dict[str, float]:
        """Take a new sample (flattened); returns the growth since the previous one."""
        delta: dict[str, float] = {}
        for key, value in counters.items():
            last = self._last.get(key)
            if last is None:
                grown = 0.0
            elif value >= last:
                grown = value - last
            else:
                grown = value
            delta[key] = grown
            self.total[key] = self.total.get(key, 0) + grown
        self._last = dict(counters)
        return delta

    def reset_totals(self) -> None:
        self.total = {}
