"""The eviction timer sleeps through the rounds that would do nothing
(``EntryCacheManager.quiet_until_ns``, ``broker.ledger.cache_evictor``): a round at or
before a design's quiet time must change nothing, and the timer must wake for the first
round after it."""

from __future__ import annotations

from typing import Any

import pytest

from broker.cache import DESIGNS, create_stream, design
from broker.cache.api import QUIET_FOREVER, EntryCacheManager
from broker.cache.config import CacheConfig
from broker.clock import ManualClock
from broker.ledger.cache_evictor import MAX_QUIET_S, CacheEvictor

TTL_MS = 1000
ROUND_MS = 10


def state(manager: EntryCacheManager) -> tuple[Any, ...]:
    """What a round may change: the counters (not its own CPU time) and, for PIP-430,
    each queued entry's timestamp and requeue count (a requeue evicts nothing)."""
    stats = {k: v for k, v in manager.stats().items() if k != "evictionCpuSeconds"}
    queue = getattr(manager, "queue", ())
    queued = [(e.entry_id, e.timestamp_ns, e.requeue_count) for e in queue if not e.removed]
    return tuple(sorted(stats.items(), key=str)), tuple(queued)


@pytest.mark.parametrize("name", list(DESIGNS))
def test_a_round_at_or_before_the_quiet_time_changes_nothing(name: str) -> None:
    clock = ManualClock()
    config = CacheConfig(
        max_size_bytes=1_000_000,
        eviction_time_threshold_ms=TTL_MS,
        extend_ttl_max_times=2,  # the last requeue ends within the test's 5 s
        segments=4,
    )
    manager = design(name).create(config, clock).manager
    assert manager.quiet_until_ns() == QUIET_FOREVER  # nothing cached
    cache = manager.get_entry_cache("persistent://t/ns/a")
    entry_id = quiet_rounds = acting_rounds = 0
    for step in range(500):  # 5 s of rounds; entries cached over the first 1.5 s
        if step % 37 == 0 and step < 150:
            # one without expected reads, one with (PIP-430 requeues it when expired)
            cache.insert(1, entry_id, None, [100], 0)
            cache.insert(1, entry_id + 1, None, [100], 1)
            entry_id += 2
        clock.advance_ms(ROUND_MS)
        quiet = manager.quiet_until_ns()
        before = state(manager)
        manager.do_cache_eviction()
        if quiet is not None and clock.monotonic_ns() <= quiet:
            quiet_rounds += 1
            assert state(manager) == before, f"round at step {step} acted before {quiet}"
        elif state(manager) != before:
            acting_rounds += 1
    if name == "segmented":  # the ring evicts only by overwriting: no round ever acts
        assert acting_rounds == 0 and manager.quiet_until_ns() == QUIET_FOREVER
        return
    assert acting_rounds > 0 and quiet_rounds > 400  # most rounds had nothing to do
    assert manager.stats()["entries"] == 0  # everything expired in the end
    assert manager.quiet_until_ns() == QUIET_FOREVER


def test_the_timer_wakes_for_the_first_round_after_the_oldest_entry_expires() -> None:
    clock = ManualClock()
    config = CacheConfig(max_size_bytes=1_000_000, eviction_time_threshold_ms=TTL_MS)
    stream = create_stream("pip430", config, clock)
    evictor = CacheEvictor(stream, ROUND_MS)
    assert evictor.next_delay_s() == pytest.approx(MAX_QUIET_S)  # nothing cached
    stream.load_topic("persistent://t/ns/a").added(1, 0, [b"x" * 100])
    clock.advance_ms(995)
    # quiet until 1000 ms after the insert: the rounds at 1005 ms and before would not
    # act; the one at 1005 ms is the first after it
    assert evictor.next_delay_s() == pytest.approx(0.010)
    clock.advance_ms(-995 + 500)
    assert evictor.next_delay_s() == pytest.approx(0.510)


def test_a_recording_trace_gets_every_round() -> None:
    # each tick is an event of the trace: a replay of it runs the same rounds
    clock = ManualClock()
    stream = create_stream("pip430", CacheConfig(max_size_bytes=1_000_000), clock)

    class Sink:
        def __getattr__(self, name: str) -> Any:
            return lambda *args, **kwargs: None

    stream.trace = Sink()  # type: ignore[assignment]
    assert stream.quiet_until_ns() is None
    assert CacheEvictor(stream, ROUND_MS).next_delay_s() == pytest.approx(0.010)
