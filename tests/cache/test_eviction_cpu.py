"""``evictionCpuSeconds``: the CPU the broker spends evicting, which `brokerlab compare`
reports per design. It must count eviction work and nothing else."""

from __future__ import annotations

import pytest

from broker.cache import DESIGNS, design
from broker.cache.config import CacheConfig
from broker.clock import ManualClock

ENTRIES = 2_000


@pytest.mark.parametrize("name", list(DESIGNS))
def test_eviction_cpu_grows_only_when_entries_are_evicted(name: str) -> None:
    clock = ManualClock()
    config = CacheConfig(max_size_bytes=ENTRIES * 10, eviction_time_threshold_ms=1000, segments=4)
    manager = design(name).create(config, clock).manager
    cache = manager.get_entry_cache("persistent://t/ns/a")
    # Less than one segment of the ring (a quarter of the size).
    for entry_id in range(ENTRIES // 5):
        cache.insert(1, entry_id, None, [10], 0)
    before = manager.stats()
    # Reads and inserts below the limit are not eviction work.
    assert before["evictionCpuSeconds"] == 0
    assert before["evicted"] == {"ttl": 0, "size": 0, "invalidated": 0}

    clock.advance_ms(5000)
    for entry_id in range(ENTRIES // 5, ENTRIES * 2):
        cache.insert(1, entry_id, None, [10], 0)
    manager.do_cache_eviction()
    after = manager.stats()
    assert after["evicted"]["ttl"] + after["evicted"]["size"] > 0
    assert after["evictionCpuSeconds"] > 0
