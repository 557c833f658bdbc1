"""Any sequence of inserts, reads, invalidations, eviction passes and clock advances keeps
a cache honest: accounted size is the sum of what it holds, a size pass brings it under
max, nothing invalidated comes back, a returned payload is the one inserted, and each
design evicts in its own order:

- PIP-430: the removal queue evicts first in, first out; an entry the rule keeps
  (accessed with the LRU-like extension, or expected reads left and requeues to spare)
  is requeued, never removed, and only such entries are requeued; after a timestamp
  pass nothing older than the TTL is left;
- legacy: each per-ledger cache loses its lowest positions first;
- the ring: only rotation removes anything; invalidation does nothing (PIP-174's PR).
"""

from __future__ import annotations

from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from broker.cache.config import CacheConfig
from broker.cache.entry import CachedEntry
from broker.cache.legacy import LegacyEntryCacheManager
from broker.cache.pip430 import Pip430EntryCacheManager
from broker.cache.segmented import SegmentedEntryCacheManager
from broker.clock import ManualClock

LEDGERS = st.integers(0, 3)
#: ledger ids are unique broker-wide (the bookie assigns them): topic t owns t*10 + l
ENTRY_IDS = st.integers(0, 25)
MAX_SIZE = 300
TTL_MS = 100

Key = tuple[int, int, int]  # (topic, ledger, entry)


class CacheMachine(RuleBasedStateMachine):
    """Model: the payload each position would return if the cache still holds it.
    Subclasses choose the design; every design must pass the same checks."""

    #: invalidation drops entries (the ring's does nothing)
    invalidation_drops = True

    def make(self, config: CacheConfig, clock: ManualClock) -> Any:
        raise NotImplementedError

    @initialize(
        by_reads=st.booleans(),
        recently_accessed=st.booleans(),
        max_requeues=st.integers(0, 3),
        watermark=st.sampled_from([0.5, 0.9]),
        copy=st.booleans(),
    )
    def setup(
        self,
        by_reads: bool,
        recently_accessed: bool,
        max_requeues: int,
        watermark: float,
        copy: bool,
    ) -> None:
        self.clock = ManualClock()
        self.config = CacheConfig(
            max_size_bytes=MAX_SIZE,
            eviction_watermark=watermark,
            eviction_time_threshold_ms=TTL_MS,
            eviction_by_expected_read_count=by_reads,
            extend_ttl_of_recently_accessed=recently_accessed,
            extend_ttl_max_times=max_requeues,
            copy_entries=copy,
            segments=3,
        )
        self.manager = self.make(self.config, self.clock)
        self.evicted: list[tuple[CachedEntry, str]] = []
        self.manager.evict_listener = lambda entry, reason: self.evicted.append((entry, reason))
        self.caches = [self.manager.get_entry_cache(f"t{i}") for i in range(2)]
        self.expected: dict[Key, bytes] = {}
        #: positions ever inserted: the write path stores each position once
        self.inserted: set[Key] = set()

    def _held(self, topic: int) -> dict[tuple[int, int], CachedEntry]:
        return {(e.ledger_id, e.entry_id): e for e in self.caches[topic].cached_entries()}

    def _check_hit(self, topic: int, entry: CachedEntry) -> None:
        key = (topic, entry.ledger_id, entry.entry_id)
        assert key in self.expected, f"{key} was invalidated or never inserted"
        assert entry.data == self.expected[key]

    def _refused(self, size: int) -> bool:
        """Whether this design may refuse a fresh insert now."""
        return False

    @rule(
        topic=st.integers(0, 1),
        ledger=LEDGERS,
        entry=ENTRY_IDS,
        payload=st.binary(min_size=1, max_size=60),
        reads=st.integers(0, 3),
    )
    def insert(self, topic: int, ledger: int, entry: int, payload: bytes, reads: int) -> None:
        ledger += topic * 10
        key = (topic, ledger, entry)
        if key in self.inserted:
            return
        self.inserted.add(key)
        may_refuse = self._refused(len(payload))
        self.caches[topic].insert(ledger, entry, [payload], [len(payload)], reads)
        cached = self._held(topic).get((ledger, entry))
        if cached is None:
            assert may_refuse, "only a full cache refuses an insert"
            return
        self.expected[key] = payload
        self._check_hit(topic, cached)

    @rule(
        topic=st.integers(0, 1),
        ledger=LEDGERS,
        first=ENTRY_IDS,
        sizes=st.lists(st.integers(1, 40), min_size=2, max_size=10),
        reads=st.integers(0, 3),
    )
    def insert_batch(
        self, topic: int, ledger: int, first: int, sizes: list[int], reads: int
    ) -> None:
        """The write path's usual shape: a batch of consecutive new entries at once."""
        ledger += topic * 10
        keys = [(topic, ledger, first + offset) for offset in range(len(sizes))]
        if any(key in self.inserted for key in keys):
            return
        self.inserted.update(keys)
        payloads = [bytes([offset % 256]) * size for offset, size in enumerate(sizes)]
        self.caches[topic].insert(ledger, first, payloads, sizes, reads)
        held = self._held(topic)
        for key, payload in zip(keys, payloads, strict=True):
            if key[1:] in held:
                self.expected[key] = payload
                self._check_hit(topic, held[key[1:]])

    @rule(topic=st.integers(0, 1), reads=st.integers(1, 3), data=st.data())
    def insert_from_read(self, topic: int, reads: int, data: st.DataObject) -> None:
        """A storage read of a position already stored: the payload is the stored one; a
        position still cached keeps its entry."""
        stored = [k for k in self.inserted if k[0] == topic]
        if not stored:
            return
        key = data.draw(st.sampled_from(sorted(stored)))
        payload = b"stored-%d-%d" % key[1:]
        before = self._held(topic).get(key[1:])
        self.caches[topic].insert_from_read(key[1], key[2], payload, len(payload), reads)
        after = self._held(topic).get(key[1:])
        if before is not None:
            assert after is not None and after.data == before.data, "a cached entry stays"
            assert after.expected_reads == before.expected_reads, "and keeps its count"
        elif after is not None:
            self.expected[key] = payload
            self._check_hit(topic, after)

    @rule(topic=st.integers(0, 1), ledger=LEDGERS, first=ENTRY_IDS, length=st.integers(0, 10))
    def get_range(self, topic: int, ledger: int, first: int, length: int) -> None:
        ledger += topic * 10
        hits: list[CachedEntry] = []
        missing = self.caches[topic].get_range(ledger, first, first + length, hits)
        for cached in hits:
            self._check_hit(topic, cached)
        covered = sorted(
            [h.entry_id for h in hits] + [i for a, b in missing for i in range(a, b + 1)]
        )
        assert covered == list(range(first, first + length + 1))

    def _forget(self, doomed: list[Key]) -> None:
        if self.invalidation_drops:
            for key in doomed:
                del self.expected[key]

    @rule(topic=st.integers(0, 1), ledger=LEDGERS, entry=ENTRY_IDS)
    def invalidate_entries(self, topic: int, ledger: int, entry: int) -> None:
        ledger += topic * 10
        self.caches[topic].invalidate_entries(ledger, entry)
        self._forget([k for k in self.expected if k[0] == topic and (k[1], k[2]) < (ledger, entry)])

    @rule(topic=st.integers(0, 1), ledger=LEDGERS)
    def invalidate_ledger(self, topic: int, ledger: int) -> None:
        ledger += topic * 10
        self.caches[topic].invalidate_all_entries(ledger)
        self._forget([k for k in self.expected if k[0] == topic and k[1] == ledger])

    @rule(topic=st.integers(0, 1))
    def clear(self, topic: int) -> None:
        self.caches[topic].clear()
        self._forget([k for k in self.expected if k[0] == topic])

    @rule(topic=st.integers(0, 1), data=st.data())
    def read_counts(self, topic: int, data: st.DataObject) -> None:
        held = list(self._held(topic).values())
        if held:
            entry = data.draw(st.sampled_from(held))
            if data.draw(st.booleans()):
                self.caches[topic].mark_read(entry.ledger_id, entry.entry_id)
            else:
                self.caches[topic].add_expected_read(entry.ledger_id, entry.entry_id)

    @rule(ms=st.integers(0, 250))
    def advance_clock(self, ms: int) -> None:
        self.clock.advance_ms(ms)

    # ------------------------------------------------------------------ the passes

    def _pass(self, timestamp: bool) -> None:
        before = self._snapshot()
        self.evicted.clear()
        if timestamp:
            self.manager.evict_expired()
        else:
            self.manager.evict_to_watermark()
            assert self.manager.size <= MAX_SIZE
        for entry, _ in self.evicted:
            self.expected.pop(self._key(entry), None)
        self.check_order(before, timestamp)

    @rule()
    def timestamp_pass(self) -> None:
        self._pass(timestamp=True)

    @rule()
    def size_pass(self) -> None:
        self._pass(timestamp=False)

    def _key(self, entry: CachedEntry) -> Key:
        topic = next(i for i, cache in enumerate(self.caches) if entry.cache is cache)
        return (topic, entry.ledger_id, entry.entry_id)

    def _snapshot(self) -> Any:
        return None

    def check_order(self, before: Any, timestamp: bool) -> None:
        """The design's eviction order (subclasses)."""

    # ------------------------------------------------------------------ invariants

    @invariant()
    def accounted_size_is_what_is_held(self) -> None:
        if not hasattr(self, "manager"):
            return
        held = [e for cache in self.caches for e in cache.cached_entries()]
        if isinstance(self.manager, SegmentedEntryCacheManager):
            segments = self.manager.segments
            held = [entry for segment in segments for entry in segment.index.values()]
        assert self.manager.size == sum(e.size for e in held)
        assert self.manager.counters.entries == len(held)
        assert all(not e.removed for e in held)
        counters = self.manager.counters
        removed = counters.evicted_ttl + counters.evicted_size + counters.evicted_invalidated
        assert counters.inserted == len(held) + removed, "each removal counted once, by reason"

    @invariant()
    def everything_held_was_inserted_and_never_invalidated(self) -> None:
        if not hasattr(self, "manager"):
            return
        for topic in range(len(self.caches)):
            for cached in self.caches[topic].cached_entries():
                self._check_hit(topic, cached)


class Pip430Machine(CacheMachine):
    def make(self, config: CacheConfig, clock: ManualClock) -> Any:
        return Pip430EntryCacheManager(config, clock)

    def _keeps(self, entry: CachedEntry) -> bool:
        """PIP-430's requeue rule, from the configuration (not the code under test)."""
        config = self.config
        max_requeues = config.extend_ttl_max_times if config.eviction_by_expected_read_count else 0
        return (config.extend_ttl_of_recently_accessed and entry.accessed) or (
            entry.expected_reads >= 1 and entry.requeue_count < max_requeues
        )

    def _snapshot(self) -> Any:
        queue = [e for e in self.manager.queue if not e.removed]
        return [(e, self._keeps(e), e.requeue_count) for e in queue]

    def check_order(self, before: Any, timestamp: bool) -> None:
        removed = {id(entry) for entry, _ in self.evicted}
        for entry, _ in self.evicted:
            assert not self._keeps(entry), f"{entry} was removed though the rule keeps it"
        last_removed = max(
            (index for index, (e, _, _) in enumerate(before) if id(e) in removed), default=-1
        )
        for index, (entry, kept, requeues) in enumerate(before):
            if timestamp and kept:
                # a requeue gives a full TTL: what the rule keeps survives a timestamp pass
                assert id(entry) not in removed, f"{entry} was kept, then removed"
            if id(entry) in removed:
                continue
            if not kept:
                assert entry.requeue_count == requeues, f"{entry} requeued against the rule"
                assert index > last_removed, f"{entry} survived a younger entry's removal"
        if timestamp:
            cutoff = self.clock.monotonic_ns() - self.config.ttl_ns
            for entry in self.manager.queue:
                if not entry.removed:
                    assert entry.timestamp_ns >= cutoff, f"{entry} expired and was kept"


class LegacyMachine(CacheMachine):
    def make(self, config: CacheConfig, clock: ManualClock) -> Any:
        return LegacyEntryCacheManager(config, clock)

    def _refused(self, size: int) -> bool:
        return self.manager.size >= MAX_SIZE

    def _snapshot(self) -> Any:
        return [set(self._held(topic)) for topic in range(len(self.caches))]

    def check_order(self, before: Any, timestamp: bool) -> None:
        for topic, held_before in enumerate(before):
            held_after = set(self._held(topic))
            gone = held_before - held_after
            if gone and held_after:
                assert max(gone) < min(held_after), "a per-ledger cache loses its lowest first"
        if timestamp:
            cutoff = self.clock.monotonic_ns() - self.config.ttl_ns
            for entry, reason in self.evicted:
                assert reason == "ttl" and entry.timestamp_ns <= cutoff


class SegmentedMachine(CacheMachine):
    invalidation_drops = False

    def make(self, config: CacheConfig, clock: ManualClock) -> Any:
        return SegmentedEntryCacheManager(config, clock)

    def _refused(self, size: int) -> bool:
        return size > self.manager.segment_size

    def check_order(self, before: Any, timestamp: bool) -> None:
        assert not self.evicted, "the ring has no passes: only rotation removes entries"


SETTINGS = settings(max_examples=150, stateful_step_count=60, deadline=None)
Pip430Machine.TestCase.settings = SETTINGS
LegacyMachine.TestCase.settings = SETTINGS
test_pip430_state_machine = Pip430Machine.TestCase
test_legacy_state_machine = LegacyMachine.TestCase
SegmentedMachine.TestCase.settings = SETTINGS
test_segmented_state_machine = SegmentedMachine.TestCase
