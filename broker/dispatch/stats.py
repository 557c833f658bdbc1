"""Counters with rates refreshed every ``statsUpdateFrequencyInSecs``, as Pulsar's stats."""

from __future__ import annotations

import datetime
from typing import Any


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


def iso_time(wall_ms: int) -> str:
    """A wall time as Pulsar's DateFormatter writes it (ISO 8601 with offset, UTC
    here): ``2024-05-01T12:00:00.123Z``."""
    moment = datetime.datetime.fromtimestamp(wall_ms / 1000, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{wall_ms % 1000:03d}Z"


class PublisherStats:
    """One producer's part of a topic's stats (Pulsar's PublisherStats): who it is and
    what it published. The front end fills in the connection's facts; ``add`` is O(1)."""

    __slots__ = (
        "access_mode",
        "address",
        "bytes_in",
        "client_version",
        "connected_since_ms",
        "metadata",
        "msg_in",
        "producer_id",
        "producer_name",
    )

    def __init__(self, producer_name: str, connected_since_ms: int) -> None:
        self.producer_name = producer_name
        self.producer_id = 0
        #: the client's address as Pulsar prints it: ``/127.0.0.1:50000``
        self.address = ""
        self.client_version = ""
        self.access_mode = "Shared"
        self.metadata: dict[str, str] = {}
        self.connected_since_ms = connected_since_ms
        self.msg_in = RateCounter()
        self.bytes_in = RateCounter()

    def refresh(self, elapsed_seconds: float) -> None:
        self.msg_in.refresh(elapsed_seconds)
        self.bytes_in.refresh(elapsed_seconds)

    def to_json(self) -> dict[str, Any]:
        rate = self.msg_in.rate
        throughput = self.bytes_in.rate
        return {
            "accessMode": self.access_mode,
            "msgRateIn": rate,
            "msgThroughputIn": throughput,
            "averageMsgSize": throughput / rate if rate > 0 else 0.0,
            "chunkedMessageRate": 0.0,
            "producerId": self.producer_id,
            "supportsPartialProducer": False,
            "producerName": self.producer_name,
            "address": self.address,
            "connectedSince": iso_time(self.connected_since_ms),
            "clientVersion": self.client_version,
            "metadata": self.metadata,
        }
