"""``brokerlab bench cache``: the cost of each cache design's operations, in one run.

Per design: inserts, gets and evictions per second; the cost of a size eviction of
10,000 entries with the cache spread over 100 vs 100,000 ledgers; the cost of an idle
timestamp tick (nothing expired) with 100 vs 100,000 ledgers (10,000 with ``--quick``).
The ratios are the claim: PIP-430's eviction looks only at the head of one queue, so
neither should grow with the number of ledgers; the legacy design visits every ledger.
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Callable
from typing import Any

from broker.cache import DESIGNS, CacheConfig, design
from broker.cache.entry import CachedEntry
from broker.clock import ManualClock

ENTRY_SIZE = 100
EVICTED_ENTRIES = 10_000
FEW_LEDGERS, MANY_LEDGERS = 100, 100_000
#: --quick: the same runs a tenth the size (the legacy ratios stay far above pip430's)
QUICK_MANY_LEDGERS = 10_000
TARGETS = {"insert": 200_000, "get": 500_000, "evict": 300_000}
RATIO_TARGETS = {"size_eviction_ratio": 1.5, "idle_tick_ratio": 2.0}


def _timed(action: Callable[[], object]) -> float:
    """Seconds for ``action``, with the garbage collector off while it runs (as timeit
    does), so a collection triggered by setup garbage is not billed to the operation."""
    gc.collect()
    gc.disable()
    try:
        started = time.perf_counter()
        action()
        return time.perf_counter() - started
    finally:
        gc.enable()


def _manager(name: str, max_bytes: int, clock: ManualClock) -> Any:
    config = CacheConfig(max_size_bytes=max_bytes, eviction_watermark=0.5, segments=4)
    return design(name).create(config, clock).manager


def _has_passes(name: str) -> bool:
    """Whether the design evicts with timestamp and size passes (the ring rotates)."""
    return bool(_manager(name, 1 << 20, ManualClock()).has_eviction_passes)


def _operations(name: str, count: int) -> dict[str, float]:
    """Inserts and gets (tailing: one entry per call, the worst case) and evictions per
    second."""
    clock = ManualClock()
    passes = _has_passes(name)
    # the ring gets exactly room for one batch, so the second batch must rotate it
    room = count * ENTRY_SIZE * (4 if passes else 1)
    manager = _manager(name, room, clock)
    cache = manager.get_entry_cache("persistent://bench/ns/t")
    payloads = [b"x" * ENTRY_SIZE]
    sizes = [ENTRY_SIZE]
    insert = cache.insert
    get_range = cache.get_range

    def inserts() -> None:
        for entry_id in range(count):
            insert(1, entry_id, payloads, sizes, 1)

    def gets() -> None:
        hits: list[CachedEntry] = []
        for entry_id in range(count):
            get_range(1, entry_id, entry_id, hits)

    insert_s = _timed(inserts)
    get_s = _timed(gets)
    evictable = manager.size
    if not passes:
        # the ring evicts by rotating: time inserts that each clear old segments' entries
        evict_s = _timed(lambda: [insert(2, i, payloads, sizes, 0) for i in range(count)])
        evicted = manager.counters.evicted_size
    else:
        clock.advance_ms(10_000)
        evict_s = _timed(lambda: manager.evict_entries(evictable))
        evicted = manager.counters.evicted_size
    return {
        "insert": count / insert_s,
        "get": count / get_s,
        "evict": evicted / evict_s if evicted else 0.0,
    }


def _spread(name: str, ledgers: int, many: int, clock: ManualClock) -> Any:
    """A cache holding the same number of entries whatever ``ledgers`` is (two per ledger
    at ``many``, the most ledgers), spread round robin over ``ledgers`` topics, oldest
    first."""
    total = 2 * many
    manager = _manager(name, total * ENTRY_SIZE * 4, clock)
    caches = [manager.get_entry_cache(f"persistent://bench/ns/t{i}") for i in range(ledgers)]
    sizes = [ENTRY_SIZE]
    for n in range(total):
        caches[n % ledgers].insert(n % ledgers, n // ledgers, None, sizes, 0)
    return manager


def _size_eviction_seconds(name: str, ledgers: int, many: int) -> float:
    manager = _spread(name, ledgers, many, ManualClock())
    return _timed(lambda: manager.evict_entries(EVICTED_ENTRIES * ENTRY_SIZE))


def _idle_tick_seconds(name: str, ledgers: int, many: int, ticks: int) -> float:
    clock = ManualClock()
    manager = _spread(name, ledgers, many, clock)

    def tick() -> None:
        for _ in range(ticks):
            manager.evict_expired()

    return _timed(tick) / ticks


def measure(quick: bool) -> dict[str, Any]:
    count = 20_000 if quick else 300_000
    ticks = 5 if quick else 100
    many = QUICK_MANY_LEDGERS if quick else MANY_LEDGERS
    results: dict[str, Any] = {}
    for name in DESIGNS:
        row: dict[str, Any] = _operations(name, count)
        if _has_passes(name):  # the ring has neither a size pass nor a timestamp pass
            few_s = _size_eviction_seconds(name, FEW_LEDGERS, many)
            many_s = _size_eviction_seconds(name, many, many)
            row["size_eviction_ratio"] = many_s / few_s
            tick_few = _idle_tick_seconds(name, FEW_LEDGERS, many, ticks)
            tick_many = _idle_tick_seconds(name, many, many, ticks)
            row["idle_tick_ratio"] = tick_many / tick_few
        results[name] = row
    return {
        "benchmark": "cache",
        "quick": quick,
        "entrySize": ENTRY_SIZE,
        "operations": count,
        "evictedEntries": EVICTED_ENTRIES,
        "ledgers": [FEW_LEDGERS, many],
        "designs": results,
        "targets": {"pip430": {**TARGETS, **RATIO_TARGETS}},
    }


def main(quick: bool = False, as_json: bool = False) -> int:
    result = measure(quick)
    if as_json:
        print(json.dumps(result))
        return 0
    print(
        f"brokerlab bench cache: {result['operations']:,} operations per row, "
        f"{ENTRY_SIZE} B entries; eviction of {EVICTED_ENTRIES:,} entries and idle ticks "
        f"with {result['ledgers'][0]:,} vs {result['ledgers'][1]:,} ledgers"
    )
    print()
    header = f"{'design':<10} {'insert/s':>10} {'get/s':>10} {'evict/s':>10} "
    header += f"{'size-evict ratio':>17} {'idle-tick ratio':>16}"
    print(header)
    print("-" * len(header))
    for name, row in result["designs"].items():
        size_ratio = row.get("size_eviction_ratio")
        tick_ratio = row.get("idle_tick_ratio")
        print(
            f"{name:<10} {row['insert']:>10,.0f} {row['get']:>10,.0f} {row['evict']:>10,.0f} "
            f"{'-' if size_ratio is None else f'{size_ratio:.2f}':>17} "
            f"{'-' if tick_ratio is None else f'{tick_ratio:.2f}':>16}"
        )
    print()
    pip430 = result["designs"]["pip430"]
    verdicts = [
        f"{name} {pip430[name]:,.0f}/s (target >= {target:,})"
        + ("" if pip430[name] >= target else " BELOW")
        for name, target in TARGETS.items()
    ] + [
        f"{name} {pip430[name]:.2f} (target <= {target})"
        + ("" if pip430[name] <= target else " ABOVE")
        for name, target in RATIO_TARGETS.items()
    ]
    print("pip430: " + "; ".join(verdicts))
    few, many = result["ledgers"]
    print(f"ratios = cost with {many:,} ledgers / cost with {few:,} ledgers, measured in this run;")
    print("segmented has no size or timestamp pass (the ring rotates on insert).")
    return 0
