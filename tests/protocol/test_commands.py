"""Every command a 3.x/4.x client sends is answered on the connection it came by: the ones
brokerlab does not serve (transactions, topic-list watchers, schemas) with Pulsar's error
for them, never by closing a connection other producers and consumers share; an ACK that
carries a request id (ack receipts) with ACK_RESPONSE."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pulsar
import pytest
from pulsar.schema import AvroSchema, Integer, Record, String

from broker.pulsar_api import ACK_CUMULATIVE, BaseCommand, ServerError, Type
from tests.harness import ServedBroker, eventually, new_topic
from tests.protocol.raw import RawConnection, entry, flow, frame, producer, send, send_frame

pytestmark = pytest.mark.slow

_request_ids = itertools.count(1000)


@pytest.fixture
def raw(raw: RawConnection) -> RawConnection:
    """The package's raw connection, past its handshake."""
    raw.handshake()
    return raw


def request(kind: int, field: str, **values: Any) -> tuple[Any, int]:
    """A request of type ``kind`` (its body in ``field``) with a fresh request id."""
    request_id = next(_request_ids)
    command = BaseCommand(type=kind)
    body = getattr(command, field)
    body.request_id = request_id
    for name, value in values.items():
        setattr(body, name, value)
    return command, request_id


def error_of(answer: Any) -> tuple[int, int, str]:
    """(request id, error code, message) of an ERROR."""
    assert answer.type == Type.ERROR, answer
    return answer.error.request_id, answer.error.error, answer.error.message


REFUSED: list[Any] = [
    pytest.param(Type.NEW_TXN, "newTxn", {}, ServerError.NotAllowedError, id="NEW_TXN"),
    pytest.param(
        Type.TC_CLIENT_CONNECT_REQUEST,
        "tcClientConnectRequest",
        {},
        ServerError.NotAllowedError,
        id="TC_CLIENT_CONNECT_REQUEST",
    ),
    pytest.param(
        Type.ADD_PARTITION_TO_TXN,
        "addPartitionToTxn",
        {},
        ServerError.NotAllowedError,
        id="ADD_PARTITION_TO_TXN",
    ),
    pytest.param(
        Type.ADD_SUBSCRIPTION_TO_TXN,
        "addSubscriptionToTxn",
        {},
        ServerError.NotAllowedError,
        id="ADD_SUBSCRIPTION_TO_TXN",
    ),
    pytest.param(Type.END_TXN, "endTxn", {}, ServerError.NotAllowedError, id="END_TXN"),
    pytest.param(
        Type.WATCH_TOPIC_LIST,
        "watchTopicList",
        {"watcher_id": 1, "namespace": "public/default", "topics_pattern": "raw-.*"},
        ServerError.NotAllowedError,
        id="WATCH_TOPIC_LIST",
    ),
]


@pytest.mark.parametrize(("kind", "field", "values", "code"), REFUSED)
def test_a_request_brokerlab_does_not_serve_gets_pulsars_error_and_the_connection_goes_on(
    broker: ServedBroker,
    raw: RawConnection,
    kind: int,
    field: str,
    values: dict[str, Any],
    code: int,
) -> None:
    topic = new_topic("raw-commands")
    raw.write(frame(producer(topic, 1, 1)))
    raw.expect(Type.PRODUCER_SUCCESS)
    raw.write(send_frame(send(1, 0), entry(b"before", 0)))
    raw.expect(Type.SEND_RECEIPT)

    command, request_id = request(kind, field, **values)
    raw.write(frame(command))
    answer = raw.read()
    assert answer is not None, "the broker closed the connection"
    assert error_of(answer)[:2] == (request_id, code)

    # the producer sharing the connection goes on, on the same connection
    raw.write(send_frame(send(1, 1), entry(b"after", 1)))
    assert raw.expect(Type.SEND_RECEIPT).send_receipt.sequence_id == 1
    assert "closing pulsar connection from " + raw.local not in broker.log()


def test_closing_a_topic_list_watcher_is_answered_with_success(raw: RawConnection) -> None:
    command, request_id = request(Type.WATCH_TOPIC_LIST_CLOSE, "watchTopicListClose")
    command.watchTopicListClose.watcher_id = 1
    raw.write(frame(command))
    assert raw.expect(Type.SUCCESS).success.request_id == request_id


# ---------------------------------------------------------------------- schemas, official client


class Reading(Record):
    sensor = String()
    value = Integer()


def test_an_avro_consumer_reads_on_while_a_bystander_producer_shares_its_connection(
    broker: ServedBroker,
) -> None:
    # value() asks the broker for the writer schema (GET_SCHEMA) on the connection the
    # bystander shares. Before, the broker closed the connection: value() waited for the
    # client's operation timeout and every producer on that connection reconnected.
    topic = new_topic("avro-bystander")
    mark = broker.mark()
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(
            topic, "s", schema=AvroSchema(Reading), initial_position=pulsar.InitialPosition.Earliest
        )
        producer = client.create_producer(topic, schema=AvroSchema(Reading))
        bystander = client.create_producer(new_topic("bystander"))
        bystander.send(b"first")
        producer.send(Reading(sensor="t1", value=21))
        message = consumer.receive(20_000)
        value = message.value()
        assert (value.sensor, value.value) == ("t1", 21)
        bystander.send(b"second")
        assert bystander.is_connected()
    finally:
        client.close()
    log = broker.log(since=mark)
    assert "closing pulsar connection" not in log
    assert "unsupported command" not in log


# ---------------------------------------------------------------------- ack receipts


def subscribe(
    topic: str, consumer_id: int, sub_type: int = 0, initial_position: int = 1
) -> tuple[Any, int]:
    command, request_id = request(
        Type.SUBSCRIBE,
        "subscribe",
        topic=topic,
        subscription="receipts",
        subType=sub_type,
        consumer_id=consumer_id,
        initialPosition=initial_position,
    )
    return command, request_id


def ack(consumer_id: int, ids: list[Any], request_id: int | None, cumulative: bool = False) -> Any:
    command = BaseCommand(type=Type.ACK)
    body = command.ack
    body.consumer_id = consumer_id
    body.ack_type = ACK_CUMULATIVE if cumulative else 0
    for message_id in ids:
        body.message_id.add(ledgerId=message_id.ledgerId, entryId=message_id.entryId)
    if request_id is not None:
        body.request_id = request_id
    return command


def produce_and_receive(raw: RawConnection, topic: str, count: int, sub_type: int) -> list[Any]:
    """``count`` messages stored through a producer on ``raw`` and given to consumer 1 of
    subscription ``receipts``: their message ids."""
    raw.write(frame(producer(topic, 1, 1)))
    raw.expect(Type.PRODUCER_SUCCESS)
    for sequence_id in range(count):
        raw.write(send_frame(send(1, sequence_id), entry(b"m%d" % sequence_id, sequence_id)))
        raw.expect(Type.SEND_RECEIPT)
    command, request_id = subscribe(topic, 1, sub_type)
    raw.write(frame(command))
    assert raw.expect(Type.SUCCESS).success.request_id == request_id
    raw.write(frame(flow(1, 100)))
    ids = []
    while len(ids) < count:
        message = raw.read()
        assert message is not None
        if message.type == Type.MESSAGE:
            ids.append(message.message.message_id)
    return ids


def backlog(broker: ServedBroker, topic: str) -> Callable[[], int]:
    path = topic.removeprefix("persistent://")
    return lambda: broker.ok("GET", f"/admin/v2/persistent/{path}/stats")["subscriptions"][
        "receipts"
    ]["msgBacklog"]


def test_an_ack_with_a_request_id_is_answered_with_ack_response(
    broker: ServedBroker, raw: RawConnection
) -> None:
    topic = new_topic("receipts")
    ids = produce_and_receive(raw, topic, 3, sub_type=1)  # Shared

    raw.write(frame(ack(1, ids[:1], 77)))
    response = raw.expect(Type.ACK_RESPONSE).ackResponse
    assert (response.consumer_id, response.request_id) == (1, 77)
    assert not response.HasField("error")
    assert backlog(broker, topic)() == 2

    # a cumulative ack on Shared: Pulsar ignores it, and still answers success
    raw.write(frame(ack(1, ids[2:], 78, cumulative=True)))
    response = raw.expect(Type.ACK_RESPONSE).ackResponse
    assert response.request_id == 78 and not response.HasField("error")
    assert backlog(broker, topic)() == 2

    # an ack without a request id is not answered: the next answer is the PONG
    raw.write(frame(ack(1, ids[1:2], None)))
    ping = BaseCommand(type=Type.PING)
    ping.ping.SetInParent()
    raw.write(frame(ping))
    raw.expect(Type.PONG)
    eventually(lambda: backlog(broker, topic)() == 1, "the unanswered ack to be applied")


def test_an_ack_that_cannot_be_made_durable_is_answered_with_its_error(
    broker: ServedBroker, raw: RawConnection
) -> None:
    topic = new_topic("receipts-fault")
    ids = produce_and_receive(raw, topic, 2, sub_type=1)  # Shared
    broker.ok("PUT", "/admin/v2/brokerlab/faults", {"operation": "metadataPut", "errorRate": 1.0})
    try:
        raw.write(frame(ack(1, ids[:1], 90)))
        response = raw.expect(Type.ACK_RESPONSE).ackResponse
    finally:
        broker.ok("DELETE", "/admin/v2/brokerlab/faults")
    assert response.request_id == 90
    assert response.error == ServerError.PersistenceError and response.message, response
    # the ack had no effect: the message is still held, and an ack now goes through
    assert backlog(broker, topic)() == 2
    raw.write(frame(ack(1, ids[:1], 91)))
    response = raw.expect(Type.ACK_RESPONSE).ackResponse
    assert response.request_id == 91 and not response.HasField("error")
    assert backlog(broker, topic)() == 1


def test_a_seek_without_a_target_gets_pulsars_metadata_error(raw: RawConnection) -> None:
    command, request_id = request(Type.SEEK, "seek", consumer_id=1)
    raw.write(frame(command))
    answer = raw.expect(Type.ERROR).error
    assert (answer.request_id, answer.error) == (request_id, ServerError.MetadataError)
    ping = BaseCommand(type=Type.PING)
    ping.ping.SetInParent()
    raw.write(frame(ping))
    raw.expect(Type.PONG)
