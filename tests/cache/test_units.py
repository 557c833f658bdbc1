"""Each design as a whole unit, driven by cache events as the broker drives it: its
ledger-side rules (what is cached, with how many expected reads, what is invalidated)
and how it counts misses (one per entry read from storage)."""

from __future__ import annotations

import pytest

from broker.cache import CacheConfig, CacheEventStream, CursorCheck, TopicEvents, create_stream
from broker.cache.unit import ReadPlan
from broker.clock import ManualClock
from tests.cache.entries import cached_ids

L = 7  # the ledger every test writes to
SIZE = 10
PAYLOAD = b"x" * SIZE


def topic(design: str, **settings: object) -> tuple[CacheEventStream, TopicEvents, ManualClock]:
    clock = ManualClock()
    stream = create_stream(design, CacheConfig(**settings), clock)  # type: ignore[arg-type]
    return stream, stream.load_topic("persistent://t/ns/unit"), clock


def add(events: TopicEvents, first: int, count: int) -> None:
    events.added(L, first, [PAYLOAD] * count)


def read(events: TopicEvents, reader: str, first: int, last: int) -> ReadPlan:
    """A read whose own storage reads complete at once."""
    plan = events.read(reader, L, first, last, False)
    for own_first, own_last in plan.own:
        events.filled(L, own_first, [PAYLOAD] * (own_last - own_first + 1))
    return plan


def activate(events: TopicEvents, cursor: str, at: int, entries_to_read: int = 0) -> None:
    events.activated(cursor, (L, at), (L, at - 1), entries_to_read)


def move(events: TopicEvents, cursor: str, read_at: int, acked_to: int | None = None) -> None:
    events.moved(cursor, (L, read_at), (L, read_at - 1 if acked_to is None else acked_to))


def held(events: TopicEvents) -> list[int]:
    return cached_ids(events.live.cache)


def counts(events: TopicEvents) -> list[int]:
    return [e.expected_reads for e in events.live.cache.cached_entries()]


GRACE_MS = 2_000  # managedLedgerContinueCaching...: 2 x the 1 s TTL


# ---------------------------------------------------------------------- PIP-430


def test_pip430_added_entries_expect_one_read_per_active_cursor() -> None:
    _, events, _ = topic("pip430")
    for name in ("a", "b", "c"):
        activate(events, name, 0)
    add(events, 0, 2)
    assert counts(events) == [3, 3]
    events.released("a", L, 0)
    events.released("b", L, 0)
    events.replay_added("c", L, 1)
    assert counts(events) == [1, 4]


class Unmeasurable(bytes):
    """An entry whose length may not be taken: a test of who measures it."""

    def __len__(self) -> int:
        raise AssertionError("measured")


@pytest.mark.parametrize("design", ["pip430", "legacy", "segmented"])
def test_a_live_only_topic_measures_its_entries_only_when_it_caches_them(design: str) -> None:
    """Without a trace or shadows the stream leaves the sizes to the live unit, which
    takes them from the entries it caches, and never measures what it does not cache."""
    _, events, clock = topic(design)
    clock.advance_ms(GRACE_MS + 1)
    events.added(L, 0, [Unmeasurable(b"x" * 5)] * 3)  # nobody reads: not cached
    assert held(events) == []
    activate(events, "a", 3)
    events.added(L, 3, [b"abc", b"defgh"])
    assert held(events) == [3, 4]
    assert [e.size for e in events.live.cache.cached_entries()] == [3, 5]


def test_pip430_storage_reads_expect_the_readers_at_or_before_the_reader() -> None:
    _, events, clock = topic("pip430")
    clock.advance_ms(GRACE_MS + 1)
    add(events, 0, 10)  # no active cursor, grace over: not cached
    assert held(events) == []
    activate(events, "ahead", 6)
    activate(events, "behind", 2)
    activate(events, "also-behind", 2)
    read(events, "behind", 2, 3)
    read(events, "ahead", 6, 6)
    assert held(events) == [2, 3, 6]
    # "behind" has itself and "also-behind" at or before it; "ahead" has all three
    assert counts(events) == [2, 2, 3]


def test_pip430_a_reader_that_is_not_active_does_not_cache_its_reads() -> None:
    _, events, clock = topic("pip430")
    clock.advance_ms(GRACE_MS + 1)
    add(events, 0, 5)
    read(events, "passer-by", 0, 4)
    assert held(events) == []
    assert events.live.manager.counters.misses == 5


def test_pip430_keeps_caching_adds_for_the_grace_after_load_and_after_the_last_cursor() -> None:
    _, events, clock = topic("pip430")
    add(events, 0, 1)  # just loaded: cached with no expected read
    assert (held(events), counts(events)) == ([0], [0])
    clock.advance_ms(GRACE_MS + 1)
    add(events, 1, 1)
    assert held(events) == [0], "grace over, nobody reads: not cached"
    activate(events, "a", 2)
    events.deactivated("a")
    clock.advance_ms(GRACE_MS - 1)
    add(events, 2, 1)
    assert held(events) == [0, 2], "the last cursor left less than the grace ago"
    clock.advance_ms(2)
    add(events, 3, 1)
    assert held(events) == [0, 2]


def test_pip430_never_invalidates_as_cursors_move_or_leave() -> None:
    _, events, _ = topic("pip430")
    activate(events, "a", 0)
    add(events, 0, 5)
    move(events, "a", 5, acked_to=4)
    events.deactivated("a")
    assert held(events) == [0, 1, 2, 3, 4], "expected reads and the removal queue do that"


# ---------------------------------------------------------------------- legacy rules


def test_legacy_invalidates_what_every_active_reader_has_passed() -> None:
    _, events, _ = topic("legacy")
    activate(events, "fast", 0)
    activate(events, "slow", 0)
    add(events, 0, 10)
    assert held(events) == list(range(10))
    move(events, "fast", 10)
    assert held(events) == list(range(10)), "the slow reader still needs them"
    move(events, "slow", 4)
    assert held(events) == list(range(4, 10)), "strictly before the slowest read position"
    events.deactivated("slow")
    assert held(events) == [], "the only active reader has read everything"
    events.deactivated("fast")
    add(events, 10, 1)
    assert held(events) == [], "no active cursor: adds are not cached"


def test_legacy_by_mark_delete_keeps_what_the_slowest_has_not_acknowledged() -> None:
    _, events, _ = topic("legacy", cache_eviction_by_mark_deleted_position=True)
    activate(events, "a", 0)
    add(events, 0, 10)
    move(events, "a", 10, acked_to=-1)
    assert held(events) == list(range(10)), "read but not acknowledged"
    move(events, "a", 10, acked_to=5)
    assert held(events) == list(range(5, 10)), "strictly before the mark-delete position"


@pytest.mark.parametrize(("behind", "active"), [(999, True), (1000, False)])
def test_legacy_a_cursor_is_backlogged_at_the_threshold(behind: int, active: bool) -> None:
    """checkBackloggedCursor: active when entries to read < the threshold (1000)."""
    _, events, _ = topic("legacy")
    activate(events, "a", 0, entries_to_read=behind)
    add(events, 0, 1)
    assert held(events) == ([0] if active else [])


def test_legacy_rechecks_backlogged_cursors_at_the_check_not_when_they_move() -> None:
    _, events, _ = topic("legacy", cursor_backlogged_threshold=5)
    activate(events, "tail", 0, entries_to_read=0)
    activate(events, "lagging", 0, entries_to_read=0)
    add(events, 0, 20)
    move(events, "tail", 20)
    move(events, "lagging", 2)
    assert held(events) == list(range(2, 20)), "lagging is 18 behind yet still active"
    events.checked([CursorCheck("tail", True, 0), CursorCheck("lagging", True, 18)])
    assert held(events) == [], "the check made it backlogged; tail has read everything"
    events.deactivated("tail")
    move(events, "lagging", 19)  # caught up, but only a check says so
    add(events, 20, 1)
    assert held(events) == [], "no active cursor until the next check"
    events.checked([CursorCheck("tail", False, 1), CursorCheck("lagging", True, 1)])
    add(events, 21, 1)
    assert held(events) == [21]
    move(events, "lagging", 22)
    assert held(events) == [], "active again: the slowest-reader rule counts it"


@pytest.mark.parametrize(("min_cursors", "chosen"), [(1, [0, 1, 2, 3]), (2, [])])
def test_legacy_caches_storage_reads_only_for_cursors_the_backlog_rule_chose(
    min_cursors: int, chosen: list[int]
) -> None:
    """checkCursorsToCacheEntries: a cursor with at least 5 entries to read is chosen when
    at least ``min_cursors`` *other* cursors are within 3 entries of it."""
    _, events, _ = topic(
        "legacy",
        min_backlog_cursors_for_caching=min_cursors,
        min_backlog_entries_for_caching=5,
        max_backlog_between_cursors_for_caching=3,
    )
    add(events, 0, 20)
    events.checked(
        [CursorCheck("a", True, 20), CursorCheck("b", True, 18), CursorCheck("lone", True, 7)]
    )
    read(events, "a", 0, 1)
    read(events, "b", 2, 3)
    read(events, "lone", 13, 13)
    assert held(events) == chosen, "a and b have one close cursor each; lone none"


def test_legacy_a_cursor_alone_is_not_chosen_for_backlog_caching() -> None:
    _, events, _ = topic("legacy", min_backlog_cursors_for_caching=1)
    add(events, 0, 5)
    events.checked([CursorCheck("alone", True, 5000)])
    read(events, "alone", 0, 4)
    assert held(events) == []


# ------------------------------------------------ PIP-430 without expected read counts


def test_pip430_without_expected_reads_applies_the_rules_before_it() -> None:
    """cacheEvictionByExpectedReadCount=false: "as before" (slowest-reader invalidation,
    backlog rules, no continue-caching grace) on the removal-queue structure."""
    _, events, _ = topic("pip430", eviction_by_expected_read_count=False)
    add(events, 0, 1)
    assert held(events) == [], "no grace after load"
    activate(events, "a", 1)
    activate(events, "b", 1)
    add(events, 1, 4)
    assert counts(events) == [0, 0, 0, 0]
    move(events, "a", 5)
    move(events, "b", 3)
    assert held(events) == [3, 4], "invalidated up to the slowest reader"
    activate(events, "late", 0, entries_to_read=1000)
    add(events, 5, 1)
    assert held(events) == [3, 4, 5], "a backlogged subscriber does not hold the cache"
    plan = read(events, "b", 2, 4)
    assert [e.entry_id for e in plan.hits] == [3, 4], "partial range reads, PIP-430's"


# ---------------------------------------------------------------------- the ring


def test_the_ring_caches_adds_while_a_cursor_is_active_and_never_storage_reads() -> None:
    _, events, _ = topic("segmented")
    add(events, 0, 1)
    assert held(events) == []
    activate(events, "c", 0)
    add(events, 1, 1)
    assert held(events) == [1]
    read(events, "c", 0, 1)
    assert held(events) == [1], "the storage read of entry 0 was not cached"
    move(events, "c", 2)
    events.deactivated("c")
    events.trimmed(L)
    assert held(events) == [1], "invalidation does nothing in PIP-174's PR"


def test_the_ring_survives_an_unload() -> None:
    stream, events, _ = topic("segmented")
    activate(events, "c", 0)
    add(events, 0, 3)
    events.unloaded()
    again = stream.load_topic("persistent://t/ns/unit")
    plan = again.read("c", L, 0, 2, False)
    assert [e.entry_id for e in plan.hits] == [0, 1, 2]


# ---------------------------------------------------------------------- misses


@pytest.mark.parametrize("design", ["pip430", "legacy"])
def test_a_reader_that_joins_a_storage_read_counts_neither_hit_nor_miss(design: str) -> None:
    _, events, clock = topic(design)
    clock.advance_ms(GRACE_MS + 1)
    add(events, 0, 10)
    first = events.read("a", L, 0, 9, False)
    second = events.read("b", L, 5, 14, False)
    assert first.own == [(0, 9)] and first.joined == []
    assert second.joined == [(5, 9)] and second.own == [(10, 14)]
    events.filled(L, 0, [PAYLOAD] * 10)
    events.filled(L, 10, [PAYLOAD] * 5)
    counters = events.live.manager.counters
    assert (counters.hits, counters.misses) == (0, 15), "one miss per entry read"
    assert counters.miss_bytes == 15 * SIZE


@pytest.mark.parametrize("design", ["pip430", "legacy"])
def test_a_read_in_flight_strictly_inside_a_missing_run_is_not_joined(design: str) -> None:
    """PendingReadsManager.findPendingRead tests the run's ends only: a read of 5-7 in
    flight is inside 0-10, so 0-10 is read whole and 5-7 twice (two misses each)."""
    _, events, clock = topic(design)
    clock.advance_ms(GRACE_MS + 1)
    add(events, 0, 11)
    inner = events.read("a", L, 5, 7, False)
    outer = events.read("b", L, 0, 10, False)
    assert (inner.own, outer.own, outer.joined) == ([(5, 7)], [(0, 10)], [])
    events.filled(L, 5, [PAYLOAD] * 3)
    assert events.live.reads_in_flight == 11, "the outer read still waits for 5-7"
    events.filled(L, 0, [PAYLOAD] * 11)
    assert events.live.reads_in_flight == 0
    assert events.live.manager.counters.misses == 3 + 11


@pytest.mark.parametrize("design", ["pip430", "legacy"])
def test_a_run_joins_one_read_at_an_end_and_reads_its_remainder_the_same_way(
    design: str,
) -> None:
    """0-20 with reads of 5-7 and 15-25 in flight: only 15-25 holds one of the run's ends
    (its last), so 15-20 is joined and the remainder 0-14 looked up again: 5-7 is inside
    it, not at an end, so 0-14 is read whole."""
    _, events, clock = topic(design)
    clock.advance_ms(GRACE_MS + 1)
    add(events, 0, 26)
    events.read("a", L, 5, 7, False)
    events.read("b", L, 15, 25, False)
    plan = events.read("c", L, 0, 20, False)
    assert (plan.own, plan.joined) == ([(0, 14)], [(15, 20)])


@pytest.mark.parametrize("design", ["pip430", "legacy"])
def test_a_run_prefers_the_latest_read_holding_its_start_then_one_holding_its_end(
    design: str,
) -> None:
    """Reads of 3-4 and 0-8 in flight (the second read whole: 3-4 was inside it) both
    hold 3, the start of 3-10: the one found last (0-8) is joined and 9-10 read. A read
    holding a run's start is joined from there: 3-4 would have left 5-10 to read. And
    12-20 holds the end of 11-16: 12-16 joined, 11 read."""
    _, events, clock = topic(design)
    clock.advance_ms(GRACE_MS + 1)
    add(events, 0, 21)
    events.read("a", L, 3, 4, False)
    assert events.read("b", L, 0, 8, False).own == [(0, 8)]
    events.read("c", L, 12, 20, False)
    plan = events.read("d", L, 3, 10, False)
    assert (plan.joined, plan.own) == ([(3, 8)], [(9, 10)])
    plan = events.read("e", L, 11, 16, False)
    assert (plan.own, plan.joined) == ([(11, 11)], [(12, 16)])


def test_the_ring_counts_every_reader_s_storage_read() -> None:
    _, events, _ = topic("segmented")
    add(events, 0, 10)
    first = events.read("a", L, 0, 9, False)
    second = events.read("b", L, 5, 9, False)
    assert (first.own, second.own, second.joined) == ([(0, 9)], [(5, 9)], [])
    events.filled(L, 0, [PAYLOAD] * 10)
    events.filled(L, 5, [PAYLOAD] * 5)
    assert events.live.manager.counters.misses == 15


def test_a_failed_storage_read_counts_nothing_and_is_forgotten() -> None:
    _, events, clock = topic("pip430")
    clock.advance_ms(GRACE_MS + 1)
    add(events, 0, 5)
    events.read("a", L, 0, 4, False)
    events.fill_failed(L, 0, 4)
    assert events.live.reads_in_flight == 0
    assert events.read("a", L, 0, 4, False).own == [(0, 4)], "read again, not joined"
    assert events.live.manager.counters.misses == 0


# ---------------------------------------------------------------------- entry length


@pytest.mark.parametrize("design", ["pip430", "legacy", "segmented"])
def test_an_injected_entry_length_is_what_every_entry_costs_the_cache(design: str) -> None:
    """brokerlabCacheEntryLengthBytes (Pulsar's tests' EntryLengthFunction): 10-byte
    payloads counted as 8 KiB each, added and read from storage alike, so a cache of
    three such entries' size holds three of them, however small the payloads."""
    length = 8 * 1024
    stream, events, _ = topic(design, max_size_bytes=100 * length, entry_length=length)
    activate(events, "c", 0)
    add(events, 0, 3)
    if design != "segmented":  # the ring caches adds only
        read(events, "c", 3, 4)  # not yet stored: both are fills from storage
    sizes = {entry.size for entry in events.live.cache.cached_entries()}
    assert sizes == {length}
    assert stream.stats()["sizeBytes"] == length * len(held(events))
