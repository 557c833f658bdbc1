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

import contextlib
import dataclasses
import gc
import pathlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from broker.cache import DESIGNS, CursorCheck, DesignInstance, design
from broker.cache.config import CacheConfig
from broker.clock import EventClock
from broker.trace.recorder import SCHEMA
from pipeline.columns import (
    ACTIVATE,
    ADD,
    CHECK,
    COLUMNS,
    DEACTIVATE,
    FILL,
    FILL_FAILED,
    LOAD,
    MOVE,
    READ,
    RELEASE,
    REPLAY_ADD,
    RESTART,
    TICK,
    TRIM,
    UNLOAD,
    EventDecoder,
    count_entries,
    effective_sample_rate,
    mean_entry_bytes,
)  # fmt: skip
from pipeline.outcome import CacheOutcome

#: rows per record batch when replaying rows given as dicts
ROWS_PER_BATCH = 65_536

__all__ = [
    "DESIGNS",
    "EventReplayer",
    "ReplayResult",
    "ReplaySpec",
    "replay",
    "replay_batches",
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
    #: 1: every entry replayed; < 1: a miniature simulation, counts estimated
    sample_rate: float = 1.0

    def scale(self, factor: float) -> None:
        """Counts of a sample to estimates of the whole (``factor`` = 1 / rate)."""
        self.hits = round(self.hits * factor)
        self.misses = round(self.misses * factor)
        self.hit_bytes = round(self.hit_bytes * factor)
        self.miss_bytes = round(self.miss_bytes * factor)
        self.evicted = {reason: round(count * factor) for reason, count in self.evicted.items()}

    def as_row(self) -> dict[str, Any]:
        row = super().as_row()
        for reason, count in row.pop("evicted").items():
            row[f"evicted_{reason}"] = count
        return row

    @classmethod
    def of(cls, spec: ReplaySpec, stats: dict[str, Any], events: int) -> ReplayResult:
        """The result of a replay of ``spec`` whose instances' summed stats (as
        ``DesignInstance.stats`` names them) are ``stats``, over ``events`` trace rows."""
        return cls(
            design=spec.design,
            size_bytes=spec.size_bytes,
            live=spec.live,
            hits=stats["hits"],
            misses=stats["misses"],
            hit_bytes=stats["hitBytes"],
            miss_bytes=stats["missBytes"],
            events=events,
            evicted=stats["evicted"],
        )

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
            group = self._group
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
        return _summed_stats([*self.retired, self.instance.stats()])

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


class EventReplayer:
    """Hands decoded events (``pipeline.columns``) to one design instance, as the broker
    handed them to its cache: O(1) per event plus the design's own work. A ``restart``
    event retires the instance (its counts are kept, see :meth:`stats`) and goes on
    with a fresh one, as the broker went on with a new cache."""

    __slots__ = ("_clock", "_spec", "events", "instance", "retired")

    def __init__(self, spec: ReplaySpec) -> None:
        self._spec = spec
        self._clock = EventClock()
        self.instance = spec.create(self._clock)
        #: events handed over
        self.events = 0
        #: the stats of the instances retired by restarts, oldest first
        self.retired: list[dict[str, Any]] = []

    def feed(self, events: list[tuple[Any, ...]]) -> None:
        clock = self._clock
        instance = self.instance
        units = instance.units
        for event in events:
            op = event[0]
            clock.now_ns = event[1]
            if op == RELEASE:
                unit = units.get(event[2])
                released = (unit or instance.unit(event[2])).released
                ledger = event[3]
                for now, entry in zip(event[5], event[4], strict=True):
                    clock.now_ns = now
                    released(ledger, entry)
            elif op == READ:
                unit = units.get(event[2])
                (unit or instance.unit(event[2])).read(
                    event[3], event[4], event[5], event[6], event[7]
                )
            elif op == ADD:
                unit = units.get(event[2])
                (unit or instance.unit(event[2])).added(event[3], event[4], None, event[5])
            elif op == FILL:
                unit = units.get(event[2])
                (unit or instance.unit(event[2])).filled(event[3], event[4], None, event[5])
            elif op == MOVE:
                instance.unit(event[2]).moved(event[3], event[4], event[5])
            elif op == CHECK:
                instance.unit(event[2]).checked(event[3])
            elif op == TICK:
                instance.tick()
            elif op == ACTIVATE:
                instance.unit(event[2]).activated(event[3], event[4], event[5], event[6])
            elif op == DEACTIVATE:
                instance.unit(event[2]).deactivated(event[3])
            elif op == REPLAY_ADD:
                instance.unit(event[2]).replay_added(event[3], event[4])
            elif op == LOAD:
                instance.load(event[2])
            elif op == UNLOAD:
                instance.unload(event[2])
            elif op == FILL_FAILED:
                instance.unit(event[2]).fill_failed(event[3], event[4], event[5])
            elif op == TRIM:
                instance.unit(event[2]).trimmed(event[3])
            elif op == RESTART:
                self.retired.append(instance.stats())
                instance = self.instance = self._spec.create(clock)
                units = instance.units
        self.events += len(events)

    def stats(self) -> dict[str, Any]:
        """The counters of every instance fed so far, summed."""
        return _summed_stats([*self.retired, self.instance.stats()])

    def result(self, rows: int) -> ReplayResult:
        """The counts so far as a result; ``rows``: trace rows behind the events."""
        return ReplayResult.of(self._spec, self.stats(), rows)


def _summed_stats(all_stats: Iterable[dict[str, Any]]) -> dict[str, Any]:
    summed: dict[str, Any] = {
        "hits": 0, "misses": 0, "hitBytes": 0, "missBytes": 0, "evicted": {},
    }  # fmt: skip
    for stats in all_stats:
        for key in ("hits", "misses", "hitBytes", "missBytes"):
            summed[key] += stats[key]
        for reason, count in stats["evicted"].items():
            summed["evicted"][reason] = summed["evicted"].get(reason, 0) + count
    return summed


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cycle collector off for the block. A replay allocates millions of
    objects that live until their entry is evicted (event tuples, cached entries), and
    each allocation burst set off a collection walking all of them: a third of a
    pip430 replay. What a replay drops is freed by reference counting (an evicted entry
    is in no cycle), so nothing piles up meanwhile."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def replay_batches(
    batches: Iterable[pa.RecordBatch], specs: Sequence[ReplaySpec], sample_rate: float = 1.0
) -> list[ReplayResult]:
    """Replay one broker's record batches (in ``seq`` order) through every spec in one
    pass: the trace is decoded once and every spec's instance consumes the events.
    ``sample_rate`` < 1: miniature simulation (``pipeline.columns``), each spec's cache
    scaled by the rate and its counts by its inverse (the results are estimates, and
    say so in ``sample_rate``)."""
    scaled = [
        dataclasses.replace(spec, size_bytes=max(1, round(spec.size_bytes * sample_rate)))
        if sample_rate < 1
        else spec
        for spec in specs
    ]
    replayers = [EventReplayer(spec) for spec in scaled]
    decoder = EventDecoder(sample_rate)
    with _collector_paused():
        for batch in batches:
            events = decoder.decode(batch)
            for replayer in replayers:
                replayer.feed(events)
        tail = decoder.finish()
        for replayer in replayers:
            replayer.feed(tail)
    results = []
    for spec, replayer in zip(specs, replayers, strict=True):
        result = replayer.result(decoder.rows)
        result.size_bytes = spec.size_bytes
        if sample_rate < 1:
            result.scale(1 / sample_rate)
            result.sample_rate = sample_rate
        results.append(result)
    return results


def _batches_of_rows(rows: Iterable[dict[str, Any]]) -> Iterator[pa.RecordBatch]:
    schema = pa.schema([field.with_nullable(True) for field in SCHEMA])
    chunk: list[dict[str, Any]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == ROWS_PER_BATCH:
            yield pa.RecordBatch.from_pylist(chunk, schema=schema)
            chunk = []
    if chunk:
        yield pa.RecordBatch.from_pylist(chunk, schema=schema)


def replay_brokers(rows: Iterable[dict[str, Any]], spec: ReplaySpec) -> dict[int, ReplayResult]:
    """Replay trace rows (dicts with the trace's columns, missing ones null; each
    broker's rows in ``seq`` order, brokers one after another or interleaved), each
    broker's through its own instance of ``spec``: the result of each broker, its
    restarts summed in."""
    by_broker: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        by_broker.setdefault(row.get("broker") or 0, []).append(row)
    return {
        broker: replay_batches(_batches_of_rows(mine), [spec])[0]
        for broker, mine in sorted(by_broker.items())
    }


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
    from pipeline.trace_io import iter_batches, trace_brokers

    uri = str(directory)
    return {
        broker: replay_batches(iter_batches(uri, file_prefix(broker)), [spec])[0]
        for broker in trace_brokers(uri)
    }


def sample_rate_for(uri: str, specs: Sequence[ReplaySpec], requested: float) -> float:
    """The rate replays of ``specs`` over the trace at ``uri`` sample at when
    ``requested`` is asked: raised where the smallest miniature cache would hold too
    few entries, or the sample too few of the trace's entries
    (``pipeline.columns.effective_sample_rate``). Reads the trace's ``kind`` column once
    and its first batch: O(rows) of Arrow work."""
    from broker.trace.recorder import file_prefix
    from pipeline.trace_io import iter_batches, trace_brokers

    brokers = trace_brokers(uri)
    if requested >= 1 or not brokers or not specs:
        return min(requested, 1.0)
    first = next(iter_batches(uri, file_prefix(brokers[0])), None)
    entry_bytes = mean_entry_bytes(first) if first is not None else 0.0
    smallest = min(spec.size_bytes for spec in specs)
    entries = sum(
        count_entries(iter_batches(uri, file_prefix(broker), ["kind"])) for broker in brokers
    )
    return effective_sample_rate(requested, smallest, entry_bytes, entries)


def replay_uri(
    uri: str, specs: Sequence[ReplaySpec], sample_rate: float = 1.0, *, raise_rate: bool = True
) -> list[ReplayResult]:
    """Replay the trace at ``uri`` (any URI ``pipeline.trace_io`` reads) through every
    spec in one pass over each broker's files: for each spec, the brokers' counts
    summed, in the order of ``specs``. ``sample_rate`` < 1 replays a spatially hashed
    sample of the entries through caches scaled by the rate (miniature simulation);
    the counts are then estimates. The rate is raised as :func:`sample_rate_for` says
    unless ``raise_rate`` is false (the caller, a Spark task, was given the rate its
    driver chose for every cell); each result's ``sample_rate`` is the rate used."""
    from broker.trace.recorder import file_prefix
    from pipeline.trace_io import iter_batches, trace_brokers

    brokers = trace_brokers(uri)
    if sample_rate < 1 and raise_rate:
        sample_rate = sample_rate_for(uri, specs, sample_rate)
    per_broker = [
        replay_batches(iter_batches(uri, file_prefix(broker), list(COLUMNS)), specs, sample_rate)
        for broker in brokers
    ]
    totals = []
    for index, spec in enumerate(specs):
        total = ReplayResult.total(spec, [results[index] for results in per_broker])
        total.sample_rate = sample_rate
        totals.append(total)
    return totals


# ---------------------------------------------------------------------- the first replay


def replay_rows_before(rows: Iterable[dict[str, Any]], spec: ReplaySpec) -> ReplayResult:
    """The first replay, row by row (one dict per row, ``EventFeeder``): kept only as
    the baseline of ``brokerlab bench replay`` until issue #17 is done. One broker."""
    clock = EventClock()
    feeder = EventFeeder(spec.create(clock), clock, lambda: spec.create(clock))
    for row in rows:
        feeder.apply(row)
    feeder.finish()
    return ReplayResult.of(spec, feeder.stats(), feeder.events)
