"""A recorded workload for the pipeline tests: a live broker writes a trace."""

from __future__ import annotations

import pathlib
from typing import Any

from tests.conftest import in_process_broker

TOPIC = "public/default/replayed"


async def record(trace_dir: pathlib.Path, design: str, shadows: str = "none") -> dict[str, Any]:
    """A tailing subscription and one that catches up in bursts (consumer connected
    every tenth round), over a 1 MiB cache: hits, misses, evictions, invalidations.
    Returns the cache stats (the shadows' under ``shadows``)."""
    async with in_process_broker(
        brokerlabTraceDir=str(trace_dir),
        managedLedgerCacheSizeMB=1,
        managedLedgerCacheImplementation=design,
        brokerlabShadowCacheImplementations=shadows,
    ) as client:
        fast = await client.subscribe(
            TOPIC, "fast", subscriptionType="Shared", subscriptionInitialPosition="Earliest"
        )
        status, _ = await client.request(
            "PUT", f"/admin/v2/persistent/{TOPIC}/subscription/slow?messageId=earliest"
        )
        assert status == 204
        for round_ in range(30):
            await client.produce(TOPIC, ["x" * 2000] * 100)
            got = await client.receive_until(fast, 100)
            await client.ack(fast, [m["messageId"] for m in got])
            if round_ % 10 == 9:
                slow = await client.subscribe(TOPIC, "slow", subscriptionType="Shared")
                got = await client.receive_until(slow, 1000)
                assert len(got) == 1000
                await client.ack(slow, [m["messageId"] for m in got])
                status, _ = await client.request("DELETE", f"/consumers/{slow}")
                assert status == 204
        status, cache = await client.request("GET", "/admin/v2/broker-stats/cache")
        return dict(cache)
