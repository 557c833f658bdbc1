"""Any sequence of inserts, reads, invalidations, eviction passes and clock advances keeps
a cache honest: accounted size is the sum of what it holds, a size pass brings it under
max, nothing invalidated comes back, and a returned payload is the one inserted."""

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
MAX_SIZE = 600


class CacheMachine(RuleBasedStateMachine):
    """Model: the payload each position would return if the cache still holds it.
    Subclasses choose the design; every design must pass the same checks."""

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
        self.manager = self.make(
            CacheConfig(
                max_size_bytes=MAX_SIZE,
                eviction_watermark=watermark,
                eviction_time_threshold_ms=100,
                eviction_by_expected_read_count=by_reads,
                extend_ttl_of_recently_accessed=recently_accessed,
                extend_ttl_max_times=max_requeues,
                copy_entries=copy,
            ),
            self.clock,
        )
        self.caches = [self.manager.get_entry_cache(f"t{i}") for i in range(2)]
        self.expected: dict[tuple[int, int, int], bytes] = {}

    def _held(self, topic: int) -> dict[tuple[int, int], CachedEntry]:
        return {(e.ledger_id, e.entry_id): e for e in self.caches[topic].cached_entries()}

    def _check_hit(self, topic: int, entry: CachedEntry) -> None:
        key = (topic, entry.ledger_id, entry.entry_id)
        assert key in self.expected, f"{key} was invalidated or never inserted"
        assert entry.data == self.expected[key]

    @rule(
        topic=st.integers(0, 1),
        ledger=LEDGERS,
        entry=ENTRY_IDS,
        payload=st.binary(min_size=1, max_size=60),
        reads=st.integers(0, 3),
    )
    def insert(self, topic: int, ledger: int, entry: int, payload: bytes, reads: int) -> None:
        ledger += topic * 10
        was_held = (ledger, entry) in self._held(topic)
        cached = self.caches[topic].insert(ledger, entry, payload, reads)
        if cached is None:
            assert not was_held, "a cached position is always returned"
            assert self.manager.size >= MAX_SIZE, "only a full cache refuses an insert"
            return
        if not was_held:
            self.expected[(topic, ledger, entry)] = payload
        self._check_hit(topic, cached)

    @rule(topic=st.integers(0, 1), ledger=LEDGERS, entry=ENTRY_IDS)
    def get(self, topic: int, ledger: int, entry: int) -> None:
        ledger += topic * 10
        cached = self.caches[topic].get(ledger, entry)
        if cached is not None:
            self._check_hit(topic, cached)

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

    @rule(topic=st.integers(0, 1), ledger=LEDGERS, entry=ENTRY_IDS)
    def invalidate_entries(self, topic: int, ledger: int, entry: int) -> None:
        ledger += topic * 10
        self.caches[topic].invalidate_entries(ledger, entry)
        for key in [k for k in self.expected if k[0] == topic and (k[1], k[2]) < (ledger, entry)]:
            del self.expected[key]

    @rule(topic=st.integers(0, 1), ledger=LEDGERS)
    def invalidate_ledger(self, topic: int, ledger: int) -> None:
        ledger += topic * 10
        self.caches[topic].invalidate_all_entries(ledger)
        for key in [k for k in self.expected if k[0] == topic and k[1] == ledger]:
            del self.expected[key]

    @rule(topic=st.integers(0, 1))
    def clear(self, topic: int) -> None:
        self.caches[topic].clear()
        for key in [k for k in self.expected if k[0] == topic]:
            del self.expected[key]

    @rule(topic=st.integers(0, 1), data=st.data())
    def read_counts(self, topic: int, data: st.DataObject) -> None:
        held = list(self._held(topic).values())
        if held:
            entry = data.draw(st.sampled_from(held))
            if data.draw(st.booleans()):
                entry.mark_read()
            else:
                self.caches[topic].add_expected_read(entry.ledger_id, entry.entry_id)

    @rule(ms=st.integers(0, 250))
    def advance_clock(self, ms: int) -> None:
        self.clock.advance_ms(ms)

    @rule()
    def timestamp_pass(self) -> None:
        self.manager.evict_expired()

    @rule()
    def size_pass(self) -> None:
        self.manager.evict_to_watermark()
        assert self.manager.size <= MAX_SIZE

    @invariant()
    def accounted_size_is_what_is_held(self) -> None:
        if not hasattr(self, "manager"):
            return
        held = [e for cache in self.caches for e in cache.cached_entries()]
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


class LegacyMachine(CacheMachine):
    def make(self, config: CacheConfig, clock: ManualClock) -> Any:
        return LegacyEntryCacheManager(config, clock)


class SegmentedMachine(CacheMachine):
    def make(self, config: CacheConfig, clock: ManualClock) -> Any:
        return SegmentedEntryCacheManager(config, clock, segments=3)


SETTINGS = settings(max_examples=150, stateful_step_count=60, deadline=None)
Pip430Machine.TestCase.settings = SETTINGS
LegacyMachine.TestCase.settings = SETTINGS
test_pip430_state_machine = Pip430Machine.TestCase
test_legacy_state_machine = LegacyMachine.TestCase
SegmentedMachine.TestCase.settings = SETTINGS
test_segmented_state_machine = SegmentedMachine.TestCase
