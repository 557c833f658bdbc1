"""Over HTTP, on a real server: an operation answered 503 had no effect, and its retry
does the operation (issue #14, item 1). The kill -9 reproductions are in
test_fault_matrix.py."""

from __future__ import annotations

from typing import Any

from tests.conftest import Client, LiveBroker

TOPIC = "public/default/faulty"
ADMIN = f"/admin/v2/persistent/{TOPIC}"


async def _fault(client: Client, operation: str, error_rate: float = 1.0) -> None:
    status, body = await client.request(
        "PUT", "/admin/v2/brokerlab/faults", json={"operation": operation, "errorRate": error_rate}
    )
    assert status == 204, body


async def _clear(client: Client) -> None:
    status, _ = await client.request("DELETE", "/admin/v2/brokerlab/faults")
    assert status == 204


def _unavailable(status: int, body: Any) -> None:
    assert status == 503, body
    assert body["code"] == "unavailable"


async def test_a_failed_ack_leaves_the_message_held_and_its_retry_is_recorded(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    consumer = await client.subscribe(TOPIC, "s", subscriptionInitialPosition="Earliest")
    ids = await client.produce(TOPIC, ["a", "b"])
    assert [m["messageId"] for m in await client.receive_until(consumer, 2)] == ids
    await _fault(client, "metadataPut")
    status, body = await client.request(
        "POST", f"/consumers/{consumer}/ack", json={"messageIds": [ids[0]]}
    )
    _unavailable(status, body)
    stats = await client.stats(TOPIC)
    assert stats["subscriptions"]["s"]["msgBacklog"] == 2
    assert stats["subscriptions"]["s"]["unackedMessages"] == 2
    status, _ = await client.request("POST", f"/consumers/{consumer}/redeliverUnacknowledged")
    assert status == 204
    again = await client.receive_until(consumer, 2)
    assert [m["messageId"] for m in again] == ids, "the failed ack had no effect"
    await _clear(client)
    await client.ack(consumer, [ids[0]])
    internal = await client.internal_stats(TOPIC)
    assert internal["cursors"]["s"]["markDeletePosition"] == ids[0]
    assert (await client.stats(TOPIC))["subscriptions"]["s"]["msgBacklog"] == 1


async def test_a_failed_reset_moves_nothing(live_broker: LiveBroker) -> None:
    client = await live_broker()
    consumer = await client.subscribe(TOPIC, "s", subscriptionInitialPosition="Earliest")
    ids = await client.produce(TOPIC, ["a", "b", "c"])
    await client.receive_until(consumer, 3)
    await _fault(client, "metadataPut")
    status, body = await client.request(
        "POST", f"{ADMIN}/subscription/s/resetcursor", json={"messageId": ids[2]}
    )
    _unavailable(status, body)
    stats = await client.stats(TOPIC)
    assert stats["subscriptions"]["s"]["msgBacklog"] == 3
    assert stats["subscriptions"]["s"]["unackedMessages"] == 3, "consumers keep what they hold"
    await _clear(client)
    status, _ = await client.request(
        "POST", f"{ADMIN}/subscription/s/resetcursor", json={"messageId": ids[2]}
    )
    assert status == 204
    assert (await client.stats(TOPIC))["subscriptions"]["s"]["msgBacklog"] == 1


async def test_failed_subscription_and_topic_deletes_change_nothing(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    for name in ("keep", "drop"):
        status, _ = await client.request(
            "PUT", f"{ADMIN}/subscription/{name}", messageId="earliest"
        )
        assert status == 204
    await client.produce(TOPIC, ["a", "b"])
    await _fault(client, "metadataDelete")
    status, body = await client.request("DELETE", f"{ADMIN}/subscription/drop")
    _unavailable(status, body)
    assert sorted((await client.stats(TOPIC))["subscriptions"]) == ["drop", "keep"]
    status, body = await client.request("DELETE", ADMIN)
    _unavailable(status, body)
    stats = await client.stats(TOPIC)  # loads the topic again from storage
    assert sorted(stats["subscriptions"]) == ["drop", "keep"]
    assert stats["subscriptions"]["keep"]["msgBacklog"] == 2
    await _clear(client)
    status, _ = await client.request("DELETE", ADMIN)
    assert status == 204
    status, _ = await client.request("GET", f"{ADMIN}/stats")
    assert status == 404
    # a topic created again under that name starts without the old subscriptions
    await client.produce(TOPIC, ["new"])
    assert (await client.stats(TOPIC))["subscriptions"] == {}


async def test_a_produce_needing_a_rollover_whose_metadata_fails_is_refused(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker(
        managedLedgerMaxEntriesPerLedger=2, managedLedgerMinLedgerRolloverTimeMinutes=0
    )
    ids = await client.produce(TOPIC, ["a"])
    await _fault(client, "metadataPut")
    statuses = []
    for _ in range(3):
        status, body = await client.request(
            "POST", f"/topics/persistent/{TOPIC}", json={"messages": [{"payload": "eA=="}]}
        )
        statuses.append(status)
        if status == 200:
            ids += [r["messageId"] for r in body["messagePublishResults"]]
        else:
            _unavailable(status, body)
    # the second message fills the ledger; its rollover cannot be recorded, so the
    # next adds are refused rather than written to a ledger the metadata does not name
    assert statuses == [200, 503, 503]
    await _clear(client)
    ids += await client.produce(TOPIC, ["f"])
    internal = await client.internal_stats(TOPIC)
    named = {ledger["ledgerId"] for ledger in internal["ledgers"]}
    assert {int(i.split(":")[0]) for i in ids} <= named


async def test_an_unload_whose_ledger_close_fails_still_unloads_and_loses_nothing(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    ids = await client.produce(TOPIC, ["a", "b"])
    await _fault(client, "closeLedger")
    status, body = await client.request("POST", "/admin/v2/namespaces/public/default/unload")
    assert status == 204, body
    await _clear(client)
    consumer = await client.subscribe(TOPIC, "late", subscriptionInitialPosition="Earliest")
    assert [m["messageId"] for m in await client.receive_until(consumer, 2)] == ids
