"""A design as a whole unit, driven by cache events.

:class:`DesignInstance` is one running design: its broker-wide
:class:`~broker.cache.api.EntryCacheManager` and a :class:`TopicUnit` per loaded topic.
A :class:`TopicUnit` pairs the topic's :class:`~broker.cache.api.EntryCache` (what is
held) with the design's :class:`~broker.cache.api.TopicPolicy` (the ledger-side rules)
and answers every cache event of the topic the same way wherever it runs: live in the
broker (with payloads), as a shadow beside another live design, in a test, or in a
replay of a recorded trace (sizes only). The events and their order are the contract;
``broker/cache/stream.py`` produces them, ``docs/trace-format.md`` lists them.

Reads, as Pulsar counts them (``RangeEntryCacheImpl`` with ``PendingReadsManager``):

- ``read``: the reader asks for ``first..last``; cached entries are hits, counted now.
  Each run of missing entries is placed as ``PendingReadsManager.findPendingRead``
  places it, among the storage reads in flight in *this* design: joined to the read of
  exactly that range, else to the oldest that includes it, else to one holding its start
  (the last found; what lies beyond is placed the same way), else to one holding its end;
  else it is a storage read of its own (a read in flight strictly inside it is not
  joined: those entries are read twice). A joined part counts nothing for the reader.
  A design that does not share storage reads (the PIP-174 ring, the disabled cache)
  starts one per reader.
- ``filled``: entries arrived from storage. Every storage read of an entry counts one
  miss, so ``misses`` is the number of entries read from storage; the entry is then
  offered to the cache with the expected reads the policy gives its owning reader at
  completion (PIP-430: active cursors at or before it).

A shadow or a replay has no storage of its own: an entry it misses that the live design
had (``available``, the live hits of the same read) is "read" at once; one the live design
is reading too completes when the live design's storage read does. So a shadow misses
exactly when its design would have gone to storage, on the live design's reads.

``released`` (the entry was handed to a consumer) counts one expected read down and
``replay_added`` one up, on the entry the design holds at that position (PIP-430's
``EntryReadCountHandler``, ``broker/cache/pip430.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any

from broker.cache.api import (
    CursorCheck,
    EntryCache,
    EntryCacheManager,
    MissingRange,
    Pos,
    TopicPolicy,
)
from broker.cache.config import CacheConfig
from broker.cache.disabled import DisabledEntryCacheManager
from broker.cache.entry import CachedEntry
from broker.clock import Clock


class PendingRange:
    """One storage read in flight in a design that shares them (Pulsar's
    ``PendingReadsManager.PendingRead``): its range, and how many of its entries have
    not arrived yet (it leaves the ledger's reads in flight when none are left)."""

    __slots__ = ("first", "last", "outstanding")

    def __init__(self, first: int, last: int, outstanding: int) -> None:
        self.first = first
        self.last = last
        self.outstanding = outstanding


class PendingEntry:
    """An entry this design is reading from storage: the reader that started the read,
    how many storage reads of it are outstanding (more than one when a read was started
    over it while another was in flight), and the range reads it belongs to (none in a
    design that does not share reads). Never changed once made, so one object can stand
    for every entry of a range."""

    __slots__ = ("ranges", "reader", "reads")

    def __init__(self, reader: str, reads: int = 1, ranges: tuple[PendingRange, ...] = ()) -> None:
        self.reader = reader
        self.reads = reads
        self.ranges = ranges


class ReadPlan:
    """A design's answer to one range read: the hits (in entry order), the ranges its
    own storage reads fetch, and the ranges it waits for from reads in flight."""

    __slots__ = ("hits", "joined", "own")

    def __init__(self, hits: list[CachedEntry]) -> None:
        self.hits = hits
        self.own: list[MissingRange] = []
        self.joined: list[MissingRange] = []


class TopicUnit:
    """One design's view of one topic: its entry cache and its ledger-side policy, and
    the storage reads of the topic in flight in this design. Costs: ``read`` O(range)
    plus the cache's lookup; ``filled`` O(entries) plus inserts; ``released`` and
    ``replay_added`` O(1); cursor events as the policy states.

    ``live``: the ``filled`` and ``fill_failed`` events are this design's own storage
    reads, one event per read (the live design, or a replay of it). A shadow's storage
    reads of an entry all complete with the live design's first read of it."""

    __slots__ = (
        "_pending", "_ranges", "_shares", "cache", "counters", "live", "manager", "policy",
        "released",
    )  # fmt: skip

    def __init__(
        self,
        manager: EntryCacheManager,
        cache: EntryCache,
        policy: TopicPolicy,
        live: bool = False,
    ) -> None:
        self.manager = manager
        self.cache = cache
        self.policy = policy
        self.live = live
        self.counters = manager.counters
        self._shares = manager.shares_pending_reads
        #: ledger id -> entry id -> the storage read of it in flight
        self._pending: dict[int, dict[int, PendingEntry]] = {}
        #: ledger id -> (first, last) -> the range reads in flight, oldest first (a
        #: design that shares storage reads)
        self._ranges: dict[int, dict[tuple[int, int], PendingRange]] = {}
        #: ``released(ledger_id, entry_id)``: the entry was handed to a consumer, one
        #: expected read happened. O(1). The cache's own ``mark_read``, bound here: it
        #: runs once per entry delivered, the commonest event of a trace
        self.released: Callable[[int, int], None] = cache.mark_read

    # ------------------------------------------------------------------ entries

    def added(
        self,
        ledger_id: int,
        first: int,
        datas: Sequence[bytes | memoryview] | None,
        sizes: Sequence[int] | None,
        counts: Sequence[int] | None = None,
    ) -> None:
        """Entries ``first..`` were stored: cached if the policy says so. ``sizes`` None:
        the lengths of ``datas``, measured only when they are cached (a topic nobody
        reads does not pay an int object per entry). ``counts``: their messages, as
        the produce path checked them (``EntryCache.insert``)."""
        reads = self.policy.added_reads()
        if reads is None:
            return
        if sizes is None:
            if datas is None:
                raise ValueError("added needs the entries' sizes or the entries")
            sizes = list(map(len, datas))
        self.cache.insert(ledger_id, first, datas, sizes, reads, counts)
        self.manager.after_insert()

    def read(
        self,
        reader: str,
        ledger_id: int,
        first: int,
        last: int,
        available: dict[int, int] | None = None,
    ) -> ReadPlan:
        """``reader`` asks for ``first..last``. ``available``: sizes of entries whose
        data is already at hand (a shadow's view of the live hits): one this design
        misses and is not already reading is read at once."""
        plan = ReadPlan([])
        self.counters.requested += last - first + 1
        missing = self.cache.get_range(ledger_id, first, last, plan.hits)
        if not missing:
            return plan
        pending = self._pending.get(ledger_id)
        if pending is None:
            pending = self._pending[ledger_id] = {}
        if self._shares:
            ranges = self._ranges.get(ledger_id)
            if ranges is None:
                ranges = self._ranges[ledger_id] = {}
            completed = False
            for miss_first, miss_last in missing:
                completed |= self._find_pending_read(
                    reader, ledger_id, miss_first, miss_last, pending, ranges, plan, available
                )
            if plan.joined:
                self.counters.joined += sum(b - a + 1 for a, b in plan.joined)
            if completed:
                self.manager.after_insert()
            return plan
        if not pending and not available:
            # nothing in flight here: every missing range is this reader's own read
            mine = PendingEntry(reader)
            for miss_first, miss_last in missing:
                pending.update(zip(range(miss_first, miss_last + 1), repeat(mine)))
            plan.own = missing
            return plan
        # a design that does not share storage reads: every missing entry is read again
        mine = PendingEntry(reader)
        completed = False
        waiting: PendingEntry | None
        for miss_first, miss_last in missing:
            run_first = run_last = -1
            for entry_id in range(miss_first, miss_last + 1):
                size = available.get(entry_id) if available else None
                if size is not None:
                    self._complete(reader, ledger_id, entry_id, None, size, 1)
                    completed = True
                    continue
                waiting = pending.get(entry_id)
                if waiting is None:
                    pending[entry_id] = mine
                else:  # another storage read of the same entry
                    pending[entry_id] = PendingEntry(waiting.reader, waiting.reads + 1)
                if run_first >= 0 and entry_id != run_last + 1:
                    plan.own.append((run_first, run_last))
                    run_first = -1
                if run_first < 0:
                    run_first = entry_id
                run_last = entry_id
            if run_first >= 0:
                plan.own.append((run_first, run_last))
        if completed:
            self.manager.after_insert()
        return plan

    def _find_pending_read(
        self,
        reader: str,
        ledger_id: int,
        first: int,
        last: int,
        pending: dict[int, PendingEntry],
        ranges: dict[tuple[int, int], PendingRange],
        plan: ReadPlan,
        available: dict[int, int] | None,
    ) -> bool:
        """One missing run, as Pulsar's ``PendingReadsManager.findPendingRead`` places
        it: joined whole to the read in flight of exactly that range, else to the first
        (oldest) one that includes it; else to one it overlaps at an end, the last such
        found that leaves only its right part, else only its left part, that part read
        the same way at once (the remainder re-enters the cache path); else a storage read
        of its own. A read in flight strictly inside the run is not joined (Pulsar's
        overlap test looks at the run's ends only): the run is read whole, those entries
        twice. Returns whether an entry was completed at once (a shadow's view of a live
        hit). O(reads in flight of the ledger + run)."""
        key = (first, last)
        if key in ranges:
            plan.joined.append(key)
            return False
        right: PendingRange | None = None
        left: PendingRange | None = None
        for found in ranges.values():
            if found.first <= first and last <= found.last:
                plan.joined.append(key)
                return False
            if found.first <= first <= found.last:  # the run's start is in it
                right = found
            elif found.first <= last <= found.last:  # the run's end is in it
                left = found
        if right is not None:
            plan.joined.append((first, right.last))
            return self._find_pending_read(
                reader, ledger_id, right.last + 1, last, pending, ranges, plan, available
            )
        if left is not None:
            completed = self._find_pending_read(
                reader, ledger_id, first, left.first - 1, pending, ranges, plan, available
            )
            plan.joined.append((left.first, last))
            return completed
        return self._start_read(reader, ledger_id, first, last, pending, ranges, plan, available)

    def _start_read(
        self,
        reader: str,
        ledger_id: int,
        first: int,
        last: int,
        pending: dict[int, PendingEntry],
        ranges: dict[tuple[int, int], PendingRange],
        plan: ReadPlan,
        available: dict[int, int] | None,
    ) -> bool:
        """A storage read of ``first..last`` of ``reader``'s own, registered as in flight.
        A shadow completes at once the entries the live design had (``available``).
        O(run)."""
        read = PendingRange(first, last, 0)
        mine = PendingEntry(reader, 1, (read,))
        completed = False
        for entry_id in range(first, last + 1):
            size = available.get(entry_id) if available else None
            if size is not None:
                self._complete(reader, ledger_id, entry_id, None, size, 1)
                completed = True
                continue
            read.outstanding += 1
            waiting = pending.get(entry_id)
            if waiting is None:
                pending[entry_id] = mine
            else:  # read twice: under a read in flight strictly inside this one
                pending[entry_id] = PendingEntry(
                    waiting.reader, waiting.reads + 1, (*waiting.ranges, read)
                )
        if read.outstanding:
            ranges[(first, last)] = read
        plan.own.append((first, last))
        return completed

    def filled(
        self,
        ledger_id: int,
        first: int,
        datas: Sequence[bytes | memoryview] | None,
        sizes: Sequence[int],
    ) -> None:
        """Entries ``first..`` arrived from storage: each one this design was reading
        counts its misses (one per storage read of it that this completes) and is
        offered to the cache with the expected reads its reader gets now."""
        pending = self._pending.get(ledger_id)
        if not pending:
            return
        one_read = self.live
        ranges = self._ranges.get(ledger_id)
        # the live design's event is one of its own reads, in flight under its range
        done = ranges.pop((first, first + len(sizes) - 1), None) if one_read and ranges else None
        misses = miss_bytes = 0
        expected_of: dict[str, int] = {}
        storage_read_reads = self.policy.storage_read_reads
        insert = self.cache.insert_from_read
        for offset, size in enumerate(sizes):
            entry_id = first + offset
            waiting = pending.pop(entry_id, None)
            if waiting is None:
                continue
            reads = waiting.reads
            if one_read and reads > 1:  # other storage reads of it are still out
                rest = tuple(read for read in waiting.ranges if read is not done)
                pending[entry_id] = PendingEntry(waiting.reader, reads - 1, rest)
                reads = 1
            elif waiting.ranges and ranges is not None:
                self._arrived(waiting, ranges)
            misses += reads
            miss_bytes += size * reads
            reader = waiting.reader
            expected = expected_of.get(reader)
            if expected is None:
                expected = expected_of[reader] = storage_read_reads(reader)
            if expected > 0:
                insert(
                    ledger_id, entry_id, None if datas is None else datas[offset], size, expected
                )
        if misses:
            counters = self.counters
            counters.misses += misses
            counters.miss_bytes += miss_bytes
            self.manager.after_insert()

    @staticmethod
    def _arrived(waiting: PendingEntry, ranges: dict[tuple[int, int], PendingRange]) -> None:
        """Every storage read of an entry is over: each range read it belonged to has
        one entry less to wait for, and leaves the reads in flight with none. O(reads)."""
        for read in waiting.ranges:
            read.outstanding -= 1
            if read.outstanding <= 0 and ranges.get((read.first, read.last)) is read:
                del ranges[(read.first, read.last)]

    def fill_failed(self, ledger_id: int, first: int, last: int) -> None:
        """The storage read of ``first..last`` failed: nothing arrives, nothing counts.
        The live design forgets that one read; a shadow's reads of those entries end."""
        pending = self._pending.get(ledger_id)
        if not pending:
            return
        one_read = self.live
        ranges = self._ranges.get(ledger_id)
        done = ranges.pop((first, last), None) if one_read and ranges else None
        for entry_id in range(first, last + 1):
            waiting = pending.pop(entry_id, None)
            if waiting is None:
                continue
            if one_read and waiting.reads > 1:
                rest = tuple(read for read in waiting.ranges if read is not done)
                pending[entry_id] = PendingEntry(waiting.reader, waiting.reads - 1, rest)
            elif waiting.ranges and ranges is not None:
                self._arrived(waiting, ranges)

    def _complete(
        self,
        reader: str,
        ledger_id: int,
        entry_id: int,
        data: bytes | memoryview | None,
        size: int,
        reads: int,
    ) -> None:
        counters = self.counters
        counters.misses += reads
        counters.miss_bytes += size * reads
        expected = self.policy.storage_read_reads(reader)
        if expected > 0:
            self.cache.insert_from_read(ledger_id, entry_id, data, size, expected)

    def replay_added(self, ledger_id: int, entry_id: int) -> None:
        """The entry joined a replay queue: one more read is expected. O(1)."""
        self.cache.add_expected_read(ledger_id, entry_id)

    def trimmed(self, ledger_id: int) -> None:
        """Every cursor consumed the ledger and it was deleted."""
        self.cache.invalidate_all_entries(ledger_id)

    # ------------------------------------------------------------------ cursors

    def activated(
        self, cursor: str, read_position: Pos, mark_delete: Pos, entries_to_read: int
    ) -> None:
        self.policy.activated(cursor, read_position, mark_delete, entries_to_read)

    def deactivated(self, cursor: str) -> None:
        self.policy.deactivated(cursor)

    def moved(self, cursor: str, read_position: Pos, mark_delete: Pos) -> None:
        self.policy.moved(cursor, read_position, mark_delete)

    def checked(self, cursors: Sequence[CursorCheck]) -> None:
        self.policy.checked(cursors)

    @property
    def reads_in_flight(self) -> int:
        """Entries this design is reading from storage now (tests, stats)."""
        return sum(len(entries) for entries in self._pending.values())


ManagerFactory = Callable[[CacheConfig, Clock], EntryCacheManager]
PolicyFactory = Callable[[CacheConfig, Clock, EntryCache], TopicPolicy]


@dataclass(frozen=True)
class Design:
    """A registered design: how to build its manager and its per-topic policy."""

    name: str
    #: one line for users: what the design is
    summary: str
    manager: ManagerFactory
    policy: PolicyFactory

    def create(self, config: CacheConfig, clock: Clock, live: bool = False) -> DesignInstance:
        """A running instance; a zero size gives the disabled cache, as in Pulsar.
        ``live``: its storage reads are the ``filled`` events (see :class:`TopicUnit`)."""
        return DesignInstance(self, config, clock, live)


class DesignInstance:
    """One running design: its cache manager and the unit of every loaded topic."""

    __slots__ = ("clock", "config", "design", "live", "manager", "units")

    def __init__(
        self, design: Design, config: CacheConfig, clock: Clock, live: bool = False
    ) -> None:
        self.design = design
        self.config = config
        self.clock = clock
        self.live = live
        self.manager: EntryCacheManager = (
            DisabledEntryCacheManager()
            if config.max_size_bytes <= 0
            else design.manager(config, clock)
        )
        self.units: dict[str, TopicUnit] = {}

    @property
    def name(self) -> str:
        return self.design.name

    def load(self, topic: str) -> TopicUnit:
        """The topic was loaded: a fresh unit (PIP-430's continue-caching grace starts)."""
        cache = self.manager.get_entry_cache(topic)
        policy = self.design.policy(self.config, self.clock, cache)
        unit = TopicUnit(self.manager, cache, policy, self.live)
        self.units[topic] = unit
        return unit

    def unit(self, topic: str) -> TopicUnit:
        """The loaded topic's unit, loading it if needed (a trace with dropped rows)."""
        unit = self.units.get(topic)
        return unit if unit is not None else self.load(topic)

    def unload(self, topic: str, unit: TopicUnit | None = None) -> None:
        """The topic was unloaded, closed or deleted: its unit (``unit``, if given, and
        only if it is still the loaded one) goes; its cache goes as the design does it
        (the ring keeps its segments)."""
        loaded = self.units.get(topic)
        if loaded is None or (unit is not None and loaded is not unit):
            return
        del self.units[topic]
        self.manager.remove_entry_cache(topic)

    def tick(self) -> None:
        """One round of the broker's eviction timer."""
        self.manager.do_cache_eviction()

    def stats(self) -> dict[str, Any]:
        return self.manager.stats()
