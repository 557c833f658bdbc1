"""A topic's requests end at its owner: HTTP topic routes on the other broker answer 307
to the same route on the owner (a client following it stores the message once), lookups
on either broker name the owner, and the official client, given both brokers in its
service URL, produces to and consumes from topics of both owners."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pulsar  # type: ignore[import-untyped, unused-ignore]
import pytest

from tests.cluster.conftest import owner_in_listing
from tests.conftest import LocalClusterFactory, ServedBrokerFactory
from tests.harness import (
    ServedBroker,
    b64,
    pulsar_bundle,
    short,
    topics_in_distinct_bundles,
    unb64,
)

RECEIVE_MS = 20_000
#: the module's cluster: topics stay loaded, so a test can count the ones it loaded
CLUSTER = {"brokers": 2, "brokerDeleteInactiveTopicsEnabled": False}


async def test_produce_to_the_non_owner_is_redirected_and_stored_once(
    local_cluster: LocalClusterFactory,
) -> None:
    local = await local_cluster()
    topic = topics_in_distinct_bundles("redirect", 1)[0]
    path = "/topics/persistent/" + short(topic)
    # the first request about the topic assigns its bundle: broker 0 (it owns the fewest
    # bundles, and has the lowest index)
    status, _ = await local.clients[0].request("GET", "/lookup/v2/topic/persistent/" + short(topic))
    assert status == 200
    owner = local.owner_index(topic)
    assert owner == 0
    other = 1 - owner
    owner_url, other_url = local.urls[owner], local.urls[other]
    body = {"messages": [{"payload": b64(b"once")}]}

    session = local.clients[other].session
    async with session.post(other_url + path, json=body, allow_redirects=False) as response:
        assert response.status == 307
        assert response.headers["Location"] == owner_url + path
        answer = await response.json()
    assert set(answer) == {"reason", "code"} and answer["code"] == "not-owner"
    # the non-owner stored nothing: the topic is not even loaded there
    other_service = local.cluster.nodes[other].service
    assert other_service is not None and other_service.topics == {}

    # aiohttp follows a 307 with the method and the body kept
    async with session.post(other_url + path, json=body) as response:
        assert response.status == 200, await response.text()
        assert str(response.url) == owner_url + path
        published = await response.json()
    [result] = published["messagePublishResults"]
    assert result["errorCode"] == 0

    owner_client = local.clients[owner]
    stats = await owner_client.internal_stats(short(topic))
    assert stats["numberOfEntries"] == 1
    assert stats["entriesAddedCounter"] == 1
    consumer = await owner_client.subscribe(
        short(topic), "once", subscriptionInitialPosition="Earliest"
    )
    await owner_client.produce(short(topic), ["sentinel"])
    got = await owner_client.receive_until(consumer, 2)
    assert [unb64(message["payload"]) for message in got] == [b"once", b"sentinel"]
    assert got[0]["messageId"] == result["messageId"]


async def test_topic_routes_keep_their_query_and_consumers_live_at_the_owner(
    local_cluster: LocalClusterFactory,
) -> None:
    local = await local_cluster()
    topic = topics_in_distinct_bundles("query", 1)[0]
    await local.clients[0].produce(short(topic), ["x"])  # broker 0 owns it (first bundle)
    assert local.owner_index(topic) == 0
    session = local.clients[1].session
    path = f"/admin/v2/persistent/{short(topic)}/stats?getPreciseBacklog=true"
    async with session.get(local.urls[1] + path, allow_redirects=False) as response:
        assert response.status == 307
        assert response.headers["Location"] == local.urls[0] + path
    # a consumer made through the other broker lives at the owner, where its polls go
    consumer_path = f"/consumers/persistent/{short(topic)}/sub"
    spec = {"subscriptionInitialPosition": "Earliest"}
    async with session.post(local.urls[1] + consumer_path, json=spec) as response:
        assert response.status == 200
        assert str(response.url) == local.urls[0] + consumer_path
        consumer_id = (await response.json())["consumerId"]
    got = await local.clients[0].receive_until(consumer_id, 1)
    assert [unb64(message["payload"]) for message in got] == [b"x"]
    status, _ = await local.clients[1].request("GET", f"/consumers/{consumer_id}/messages")
    assert status == 404  # broker 1 has no such consumer


async def test_a_redirect_loop_never_happens_while_a_bundle_moves(
    local_cluster: LocalClusterFactory,
) -> None:
    """After an unload the next request, wherever it arrives, assigns the bundle and is
    answered by the new owner or redirected there once."""
    local = await local_cluster()
    topic = topics_in_distinct_bundles("moving", 1)[0]
    await local.clients[0].produce(short(topic), ["before"])
    bundle = pulsar_bundle(topic)
    status, _ = await local.clients[0].request(
        "PUT", f"/admin/v2/namespaces/public/default/{bundle}/unload"
    )
    assert status == 204
    for client in local.clients:
        async with client.session.post(
            client.base_url + "/topics/persistent/" + short(topic),
            json={"messages": [{"payload": b64(b"after")}]},
        ) as response:
            assert response.status == 200
            assert len(response.history) <= 1
    assert local.owner_index(topic) == 1
    stats = await local.clients[1].internal_stats(short(topic))
    assert stats["numberOfEntries"] == 3


# ---------------------------------------------------------------------- official client


def spread_topics(cluster: ServedBroker, prefix: str) -> dict[int, str]:
    """A topic owned by each broker: four topics in four bundles, looked up in turn,
    land alternately on broker 0 and 1 (fewest bundles first), or are where an earlier
    test's lookups put them."""
    topics = topics_in_distinct_bundles(prefix)
    owners = {cluster.owner(topic): topic for topic in reversed(topics)}
    assert set(owners) == {0, 1}, owners
    listing = cluster.listing()
    for index, topic in owners.items():
        assert owner_in_listing(listing, pulsar_bundle(topic)) == index
    return owners


def test_lookups_on_either_broker_name_the_owner(shared_served_broker: ServedBrokerFactory) -> None:
    cluster = shared_served_broker(**CLUSTER)
    owned = spread_topics(cluster, "lookup")
    for owner, topic in owned.items():
        for asking in (0, 1):
            data = cluster.lookup(topic, broker=asking)
            assert data["brokerUrl"] == cluster.service_urls[owner], (asking, data)
            assert data["nativeUrl"] == cluster.service_urls[owner]
            assert data["httpUrl"] == cluster.http_urls[owner]
    # the stats of a topic are the owner's: the other broker redirects
    for owner, topic in owned.items():
        answer = cluster.request(
            "GET", f"/admin/v2/persistent/{short(topic)}/stats", broker=1 - owner
        )
        assert answer.status == 307
        assert answer.headers["Location"].startswith(cluster.http_urls[owner] + "/")


def test_the_official_client_reaches_topics_of_both_owners(
    shared_served_broker: ServedBrokerFactory, pulsar_client: Callable[[str], pulsar.Client]
) -> None:
    cluster = shared_served_broker(**CLUSTER)
    loaded_before = [broker["topics"] for broker in cluster.listing()]
    owned = spread_topics(cluster, "official")
    client = pulsar_client(cluster.service_url)
    consumers: dict[int, Any] = {}
    for owner, topic in owned.items():
        consumers[owner] = client.subscribe(
            topic,
            "both",
            consumer_type=pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Earliest,
        )
    sent: dict[int, list[bytes]] = {}
    for owner, topic in owned.items():
        producer = client.create_producer(topic, batching_enabled=False)
        sent[owner] = [f"{owner}-{index}".encode() for index in range(10)] + [b"sentinel"]
        for payload in sent[owner]:
            producer.send(payload)
        # the owner serves the producer and the consumer: its stats show them
        stats = cluster.ok("GET", f"/admin/v2/persistent/{short(topic)}/stats", broker=owner)
        assert stats["msgInCounter"] == len(sent[owner])
        assert len(stats["subscriptions"]["both"]["consumers"]) == 1
        producer.close()
    for owner, consumer in consumers.items():
        got: list[bytes] = []
        while not got or got[-1] != b"sentinel":
            message = consumer.receive(RECEIVE_MS)
            got.append(message.data())
            consumer.acknowledge(message)
        assert got == sent[owner]  # each once, in order
        internal = cluster.ok(
            "GET", f"/admin/v2/persistent/{short(owned[owner])}/internalStats", broker=owner
        )
        assert internal["numberOfEntries"] == len(sent[owner])
    # neither broker loaded the other's topic
    loaded = [broker["topics"] for broker in cluster.listing()]
    assert [now - before for now, before in zip(loaded, loaded_before, strict=True)] == [1, 1]


@pytest.mark.parametrize("asking", [0, 1])
def test_a_binary_lookup_through_either_broker_connects_to_the_owner(
    shared_served_broker: ServedBrokerFactory,
    pulsar_client: Callable[[str], pulsar.Client],
    asking: int,
) -> None:
    """A client given one broker only still ends at the owner (LOOKUP answers it)."""
    cluster = shared_served_broker(**CLUSTER)
    owned = spread_topics(cluster, f"single-{asking}")
    client = pulsar_client(cluster.service_urls[asking])
    for owner, topic in owned.items():
        producer = client.create_producer(topic)
        producer.send(b"hello")
        stats = cluster.ok("GET", f"/admin/v2/persistent/{short(topic)}/stats", broker=owner)
        assert stats["msgInCounter"] == 1
        producer.close()
