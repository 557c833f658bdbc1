"""Consumers that idle out or time out acks, Failover hand-over, cursor resets, topic
deletion and namespace unload."""

from __future__ import annotations

import asyncio

from tests.conftest import Client, LiveBroker, unb64
from tests.harness import eventually_async

TOPIC = "public/default/events"


async def _poll_until(client: Client, consumer: str, wanted: set[str]) -> list[dict[str, object]]:
    """What ``consumer`` receives until every one of ``wanted`` has come."""
    got: list[dict[str, object]] = []

    async def all_came() -> bool:
        got.extend(await client.receive(consumer, 100, 100))
        return wanted <= {m["messageId"] for m in got}

    await eventually_async(all_came, lambda: f"messages {sorted(wanted)} (got {got})", 20)
    return got


async def test_consumer_that_stops_polling_is_closed_and_its_messages_go_to_another(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker(consumerIdleTimeoutMs=300)
    idle = await client.subscribe(TOPIC, "idle", subscriptionType="Shared", receiverQueueSize=5)
    ids = await client.produce(TOPIC, [f"e{i}" for i in range(5)])
    seen = await client.receive_until(idle, 5)
    assert len(seen) == 5
    busy = await client.subscribe(TOPIC, "idle", subscriptionType="Shared")
    got = await _poll_until(client, busy, set(ids))
    assert sorted(m["messageId"] for m in got) == sorted(ids)
    assert {m["redeliveryCount"] for m in got} == {1}
    status, body = await client.request("GET", f"/consumers/{idle}/messages", timeoutMs=0)
    assert (status, body["code"]) == (404, "not-found")


async def test_unacked_messages_come_back_after_the_ack_timeout(live_broker: LiveBroker) -> None:
    client = await live_broker()
    consumer = await client.subscribe(
        TOPIC, "timeouts", subscriptionType="Shared", ackTimeoutMillis=200
    )
    ids = await client.produce(TOPIC, ["t0", "t1"])
    first = await client.receive_until(consumer, 2)
    await client.ack(consumer, [ids[0]])
    again = await _poll_until(client, consumer, {ids[1]})
    assert [(m["messageId"], m["redeliveryCount"]) for m in again] == [(ids[1], 1)]
    assert [m["redeliveryCount"] for m in first] == [0, 0]


async def test_failover_gives_everything_to_the_highest_priority_consumer_then_fails_over(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    standby = await client.subscribe(
        TOPIC, "fo", subscriptionType="Failover", consumerName="b", priorityLevel=1
    )
    active = await client.subscribe(
        TOPIC, "fo", subscriptionType="Failover", consumerName="a", priorityLevel=0
    )
    ids = await client.produce(TOPIC, [f"f{i}" for i in range(10)])
    got = await client.receive_until(active, 10)
    assert [m["messageId"] for m in got] == ids
    assert await client.receive(standby, 10, 100) == []
    await client.ack(active, [ids[3]], "Cumulative")
    status, _ = await client.request("DELETE", f"/consumers/{active}")
    assert status == 204
    rest = await client.receive_until(standby, 6)
    assert [m["messageId"] for m in rest] == ids[4:]
    assert all(m["redeliveryCount"] == 1 for m in rest)


async def test_reset_cursor_by_message_id_and_by_publish_time(live_broker: LiveBroker) -> None:
    client = await live_broker()
    consumer = await client.subscribe(TOPIC, "rewind", subscriptionInitialPosition="Earliest")
    ids = await client.produce(TOPIC, [f"r{i}" for i in range(10)])
    got = await client.receive_until(consumer, 10)
    await client.ack(consumer, [ids[-1]], "Cumulative")
    base = f"/admin/v2/persistent/{TOPIC}/subscription/rewind/resetcursor"
    status, _ = await client.request("POST", base, json={"messageId": ids[6]})
    assert status == 204
    again = await client.receive_until(consumer, 4)
    assert [m["messageId"] for m in again] == ids[6:]
    assert (await client.stats(TOPIC))["subscriptions"]["rewind"]["msgBacklog"] == 4

    published = int(str(got[0]["publishTime"]))
    status, _ = await client.request("POST", f"{base}/{published}")
    assert status == 204
    everything = await client.receive_until(consumer, 10)
    assert [m["messageId"] for m in everything] == ids
    status, _ = await client.request("POST", f"{base}/{published + 10**9}")
    assert status == 204
    assert (await client.stats(TOPIC))["subscriptions"]["rewind"]["msgBacklog"] == 0


async def test_topics_are_listed_and_deleted(live_broker: LiveBroker) -> None:
    client = await live_broker()
    await client.produce("acme/prod/a", ["1"])
    await client.produce("acme/prod/b", ["2"])
    await client.produce("acme/other/c", ["3"])
    status, topics = await client.request("GET", "/admin/v2/persistent/acme/prod")
    assert (status, topics) == (200, ["persistent://acme/prod/a", "persistent://acme/prod/b"])
    consumer = await client.subscribe("acme/prod/a", "s")
    status, body = await client.request("DELETE", "/admin/v2/persistent/acme/prod/a")
    assert (status, body["code"]) == (412, "precondition-failed")
    status, _ = await client.request("DELETE", "/admin/v2/persistent/acme/prod/a", force="true")
    assert status == 204
    status, topics = await client.request("GET", "/admin/v2/persistent/acme/prod")
    assert topics == ["persistent://acme/prod/b"]
    status, body = await client.request("GET", "/admin/v2/persistent/acme/prod/a/stats")
    assert (status, body["code"]) == (404, "not-found")
    status, body = await client.request("GET", f"/consumers/{consumer}/messages", timeoutMs=0)
    assert status == 404


async def test_namespace_unload_disconnects_consumers_and_topics_reload_from_storage(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    consumer = await client.subscribe(TOPIC, "u", subscriptionInitialPosition="Earliest")
    ids = await client.produce(TOPIC, ["u0", "u1", "u2"])
    await client.receive_until(consumer, 3)
    await client.ack(consumer, [ids[0]])
    status, _ = await client.request("POST", "/admin/v2/namespaces/public/default/unload")
    assert status == 204
    status, _ = await client.request("GET", f"/consumers/{consumer}/messages", timeoutMs=0)
    assert status == 404
    consumer = await client.subscribe(TOPIC, "u")
    back = await client.receive_until(consumer, 2)
    assert [m["messageId"] for m in back] == ids[1:]
    assert [unb64(str(m["payload"])) for m in back] == [b"u1", b"u2"]
    more = await client.produce(TOPIC, ["u3"])
    assert more[0].split(":")[0] != ids[0].split(":")[0], "a reloaded topic writes a new ledger"


async def test_a_consumer_in_a_long_poll_is_not_idle(live_broker: LiveBroker) -> None:
    client = await live_broker(consumerIdleTimeoutMs=200)
    consumer = await client.subscribe(TOPIC, "patient", subscriptionType="Shared")
    # one poll that outlasts the idle timeout several times over (and two upkeep rounds,
    # 0.5 s apart, that would close an idle consumer), with nothing to receive
    assert await client.receive(consumer, 10, 1000) == []
    ids = await client.produce(TOPIC, ["finally"])
    got = await client.receive_until(consumer, 1)
    assert [m["messageId"] for m in got] == ids


async def test_dispatch_survives_a_storage_fault_and_delivers_once_it_clears(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker(managedLedgerCacheSizeMB=0)  # every read goes to storage
    fault = {"operation": "readEntries", "errorRate": 1.0}
    status, _ = await client.request("PUT", "/admin/v2/brokerlab/faults", json=fault)
    assert status == 204
    consumer = await client.subscribe(TOPIC, "resilient", subscriptionType="Shared")
    ids = await client.produce(TOPIC, [f"f{i}" for i in range(5)])
    assert await client.receive(consumer, 10, 300) == []
    status, body = await client.request("GET", "/admin/v2/brokerlab/faults")
    assert body["readEntries"]["injectedErrors"] >= 1, "the dispatcher did try to read"
    status, _ = await client.request("DELETE", "/admin/v2/brokerlab/faults")
    got = await client.receive_until(consumer, len(ids))
    assert [m["messageId"] for m in got] == ids


async def test_two_exclusive_consumers_racing_for_a_subscription_admit_only_one(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    shared = await client.subscribe(TOPIC, "contested", subscriptionType="Shared")
    await client.request("DELETE", f"/consumers/{shared}")
    path = f"/consumers/persistent/{TOPIC}/contested"
    results = await asyncio.gather(
        *(client.request("POST", path, json={"subscriptionType": "Exclusive"}) for _ in range(2))
    )
    assert sorted(status for status, _ in results) == [200, 409]
    stats = await client.stats(TOPIC)
    assert len(stats["subscriptions"]["contested"]["consumers"]) == 1


async def test_the_ack_timeout_runs_from_receipt_not_from_the_receiver_queue(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    waiting = await client.subscribe(TOPIC, "queued", ackTimeoutMillis=100)
    idle = await client.subscribe(f"{TOPIC}-empty", "clock")
    ids = await client.produce(TOPIC, ["q0", "q1"])
    # let an upkeep round or two (0.5 s apart) pass while the messages sit unreceived in
    # the queue, well past their ack timeout
    assert await client.receive(idle, 10, 800) == []
    got = await client.receive_until(waiting, 2)
    assert [(m["messageId"], m["redeliveryCount"]) for m in got] == [(i, 0) for i in ids]
