"""``brokerlab bench lac``: the CPU cost of a failover storm with and without the
bookie's last-entry cache, measured in one run.

N topics with data on an on-disk bookie (RocksDB location index); then twice: unload them
all and load each again, which asks the bookie for the last entry of its last ledger.
Reported: process CPU time of the two storm rounds and floor seeks, cache on vs off;
and the wall time of the same storm when each real seek takes the realistic profile's
latency (storage.conf: ``getLastEntryLatency=fixed:0.2``).
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import tempfile
import time
from typing import Any

from broker.cache import DEFAULT_DESIGN, CacheConfig, create_stream
from broker.clock import SystemClock
from broker.dispatch.names import TopicName
from broker.dispatch.service import BrokerService, ServiceConfig
from broker.ledger.entry import encode_message
from storage_stub.bookie import open_storage
from storage_stub.config import StorageConfig

REALISTIC_SEEK = "fixed:0.2"


async def _storm(
    topics: int, cache_size: int, rounds: int, seek_latency: str = "0"
) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="brokerlab-bench-lac-") as scratch:
        config = StorageConfig(
            syncMode="none",
            dbStorage_lastEntryCacheMaxSize=cache_size,
            getLastEntryLatency=seek_latency,
        )
        storage = await open_storage(config, pathlib.Path(scratch))
        clock = SystemClock()
        no_cache = create_stream(DEFAULT_DESIGN, CacheConfig(max_size_bytes=0), clock)
        service = BrokerService(ServiceConfig(), storage.bookie, storage.metadata, no_cache, clock)
        names = [TopicName("bench", "ns", f"t{i}") for i in range(topics)]
        try:
            for name in names:
                topic = await service.get_topic(name, create=True)
                await topic.publish([encode_message(b"data", clock.wall_ms())])
            seeks_before = storage.counters.getFloor.calls
            cpu_before = time.process_time()
            wall_before = time.perf_counter()
            for _ in range(rounds):
                await service.unload_namespace("bench", "ns")
                for name in names:
                    await service.get_topic(name, create=False)
            cpu = time.process_time() - cpu_before
            wall = time.perf_counter() - wall_before
            seeks = storage.counters.getFloor.calls - seeks_before
        finally:
            await service.close()
            await storage.close()
    return {"cpuSeconds": cpu, "wallSeconds": wall, "floorSeeks": seeks}


def measure(quick: bool) -> dict[str, Any]:
    # --quick: a smoke run (the suite runs it); every count it reports scales with topics
    topics = 100 if quick else 3000
    rounds = 2
    on = asyncio.run(_storm(topics, 100_000, rounds))
    off = asyncio.run(_storm(topics, 0, rounds))
    on_slow = asyncio.run(_storm(topics, 100_000, rounds, REALISTIC_SEEK))
    off_slow = asyncio.run(_storm(topics, 0, rounds, REALISTIC_SEEK))
    return {
        "benchmark": "lac",
        "quick": quick,
        "topics": topics,
        "rounds": rounds,
        "cacheOn": on,
        "cacheOff": off,
        "cpuRatioOnOverOff": on["cpuSeconds"] / max(off["cpuSeconds"], 1e-9),
        "realisticSeekLatency": REALISTIC_SEEK,
        "cacheOnRealistic": on_slow,
        "cacheOffRealistic": off_slow,
        "wallRatioOnOverOffRealistic": on_slow["wallSeconds"] / off_slow["wallSeconds"],
    }


def main(quick: bool = False, as_json: bool = False) -> int:
    result = measure(quick)
    if as_json:
        print(json.dumps(result))
        return 0
    print(
        f"brokerlab bench lac: {result['topics']:,} topics on an on-disk bookie, "
        f"{result['rounds']} rounds of unload + load of every topic"
    )
    print()
    header = ("last-entry cache", "seek latency", "floor seeks", "CPU s", "wall s")
    print(f"{header[0]:<18} {header[1]:>12} {header[2]:>12} {header[3]:>8} {header[4]:>8}")
    rows = (
        ("on (100,000)", "0", "cacheOn"),
        ("off (0)", "0", "cacheOff"),
        ("on (100,000)", REALISTIC_SEEK, "cacheOnRealistic"),
        ("off (0)", REALISTIC_SEEK, "cacheOffRealistic"),
    )
    for label, latency, key in rows:
        row = result[key]
        print(
            f"{label:<18} {latency:>12} {row['floorSeeks']:>12,} {row['cpuSeconds']:>8.2f} "
            f"{row['wallSeconds']:>8.2f}"
        )
    print()
    print(f"CPU time, cache on / off: {result['cpuRatioOnOverOff']:.2f}")
    print(
        f"wall time with {REALISTIC_SEEK} ms seeks, cache on / off: "
        f"{result['wallRatioOnOverOffRealistic']:.2f} (all measured in this run)"
    )
    return 0
