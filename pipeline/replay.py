"""Replay an access trace (docs/trace-format.md) through one cache design at one size.

A trace is the broker's stream of cache events (``broker/cache/stream.py``), and a
replay hands the same events, in the same order and at the same times, to a
:class:`~broker.cache.unit.DesignInstance` of the registered design, exactly as the
broker hands them to a shadow: the same ``broker.cache`` classes, the design's own
ledger-side rules, sizes instead of payloads, the eviction timer's rounds (``tick``
rows) where the broker ran them. A replay of design Y therefore counts what a shadow of
Y counted on the same run, and a replay of the live design at the live size counts what
the live design counted.

Cost: O(events) per replay, plus the design's own work; memory: the design's entries
(sizes only) and the storage reads in flight.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from broker.cache import DESIGNS, CursorCheck, DesignInstance, design
from broker.cache.config import CacheConfig
from broker.clock import EventClock
from pipeline.outcome import CacheOutcome

__all__ = ["DESIGNS", "EventFeeder", "ReplayResult", "ReplaySpec", "replay"]

#: events that span several rows: consecutive rows, the last one has entry == last_entry
_GROUPED = frozenset(("add", "read", "fill", "check"))


@dataclasses.dataclass(frozen=True)
class ReplaySpec:
    """One replay: a design, a size, the other settings (the trace's, normally)."""

    design: str
    size_bytes: int
    settings: CacheConfig = dataclasses.field(default_factory=CacheConfig)
    #: the design and size the broker ran: the trace's storage reads are this design's
    #: own, one ``fill`` per read (it matters only for designs that do not share reads)
    live: bool = False

    def cache_config(self) -> CacheConfig:
        return dataclasses.replace(self.settings, max_size_bytes=self.size_bytes)


@dataclasses.dataclass(kw_only=True)
class ReplayResult(CacheOutcome):
    design: str
    size_bytes: int
    live: bool
    events: int
    evicted: dict[str, int]

    def as_row(self) -> dict[str, Any]:
        row = super().as_row()
        for reason, count in row.pop("evicted").items():
            row[f"evicted_{reason}"] = count
        return row


class EventFeeder:
    """Hands trace rows to one design instance as the cache events they record. Rows of
    one event (an add batch, a range read, a fill, a check) are gathered and handed over
    together, as the broker did. O(1) per row, plus the design's work."""

    __slots__ = ("_clock", "_group", "events", "instance")

    def __init__(self, instance: DesignInstance, clock: EventClock) -> None:
        self.instance = instance
        self._clock = clock
        self._group: list[dict[str, Any]] = []
        #: rows handed over
        self.events = 0

    def apply(self, row: dict[str, Any]) -> None:
        self.events += 1
        kind = row["kind"]
        group = self._group
        if group and not _continues(group[-1], row):
            self._flush()  # an event cut short (rows dropped): hand over what there is
        if kind in _GROUPED:
            group.append(row)
            if row["entry"] == row["last_entry"]:
                self._flush()
            return
        self._clock.now_ns = row["ts_ns"]
        if kind == "tick":
            self.instance.tick()
            return
        topic = row["topic"]
        if kind == "load":
            self.instance.load(topic)
        elif kind == "unload":
            self.instance.unload(topic)
        elif kind == "release":
            self.instance.unit(topic).released(row["ledger"], row["entry"])
        elif kind == "replay_add":
            self.instance.unit(topic).replay_added(row["ledger"], row["entry"])
        elif kind == "move":
            self.instance.unit(topic).moved(
                row["subscription"],
                (row["ledger"], row["entry"]),
                (row["md_ledger"], row["md_entry"]),
            )
        elif kind == "activate":
            self.instance.unit(topic).activated(
                row["subscription"],
                (row["ledger"], row["entry"]),
                (row["md_ledger"], row["md_entry"]),
                row["entries_to_read"],
            )
        elif kind == "deactivate":
            self.instance.unit(topic).deactivated(row["subscription"])
        elif kind == "fill_failed":
            self.instance.unit(topic).fill_failed(row["ledger"], row["entry"], row["last_entry"])
        elif kind == "trim":
            self.instance.unit(topic).trimmed(row["ledger"])
        # "evict" rows are the live design's output, not an input: nothing to do

    def finish(self) -> None:
        """The trace ended: hand over an event whose last rows are missing."""
        if self._group:
            self._flush()

    def _flush(self) -> None:
        rows = self._group
        self._group = []
        first = rows[0]
        self._clock.now_ns = first["ts_ns"]
        unit = self.instance.unit(first["topic"])
        kind = first["kind"]
        if kind == "check":
            unit.checked(
                [
                    CursorCheck(row["subscription"], row["has_consumers"], row["entries_to_read"])
                    for row in rows
                    if row["subscription"] is not None  # a check of a topic with no cursor
                ]
            )
            return
        ledger, start = first["ledger"], first["entry"]
        if kind == "read":
            available = {row["entry"]: row["size"] for row in rows if row["hit"]}
            unit.read(first["subscription"], ledger, start, rows[-1]["entry"], available)
        elif kind == "add":
            unit.added(ledger, start, None, [row["size"] for row in rows])
        else:
            unit.filled(ledger, start, None, [row["size"] for row in rows])


def _continues(previous: dict[str, Any], row: dict[str, Any]) -> bool:
    """Whether ``row`` is the next row of the event ``previous`` belongs to."""
    return (
        row["kind"] == previous["kind"]
        and row["entry"] == previous["entry"] + 1
        and row["last_entry"] == previous["last_entry"]
        and row["topic"] == previous["topic"]
        and row["ledger"] == previous["ledger"]
        and (row["kind"] == "check" or row["subscription"] == previous["subscription"])
    )


def replay(rows: Iterable[dict[str, Any]], spec: ReplaySpec) -> ReplayResult:
    """Replay trace rows (dicts with the trace's columns, in ``seq`` order)."""
    clock = EventClock()
    instance = design(spec.design).create(spec.cache_config(), clock, live=spec.live)
    feeder = EventFeeder(instance, clock)
    for row in rows:
        feeder.apply(row)
    feeder.finish()
    stats = instance.stats()
    return ReplayResult(
        design=spec.design,
        size_bytes=spec.size_bytes,
        live=spec.live,
        hits=stats["hits"],
        misses=stats["misses"],
        hit_bytes=stats["hitBytes"],
        miss_bytes=stats["missBytes"],
        events=feeder.events,
        evicted=dict(stats["evicted"]),
    )
