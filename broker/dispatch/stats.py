"""Counters with rates refreshed every ``statsUpdateFrequencyInSecs``, as Pulsar's stats."""

from __future__ import annotations


class RateCounter:
    """A monotonically growing count (messages, bytes) and its rate over the last
    refresh period. ``add`` is O(1) and allocation-free; ``refresh`` is called by the
    broker's stats loop."""

    __slots__ = ("_last_total", "rate", "total")

    def __init__(self) -> None:
        self.total = 0
        self.rate = 0.0
        self._last_total = 0

    def add(self, amount: int) -> None:
        self.total += amount

    def refresh(self, elapsed_seconds: float) -> None:
        if elapsed_seconds > 0:
            self.rate = (self.total - self._last_total) / elapsed_seconds
        self._last_total = self.total


class BrokerTotals:
    """Broker-wide message totals since start, for Prometheus counters: they only grow,
    whatever topics or consumers come and go. Bumped once per batch."""

    __slots__ = ("dispatched", "dispatched_bytes", "produced", "produced_bytes", "redelivered")

    def __init__(self) -> None:
        self.produced = 0
        self.produced_bytes = 0
        self.dispatched = 0
        self.dispatched_bytes = 0
        self.redelivered = 0
