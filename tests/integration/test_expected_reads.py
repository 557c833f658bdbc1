"""PIP-430's expected read counts against the real server: tailing subscriptions leave no
expected reads behind and never touch storage; a Shared subscription with two consumers
drains a 20,000-message backlog without a storage read (Pulsar issue #16421)."""

from __future__ import annotations

from tests.conftest import Client, LiveBroker
from tests.harness import eventually_async

TOPIC = "public/default/fanout"


async def stats(client: Client, route: str) -> dict[str, object]:
    status, body = await client.request("GET", f"/admin/v2/broker-stats/{route}")
    assert status == 200
    return dict(body)


async def test_five_tailing_subscriptions_leave_no_expected_reads_and_no_storage_reads(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    consumers = [await client.subscribe(TOPIC, f"tail-{i}") for i in range(5)]
    produced = 0
    for _ in range(30):  # 30 batches of 15: the consumers tail the topic between batches
        ids = await client.produce(TOPIC, [f"t{produced + i}" for i in range(15)])
        produced += len(ids)
        for consumer in consumers:
            got = await client.receive_until(consumer, len(ids))
            assert [m["messageId"] for m in got] == ids
            await client.ack(consumer, [ids[-1]], "Cumulative")
    cache = await stats(client, "cache")
    assert cache["implementation"] == "pip430"
    assert cache["entriesWithExpectedReads"] == 0, "every expected read happened"
    assert cache["hits"] == 5 * produced and cache["misses"] == 0
    assert (await stats(client, "storage"))["bookie"]["entriesRead"] == 0  # type: ignore[index]


async def test_a_shared_backlog_of_20000_drains_without_storage_reads(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    consumers = [
        await client.subscribe(TOPIC, "workers", subscriptionType="Shared") for _ in range(2)
    ]
    total = 20_000
    for start in range(0, total, 1000):
        await client.produce(TOPIC, [f"b{i}" for i in range(start, start + 1000)])
    received = 0

    async def all_received() -> bool:
        nonlocal received
        for consumer in consumers:
            batch = await client.receive(consumer, 1000, 50)
            received += len(batch)
            if batch:
                await client.ack(consumer, [str(m["messageId"]) for m in batch])
        return received >= total

    await eventually_async(all_received, lambda: f"{total} messages (got {received})", 60)
    assert received == total
    storage = await stats(client, "storage")
    assert storage["bookie"]["entriesRead"] == 0, "the backlog was served from the cache"  # type: ignore[index]
