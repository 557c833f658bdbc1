"""The stream of cache events: one producer (the broker's ledger and dispatch layers),
every consumer (the live design, each shadow design, the access trace) fed the same
events in the same order.

The events, per topic (:class:`TopicEvents`): ``loaded`` (``load_topic``), ``added``
(entries stored), ``read`` (a cursor reads a range through the cache), ``filled`` and
``fill_failed`` (the live design's storage reads complete), ``released`` (an entry was
handed to a consumer), ``replay_added`` (an entry joined a replay queue), ``activated``,
``deactivated`` and ``moved`` (cursors: consumers come and go; read and mark-delete
positions), ``checked`` (the periodic check of every cursor), ``trimmed`` (a ledger was
deleted) and ``unloaded``; broker-wide, ``tick`` (the eviction timer). The trace records
them as rows (``docs/trace-format.md``) and ``pipeline/replay.py`` feeds the rows back
to any design: a shadow, a replay and the live run of a design see the same events.

Each event reads the broker's clock once and sets the designs' :class:`EventClock` to
it, so every design (and the trace's ``ts_ns``) sees one instant per event.

The live design answers reads with payloads; shadows hold sizes only. A shadow is the
other design running on the live design's events: its hits are entries it holds, its
misses the entries it would have read from storage (see ``broker/cache/unit.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from broker.cache.api import CursorCheck, Pos
from broker.cache.entry import CachedEntry
from broker.cache.unit import DesignInstance, ReadPlan, TopicUnit
from broker.clock import Clock, EventClock

#: the counters a shadow reports (the live design reports all of its own)
SHADOW_STATS = (
    "hits",
    "misses",
    "joined",
    "requested",
    "hitBytes",
    "missBytes",
    "sizeBytes",
    "entries",
    "evicted",
)


class TraceSink(Protocol):
    """What the access trace records of the stream (``broker.trace.recorder``)."""

    def load(self, topic: str) -> None: ...
    def unload(self, topic: str) -> None: ...
    def add(self, topic: str, ledger: int, first: int, sizes: Sequence[int]) -> None: ...
    def read(
        self,
        topic: str,
        reader: str,
        ledger: int,
        first: int,
        last: int,
        replay: bool,
        hits: dict[int, int],
    ) -> None: ...
    def fill(self, topic: str, ledger: int, first: int, sizes: Sequence[int]) -> None: ...
    def fill_failed(self, topic: str, ledger: int, first: int, last: int) -> None: ...
    def release(self, topic: str, reader: str, ledger: int, entry: int) -> None: ...
    def replay_add(self, topic: str, reader: str, ledger: int, entry: int) -> None: ...
    def activate(
        self, topic: str, cursor: str, read: Pos, mark_delete: Pos, entries_to_read: int
    ) -> None: ...
    def deactivate(self, topic: str, cursor: str) -> None: ...
    def move(self, topic: str, cursor: str, read: Pos, mark_delete: Pos) -> None: ...
    def check(self, topic: str, cursors: Sequence[CursorCheck]) -> None: ...
    def trim(self, topic: str, ledger: int) -> None: ...
    def tick(self) -> None: ...
    def evict(self, topic: str, ledger: int, entry: int, size: int, reason: str) -> None: ...
    def restart(self, clock: Clock | None = None) -> TraceSink:
        """The broker's cache was replaced by a new, empty stream whose event clock is
        ``clock``: called by whoever builds that stream (``create_stream(...,
        trace=recorder.restart)``), never by the stream. Returns the sink."""
        ...


class CacheEventStream:
    """The broker's cache: the live design, its shadows, the trace, and the clock they
    share. ``load_topic`` hands the ledger layer a topic's :class:`TopicEvents`."""

    def __init__(
        self,
        live: DesignInstance,
        shadows: Sequence[DesignInstance],
        source: Clock,
        clock: EventClock,
        trace: TraceSink | None = None,
        entry_length: int = 0,
    ) -> None:
        self.live = live
        #: every entry's size in the cache, whatever its payload (0: its payload's)
        self.entry_length = entry_length
        self.shadows = list(shadows)
        self.trace = trace
        self._source = source
        self.clock = clock
        if trace is not None:
            recorder = trace

            def evicted(entry: CachedEntry, reason: str) -> None:
                recorder.evict(
                    entry.cache.name, entry.ledger_id, entry.entry_id, entry.size, reason
                )

            live.manager.evict_listener = evicted

    def stamp(self) -> None:
        """The designs' clock reads the broker's clock, once for the event at hand."""
        self.clock.now_ns = self._source.monotonic_ns()

    def load_topic(self, name: str) -> TopicEvents:
        """A topic is being loaded: every design gets a fresh unit for it."""
        self.stamp()
        if self.trace is not None:
            self.trace.load(name)
        return TopicEvents(
            self,
            name,
            self.live.load(name),
            [shadow.load(name) for shadow in self.shadows],
        )

    def tick(self) -> None:
        """One round of the broker's eviction timer, in every design."""
        self.stamp()
        if self.trace is not None:
            self.trace.tick()
        self.live.tick()
        for shadow in self.shadows:
            shadow.tick()

    def quiet_until_ns(self) -> int | None:
        """The broker-clock time until which a :meth:`tick` would change nothing in any
        design (``EntryCacheManager.quiet_until_ns``); None while a trace records (each
        tick is one of its events) or when a design cannot tell. O(designs) plus what
        each design's answer costs."""
        if self.trace is not None:
            return None
        until = self.live.manager.quiet_until_ns()
        for shadow in self.shadows:
            if until is None:
                return None
            theirs = shadow.manager.quiet_until_ns()
            until = None if theirs is None else min(until, theirs)
        return until

    def now_ns(self) -> int:
        """The broker's clock, which the designs' event clock is stamped from."""
        return self._source.monotonic_ns()

    def stats(self) -> dict[str, Any]:
        """The live design's counters and, under ``shadows``, each shadow's."""
        result = self.live.stats()
        result["shadows"] = {
            shadow.name: {
                key: value for key, value in shadow.stats().items() if key in SHADOW_STATS
            }
            for shadow in self.shadows
        }
        return result


class TopicEvents:
    """One topic's cache events, fanned out to the live unit, the shadow units and the
    trace. Each event costs its live cost, plus the same on every shadow, plus a trace
    row per entry when tracing."""

    __slots__ = (
        "_clock",
        "_entry_length",
        "_mark_read",
        "_shadow_mark_reads",
        "_source",
        "_stream",
        "_trace",
        "live",
        "name",
        "shadows",
    )

    def __init__(
        self, stream: CacheEventStream, name: str, live: TopicUnit, shadows: list[TopicUnit]
    ) -> None:
        self._stream = stream
        self.name = name
        self.live = live
        self.shadows = shadows
        self._trace = stream.trace
        self._clock = stream.clock
        self._source = stream._source
        self._entry_length = stream.entry_length
        # released is the one event per entry handed over: bound once
        self._mark_read = live.cache.mark_read
        self._shadow_mark_reads = [shadow.cache.mark_read for shadow in shadows]

    def added(
        self,
        ledger_id: int,
        first: int,
        datas: Sequence[bytes],
        counts: Sequence[int] | None = None,
    ) -> None:
        """Entries ``first..`` were stored; ``counts``: their messages as the produce
        path checked them (kept on the live design's cached entries), None if not
        known."""
        self._clock.now_ns = self._source.monotonic_ns()
        if self._trace is None and not self.shadows and not self._entry_length:
            self.live.added(ledger_id, first, datas, None, counts)  # sizes measured if cached
            return
        sizes = self._sizes(datas)
        if self._trace is not None:
            self._trace.add(self.name, ledger_id, first, sizes)
        self.live.added(ledger_id, first, datas, sizes, counts)
        for shadow in self.shadows:
            shadow.added(ledger_id, first, None, sizes)

    def _sizes(self, datas: Sequence[bytes]) -> list[int]:
        """Each entry's size in the cache: its payload's, or the configured length
        (``brokerlabCacheEntryLengthBytes``). O(n)."""
        length = self._entry_length
        return [length] * len(datas) if length else list(map(len, datas))

    def read(self, reader: str, ledger_id: int, first: int, last: int, replay: bool) -> ReadPlan:
        """The live design's plan for the read; the shadows look up the same range."""
        self._clock.now_ns = self._source.monotonic_ns()
        plan = self.live.read(reader, ledger_id, first, last)
        if self.shadows or self._trace is not None:
            available = {entry.entry_id: entry.size for entry in plan.hits}
            if self._trace is not None:
                self._trace.read(self.name, reader, ledger_id, first, last, replay, available)
            for shadow in self.shadows:
                shadow.read(reader, ledger_id, first, last, available)
        return plan

    def filled(self, ledger_id: int, first: int, datas: Sequence[bytes]) -> None:
        self._clock.now_ns = self._source.monotonic_ns()
        sizes = self._sizes(datas)
        if self._trace is not None:
            self._trace.fill(self.name, ledger_id, first, sizes)
        self.live.filled(ledger_id, first, datas, sizes)
        for shadow in self.shadows:
            shadow.filled(ledger_id, first, None, sizes)

    def fill_failed(self, ledger_id: int, first: int, last: int) -> None:
        self._clock.now_ns = self._source.monotonic_ns()
        if self._trace is not None:
            self._trace.fill_failed(self.name, ledger_id, first, last)
        self.live.fill_failed(ledger_id, first, last)
        for shadow in self.shadows:
            shadow.fill_failed(ledger_id, first, last)

    def released(self, reader: str, ledger_id: int, entry_id: int) -> None:
        """An entry was handed to ``reader``'s consumer. O(1) per design."""
        if self._trace is not None:
            self._clock.now_ns = self._source.monotonic_ns()
            self._trace.release(self.name, reader, ledger_id, entry_id)
        self._mark_read(ledger_id, entry_id)
        for mark_read in self._shadow_mark_reads:
            mark_read(ledger_id, entry_id)

    def replay_added(self, reader: str, ledger_id: int, entry_id: int) -> None:
        if self._trace is not None:
            self._clock.now_ns = self._source.monotonic_ns()
            self._trace.replay_add(self.name, reader, ledger_id, entry_id)
        self.live.replay_added(ledger_id, entry_id)
        for shadow in self.shadows:
            shadow.replay_added(ledger_id, entry_id)

    def activated(
        self, cursor: str, read_position: Pos, mark_delete: Pos, entries_to_read: int
    ) -> None:
        self._clock.now_ns = self._source.monotonic_ns()
        if self._trace is not None:
            self._trace.activate(self.name, cursor, read_position, mark_delete, entries_to_read)
        self.live.activated(cursor, read_position, mark_delete, entries_to_read)
        for shadow in self.shadows:
            shadow.activated(cursor, read_position, mark_delete, entries_to_read)

    def deactivated(self, cursor: str) -> None:
        self._clock.now_ns = self._source.monotonic_ns()
        if self._trace is not None:
            self._trace.deactivate(self.name, cursor)
        self.live.deactivated(cursor)
        for shadow in self.shadows:
            shadow.deactivated(cursor)

    def moved(self, cursor: str, read_position: Pos, mark_delete: Pos) -> None:
        self._clock.now_ns = self._source.monotonic_ns()
        if self._trace is not None:
            self._trace.move(self.name, cursor, read_position, mark_delete)
        self.live.moved(cursor, read_position, mark_delete)
        for shadow in self.shadows:
            shadow.moved(cursor, read_position, mark_delete)

    def checked(self, cursors: Sequence[CursorCheck]) -> None:
        self._clock.now_ns = self._source.monotonic_ns()
        if self._trace is not None:
            self._trace.check(self.name, cursors)
        self.live.checked(cursors)
        for shadow in self.shadows:
            shadow.checked(cursors)

    def trimmed(self, ledger_id: int) -> None:
        self._clock.now_ns = self._source.monotonic_ns()
        if self._trace is not None:
            self._trace.trim(self.name, ledger_id)
        self.live.trimmed(ledger_id)
        for shadow in self.shadows:
            shadow.trimmed(ledger_id)

    def unloaded(self) -> None:
        """The topic was unloaded, closed or deleted."""
        stream = self._stream
        stream.stamp()
        if self._trace is not None:
            self._trace.unload(self.name)
        stream.live.unload(self.name, self.live)
        for shadow, unit in zip(stream.shadows, self.shadows, strict=True):
            shadow.unload(self.name, unit)
