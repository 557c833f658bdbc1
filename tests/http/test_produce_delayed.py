"""Delayed delivery through HTTP produce (``deliverAt``, ``deliverAfterMs``, as Pulsar's
REST produce names them): a Shared HTTP consumer gets the delayed message only once it
is due (the broker strict, so never early), the others at once; a delayed message in a
batch, or due beyond ``delayedDeliveryMaxDelayInMillis``, is a 400 that stores nothing.
Times are the machine's wall clock, which the in-process broker shares."""

from __future__ import annotations

from tests.conftest import LiveBroker, b64, unb64
from tests.harness import eventually_async
from tests.http.test_websocket_delayed import BROKER, MAX_DELAY_MS, now_ms

TOPIC = "public/default/http-delayed"
PATH = f"/topics/persistent/{TOPIC}"


async def test_delayed_messages_come_when_due_and_bad_ones_store_nothing(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker(**BROKER)
    consumer = await client.subscribe(
        TOPIC, "sub", subscriptionType="Shared", subscriptionInitialPosition="Earliest"
    )
    before = now_ms()
    messages = [
        {"payload": b64("after"), "deliverAfterMs": 1200},
        {"payload": b64("at"), "deliverAt": before + 600},
        {"payload": b64("now")},
    ]
    status, body = await client.request("POST", PATH, json={"messages": messages})
    assert status == 200, body
    arrivals: dict[bytes, int] = {}

    async def all_three() -> bool:
        for message in await client.receive(consumer, 10, 2000):
            arrivals[unb64(message["payload"])] = now_ms()
        return len(arrivals) >= 3

    await eventually_async(all_three, lambda: f"three messages (got {list(arrivals)})", 20)
    assert list(arrivals) == [b"now", b"at", b"after"]
    assert arrivals[b"at"] >= before + 600
    assert arrivals[b"after"] >= before + 1200

    stored = (await client.internal_stats(TOPIC))["entriesAddedCounter"]
    too_far = {"payload": b64("x"), "deliverAfterMs": MAX_DELAY_MS + 60_000}
    status, body = await client.request("POST", PATH, json={"messages": [too_far]})
    assert status == 400 and body["code"] == "invalid-request", body
    assert body["reason"] == (
        f"messages[0]: Exceeds max allowed delivery delay of {MAX_DELAY_MS} milliseconds"
    )
    batched = {"messages": [{"payload": b64("x"), "deliverAfterMs": 10}], "batch": True}
    status, body = await client.request("POST", PATH, json=batched)
    assert status == 400 and "batch" in body["reason"], body
    assert (await client.internal_stats(TOPIC))["entriesAddedCounter"] == stored
