"""Admin of a 2-broker cluster, in process: a bundle unload moves the bundle's topics to
the other broker; metrics and cache stats are each broker's own; a broker that is down
answers 503 on topic routes (and serves again once started)."""

from __future__ import annotations

import asyncio
import pathlib
import re

import orjson

from broker.ledger.managed_ledger import metadata_key
from tests.cluster.conftest import owner_in_listing, unfollowed
from tests.conftest import LocalCluster, LocalClusterFactory
from tests.harness import (
    b64,
    eventually_async,
    pulsar_bundle,
    short,
    topic_in_bundle,
    topics_in_distinct_bundles,
    unb64,
)

UNLOAD = "/admin/v2/namespaces/public/default/{bundle}/unload"
PRODUCE = "/topics/persistent/{topic}"


async def listing(local: LocalCluster, asking: int = 0) -> list[dict]:
    status, body = await local.clients[asking].request("GET", "/admin/v2/brokerlab/brokers")
    assert status == 200, body
    return list(body)


async def produce_anywhere(
    local: LocalCluster, asking: int, topic: str, payloads: list[str]
) -> None:
    """Produce through broker ``asking``, following its redirect to the owner."""
    await local.clients[asking].produce(short(topic), payloads)


async def payloads_at(local: LocalCluster, broker: int, topic: str, count: int) -> list[bytes]:
    """What a new subscription at ``broker`` reads from the start (``count`` messages)."""
    client = local.clients[broker]
    consumer = await client.subscribe(
        short(topic), f"check-{count}", subscriptionInitialPosition="Earliest"
    )
    got = await client.receive_until(consumer, count)
    status, _ = await client.request("DELETE", f"/consumers/{consumer}")
    assert status == 204
    return [unb64(message["payload"]) for message in got]


# ---------------------------------------------------------------------- bundle unload


async def test_unloading_a_bundle_moves_its_topics_to_the_other_broker(
    local_cluster: LocalClusterFactory,
) -> None:
    local = await local_cluster()
    moving = pulsar_bundle(topics_in_distinct_bundles("unload", 1)[0])
    first = topic_in_bundle("unload-a", moving)
    second = topic_in_bundle("unload-b", moving)
    staying = next(t for t in topics_in_distinct_bundles("stay") if pulsar_bundle(t) != moving)
    await produce_anywhere(local, 0, first, ["a1"])  # the first bundle used: broker 0's
    await produce_anywhere(local, 0, second, ["b1"])
    await produce_anywhere(local, 0, staying, ["s1"])  # the second: broker 1's
    assert owner_in_listing(await listing(local), moving) == 0
    assert owner_in_listing(await listing(local), pulsar_bundle(staying)) == 1
    node0, node1 = local.cluster.nodes
    assert node0.service is not None and node1.service is not None
    assert {str(name) for name in node0.service.topics} == {first, second}

    # asked of either broker (here the one not owning it)
    status, body = await local.clients[1].request("PUT", UNLOAD.format(bundle=moving))
    assert status == 204, body
    # unloaded at broker 0, owned by nobody until it is next used
    assert node0.service.topics == {}
    assert owner_in_listing(await listing(local), moving) is None
    assert [str(name) for name in node1.service.topics] == [staying]  # untouched

    # the next lookup, even at broker 0, gives it to broker 1
    status, data = await local.clients[0].request(
        "GET", "/lookup/v2/topic/persistent/" + short(first)
    )
    assert status == 200 and data["httpUrl"] == local.urls[1]
    brokers = await listing(local)
    assert owner_in_listing(brokers, moving) == 1
    assert f"public/default/{moving}" not in brokers[0]["bundles"]
    # both topics are served there with what they held, and take new messages
    await produce_anywhere(local, 0, second, ["b2"])
    assert await payloads_at(local, 1, first, 1) == [b"a1"]
    assert await payloads_at(local, 1, second, 2) == [b"b1", b"b2"]
    assert node0.service.topics == {}
    status, location = await unfollowed(
        local.clients[0], "GET", f"/admin/v2/persistent/{short(first)}/stats"
    )
    assert (status, location) == (307, f"{local.urls[1]}/admin/v2/persistent/{short(first)}/stats")


async def test_unloading_an_unknown_or_unowned_bundle(local_cluster: LocalClusterFactory) -> None:
    local = await local_cluster()
    for asking in (0, 1):
        for bad in ("0x00000000_0x80000000", "0x00000000_0x3fffffff", "not-a-bundle"):
            status, body = await local.clients[asking].request("PUT", UNLOAD.format(bundle=bad))
            assert status == 400, (bad, body)
            assert set(body) == {"reason", "code"} and body["code"] == "invalid-request"
        # a bundle nobody owns yet: nothing to unload
        status, _ = await local.clients[asking].request(
            "PUT", UNLOAD.format(bundle="0xc0000000_0xffffffff")
        )
        assert status == 204
    assert local.cluster.ownership.owners == {}


async def test_a_topic_asked_for_during_its_bundles_unload_does_not_stay_at_the_old_owner(
    local_cluster: LocalClusterFactory,
) -> None:
    local = await local_cluster()
    storage = local.cluster.storage
    bundle = pulsar_bundle(topics_in_distinct_bundles("window", 1)[0])
    loaded = topic_in_bundle("window-loaded", bundle)
    late = topic_in_bundle("window-late", bundle)
    await produce_anywhere(local, 0, loaded, ["x"])
    assert local.owner_index(loaded) == 0
    # closing the loaded topic's ledger takes a second: the unload is under way meanwhile
    closes = storage.counters.closeLedger.calls
    storage.faults.set("closeLedger", 0.0, 1000.0)
    unload = asyncio.create_task(local.clients[0].request("PUT", UNLOAD.format(bundle=bundle)))

    async def closing() -> bool:
        return storage.counters.closeLedger.calls > closes

    await eventually_async(closing, "the unload to close the ledger")
    # a consumer of another topic of the bundle, at the broker unloading it: refused, or
    # made and then closed with the rest of the bundle (its client then looks up again)
    subscribed, made = await local.clients[0].request(
        "POST", f"/consumers/persistent/{short(late)}/s", json={}
    )
    assert (await unload)[0] == 204
    storage.faults.clear()
    await produce_anywhere(local, 1, late, ["after"])  # the bundle goes to broker 1
    assert local.owner_index(late) == 1
    if subscribed == 200:
        # the consumer must not be left polling a copy of the topic at broker 0, where
        # "after" (waiting at broker 1) never comes
        polled, _ = await local.clients[0].request(
            "GET", f"/consumers/{made['consumerId']}/messages", timeoutMs=0
        )
        assert polled != 200, "a consumer at broker 0 of a topic broker 1 serves"
    # broker 0 serves the topic no more: redirected, like any topic it does not own
    status, _ = await unfollowed(
        local.clients[0], "GET", f"/admin/v2/persistent/{short(late)}/stats"
    )
    assert status == 307
    node0 = local.cluster.nodes[0]
    assert node0.service is not None and node0.service.topics == {}


async def test_an_ack_being_written_during_an_unload_is_not_lost(
    local_cluster: LocalClusterFactory,
) -> None:
    local = await local_cluster()
    storage = local.cluster.storage
    topic = topics_in_distinct_bundles("ack-in-flight", 1)[0]
    client = local.clients[0]
    consumer = await client.subscribe(
        short(topic), "s", subscriptionType="Shared", subscriptionInitialPosition="Earliest"
    )
    await client.produce(short(topic), ["m0", "m1", "m2"])
    got = await client.receive_until(consumer, 3)
    assert local.owner_index(topic) == 0
    # the cursor write carrying the ack takes a second; writes after it do not
    puts = storage.counters.metadataPut.calls
    storage.faults.set("metadataPut", 0.0, 1000.0)
    ack = asyncio.create_task(client.ack(consumer, [got[0]["messageId"]]))

    async def writing() -> bool:
        return storage.counters.metadataPut.calls > puts

    await eventually_async(writing, "the cursor write to begin")
    storage.faults.clear()
    status, _ = await client.request("PUT", UNLOAD.format(bundle=pulsar_bundle(topic)))
    assert status == 204
    # the subscription, now at broker 1
    again = await local.clients[1].subscribe(short(topic), "s", subscriptionType="Shared")
    assert local.owner_index(topic) == 1
    await ack  # answered 204: the ack is durable
    await local.clients[1].produce(short(topic), ["sentinel"])
    redelivered = await local.clients[1].receive_until(again, 3)
    assert [unb64(message["payload"]) for message in redelivered] == [b"m1", b"m2", b"sentinel"]


# ---------------------------------------------------------------------- per broker


SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})? ")


async def test_metrics_carry_each_brokers_own_label(local_cluster: LocalClusterFactory) -> None:
    local = await local_cluster()
    topics = topics_in_distinct_bundles("metrics", 2)
    for topic in topics:
        await produce_anywhere(local, 0, topic, ["m"])  # one topic on each broker
    assert {local.owner_index(topic) for topic in topics} == {0, 1}
    for index, client in enumerate(local.clients):
        status, text = await client.request("GET", "/metrics")
        assert status == 200
        samples = [line for line in text.splitlines() if line and not line.startswith("#")]
        assert len(samples) > 20
        for line in samples:
            match = SAMPLE.match(line)
            assert match is not None, line
            labels = match.group("labels") or ""
            assert f'broker="{index}"' in labels, line
            assert labels.count("broker=") == 1, line
        # the counters are this broker's: one message produced each
        produced = [s for s in samples if s.startswith("brokerlab_messages_produced_total")]
        assert produced == [f'brokerlab_messages_produced_total{{broker="{index}"}} 1.0']


async def test_cache_stats_count_only_the_brokers_own_reads(
    local_cluster: LocalClusterFactory,
) -> None:
    local = await local_cluster()
    topic = topics_in_distinct_bundles("cache", 1)[0]
    await produce_anywhere(local, 1, topic, [f"m{i}" for i in range(5)])
    assert local.owner_index(topic) == 0
    # consumed through broker 1's front end, served by broker 0
    consumer_path = f"/consumers/persistent/{short(topic)}/reader"
    async with local.clients[1].session.post(
        local.urls[1] + consumer_path, json={"subscriptionInitialPosition": "Earliest"}
    ) as response:
        assert response.status == 200
        consumer = (await response.json())["consumerId"]
    got = await local.clients[0].receive_until(consumer, 5)
    assert len(got) == 5
    stats = []
    for client in local.clients:
        status, body = await client.request("GET", "/admin/v2/broker-stats/cache")
        assert status == 200
        stats.append(body)
    assert stats[0]["hits"] + stats[0]["misses"] >= 5
    assert stats[1]["hits"] == stats[1]["misses"] == 0
    assert stats[1]["inserted"] == 0 and stats[1]["entries"] == 0


# ---------------------------------------------------------------------- a broker down


async def test_a_broker_that_is_down_answers_503_until_it_starts(
    local_cluster: LocalClusterFactory,
) -> None:
    local = await local_cluster()
    topic = topics_in_distinct_bundles("down", 1)[0]
    await produce_anywhere(local, 0, topic, ["before"])
    consumer = await local.clients[0].subscribe(
        short(topic), "s", subscriptionInitialPosition="Earliest"
    )
    node0 = local.cluster.nodes[0]
    await node0.stop()
    assert node0.state == "down"
    down = local.clients[0]
    other = topics_in_distinct_bundles("down-other", 2)[1]
    for method, path, body in (
        ("POST", PRODUCE.format(topic=short(topic)), {"messages": [{"payload": b64("x")}]}),
        ("POST", PRODUCE.format(topic=short(other)), {"messages": [{"payload": b64("x")}]}),
        ("POST", f"/consumers/persistent/{short(topic)}/s2", {}),
        ("GET", f"/consumers/{consumer}/messages", None),
        ("POST", f"/consumers/{consumer}/ack", {"messageIds": ["0:0"]}),
        ("GET", f"/admin/v2/persistent/{short(topic)}/stats", None),
        ("GET", f"/admin/v2/persistent/{short(topic)}/internalStats", None),
        ("GET", "/lookup/v2/topic/persistent/" + short(topic), None),
        ("GET", "/admin/v2/persistent/public/default", None),
        ("PUT", UNLOAD.format(bundle=pulsar_bundle(topic)), None),
    ):
        status, answer = await down.request(method, path, json=body)
        assert status == 503, (method, path, answer)
        assert set(answer) == {"reason", "code"} and answer["code"] == "unavailable"
    # the cluster listing still answers, and says so
    brokers = await listing(local, 0)
    assert brokers[0]["state"] == "down" and brokers[0]["bundles"] == []
    # the other broker took the topic's bundle (a graceful stop hands it over)
    await produce_anywhere(local, 1, topic, ["while-down"])
    assert local.owner_index(topic) == 1
    assert await payloads_at(local, 1, topic, 2) == [b"before", b"while-down"]

    await node0.start()
    assert node0.state == "up"
    status, _ = await unfollowed(down, "GET", f"/admin/v2/persistent/{short(topic)}/stats")
    assert status == 307  # broker 1 owns it now
    fresh = next(t for t in topics_in_distinct_bundles("up-again") if local.owner_index(t) is None)
    await produce_anywhere(local, 0, fresh, ["back"])
    assert local.owner_index(fresh) == 0  # owns the fewest bundles


async def test_a_killed_broker_keeps_its_bundles_until_its_session_expires(
    local_cluster: LocalClusterFactory,
) -> None:
    """A kill closes nothing: the ledger stays open in the metadata store, the bundle
    stays the dead broker's (requests for it fail) until the session expires, and the
    next owner recovers the ledger with every message stored before the kill."""
    local = await local_cluster(metadataStoreSessionTimeoutMillis=500)
    storage = local.cluster.storage
    topic = topics_in_distinct_bundles("killed", 1)[0]
    await produce_anywhere(local, 0, topic, ["k0", "k1", "k2"])
    closes = storage.counters.closeLedger.calls
    node0 = local.cluster.nodes[0]
    await node0.stop("kill")
    assert storage.counters.closeLedger.calls == closes
    record = orjson.loads(await storage.metadata.get(metadata_key(topic)) or b"{}")
    assert [ledger["open"] for ledger in record["ledgers"]] == [True]
    brokers = await listing(local, 1)
    assert brokers[0]["state"] == "down"
    assert brokers[0]["bundles"] == [f"public/default/{pulsar_bundle(topic)}"]
    # broker 1 sends the request to the dead owner, which answers 503
    status, answer = await local.clients[1].request(
        "POST", PRODUCE.format(topic=short(topic)), json={"messages": [{"payload": b64("x")}]}
    )
    assert (status, answer["code"]) == (503, "unavailable")

    async def expired() -> bool:
        return (await listing(local, 1))[0]["bundles"] == []

    await eventually_async(expired, "the session to expire", deadline_s=20)
    await produce_anywhere(local, 1, topic, ["k3"])
    assert local.owner_index(topic) == 1
    assert storage.counters.closeLedger.calls == closes + 1  # broker 1's recovery
    assert await payloads_at(local, 1, topic, 4) == [b"k0", b"k1", b"k2", b"k3"]


async def test_a_request_in_flight_when_its_broker_stops_answers_503(
    local_cluster: LocalClusterFactory,
) -> None:
    local = await local_cluster()
    storage = local.cluster.storage
    topic = topics_in_distinct_bundles("in-flight", 1)[0]
    # the produce's first metadata read (the partitioned-topic records, read once per
    # broker incarnation) takes a second; the broker stops meanwhile
    reads = storage.counters.metadataGet.calls
    storage.faults.set("metadataGet", 0.0, 1000.0)
    request = asyncio.create_task(
        local.clients[0].request(
            "POST", PRODUCE.format(topic=short(topic)), json={"messages": [{"payload": b64("x")}]}
        )
    )

    async def reading() -> bool:
        return storage.counters.metadataGet.calls > reads

    await eventually_async(reading, "the produce to read metadata")
    await local.cluster.nodes[0].stop()
    status, body = await request
    storage.faults.clear()
    assert body["code"] == "unavailable"
    assert status == 503, body


async def test_the_load_generator_sums_every_broker_s_trace_stats(
    local_cluster: LocalClusterFactory, tmp_path: pathlib.Path
) -> None:
    """A trace of a cluster is every broker's files: the events and drops the load
    generator reports (and checks before trusting a replay) are all brokers'."""
    from loadgen.client import BrokerClient

    # no eviction timer ticks meanwhile (each is a trace event), so the counts stand still
    local = await local_cluster(
        brokerlabTraceDir=str(tmp_path / "trace"), managedLedgerCacheEvictionIntervalMs=60_000
    )
    first, second = topics_in_distinct_bundles("traced", 2)
    await produce_anywhere(local, 0, first, ["a"] * 5)
    await produce_anywhere(local, 0, second, ["b"] * 7)
    assert {local.owner_index(first), local.owner_index(second)} == {0, 1}
    own = [
        (await client.request("GET", "/admin/v2/broker-stats/trace"))[1] for client in local.clients
    ]
    assert all(stats["events"] > 0 for stats in own)
    async with BrokerClient(local.urls[0], brokers=local.urls) as client:
        summed = await client.trace_stats()
    assert summed["events"] == sum(stats["events"] for stats in own)
    assert summed["dropped"] == 0 and summed["enabled"] is True
