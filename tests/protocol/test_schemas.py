"""Schemas with the official client against a real broker process, as a tutorial app
uses them: an Avro topic evolving (a new field with a default accepted, a new required
field refused with IncompatibleSchema under the default FULL strategy), consumers
decoding each message with its writer's schema (GET_SCHEMA answered, on the connection
other producers share, which stays up), a String producer refused on a JSON topic, and
the schema still there after a restart."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import _pulsar
import pulsar
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from pulsar.schema import (
    AvroSchema,
    Integer,
    JsonSchema,
    ProtobufNativeSchema,
    Record,
    Schema,
    String,
    StringSchema,
)

from broker.pulsar_api import BaseCommand, ServerError, Type
from tests.conftest import ServedBrokerFactory
from tests.harness import ServedBroker, http_request, new_topic, persistent
from tests.protocol.test_bad_frames import RawConnection, frame, ping, producer

pytestmark = pytest.mark.slow

RECEIVE_MS = 20_000


def user_v1() -> type[Record]:
    class User(Record):
        name = String(required=True)

    return User


def user_v2() -> type[Record]:
    """v1 and an optional field with a default: compatible both ways."""

    class User(Record):
        name = String(required=True)
        email = String(required_default=True)

    return User


def user_v3() -> type[Record]:
    """v1 and a required field: v3 cannot read v1's data (BACKWARD breaks)."""

    class User(Record):
        name = String(required=True)
        age = Integer(required=True)

    return User


def get_schema(broker: ServedBroker, topic: str, tail: str = "/schema") -> Any:
    """The answer of ``GET /admin/v2/schemas/{topic}{tail}``."""
    return http_request(broker.http_urls[0], "GET", f"/admin/v2/schemas/{topic}{tail}")


def test_avro_topic_evolves_compatibly_and_refuses_a_new_required_field(
    broker: ServedBroker, client: pulsar.Client
) -> None:
    topic = new_topic("avro")
    v1, v2, v3 = user_v1(), user_v2(), user_v3()
    consumer = client.subscribe(persistent(topic), "app", schema=AvroSchema(v2))
    old = client.create_producer(persistent(topic), schema=AvroSchema(v1))
    old.send(v1(name="ada"))
    new = client.create_producer(persistent(topic), schema=AvroSchema(v2))  # accepted
    new.send(v2(name="grace", email="g@example.com"))

    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(persistent(topic), schema=AvroSchema(v3))

    # each message decodes with its writer's schema, fetched from the broker by version
    first = consumer.receive(RECEIVE_MS)
    second = consumer.receive(RECEIVE_MS)
    assert (first.value().name, first.value().email) == ("ada", None)
    assert (second.value().name, second.value().email) == ("grace", "g@example.com")
    # the versions the producers stamped (8 bytes, big-endian, as Pulsar's): the
    # consumer came to the idle topic first, so its v2 became version 0 and v1 version 1
    versions = [m.schema_version().encode("latin-1") for m in (first, second)]
    assert versions == [(1).to_bytes(8, "big"), (0).to_bytes(8, "big")], versions

    answer = get_schema(broker, topic, "/schemas")
    assert answer.status == 200
    stored = answer.body["getSchemaResponses"]
    assert [v["version"] for v in stored] == [0, 1]  # the refused v3 was not stored
    assert [v["type"] for v in stored] == ["AVRO", "AVRO"]
    assert [len(json.loads(v["data"])["fields"]) for v in stored] == [2, 1]


def test_a_schema_lookup_leaves_the_shared_connection_up(
    broker: ServedBroker, client: pulsar.Client
) -> None:
    """GET_SCHEMA travels on the connection the client shares with its other producers
    and consumers: it is answered, and nobody on it reconnects."""
    topic, bystander_topic = new_topic("decoded"), new_topic("bystander")
    v1 = user_v1()
    bystander = client.create_producer(persistent(bystander_topic))
    watcher = client.subscribe(persistent(bystander_topic), "watch")
    consumer = client.subscribe(persistent(topic), "app", schema=AvroSchema(v1))
    producer = client.create_producer(persistent(topic), schema=AvroSchema(v1))
    lines_before = len(broker.output)
    for index in range(3):
        producer.send(v1(name=f"user-{index}"))
        bystander.send(f"b{index}".encode())
        assert consumer.receive(RECEIVE_MS).value().name == f"user-{index}"
    got = [watcher.receive(RECEIVE_MS).data() for _ in range(3)]
    assert got == [b"b0", b"b1", b"b2"]  # once each: no resend after a reconnect
    log = "".join(broker.output[lines_before:])
    assert "closing pulsar connection" not in log, log


def test_a_string_producer_is_refused_on_a_json_topic(
    broker: ServedBroker, client: pulsar.Client
) -> None:
    topic = new_topic("json")
    v1 = user_v1()
    json_producer = client.create_producer(persistent(topic), schema=JsonSchema(v1))
    json_producer.send(v1(name="ada"))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(persistent(topic), schema=StringSchema())
    # the topic's schema is unchanged: still one JSON version
    answer = get_schema(broker, topic)
    assert (answer.status, answer.body["type"], answer.body["version"]) == (200, "JSON", 0)
    # a consumer reading it as a string is refused too (its type differs)
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(persistent(topic), "strings", schema=StringSchema())


def test_the_schema_survives_a_restart(
    served_broker: ServedBrokerFactory, pulsar_client: Callable[..., Any]
) -> None:
    broker = served_broker()
    topic = new_topic("restart")
    v1, v3 = user_v1(), user_v3()
    client = pulsar_client(broker.service_urls[0])
    client.create_producer(persistent(topic), schema=AvroSchema(v1)).send(v1(name="ada"))
    client.close()
    broker.stop()
    broker.start()
    client = pulsar_client(broker.service_urls[0])
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(persistent(topic), schema=AvroSchema(v3))
    consumer = client.subscribe(
        persistent(topic),
        "late",
        schema=AvroSchema(v1),
        initial_position=pulsar.InitialPosition.Earliest,
    )
    assert consumer.receive(RECEIVE_MS).value().name == "ada"
    answer = get_schema(broker, topic, "/schema/0")
    assert (answer.status, answer.body["type"]) == (200, "AVRO")


class ClientSide(Schema):
    """A client-side schema type (AUTO_CONSUME, AUTO_PUBLISH) over the C++ client, which
    the Python wrapper does not name: bytes in, bytes out."""

    def __init__(self, kind: Any) -> None:
        super().__init__(None, kind, None, kind.name)

    def encode(self, obj: Any) -> Any:
        return obj

    def decode(self, data: Any) -> Any:
        return data


def test_auto_consume_and_auto_publish_take_the_topics_schema(
    broker: ServedBroker, client: pulsar.Client
) -> None:
    """An AUTO_CONSUME consumer takes whatever the topic has (the C++ client sends no
    schema for it: nothing to check); an AUTO_PUBLISH producer publishes with the topic's
    schema, which a typed consumer decodes."""
    topic = persistent(new_topic("auto"))
    v1 = user_v1()
    client.create_producer(topic, schema=JsonSchema(v1)).send(v1(name="ada"))
    auto = client.subscribe(
        topic,
        "auto",
        schema=ClientSide(_pulsar.SchemaType.AUTO_CONSUME),
        initial_position=pulsar.InitialPosition.Earliest,
    )
    typed = client.subscribe(topic, "typed", schema=JsonSchema(v1))
    assert json.loads(auto.receive(RECEIVE_MS).data()) == {"name": "ada"}
    publisher = client.create_producer(topic, schema=ClientSide(_pulsar.SchemaType.AUTO_PUBLISH))
    publisher.send(json.dumps({"name": "bob"}).encode())
    assert typed.receive(RECEIVE_MS).value().name == "bob"
    answer = get_schema(broker, topic.removeprefix("persistent://"), "/schemas")
    assert [v["type"] for v in answer.body["getSchemaResponses"]] == ["JSON"]


def test_a_typed_consumer_is_refused_on_a_schemaless_topic_in_use(
    client: pulsar.Client,
) -> None:
    """A topic with a bytes consumer (or producer, or data) and no schema refuses a
    consumer that brings one, as Pulsar does; on an idle topic it registers it."""
    busy, idle = persistent(new_topic("schemaless")), persistent(new_topic("idle"))
    client.subscribe(busy, "bytes")
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(busy, "typed", schema=JsonSchema(user_v1()))
    client.subscribe(idle, "typed", schema=JsonSchema(user_v1()))  # registered
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(idle, schema=StringSchema())


def test_partitions_on_two_brokers_share_one_schema(
    served_broker: ServedBrokerFactory, pulsar_client: Callable[..., Any]
) -> None:
    """A partitioned topic's partitions, owned by the brokers of a cluster, register and
    check one schema: one version for all of them, and a refusal on every one."""
    cluster = served_broker(brokers=2)
    topic = new_topic("parts")
    answer = http_request(
        cluster.http_urls[0], "PUT", f"/admin/v2/persistent/{topic}/partitions", body=4
    )
    assert answer.status == 204, answer
    client = pulsar_client(cluster.service_urls[0])
    v1, v2, v3 = user_v1(), user_v2(), user_v3()
    consumer = client.subscribe(persistent(topic), "app", schema=AvroSchema(v2))
    producer = client.create_producer(
        persistent(topic),
        schema=AvroSchema(v1),
        message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
        batching_enabled=False,
    )
    for index in range(8):
        producer.send(v1(name=f"u{index}"))
    names = sorted(consumer.receive(RECEIVE_MS).value().name for _ in range(8))
    assert names == [f"u{index}" for index in range(8)]
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(persistent(topic), schema=AvroSchema(v3))
    # the partition's owner answers (the other broker redirects there): one version
    # registered by the consumer, one by the producers of the four partitions
    answers = [
        http_request(url, "GET", f"/admin/v2/schemas/{topic}-partition-3/schemas")
        for url in cluster.http_urls
    ]
    assert sorted(a.status for a in answers) == [200, 307], answers
    owner = next(a for a in answers if a.status == 200)
    assert [v["version"] for v in owner.body["getSchemaResponses"]] == [0, 1]


def test_without_auto_update_producers_use_the_schemas_an_admin_registered(
    broker: ServedBroker, client: pulsar.Client
) -> None:
    """is_allow_auto_update_schema=false on a namespace: a producer's schema must be one
    the topic has; an admin registers new versions."""
    http = broker.http_urls[0]
    namespace = new_topic("frozen").rsplit("/", 1)[1]  # a fresh namespace name
    assert http_request(http, "PUT", f"/admin/v2/namespaces/public/{namespace}").status == 204
    path = f"/admin/v2/namespaces/public/{namespace}/isAllowAutoUpdateSchema"
    assert http_request(http, "POST", path, body=False).status == 204
    topic = f"public/{namespace}/orders"
    v1, v2 = user_v1(), user_v2()
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(persistent(topic), schema=AvroSchema(v1))
    payload = {"type": "AVRO", "schema": json.dumps(v1.schema()), "properties": {}}
    answer = http_request(http, "POST", f"/admin/v2/schemas/{topic}/schema", body=payload)
    assert (answer.status, answer.body) == (202, {"version": {"version": 0}})
    client.create_producer(persistent(topic), schema=AvroSchema(v1)).send(v1(name="ada"))
    with pytest.raises(pulsar.IncompatibleSchema):  # compatible, but not registered
        client.create_producer(persistent(topic), schema=AvroSchema(v2))


def test_protobuf_native_messages_decode_and_keep_their_root(client: pulsar.Client) -> None:
    topic = persistent(new_topic("protobuf"))
    consumer = client.subscribe(topic, "app", schema=ProtobufNativeSchema(Timestamp))
    producer = client.create_producer(topic, schema=ProtobufNativeSchema(Timestamp))
    producer.send(Timestamp(seconds=1764400000, nanos=5))
    assert consumer.receive(RECEIVE_MS).value() == Timestamp(seconds=1764400000, nanos=5)
    with pytest.raises(pulsar.IncompatibleSchema):  # another root message
        client.create_producer(topic, schema=ProtobufNativeSchema(Duration))


# ---------------------------------------------------------------------- raw frames


def schema_command(kind: int, request_id: int, topic: str) -> Any:
    command = BaseCommand(type=kind)
    body = command.getSchema if kind == Type.GET_SCHEMA else command.getOrCreateSchema
    body.request_id = request_id
    body.topic = topic
    return command


def avro_schema(target: Any, definition: object) -> None:
    target.name = "raw"
    target.type = 4  # Avro
    target.schema_data = json.dumps(definition).encode()


NAME_ONLY = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]}
WITH_AGE = {**NAME_ONLY, "fields": [*NAME_ONLY["fields"], {"name": "age", "type": "int"}]}


def test_schema_commands_are_answered_on_the_connection(broker: ServedBroker) -> None:
    """GET_SCHEMA and GET_OR_CREATE_SCHEMA get their responses, errors included (as
    error codes in them, as Pulsar answers), and the connection stays up throughout."""
    raw = RawConnection(broker.service_urls[0])
    try:
        raw.handshake()
        topic = persistent(new_topic("raw"))
        raw.write(frame(schema_command(Type.GET_SCHEMA, 1, topic)))
        response = raw.expect(Type.GET_SCHEMA_RESPONSE).getSchemaResponse
        assert (response.request_id, response.error_code) == (1, ServerError.TopicNotFound)

        create = schema_command(Type.GET_OR_CREATE_SCHEMA, 2, topic)
        avro_schema(create.getOrCreateSchema.schema, NAME_ONLY)
        raw.write(frame(create))  # no such topic: it is not created
        response = raw.expect(Type.GET_OR_CREATE_SCHEMA_RESPONSE).getOrCreateSchemaResponse
        assert (response.request_id, response.error_code) == (2, ServerError.TopicNotFound)

        # a producer with an Avro schema creates the topic and registers version 0
        command = producer(topic, 1, 3)
        avro_schema(command.producer.schema, NAME_ONLY)
        raw.write(frame(command))
        success = raw.expect(Type.PRODUCER_SUCCESS).producer_success
        assert success.schema_version == (0).to_bytes(8, "big")

        create.getOrCreateSchema.request_id = 4
        raw.write(frame(create))
        response = raw.expect(Type.GET_OR_CREATE_SCHEMA_RESPONSE).getOrCreateSchemaResponse
        assert (response.request_id, response.schema_version) == (4, (0).to_bytes(8, "big"))
        create.getOrCreateSchema.request_id = 5
        avro_schema(create.getOrCreateSchema.schema, WITH_AGE)  # FULL refuses it
        raw.write(frame(create))
        response = raw.expect(Type.GET_OR_CREATE_SCHEMA_RESPONSE).getOrCreateSchemaResponse
        assert response.error_code == ServerError.IncompatibleSchema, response

        refused = producer(topic, 2, 6)
        refused.producer.schema.name = "raw"
        refused.producer.schema.type = 4
        refused.producer.schema.schema_data = b"{not an avro schema"
        raw.write(frame(refused))
        error = raw.expect(Type.ERROR).error
        assert (error.request_id, error.error) == (6, ServerError.IncompatibleSchema)

        get = schema_command(Type.GET_SCHEMA, 7, topic)
        get.getSchema.schema_version = (0).to_bytes(8, "big")
        raw.write(frame(get))
        response = raw.expect(Type.GET_SCHEMA_RESPONSE).getSchemaResponse
        assert response.schema_version == (0).to_bytes(8, "big")
        assert (response.schema.type, json.loads(response.schema.schema_data)) == (4, NAME_ONLY)
        get.getSchema.request_id = 8
        get.getSchema.schema_version = b""
        raw.write(frame(get))
        response = raw.expect(Type.GET_SCHEMA_RESPONSE).getSchemaResponse
        assert response.error_code == ServerError.IncompatibleSchema  # "Empty schema version"

        raw.write(frame(ping()))
        raw.expect(Type.PONG)  # still connected
    finally:
        raw.close()


def subscribe(topic: str, subscription: str, consumer_id: int, request_id: int) -> Any:
    command = BaseCommand(type=Type.SUBSCRIBE)
    body = command.subscribe
    body.topic, body.subscription, body.subType = topic, subscription, 1  # Shared
    body.consumer_id, body.request_id = consumer_id, request_id
    return command


def test_an_auto_consume_consumer_leaves_the_topic_idle(broker: ServedBroker) -> None:
    """A consumer that says AUTO_CONSUME (Schema.Type 21, as Java clients send it) does
    not count as a user of the topic: the next consumer's schema is registered, where
    after a bytes consumer it is refused."""
    raw = RawConnection(broker.service_urls[0])
    try:
        raw.handshake()
        topic = persistent(new_topic("raw-auto"))
        auto = subscribe(topic, "auto", 1, 1)
        auto.subscribe.schema.name, auto.subscribe.schema.type = "auto", 21
        auto.subscribe.schema.schema_data = b""
        raw.write(frame(auto))
        assert raw.expect(Type.SUCCESS).success.request_id == 1
        typed = subscribe(topic, "typed", 2, 2)
        avro_schema(typed.subscribe.schema, NAME_ONLY)
        raw.write(frame(typed))
        assert raw.expect(Type.SUCCESS).success.request_id == 2
        raw.write(frame(schema_command(Type.GET_SCHEMA, 3, topic)))
        response = raw.expect(Type.GET_SCHEMA_RESPONSE).getSchemaResponse
        assert response.schema_version == (0).to_bytes(8, "big")

        other = persistent(new_topic("raw-bytes"))
        raw.write(frame(subscribe(other, "bytes", 3, 4)))  # no schema: a bytes consumer
        assert raw.expect(Type.SUCCESS).success.request_id == 4
        typed = subscribe(other, "typed", 4, 5)
        avro_schema(typed.subscribe.schema, NAME_ONLY)
        raw.write(frame(typed))
        error = raw.expect(Type.ERROR).error
        assert (error.request_id, error.error) == (5, ServerError.IncompatibleSchema)
    finally:
        raw.close()
