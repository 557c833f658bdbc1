"""Pulsar's WebSocket API (/ws/v2/...), against a real broker on a real port with
aiohttp's WebSocket client, as a user of Pulsar's documented API would drive it.

Message ids are base64 of a serialized MessageIdData, as Pulsar's clients write them;
these tests decode them to check what they name.
"""

from __future__ import annotations

import base64
import datetime
import json
from typing import Any

import aiohttp
import pytest

from broker.pulsar_api import MessageIdData
from tests.conftest import Client, LiveBroker, b64, unb64
from tests.harness import eventually_async

TOPIC = "public/default/ws"
SUB = "sub"
DEADLINE_S = 20.0

Socket = aiohttp.ClientWebSocketResponse


# ---------------------------------------------------------------------- helpers


def ws_url(client: Client, path: str) -> str:
    return client.base_url.replace("http://", "ws://", 1) + path


def producer_path(topic: str = TOPIC, **query: Any) -> str:
    return with_query(f"/ws/v2/producer/persistent/{topic}", query)


def consumer_path(topic: str = TOPIC, sub: str = SUB, **query: Any) -> str:
    return with_query(f"/ws/v2/consumer/persistent/{topic}/{sub}", query)


def reader_path(topic: str = TOPIC, **query: Any) -> str:
    return with_query(f"/ws/v2/reader/persistent/{topic}", query)


def with_query(path: str, query: dict[str, Any]) -> str:
    if not query:
        return path
    return path + "?" + "&".join(f"{key}={value}" for key, value in query.items())


def connect(client: Client, path: str) -> Any:
    return client.session.ws_connect(ws_url(client, path))


async def receive(ws: Socket) -> dict[str, Any]:
    """The next JSON frame (failing at the deadline rather than hanging)."""
    message = await ws.receive(timeout=DEADLINE_S)
    assert message.type == aiohttp.WSMsgType.TEXT, message
    return dict(json.loads(message.data))


async def receive_many(ws: Socket, count: int) -> list[dict[str, Any]]:
    return [await receive(ws) for _ in range(count)]


async def closed_with(ws: Socket) -> tuple[int | None, str]:
    """Wait for the server to close the session: its close code and reason."""
    message = await ws.receive(timeout=DEADLINE_S)
    assert message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED), message
    return ws.close_code, str(message.extra or "")


async def send(ws: Socket, **command: Any) -> None:
    await ws.send_str(json.dumps(command))


async def produce_ws(ws: Socket, payload: str, **fields: Any) -> dict[str, Any]:
    await send(ws, payload=b64(payload), **fields)
    return await receive(ws)


def message_id(text: str) -> tuple[int, int, int, int]:
    """(ledger, entry, batch index, batch size) of a WebSocket message id."""
    data = MessageIdData.FromString(base64.b64decode(text))
    return data.ledgerId, data.entryId, data.batch_index, data.batch_size


def encoded_id(ledger: int, entry: int, batch_index: int = -1, batch_size: int = 0) -> str:
    data = MessageIdData(ledgerId=ledger, entryId=entry)
    if batch_index >= 0:
        data.batch_index = batch_index
        data.batch_size = batch_size
    return base64.b64encode(data.SerializeToString()).decode()


async def subscription_stats(client: Client, sub: str = SUB) -> dict[str, Any]:
    return dict((await client.stats(TOPIC))["subscriptions"][sub])


async def backlog_is(client: Client, count: int, sub: str = SUB) -> None:
    async def probe() -> bool:
        stats = await subscription_stats(client, sub)
        return bool(stats["msgBacklog"] == count and stats["unackedMessages"] == 0)

    await eventually_async(probe)


async def dispatched(client: Client, count: int, sub: str = SUB) -> None:
    """Wait until the broker has handed ``count`` messages to the subscription's
    consumers (into their receiver queues, sent to the socket or not)."""

    async def probe() -> bool:
        consumers = (await subscription_stats(client, sub))["consumers"]
        return sum(c["msgOutCounter"] for c in consumers) >= count

    await eventually_async(probe)


async def entries_added(client: Client) -> int:
    return int((await client.internal_stats(TOPIC))["entriesAddedCounter"])


async def next_frame_is_end_of_topic(ws: Socket) -> None:
    """Ask ``isEndOfTopic``: the next frame must be its answer, so no message was
    pushed before it."""
    await send(ws, type="isEndOfTopic")
    assert await receive(ws) == {"endOfTopic": False}


# ---------------------------------------------------------------------- produce, consume, ack


async def test_pulsars_documented_flow_produce_consume_ack(live_broker: LiveBroker) -> None:
    client = await live_broker()
    async with (
        connect(client, consumer_path(subscriptionType="Shared")) as consumer,
        connect(client, producer_path()) as producer,
    ):
        answer = await produce_ws(
            producer, "Hello World", properties={"key1": "value1"}, context="1", key="k1"
        )
        assert answer["result"] == "ok" and answer["context"] == "1", answer
        last = (await client.internal_stats(TOPIC))["lastConfirmedEntry"]
        ledger, entry, batch_index, _ = message_id(answer["messageId"])
        assert f"{ledger}:{entry}" == last and batch_index == -1

        pushed = await receive(consumer)
        assert pushed["messageId"] == answer["messageId"]
        assert unb64(pushed["payload"]) == b"Hello World"
        assert pushed["properties"] == {"key1": "value1"}
        assert pushed["key"] == "k1"
        assert pushed["redeliveryCount"] == 0
        published = datetime.datetime.fromisoformat(pushed["publishTime"])
        assert published.tzinfo is not None
        assert "eventTime" not in pushed  # none was set

        await send(consumer, messageId=pushed["messageId"])
        await backlog_is(client, 0)
    # the ack was durable: a new consumer of the subscription gets the next message only
    async with (
        connect(client, consumer_path()) as consumer,
        connect(client, producer_path()) as producer,
    ):
        second = await produce_ws(producer, "second", eventTime="2024-05-01T12:00:00.250+02:00")
        pushed = await receive(consumer)
        assert unb64(pushed["payload"]) == b"second"
        assert pushed["messageId"] == second["messageId"]
        assert pushed["eventTime"] == "2024-05-01T10:00:00.250Z"


async def test_a_batching_producer_stores_one_entry_and_each_message_has_its_id(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    query = {
        "batchingEnabled": "true",
        "batchingMaxMessages": 3,
        "batchingMaxPublishDelay": 600_000,  # the batch goes when it is full
    }
    async with (
        connect(client, consumer_path(subscriptionInitialPosition="Earliest")) as consumer,
        connect(client, producer_path(**query)) as producer,
    ):
        await send(producer, payload=b64("m0"), context="0", key="k0")
        # a bad message answered meanwhile: the first one waits for the batch to fill
        await producer.send_str("{not json")
        assert (await receive(producer))["result"] == "send-error:3"
        for index in (1, 2):
            await send(producer, payload=b64(f"m{index}"), context=str(index), key=f"k{index}")
        answers = await receive_many(producer, 3)
        assert [a["result"] for a in answers] == ["ok"] * 3
        assert [a["context"] for a in answers] == ["0", "1", "2"]
        ids = [message_id(a["messageId"]) for a in answers]
        assert {(ledger, entry) for ledger, entry, _, _ in ids} == {ids[0][:2]}
        assert [(index, size) for _, _, index, size in ids] == [(0, 3), (1, 3), (2, 3)]
        assert await entries_added(client) == 1

        pushed = await receive_many(consumer, 3)
        assert [unb64(m["payload"]) for m in pushed] == [b"m0", b"m1", b"m2"]
        assert [m["key"] for m in pushed] == ["k0", "k1", "k2"]
        assert [m["messageId"] for m in pushed] == [a["messageId"] for a in answers]
        # acks of messages 0 and 2 only: the batch is not acknowledged yet
        await send(consumer, messageId=pushed[0]["messageId"])
        await send(consumer, messageId=pushed[2]["messageId"])
        await next_frame_is_end_of_topic(consumer)
    # closing handed the batch back; only its unacknowledged message comes again
    async with connect(client, consumer_path()) as consumer:
        again = await receive(consumer)
        assert again["messageId"] == answers[1]["messageId"]
        assert again["redeliveryCount"] == 1
        await send(consumer, messageId=again["messageId"])
        await backlog_is(client, 0)


async def test_batches_hold_at_most_batching_max_messages_when_sends_pile_up(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    query = {"batchingEnabled": "true", "batchingMaxMessages": 2, "batchingMaxPublishDelay": 0}
    async with connect(client, producer_path(**query)) as producer:
        # a slow storage write: the sends behind it queue up and are written together
        status, body = await client.request(
            "PUT", "/admin/v2/brokerlab/faults", json={"operation": "addEntries", "delayMs": 200}
        )
        assert status == 204, body
        for index in range(7):
            await send(producer, payload=b64(f"p{index}"), context=str(index))
        answers = await receive_many(producer, 7)
    assert [a["result"] for a in answers] == ["ok"] * 7
    assert [a["context"] for a in answers] == [str(i) for i in range(7)]
    ids = [message_id(a["messageId"]) for a in answers]
    entries = {(ledger, entry): size for ledger, entry, _, size in ids}
    assert all(1 <= size <= 2 for size in entries.values()), ids
    assert await entries_added(client) == len(entries)


async def test_a_negative_ack_redelivers_the_message_with_one_more_redelivery(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    path = consumer_path(subscriptionType="Shared", negativeAckRedeliveryDelay=0)
    async with connect(client, path) as consumer, connect(client, producer_path()) as producer:
        answer = await produce_ws(producer, "retry me")
        first = await receive(consumer)
        assert first["redeliveryCount"] == 0
        await send(consumer, type="negativeAcknowledge", messageId=first["messageId"])
        second = await receive(consumer)
        assert second["messageId"] == answer["messageId"]
        assert unb64(second["payload"]) == b"retry me"
        assert second["redeliveryCount"] == 1
        await send(consumer, messageId=second["messageId"])
        await backlog_is(client, 0)


# ---------------------------------------------------------------------- flow control


async def test_push_mode_stops_at_receiver_queue_size_unacked_messages(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    async with connect(client, consumer_path(receiverQueueSize=2)) as consumer:
        await client.produce(TOPIC, [f"m{i}" for i in range(5)])
        first_two = await receive_many(consumer, 2)
        # two more wait in the receiver queue; none of them is pushed before an ack
        await dispatched(client, 4)
        await next_frame_is_end_of_topic(consumer)
        await send(consumer, messageId=first_two[0]["messageId"])
        third = await receive(consumer)
        assert unb64(third["payload"]) == b"m2"
        await next_frame_is_end_of_topic(consumer)
        # a negative ack frees room in the window too
        await send(consumer, type="negativeAcknowledge", messageId=first_two[1]["messageId"])
        assert unb64((await receive(consumer))["payload"]) == b"m3"


async def test_pull_mode_pushes_only_the_permitted_messages(live_broker: LiveBroker) -> None:
    client = await live_broker()
    async with connect(client, consumer_path(pullMode="true")) as consumer:
        await client.produce(TOPIC, ["a", "b", "c"])
        await dispatched(client, 3)  # in the receiver queue, waiting for permits
        await next_frame_is_end_of_topic(consumer)
        await send(consumer, type="permit", permitMessages=2)
        got = await receive_many(consumer, 2)
        assert [unb64(m["payload"]) for m in got] == [b"a", b"b"]
        # acks grant nothing in pull mode
        for pushed in got:
            await send(consumer, messageId=pushed["messageId"])
        await next_frame_is_end_of_topic(consumer)
        await send(consumer, type="permit", permitMessages=1)
        last = await receive(consumer)
        assert unb64(last["payload"]) == b"c"
        await send(consumer, messageId=last["messageId"])
        await backlog_is(client, 0)


@pytest.mark.parametrize("subscription_type", ["Exclusive", "Shared"])
async def test_an_ack_timeout_redelivers_even_when_the_window_is_full(
    live_broker: LiveBroker, subscription_type: str
) -> None:
    client = await live_broker()
    path = consumer_path(
        subscriptionType=subscription_type, receiverQueueSize=1, ackTimeoutMillis=1000
    )
    async with connect(client, path) as consumer:
        await client.produce(TOPIC, ["unacked"])
        first = await receive(consumer)
        # never acked: taken back after the ack timeout, which makes room for it again
        again = await receive(consumer)
        assert again["messageId"] == first["messageId"]
        assert again["redeliveryCount"] == 1
        await send(consumer, messageId=again["messageId"])
        await backlog_is(client, 0)


async def test_in_pull_mode_another_session_of_the_subscription_can_ack(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    path = consumer_path(subscriptionType="Shared", pullMode="true")
    async with connect(client, path) as receiving:
        await client.produce(TOPIC, ["x"])
        await send(receiving, type="permit", permitMessages=1)
        pushed = await receive(receiving)
        async with connect(client, path) as acking:
            await send(acking, messageId=pushed["messageId"])
            await backlog_is(client, 0)


async def test_unsubscribe_deletes_the_subscription_unless_others_are_connected(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    path = consumer_path(subscriptionType="Shared")
    async with connect(client, path) as first, connect(client, path) as second:
        await send(first, type="unsubscribe")
        code, reason = await closed_with(first)
        assert code == 4008 and "other consumers" in reason, (code, reason)
        await send(second, type="unsubscribe")
        code, _ = await closed_with(second)
        assert code == aiohttp.WSCloseCode.OK
    assert (await client.stats(TOPIC))["subscriptions"] == {}


# ---------------------------------------------------------------------- reader


async def test_a_reader_from_earliest_reads_everything_and_leaves_no_subscription(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    ids = await client.produce(TOPIC, ["r0", "r1", "r2"])
    async with connect(client, reader_path(messageId="earliest", receiverQueueSize=1)) as reader:
        for index in range(3):
            pushed = await receive(reader)
            assert unb64(pushed["payload"]) == f"r{index}".encode()
            ledger, entry, _, _ = message_id(pushed["messageId"])
            assert f"{ledger}:{entry}" == ids[index]
            # a reader's ack only makes room for the next message (receiverQueueSize 1)
            await send(reader, messageId=pushed["messageId"])
        (name,) = (await client.stats(TOPIC))["subscriptions"]
        assert name.startswith("reader-")

    async def no_subscription() -> bool:
        return not (await client.stats(TOPIC))["subscriptions"]

    await eventually_async(no_subscription)


async def test_a_reader_starts_after_the_message_id_it_is_given(live_broker: LiveBroker) -> None:
    client = await live_broker()
    ids = await client.produce(TOPIC, ["r0", "r1", "r2"])
    ledger, entry = map(int, ids[0].split(":"))
    async with connect(client, reader_path(messageId=encoded_id(ledger, entry))) as reader:
        got = await receive_many(reader, 2)
        assert [unb64(m["payload"]) for m in got] == [b"r1", b"r2"]
    # and after a message of a batch: the rest of that batch, then what follows
    batch = {"batchingEnabled": "true", "batchingMaxMessages": 3, "batchingMaxPublishDelay": 600000}
    async with connect(client, producer_path(**batch)) as producer:
        for index in range(3):
            await send(producer, payload=b64(f"b{index}"))
        answers = await receive_many(producer, 3)
    await client.produce(TOPIC, ["after"])
    async with connect(client, reader_path(messageId=answers[0]["messageId"])) as reader:
        got = await receive_many(reader, 3)
        assert [unb64(m["payload"]) for m in got] == [b"b1", b"b2", b"after"]


async def test_a_reader_from_latest_gets_only_new_messages(live_broker: LiveBroker) -> None:
    client = await live_broker()
    await client.produce(TOPIC, ["old"])
    async with connect(client, reader_path()) as reader:
        await client.produce(TOPIC, ["new"])
        assert unb64((await receive(reader))["payload"]) == b"new"


# ---------------------------------------------------------------------- bad input


async def test_bad_json_or_bad_base64_gets_pulsars_error_result_and_stores_nothing(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    async with connect(client, producer_path()) as producer:
        await producer.send_str("{not json")
        answer = await receive(producer)
        assert answer["result"] == "send-error:3", answer
        assert answer["errorMsg"]
        await producer.send_str("[1, 2]")
        assert (await receive(producer))["result"] == "send-error:3"
        await send(producer, payload="not base64!", context="c1")
        answer = await receive(producer)
        assert answer["result"] == "send-error:7" and answer["context"] == "c1", answer
        await send(producer, context="c2")  # no payload
        assert (await receive(producer))["result"] == "send-error:7"
        await send(producer, payload=b64("x"), properties={"a": 1}, context="c3")
        answer = await receive(producer)
        assert answer["result"] == "send-error:3" and answer["context"] == "c3", answer
        await send(producer, payload=b64("x"), eventTime="yesterday")
        assert (await receive(producer))["result"] == "send-error:7"
        assert await entries_added(client) == 0
        # the session goes on
        assert (await produce_ws(producer, "fine"))["result"] == "ok"
        assert await entries_added(client) == 1


@pytest.mark.parametrize("batching", [False, True], ids=["unbatched", "batched"])
async def test_a_payload_over_max_message_size_is_refused_and_the_session_goes_on(
    live_broker: LiveBroker, batching: bool
) -> None:
    """maxMessageSize holds for every payload, the WebSocket producer's too (as HTTP's
    413 and the binary protocol's SEND_ERROR): one byte over is that message's error,
    stored nowhere; at the limit it is stored."""
    limit = 4096
    client = await live_broker(maxMessageSize=limit)
    path = producer_path(batchingEnabled=str(batching).lower())
    async with connect(client, path) as producer:
        await send(producer, payload=base64.b64encode(bytes(limit + 1)).decode(), context="big")
        answer = await receive(producer)
        assert answer["result"].startswith("send-error:") and answer["context"] == "big"
        assert "maxMessageSize" in answer["errorMsg"], answer
        await send(producer, payload=base64.b64encode(bytes(limit)).decode(), context="at")
        answer = await receive(producer)
        assert (answer["result"], answer["context"]) == ("ok", "at"), answer
    assert await entries_added(client) == 1
    stats = await client.stats(TOPIC)
    assert stats["msgInCounter"] == 1


@pytest.mark.parametrize(
    "command",
    [
        "{not json",
        json.dumps({"messageId": "%%%"}),
        json.dumps({"messageId": b64("junk")}),
        json.dumps({"messageId": ""}),
        json.dumps({"messageId": b64(b"\x10\x03")}),  # an entry id without a ledger id
        json.dumps({"type": "permit"}),
    ],
    ids=["bad-json", "bad-base64", "not-a-message-id", "empty-id", "no-ledger-id", "no-permits"],
)
async def test_a_consumer_command_pulsar_cannot_read_closes_the_session_and_acks_nothing(
    live_broker: LiveBroker, command: str
) -> None:
    client = await live_broker()
    async with connect(client, consumer_path()) as consumer:
        await client.produce(TOPIC, ["keep me"])
        pushed = await receive(consumer)
        await consumer.send_str(command)
        code, reason = await closed_with(consumer)
        assert code == 4003, (code, reason)
        assert reason.startswith("Failed to de-serialize from JSON")
    async with connect(client, consumer_path()) as consumer:
        again = await receive(consumer)
        assert again["messageId"] == pushed["messageId"]
        assert again["redeliveryCount"] == 1


@pytest.mark.parametrize(
    ("path", "status"),
    [
        (consumer_path(subscriptionType="Bogus"), 400),
        (consumer_path(receiverQueueSize=-1), 400),
        (consumer_path(ackTimeoutMillis=10), 400),
        (consumer_path(deadLetterTopic="dlq"), 400),
        (consumer_path(subscriptionMode="NonDurable"), 400),
        (consumer_path(pullMode="maybe"), 400),
        (producer_path(compressionType="LZ4"), 400),
        (producer_path(encryptionKeys="k"), 400),
        (producer_path(batchingEnabled="true", batchingMaxMessages=0), 400),
        (reader_path(messageId="%%%"), 400),
        ("/ws/v2/producer/persistent/public/default/bad..name%20x", 400),
    ],
)
async def test_a_handshake_with_bad_parameters_is_refused_before_anything_changes(
    live_broker: LiveBroker, path: str, status: int
) -> None:
    client = await live_broker()
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await client.session.ws_connect(ws_url(client, path))
    assert refused.value.status == status
    code, _ = await client.request("GET", f"/admin/v2/persistent/{TOPIC}/stats")
    assert code == 404  # no topic was created


async def test_a_plain_http_request_to_a_websocket_route_is_a_400(live_broker: LiveBroker) -> None:
    client = await live_broker()
    status, body = await client.request("GET", consumer_path())
    assert status == 400 and body["code"] == "invalid-request", body
    code, _ = await client.request("GET", f"/admin/v2/persistent/{TOPIC}/stats")
    assert code == 404


async def test_a_second_exclusive_consumer_is_refused_with_409(live_broker: LiveBroker) -> None:
    client = await live_broker()
    async with connect(client, consumer_path()):
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await client.session.ws_connect(ws_url(client, consumer_path()))
        assert refused.value.status == 409


async def upgrade_refused(client: Client, path: str) -> tuple[int, dict[str, Any]]:
    """Open a WebSocket session that the broker refuses: its status and error body."""
    headers = {
        "Connection": "Upgrade",
        "Upgrade": "websocket",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": base64.b64encode(b"limits-test-key!").decode(),
    }
    async with client.session.get(client.base_url + path, headers=headers) as response:
        assert response.status != 101, "the broker accepted the session"
        return response.status, dict(await response.json())


async def test_producers_over_max_producers_per_topic_are_refused_409_until_one_closes(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker(maxProducersPerTopic=2)
    async with connect(client, producer_path()) as first:
        async with connect(client, producer_path()):
            status, body = await upgrade_refused(client, producer_path())
            assert (status, body["code"]) == (409, "conflict"), body
            assert "maxProducersPerTopic=2" in body["reason"], body
            assert (await produce_ws(first, "admitted"))["result"] == "ok"
            async with connect(client, producer_path("public/default/ws-other")) as other:
                assert (await produce_ws(other, "another topic"))["result"] == "ok"

        async def admitted() -> bool:
            # the broker counts a session out once it has seen it close
            try:
                async with connect(client, producer_path()) as again:
                    return bool((await produce_ws(again, "in its place"))["result"] == "ok")
            except aiohttp.WSServerHandshakeError as refused:
                assert refused.status == 409
                return False

        await eventually_async(admitted)
    assert (await client.stats(TOPIC))["msgInCounter"] == 2


async def test_a_producer_session_outlives_an_unload_and_is_counted_on_the_reloaded_topic(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker(maxProducersPerTopic=1)
    async with connect(client, producer_path()) as producer:
        assert (await produce_ws(producer, "before"))["result"] == "ok"
        status, body = await client.request("POST", "/admin/v2/namespaces/public/default/unload")
        assert status == 204, body
        assert (await produce_ws(producer, "after"))["result"] == "ok"  # on the new load
        status, body = await upgrade_refused(client, producer_path())
        assert (status, body["code"]) == (409, "conflict"), body


async def test_with_deduplication_a_named_producer_goes_on_from_its_last_sequence_id(
    live_broker: LiveBroker,
) -> None:
    """The session numbers its messages; on a topic that deduplicates, a session of the
    same producer name goes on after the highest id its name stored (as Pulsar's client
    under its WebSocket service), and one told to start lower sends duplicates, answered
    with message id -1:-1 and not stored."""
    client = await live_broker(brokerDeduplicationEnabled=True)
    async with connect(client, producer_path(producerName="ws-app")) as producer:
        for index in range(3):  # sequence ids 0, 1, 2
            assert (await produce_ws(producer, f"m{index}"))["result"] == "ok"
    async with connect(client, producer_path(producerName="ws-app", initialSequenceId=0)) as again:
        answer = await produce_ws(again, "m1-again")  # sequence id 1: stored already
    assert answer["result"] == "ok"
    minus_one = (1 << 64) - 1
    assert message_id(answer["messageId"])[:2] == (minus_one, minus_one)
    assert await entries_added(client) == 3
    async with connect(client, producer_path(producerName="ws-app")) as producer:
        answer = await produce_ws(producer, "m3")  # sequence id 3: new
    ledger, entry, _, _ = message_id(answer["messageId"])
    assert f"{ledger}:{entry}" == (await client.internal_stats(TOPIC))["lastConfirmedEntry"]
    assert await entries_added(client) == 4


# ---------------------------------------------------------------------- broker side


async def test_unloading_the_namespace_ends_consumer_sessions_with_service_restart(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    async with connect(client, consumer_path()) as consumer:
        status, body = await client.request("POST", "/admin/v2/namespaces/public/default/unload")
        assert status == 204, body
        code, _ = await closed_with(consumer)
        assert code == aiohttp.WSCloseCode.SERVICE_RESTART


async def test_a_send_not_stored_within_send_timeout_fails_and_the_session_goes_on(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    async with connect(client, producer_path(sendTimeoutMillis=1)) as producer:
        status, body = await client.request(
            "PUT",
            "/admin/v2/brokerlab/faults",
            # far beyond the send timeout, and short: a broker's stop waits for the adds
            # in flight (a 600 s delay held the teardown for ten minutes)
            json={"operation": "addEntries", "delayMs": 3_000},
        )
        assert status == 204, body
        answer = await produce_ws(producer, "slow", context="s")
        assert answer["result"] == "send-error:8" and answer["context"] == "s", answer
        assert "timed out" in answer["errorMsg"]


async def test_the_websocket_api_is_off_when_disabled(live_broker: LiveBroker) -> None:
    client = await live_broker(webSocketServiceEnabled=False)
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await client.session.ws_connect(ws_url(client, consumer_path()))
    assert refused.value.status == 404


async def test_websocket_producers_and_consumers_show_in_the_topic_stats(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    async with (
        connect(client, consumer_path(consumerName="watcher")) as consumer,
        connect(client, producer_path(producerName="ws-writer")) as producer,
    ):
        await produce_ws(producer, "counted")
        await receive(consumer)
        stats = await client.stats(TOPIC)
        [publisher] = stats["publishers"]
        assert publisher["producerName"] == "ws-writer"
        assert publisher["address"].startswith("/127.0.0.1:")
        [watcher] = stats["subscriptions"][SUB]["consumers"]
        assert watcher["consumerName"] == "watcher"
        assert watcher["address"].startswith("/127.0.0.1:")
        assert watcher["connectedSince"].endswith("Z")
