"""Replay an access trace (docs/trace-format.md) through one cache design at one size.

A trace is the broker's stream of cache events (``broker/cache/stream.py``), and a
replay hands the same events, in the same order and at the same times, to a
:class:`~broker.cache.unit.DesignInstance` of the registered design, exactly as the
broker hands them to a shadow: the same ``broker.cache`` classes, the design's own
ledger-side rules, sizes instead of payloads, the eviction timer's rounds (``tick``
rows) where the broker ran them. A replay of design Y therefore counts what a shadow of
Y counted on the same run, and a replay of the live design at the live size counts what
the live design counted.

A trace of several brokers (a cluster) is replayed broker by broker: each broker has its
own cache of the configured size, so each broker's rows go to an instance of its own,
and the counts are summed. A ``restart`` row is the broker's cache starting again empty:
the replay goes on with a fresh instance of the same design and settings, and the
retired instance's counts are kept in the sum.

Cost: O(events) per replay, plus the design's own work; memory: the design's entries
(sizes only) and the storage reads in flight, for each broker the rows interleave.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Callable, Iterable
from typing import Any

from broker.cache import DESIGNS, CursorCheck, DesignInstance, design
from broker.cache.config import CacheConfig
from broker.clock import EventClock
from pipeline.outcome import CacheOutcome

__all__ = [
    "DESIGNS",
    "EventFeeder",
    "ReplayResult",
    "ReplaySpec",
    "replay",
    "replay_brokers",
    "replay_trace_dir",
    "replay_uri",
]

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

    def create(self, clock: EventClock) -> DesignInstance:
        """A fresh instance of the design at this size, on ``clock``."""
        return design(self.design).create(self.cache_config(), clock, live=self.live)


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

    @classmethod
    def total(cls, spec: ReplaySpec, results: Iterable[ReplayResult]) -> ReplayResult:
        """The counts of several replays of ``spec`` (the brokers of a trace) summed."""
        summed = cls(
            design=spec.design,
            size_bytes=spec.size_bytes,
            live=spec.live,
            hits=0,
            misses=0,
            hit_bytes=0,
            miss_bytes=0,
            events=0,
            evicted={},
        )
        for result in results:
            summed.hits += result.hits
            summed.misses += result.misses
            summed.hit_bytes += result.hit_bytes
            summed.miss_bytes += result.miss_bytes
            summed.events += result.events
            for reason, count in result.evicted.items():
                summed.evicted[reason] = summed.evicted.get(reason, 0) + count
        return summed


class EventFeeder:
    """Hands one broker's trace rows to a design instance as the cache events they
    record. Rows of one event (an add batch, a range read, a fill, a check) are gathered
    and handed over together, as the broker did. O(1) per row, plus the design's work.

    A ``restart`` row retires the instance (its counts are kept, see :meth:`stats`) and
    goes on with a fresh one from ``renew``, as the broker went on with a new cache."""

    __slots__ = ("_clock", "_group", "_renew", "events", "instance", "retired")

    def __init__(
        self,
        instance: DesignInstance,
        clock: EventClock,
        renew: Callable[[], DesignInstance] | None = None,
    ) -> None:
        self.instance = instance
        self._clock = clock
        self._renew = renew
        self._group: list[dict[str, Any]] = []
        #: rows handed over
        self.events = 0
        #: the stats of the instances retired by restarts, oldest first
        self.retired: list[dict[str, Any]] = []

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
        if kind == "restart":
            self._restart()
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

    def _restart(self) -> None:
        """The broker's cache restarted empty: a fresh instance from here on (an event
        cut short before the restart row was handed over in ``apply``)."""
        if self._renew is None:
            raise ValueError("a restart row, and no way to start a fresh design instance")
        self.retired.append(self.instance.stats())
        self.instance = self._renew()

    def stats(self) -> dict[str, Any]:
        """The counters of every instance fed so far, summed: ``hits``, ``misses``,
        ``hitBytes``, ``missBytes`` and ``evicted`` (by reason)."""
        summed: dict[str, Any] = {
            "hits": 0, "misses": 0, "hitBytes": 0, "missBytes": 0, "evicted": {},
        }  # fmt: skip
        for stats in [*self.retired, self.instance.stats()]:
            for key in ("hits", "misses", "hitBytes", "missBytes"):
                summed[key] += stats[key]
            for reason, count in stats["evicted"].items():
                summed["evicted"][reason] = summed["evicted"].get(reason, 0) + count
        return summed

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


def _feeder(spec: ReplaySpec) -> EventFeeder:
    clock = EventClock()
    return EventFeeder(spec.create(clock), clock, lambda: spec.create(clock))


def replay_brokers(rows: Iterable[dict[str, Any]], spec: ReplaySpec) -> dict[int, ReplayResult]:
    """Replay trace rows (dicts with the trace's columns; each broker's rows in ``seq``
    order, brokers one after another or interleaved), each broker's through its own
    instance of ``spec``: the result of each broker, its restarts summed in."""
    feeders: dict[int, EventFeeder] = {}
    feeder: EventFeeder | None = None
    current = None
    for row in rows:
        broker = row.get("broker") or 0  # rows made by hand may leave it out
        if broker != current or feeder is None:
            feeder = feeders.get(broker)
            if feeder is None:
                feeder = feeders[broker] = _feeder(spec)
            current = broker
        feeder.apply(row)
    results = {}
    for broker, done in sorted(feeders.items()):
        done.finish()
        stats = done.stats()
        results[broker] = ReplayResult(
            design=spec.design,
            size_bytes=spec.size_bytes,
            live=spec.live,
            hits=stats["hits"],
            misses=stats["misses"],
            hit_bytes=stats["hitBytes"],
            miss_bytes=stats["missBytes"],
            events=done.events,
            evicted=stats["evicted"],
        )
    return results


def replay(rows: Iterable[dict[str, Any]], spec: ReplaySpec) -> ReplayResult:
    """Replay trace rows (as :func:`replay_brokers`): the counts of every broker summed,
    each broker with its own cache of ``spec.size_bytes``."""
    return ReplayResult.total(spec, replay_brokers(rows, spec).values())


def replay_trace_dir(directory: pathlib.Path | str, spec: ReplaySpec) -> dict[int, ReplayResult]:
    """Replay a trace directory (any URI ``pipeline.trace_io`` reads) broker by broker,
    streaming each broker's files in turn: the result of each broker that wrote files.
    The replay of the live design at the live size gives each broker's live counts
    (summed over its restarts)."""
    from broker.trace.recorder import file_prefix
    from pipeline.trace_io import iter_rows, trace_brokers

    uri = str(directory)
    results = {}
    for broker in trace_brokers(uri):
        rows = iter_rows(uri, file_prefix(broker))
        results[broker] = replay_brokers(rows, spec).get(broker) or ReplayResult.total(spec, [])
    return results


def replay_uri(uri: str, specs: list[ReplaySpec], sample_rate: float = 1.0) -> list[ReplayResult]:
    """Replay the trace at ``uri`` (any URI ``pipeline.trace_io`` reads) through every
    spec: for each spec, the brokers' counts summed, in the order of ``specs``.
    ``sample_rate`` < 1 replays a spatially hashed sample of the entries through caches
    scaled by the rate (miniature simulation); the counts are then estimates."""
    from broker.trace.recorder import file_prefix
    from pipeline.trace_io import iter_rows, trace_brokers

    if sample_rate != 1.0:
        raise NotImplementedError("sampling is not built yet")
    brokers = trace_brokers(uri)
    return [
        ReplayResult.total(
            spec, [replay(iter_rows(uri, file_prefix(broker)), spec) for broker in brokers]
        )
        for spec in specs
    ]
