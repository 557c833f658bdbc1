"""Delayed delivery over Pulsar's WebSocket API: a producer's ``deliverAt`` and
``deliverAfterMs`` hold the message on a Shared subscription until its time (the
broker strict, so never early), a delayed message is never batched, a deliver-at in
the past comes at once, and one beyond ``delayedDeliveryMaxDelayInMillis`` is answered
``send-error:8`` and stores nothing. Times are the machine's wall clock, which the
in-process broker shares; nothing sleeps."""

from __future__ import annotations

import time

from tests.conftest import LiveBroker, b64, unb64
from tests.http.test_websocket import (
    connect,
    consumer_path,
    entries_added,
    message_id,
    produce_ws,
    producer_path,
    receive,
    receive_many,
    send,
)

MAX_DELAY_MS = 3_600_000
BROKER = {
    "isDelayedDeliveryDeliverAtTimeStrict": True,
    "delayedDeliveryTickTimeMillis": 100,
    "delayedDeliveryMaxDelayInMillis": MAX_DELAY_MS,
}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def test_deliver_after_and_at_hold_messages_until_their_time(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker(**BROKER)
    async with (
        connect(client, consumer_path(subscriptionType="Shared")) as consumer,
        connect(client, producer_path(batchingEnabled="true", batchingMaxMessages=10)) as producer,
    ):
        before = now_ms()
        # sent together, so a batching producer would put them in one batch
        await send(producer, payload=b64("plain"), context="p1")
        await send(producer, payload=b64("after"), deliverAfterMs=1500, context="a")
        await send(producer, payload=b64("at"), deliverAt=before + 800, context="b")
        await send(producer, payload=b64("plain2"), context="p2")
        answers = {answer["context"]: answer for answer in await receive_many(producer, 4)}
        assert {answer["result"] for answer in answers.values()} == {"ok"}
        # delayed messages are never batched: ids without a batch index
        assert message_id(answers["a"]["messageId"])[2] == -1
        assert message_id(answers["b"]["messageId"])[2] == -1
        arrivals = {}
        for _ in range(4):
            pushed = await receive(consumer)
            arrivals[unb64(pushed["payload"])] = now_ms()
        assert list(arrivals) == [b"plain", b"plain2", b"at", b"after"]
        assert arrivals[b"at"] >= before + 800
        assert arrivals[b"after"] >= before + 1500


async def test_deliver_at_in_the_past_comes_at_once(live_broker: LiveBroker) -> None:
    client = await live_broker(**BROKER)
    async with (
        connect(client, consumer_path(subscriptionType="Shared")) as consumer,
        connect(client, producer_path()) as producer,
    ):
        answer = await produce_ws(producer, "past", deliverAt=now_ms() - 60_000)
        assert answer["result"] == "ok"
        assert unb64((await receive(consumer))["payload"]) == b"past"


async def test_beyond_the_max_delay_is_refused_and_the_session_goes_on(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker(**BROKER)
    async with connect(client, producer_path()) as producer:
        refused = await produce_ws(
            producer, "too-far", deliverAfterMs=MAX_DELAY_MS + 60_000, context="x"
        )
        assert refused["result"] == "send-error:8" and refused["context"] == "x", refused
        assert refused["errorMsg"] == (
            f"Exceeds max allowed delivery delay of {MAX_DELAY_MS} milliseconds"
        )
        assert await entries_added(client) == 0
        bad = await produce_ws(producer, "bad", deliverAt="tomorrow")
        assert bad["result"] == "send-error:3"
        assert (await produce_ws(producer, "fine", deliverAfterMs=1000))["result"] == "ok"
        assert await entries_added(client) == 1
