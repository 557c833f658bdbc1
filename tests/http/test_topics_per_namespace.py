"""maxTopicsPerNamespace counts each partition of a partitioned topic, as Pulsar does: a
partitioned topic whose partitions would not fit is refused whole (409 conflict naming
the setting, nothing created), and the partitions of one that fit are used freely."""

from __future__ import annotations

from typing import Any

from tests.conftest import Client, LiveBroker

NAMESPACE = "/admin/v2/persistent/public/default"


def admin(topic: str, rest: str = "") -> str:
    return f"{NAMESPACE}/{topic}{rest}"


async def refused_over_the_limit(client: Client, method: str, path: str, **kw: Any) -> None:
    status, body = await client.request(method, path, **kw)
    assert (status, body["code"]) == (409, "conflict"), (status, body)
    assert "maxTopicsPerNamespace=3" in body["reason"], body


async def topics(client: Client) -> list[str]:
    status, body = await client.request("GET", NAMESPACE)
    assert status == 200, body
    return [name.rsplit("/", 1)[1] for name in body]


async def test_a_partitioned_topic_whose_partitions_do_not_fit_is_refused_whole(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker(maxTopicsPerNamespace=3)
    await client.produce("public/default/single", ["one topic"])
    await refused_over_the_limit(client, "PUT", admin("wide", "/partitions"), json=3)
    status, _ = await client.request("GET", admin("wide", "/partitions"))
    assert status == 404
    assert await topics(client) == ["single"]
    # two partitions and the single topic: exactly the limit
    status, body = await client.request("PUT", admin("pair", "/partitions"), json=2)
    assert status == 204, body
    assert await topics(client) == ["pair-partition-0", "pair-partition-1", "single"]


async def test_the_partitions_of_a_partitioned_topic_that_fits_are_used_at_the_limit(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker(maxTopicsPerNamespace=3)
    status, body = await client.request("PUT", admin("trio", "/partitions"), json=3)
    assert status == 204, body
    # partitions are created on first use here, but they were counted with the
    # partitioned topic: using them creates nothing more
    for index in range(3):
        await client.produce(f"public/default/trio-partition-{index}", [f"to {index}"])
    await client.subscribe("public/default/trio-partition-0", "s")
    await refused_over_the_limit(
        client,
        "POST",
        "/topics/persistent/public/default/other",
        json={"messages": [{"payload": ""}]},
    )
    await refused_over_the_limit(client, "PUT", admin("more", "/partitions"), json=1)
    # deleting the partitioned topic frees its three places
    status, body = await client.request("DELETE", admin("trio", "/partitions"), force="true")
    assert status == 204, body
    status, body = await client.request("PUT", admin("more", "/partitions"), json=3)
    assert status == 204, body


async def test_an_auto_created_partitioned_topic_counts_its_partitions(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker(
        maxTopicsPerNamespace=3, allowAutoTopicCreationType="partitioned", defaultNumPartitions=2
    )
    await client.produce("public/default/single", ["one topic"])
    await client.produce("public/default/another", ["two topics"])
    await refused_over_the_limit(
        client, "GET", admin("auto", "/partitions"), checkAllowAutoCreation="true"
    )
    assert await topics(client) == ["another", "single"]
