"""A partitioned topic's partition count is the client's to choose; no count holds the
broker. Past maxNumPartitionsPerPartitionedTopic (0 by default, as Pulsar: no limit)
brokerlabMaxPartitionsCeiling (10,000) refuses it with ``{"reason", "code"}``, changing
nothing; up to it, the routes that walk every partition (unload here) yield to other
requests as they go: health probes are answered while a 100,000-partition topic (under a
ceiling raised to that) unloads."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.conftest import Client, LiveBroker, ServedBrokerFactory
from tests.harness import new_topic

HUGE = 1_000_000
#: brokerlabMaxPartitionsCeiling of the unload test's broker (ten times the default):
#: enough partitions that their unload yields some 200 times
CEILING = 100_000
HEALTH = "/admin/v2/brokers/health"


def admin(topic: str, rest: str = "") -> str:
    return f"/admin/v2/persistent/{topic}{rest}"


async def refused(client: Client, method: str, path: str, **kw: Any) -> str:
    status, body = await client.request(method, path, **kw)
    assert status == 400 and isinstance(body, dict), (status, body)
    assert body["code"] == "invalid-request"
    return str(body["reason"])


async def test_a_huge_partition_count_is_refused_and_changes_nothing(
    shared_broker: LiveBroker,
) -> None:
    client = await shared_broker()
    topic = new_topic("huge")
    reason = await refused(client, "PUT", admin(topic, "/partitions"), json=HUGE)
    assert "brokerlabMaxPartitionsCeiling" in reason
    assert (await client.request("GET", admin(topic, "/partitions")))[0] == 404  # not created

    assert (await client.request("PUT", admin(topic, "/partitions"), json=2))[0] == 204
    reason = await refused(client, "POST", admin(topic, "/partitions"), json=HUGE)
    assert "brokerlabMaxPartitionsCeiling" in reason
    assert (await client.request("GET", admin(topic, "/partitions")))[1]["partitions"] == 2


async def test_health_probes_are_answered_while_every_partition_unloads(
    shared_served_broker: ServedBrokerFactory,
) -> None:
    # a broker process, not a thread of this one: sharing this process's GIL, a loaded
    # machine could starve the probing thread (one probe answered in a whole unload)
    broker = shared_served_broker(brokerlabMaxPartitionsCeiling=CEILING)
    client = Client(broker.http_url)
    try:
        topic = new_topic("wide")
        created = await client.request("PUT", admin(topic, "/partitions"), json=CEILING)
        assert created[0] == 204
        unload = asyncio.ensure_future(client.request("PUT", admin(topic, "/unload")))
        answered_during = 0
        while not unload.done():
            status, body = await client.request("GET", HEALTH)
            assert (status, body) == (200, "ok")
            if not unload.done():
                answered_during += 1
        assert (await unload)[0] == 204
    finally:
        await client.close()
    # a probe or two may be answered before the unload begins (it was sent first, but
    # on a connection of its own); more, only if the unload lets them through (about 60
    # here; without yielding, at most 2)
    assert answered_during >= 5, answered_during
