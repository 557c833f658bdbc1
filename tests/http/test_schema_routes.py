"""Pulsar's schema admin routes and the schema policies of namespaces and topics, on a
real broker: versions added, read, checked and deleted; bad input answered with
``{"reason", "code"}`` (409 incompatible, 422 unparsable) and nothing stored."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from broker.http.schemas import (
    GetAllVersionsSchemaResponse,
    GetSchemaResponse,
    IsCompatibilityResponse,
    LongSchemaVersion,
    PostSchemaResponse,
)
from tests.conftest import Client, LiveBroker
from tests.harness import new_topic
from tests.http.test_schemas import conforming

SCHEMAS = "/admin/v2/schemas/"
NAMESPACE = "/admin/v2/namespaces/public/default"


def avro(*fields: dict[str, Any]) -> dict[str, Any]:
    definition = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]}
    definition["fields"] += list(fields)
    return {"type": "AVRO", "schema": json.dumps(definition), "properties": {"app": "test"}}


OPTIONAL_EMAIL = {"name": "email", "type": ["null", "string"], "default": None}
REQUIRED_AGE = {"name": "age", "type": "int"}


async def versions(client: Client, topic: str) -> list[int]:
    status, body = await client.request("GET", SCHEMAS + topic + "/schemas")
    assert status == 200, body
    conforming(GetAllVersionsSchemaResponse, body)  # the documented answer, no more
    return [v["version"] for v in body["getSchemaResponses"]]


async def test_versions_are_added_read_and_deleted(live_broker: LiveBroker) -> None:
    client = await live_broker()
    topic = new_topic("schemas")
    assert await client.request("GET", SCHEMAS + topic + "/schema") == (
        404,
        {"reason": f"topic persistent://{topic} has no schema", "code": "not-found"},
    )
    assert await versions(client, topic) == []

    status, body = await client.request("POST", SCHEMAS + topic + "/schema", json=avro())
    assert (status, body) == (202, {"version": {"version": 0}})
    conforming(PostSchemaResponse, body)
    status, body = await client.request("POST", SCHEMAS + topic + "/schema", json=avro())
    assert (status, body) == (202, {"version": {"version": 0}})  # the same schema, its version
    status, body = await client.request(
        "POST", SCHEMAS + topic + "/schema", json=avro(OPTIONAL_EMAIL)
    )
    assert (status, body) == (202, {"version": {"version": 1}})

    status, latest = await client.request("GET", SCHEMAS + topic + "/schema")
    assert status == 200
    conforming(GetSchemaResponse, latest)
    assert (latest["version"], latest["type"], latest["properties"]) == (1, "AVRO", {"app": "test"})
    assert json.loads(latest["data"])["fields"][1] == OPTIONAL_EMAIL
    status, first = await client.request("GET", SCHEMAS + topic + "/schema/0")
    assert (status, len(json.loads(first["data"])["fields"])) == (200, 1)
    assert (await client.request("GET", SCHEMAS + topic + "/schema/7"))[0] == 404
    assert (await client.request("GET", SCHEMAS + topic + "/schema/x"))[0] == 400

    status, body = await client.request(
        "POST", SCHEMAS + topic + "/version", json=avro(OPTIONAL_EMAIL)
    )
    assert (status, body) == (202, {"version": 1})
    conforming(LongSchemaVersion, body)
    status, body = await client.request(
        "POST", SCHEMAS + topic + "/version", json=avro(REQUIRED_AGE)
    )
    assert (status, body) == (202, {"version": -1})

    status, body = await client.request("DELETE", SCHEMAS + topic + "/schema")
    assert (status, body) == (200, {"version": 2})
    assert (await client.request("GET", SCHEMAS + topic + "/schema"))[0] == 404
    assert await versions(client, topic) == []
    # after a delete any schema goes, and versions count on
    status, body = await client.request(
        "POST", SCHEMAS + topic + "/schema", json={"type": "STRING", "schema": ""}
    )
    assert (status, body) == (202, {"version": {"version": 3}})


async def test_bad_schemas_are_refused_and_nothing_is_stored(live_broker: LiveBroker) -> None:
    client = await live_broker()
    topic = new_topic("refused")
    assert (await client.request("POST", SCHEMAS + topic + "/schema", json=avro()))[0] == 202

    status, body = await client.request(
        "POST", SCHEMAS + topic + "/schema", json=avro(REQUIRED_AGE)
    )
    assert (status, body["code"]) == (409, "conflict")  # FULL: v1 cannot read v0's data
    assert "age" in body["reason"]
    status, body = await client.request(
        "POST", SCHEMAS + topic + "/schema", json={"type": "AVRO", "schema": "{not json"}
    )
    assert (status, body["code"]) == (422, "invalid-schema")
    status, body = await client.request(
        "POST", SCHEMAS + topic + "/schema", json={"type": "RUBY", "schema": ""}
    )
    assert (status, body["code"]) == (422, "invalid-schema")
    status, body = await client.request(
        "POST", SCHEMAS + topic + "/schema", json={"type": "STRING", "schema": ""}
    )
    assert (status, body["code"]) == (409, "conflict")  # another type
    status, body = await client.request("POST", SCHEMAS + topic + "/schema", json={"schema": ""})
    assert (status, body["code"]) == (400, "invalid-request")
    assert await versions(client, topic) == [0]

    status, body = await client.request(
        "POST", SCHEMAS + topic + "/compatibility", json=avro(REQUIRED_AGE)
    )
    assert (status, body) == (
        202,
        {"isCompatibility": False, "schemaCompatibilityStrategy": "FULL"},
    )
    status, body = await client.request(
        "POST", SCHEMAS + topic + "/compatibility", json=avro(OPTIONAL_EMAIL)
    )
    assert (status, body["isCompatibility"]) == (202, True)
    conforming(IsCompatibilityResponse, body)
    assert await versions(client, topic) == [0]  # a check stores nothing


async def test_the_namespace_and_topic_strategies_decide(live_broker: LiveBroker) -> None:
    client = await live_broker()
    topic = new_topic("strategy")
    path = NAMESPACE + "/schemaCompatibilityStrategy"
    assert await client.request("GET", path) == (200, "UNDEFINED")
    assert (await client.request("PUT", path, json="SIDEWAYS"))[0] == 400
    assert (
        await client.request(
            "PUT", "/admin/v2/namespaces/public/nope/schemaCompatibilityStrategy", json="FULL"
        )
    )[0] == 404
    assert await client.request("GET", path) == (200, "UNDEFINED")  # nothing changed

    assert (await client.request("PUT", path, json="FORWARD"))[0] == 204
    assert await client.request("GET", path) == (200, "FORWARD")
    assert (await client.request("POST", SCHEMAS + topic + "/schema", json=avro()))[0] == 202
    # FORWARD: the old schema reads data with a new field, so a required one is fine
    status, body = await client.request(
        "POST", SCHEMAS + topic + "/schema", json=avro(REQUIRED_AGE)
    )
    assert (status, body) == (202, {"version": {"version": 1}})

    # the topic's own policy wins over the namespace's
    await client.produce(topic, ["m"])  # the topic exists
    topic_path = f"/admin/v2/persistent/{topic}/schemaCompatibilityStrategy"
    assert await client.request("GET", topic_path) == (200, "UNDEFINED")
    assert await client.request("GET", topic_path, applied="true") == (200, "FORWARD")
    assert (await client.request("PUT", topic_path, json="ALWAYS_INCOMPATIBLE"))[0] == 204
    status, body = await client.request(
        "POST", SCHEMAS + topic + "/schema", json=avro(REQUIRED_AGE, OPTIONAL_EMAIL)
    )
    assert (status, body["code"]) == (409, "conflict")
    assert (await client.request("DELETE", topic_path))[0] == 204
    assert await client.request("GET", topic_path, applied="true") == (200, "FORWARD")
    missing = "/admin/v2/persistent/public/default/no-such-topic/schemaCompatibilityStrategy"
    assert (await client.request("PUT", missing, json="FULL"))[0] == 404

    assert (await client.request("PUT", path, json="UNDEFINED"))[0] == 204
    assert await client.request("GET", path) == (200, "UNDEFINED")


async def test_schema_flags_of_a_namespace(live_broker: LiveBroker) -> None:
    client = await live_broker()
    for route, default in (
        ("/isAllowAutoUpdateSchema", True),
        ("/schemaValidationEnforced", False),
    ):
        assert await client.request("GET", NAMESPACE + route) == (200, default)
        assert (await client.request("POST", NAMESPACE + route, json="yes"))[0] == 400
        assert (await client.request("POST", NAMESPACE + route, json=not default))[0] == 204
        assert await client.request("GET", NAMESPACE + route) == (200, not default)


async def test_a_deleted_topic_takes_its_schema_along(live_broker: LiveBroker) -> None:
    client = await live_broker()
    topic, partitioned = new_topic("gone"), new_topic("parts")
    await client.produce(topic, ["m"])
    assert (await client.request("POST", SCHEMAS + topic + "/schema", json=avro()))[0] == 202
    assert (await client.request("DELETE", f"/admin/v2/persistent/{topic}"))[0] == 204
    assert (await client.request("GET", SCHEMAS + topic + "/schema"))[0] == 404

    # partitions share their partitioned topic's schema; deleting one partition keeps it
    admin = f"/admin/v2/persistent/{partitioned}/partitions"
    assert (await client.request("PUT", admin, json=2))[0] == 204
    assert (await client.request("POST", SCHEMAS + partitioned + "/schema", json=avro()))[0] == 202
    partition = partitioned + "-partition-1"
    await client.produce(partition, ["m"])
    status, body = await client.request("GET", SCHEMAS + partition + "/schema")
    assert (status, body["version"]) == (200, 0)
    assert (await client.request("DELETE", f"/admin/v2/persistent/{partition}"))[0] == 204
    assert (await client.request("GET", SCHEMAS + partitioned + "/schema"))[0] == 200
    assert (await client.request("DELETE", admin, force="true"))[0] == 204
    assert (await client.request("GET", SCHEMAS + partitioned + "/schema"))[0] == 404


async def test_enforced_validation_refuses_producers_without_a_schema(
    live_broker: LiveBroker,
) -> None:
    """isSchemaValidationEnforced=true: a producer that brings no schema (a WebSocket
    producer sends bytes) is refused on a topic that has one, and accepted elsewhere."""
    client = await live_broker(isSchemaValidationEnforced=True)
    typed, plain = new_topic("typed"), new_topic("plain")
    assert (await client.request("POST", SCHEMAS + typed + "/schema", json=avro()))[0] == 202
    url = client.base_url.replace("http://", "ws://") + "/ws/v2/producer/persistent/"
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await client.session.ws_connect(url + typed)
    assert refused.value.status == 409
    async with client.session.ws_connect(url + plain) as ws:
        assert not ws.closed
