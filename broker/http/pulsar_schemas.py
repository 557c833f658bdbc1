"""Pulsar's schema admin routes (``admin/v2/SchemasResource``) and the schema policies of
namespaces and topics (``Namespaces``, ``PersistentTopics``): thin translations to the
broker's schema registry (:mod:`broker.dispatch.schema_registry`) and policy store.

Paths, verbs, JSON field names and success statuses are Pulsar's (``POST .../schema``
answers 202, as Pulsar's ``Response.accepted()``); errors are brokerlab's
``{"reason", "code"}``: 409 for an incompatible schema, 422 for one that does not parse,
as Pulsar's statuses.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from broker.dispatch.errors import (
    IncompatibleSchemaError,
    InvalidRequestError,
    InvalidSchemaError,
    NotFoundError,
)
from broker.dispatch.names import TopicName
from broker.dispatch.schema_registry import (
    AVRO,
    JSON,
    KEY_VALUE,
    PROTOBUF,
    TYPE_NAMES,
    TYPE_NUMBERS,
    SchemaData,
    StoredSchema,
    decode_key_value,
    schema_id,
)
from broker.dispatch.service import BrokerService
from broker.dispatch.topic_schemas import (
    AUTO_UPDATE_POLICY,
    STRATEGY_POLICY,
    VALIDATION_POLICY,
)
from broker.http import security
from broker.http.app_state import NODE
from broker.http.contract import (
    ADMIN_TOPIC,
    NAMESPACE,
    TOPIC_OWNER,
    FlagQuery,
    JsonBody,
    RouteTable,
    Success,
)
from broker.http.models import PolicyFlag, PostSchemaPayload, SchemaCompatibilityStrategy
from broker.http.schemas import (
    GetAllVersionsSchemaResponse,
    GetSchemaResponse,
    IsCompatibilityResponse,
    LongSchemaVersion,
    PostSchemaResponse,
)
from broker.ledger.managed_ledger import metadata_key

api = RouteTable()
routes = api.routes

SCHEMA_TOPIC = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"
#: Java's SchemaType BYTES (-1): stored as is, a type without a definition
BYTES = -1


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(data), content_type="application/json")


def _service(request: web.Request) -> BrokerService:
    return request.app[NODE].running_service()


def _topic(request: web.Request) -> TopicName:
    info = request.match_info
    return TopicName.of(info["tenant"], info["namespace"], info["topic"])


def _owned_topic(request: web.Request) -> tuple[BrokerService, TopicName]:
    """The service and the topic, which this broker must own (307 to its owner)."""
    service = _service(request)
    name = _topic(request)
    service.check_owner(name)
    return service, name


def _type_name(number: int) -> str:
    return "BYTES" if number == BYTES else TYPE_NAMES.get(number, str(number))


def _definition_text(schema: SchemaData) -> str:
    """The definition as Pulsar's REST API shows it."""
    if schema.type != KEY_VALUE:
        return schema.data.decode("utf-8", "replace")
    parts = {}
    for side, part in zip(("key", "value"), decode_key_value(schema), strict=True):
        if part.type in (AVRO, JSON, PROTOBUF) and part.data:
            try:
                parts[side] = orjson.loads(part.data)
                continue
            except orjson.JSONDecodeError:
                pass
        parts[side] = _type_name(part.type)
    return orjson.dumps(parts).decode()


def _answer(stored: StoredSchema) -> dict[str, Any]:
    schema = stored.schema
    return {
        "version": stored.version,
        "type": _type_name(schema.type),
        "timestamp": schema.timestamp,
        "data": _definition_text(schema),
        "properties": schema.properties,
    }


def _schema_of(payload: PostSchemaPayload, user: str) -> SchemaData:
    """A posted schema as the registry takes it. InvalidSchemaError for an unknown type
    or a KEY_VALUE definition that is not ``{"key": ..., "value": ...}``."""
    type_name = payload["type"]
    if type_name == "BYTES":
        number = BYTES
    elif type_name in TYPE_NUMBERS:
        number = TYPE_NUMBERS[type_name]
    else:
        raise InvalidSchemaError(f"unknown schema type {type_name!r}")
    text = payload.get("schema", "")
    properties = dict(payload.get("properties", {}))
    if number != KEY_VALUE:
        return SchemaData(number, text.encode(), properties, user=user)
    try:
        parts = orjson.loads(text)
    except orjson.JSONDecodeError:
        parts = None
    if not isinstance(parts, dict) or "key" not in parts or "value" not in parts:
        raise InvalidSchemaError('a KEY_VALUE schema is {"key": ..., "value": ...}')
    data = b""
    for part in (parts["key"], parts["value"]):
        raw = orjson.dumps(part) if isinstance(part, dict | list) else b""
        data += len(raw).to_bytes(4, "big") + raw
    return SchemaData(number, data, properties, user=user)


def _user(request: web.Request) -> str:
    """The authenticated role, kept with what it stores ("" with authentication off)."""
    return request.get(security.ROLE) or ""


# ---------------------------------------------------------------------- schemas


@api.operation(
    "GET",
    SCHEMA_TOPIC + "/schema",
    "getSchema",
    tag="schemas",
    summary="the latest schema of a topic",
    success=Success(200, "the schema.", GetSchemaResponse),
    errors={400: "bad topic name.", 404: "the topic has no schema (or it was deleted)."},
    redirect=TOPIC_OWNER,
    description="""
        Pulsar's GetSchemaResponse of the topic's latest schema version:

        ```json
        {"version": 1, "type": "AVRO", "timestamp": 1764400000000,
         "data": "{\\"type\\":\\"record\\",\\"name\\":\\"User\\",...}", "properties": {}}
        ```

        A partition's schema is its partitioned topic's (schemas are kept per partitioned
        topic, as in Pulsar).
    """,
)
async def get_schema(request: web.Request) -> web.Response:
    service, name = _owned_topic(request)
    stored = await service.schemas.registry.get(schema_id(name))
    if stored is None:
        raise NotFoundError(f"topic {name} has no schema")
    return _json(_answer(stored))


@api.operation(
    "GET",
    SCHEMA_TOPIC + "/schema/{version}",
    "getSchemaVersion",
    tag="schemas",
    summary="one version of a topic's schema",
    success=Success(200, "the schema.", GetSchemaResponse),
    errors={
        400: "bad topic name; a version that is not a decimal integer.",
        404: "no such version (or it precedes the last delete).",
    },
    redirect=TOPIC_OWNER,
    description="As `GET .../schema`, for version `{version}` (from 0).",
)
async def get_schema_version(request: web.Request) -> web.Response:
    service, name = _owned_topic(request)
    raw = request.match_info["version"]
    if not raw.isdigit() or len(raw) > 18:
        raise InvalidRequestError(f"schema version must be a decimal integer, not {raw!r}")
    stored = await service.schemas.registry.get(schema_id(name), int(raw))
    if stored is None:
        raise NotFoundError(f"topic {name} has no schema version {raw}")
    return _json(_answer(stored))


@api.operation(
    "GET",
    SCHEMA_TOPIC + "/schemas",
    "getAllSchemas",
    tag="schemas",
    summary="every version of a topic's schema",
    success=Success(200, "the versions.", GetAllVersionsSchemaResponse),
    errors={400: "bad topic name."},
    redirect=TOPIC_OWNER,
    description="""
        Pulsar's GetAllVersionsSchemaResponse: `{"getSchemaResponses": [...]}`, every version
        since the last delete, oldest first (`[]` when none).
    """,
)
async def get_all_schemas(request: web.Request) -> web.Response:
    service, name = _owned_topic(request)
    versions = await service.schemas.registry.live_versions(schema_id(name))
    return _json({"getSchemaResponses": [_answer(stored) for stored in versions]})


SCHEMA_BODY = JsonBody[PostSchemaPayload](PostSchemaPayload, "The schema.")


@api.operation(
    "POST",
    SCHEMA_TOPIC + "/schema",
    "postSchema",
    tag="schemas",
    summary="register a schema",
    body=SCHEMA_BODY,
    success=Success(
        202, "its version (the existing one for a schema the topic has).", PostSchemaResponse
    ),
    errors={
        400: "bad topic name; a body that is not a PostSchemaPayload.",
        409: "the topic's compatibility strategy refuses it; nothing stored.",
        413: "body over `maxHttpRequestBodyBytes`.",
        422: "the definition does not parse for its type, or the type is unknown; nothing stored.",
    },
    redirect=TOPIC_OWNER,
    description="""
        Body: Pulsar's PostSchemaPayload, `{"type": "AVRO", "schema": "<definition>",
        "properties": {}}`. Registered as a producer's schema is, under the topic's
        strategy (topic policy, namespace policy, else `schemaCompatibilityStrategy`), even
        when auto-update is off (an admin may always add). Answers Pulsar's
        PostSchemaResponse, `{"version": {"version": 2}}`, with 202 as Pulsar does.
    """,
)
async def post_schema(request: web.Request) -> web.Response:
    service, name = _owned_topic(request)
    schema = _schema_of(await SCHEMA_BODY.read(request), _user(request))
    schemas = service.schemas
    version = await schemas.registry.put_if_absent(schema_id(name), schema, schemas.strategy(name))
    return _json({"version": {"version": version}}, 202)


FORCE_DELETE = FlagQuery("force", "Remove every version for good (no deleted version added).")


@api.operation(
    "DELETE",
    SCHEMA_TOPIC + "/schema",
    "deleteSchema",
    tag="schemas",
    summary="delete a topic's schema",
    query=(FORCE_DELETE,),
    success=Success(200, "the version of the delete.", LongSchemaVersion),
    errors={400: "bad topic name; `force` not `true` or `false`."},
    redirect=TOPIC_OWNER,
    description="""
        Pulsar's DeleteSchemaResponse, `{"version": 3}`: a deleted version is added, after
        which the topic has no schema and any schema may be registered (the versions before
        it are kept but no longer read or compared). `force=true` removes every version
        (`{"version": -1}`), as does nothing on a topic without a schema.
    """,
)
async def delete_schema(request: web.Request) -> web.Response:
    service, name = _owned_topic(request)
    force = FORCE_DELETE.read(request)
    version = await service.schemas.registry.delete(schema_id(name), _user(request), force)
    return _json({"version": -1 if version is None else version})


@api.operation(
    "POST",
    SCHEMA_TOPIC + "/compatibility",
    "testCompatibility",
    tag="schemas",
    summary="would a schema be accepted",
    body=SCHEMA_BODY,
    success=Success(202, "the outcome.", IsCompatibilityResponse),
    errors={
        400: "bad topic name; a body that is not a PostSchemaPayload.",
        413: "body over `maxHttpRequestBodyBytes`.",
        422: "the definition does not parse for its type, or the type is unknown.",
    },
    redirect=TOPIC_OWNER,
    description="""
        Pulsar's IsCompatibilityResponse, `{"isCompatibility": false,
        "schemaCompatibilityStrategy": "FULL"}`: whether `POST .../schema` would accept the
        schema, nothing stored. Differs from Pulsar on purpose: Pulsar answers an
        incompatible schema with an error (500), brokerlab with `"isCompatibility": false`;
        and it checks with the topic's strategy (Pulsar: the namespace's).
    """,
)
async def test_compatibility(request: web.Request) -> web.Response:
    service, name = _owned_topic(request)
    schema = _schema_of(await SCHEMA_BODY.read(request), _user(request))
    strategy = service.schemas.strategy(name)
    try:
        await service.schemas.registry.check(schema_id(name), schema, strategy)
        compatible = True
    except IncompatibleSchemaError:
        compatible = False
    return _json({"isCompatibility": compatible, "schemaCompatibilityStrategy": strategy}, 202)


@api.operation(
    "POST",
    SCHEMA_TOPIC + "/version",
    "getVersionBySchema",
    tag="schemas",
    summary="the version a schema has",
    body=SCHEMA_BODY,
    success=Success(202, "its version, -1 if the topic does not have it.", LongSchemaVersion),
    errors={
        400: "bad topic name; a body that is not a PostSchemaPayload.",
        413: "body over `maxHttpRequestBodyBytes`.",
        422: "the type is unknown.",
    },
    redirect=TOPIC_OWNER,
    description='Pulsar\'s LongSchemaVersionResponse: `{"version": 1}`, or -1.',
)
async def get_version_by_schema(request: web.Request) -> web.Response:
    service, name = _owned_topic(request)
    schema = _schema_of(await SCHEMA_BODY.read(request), _user(request))
    registry = service.schemas.registry
    found = registry.find(await registry.live_versions(schema_id(name)), schema)
    return _json({"version": -1 if found is None else found}, 202)


# ---------------------------------------------------------------------- policies


STRATEGY_BODY = JsonBody[str](SchemaCompatibilityStrategy, "The strategy.")
FLAG_BODY = JsonBody[bool](PolicyFlag, "The flag.")
NO_NAMESPACE = {400: "bad tenant or namespace name.", 404: "no such namespace."}
STRATEGY_SCHEMA = {"type": "string"}


def _namespace_policies(service: BrokerService, request: web.Request) -> tuple[str, str]:
    info = request.match_info
    tenant, namespace = info["tenant"], info["namespace"]
    TopicName.of(tenant, namespace, "x")  # 400 for bad names
    if service.policies.namespace_policies(tenant, namespace) is None:
        raise NotFoundError(f"Namespace {tenant}/{namespace} does not exist")
    return tenant, namespace


@api.operation(
    "GET",
    NAMESPACE + "/schemaCompatibilityStrategy",
    "getSchemaCompatibilityStrategy",
    tag="namespaces",
    summary="a namespace's schema compatibility strategy",
    success=Success(200, 'the strategy, a JSON string (`"BACKWARD"`).', STRATEGY_SCHEMA),
    errors=NO_NAMESPACE,
    description="""
        The namespace's `schema_compatibility_strategy` policy, or `"UNDEFINED"` when it is
        not set (its topics then follow `schemaCompatibilityStrategy` of broker.conf, FULL
        by default). Pulsar answers an unset policy with an empty 204.
    """,
)
async def get_namespace_strategy(request: web.Request) -> web.Response:
    service = _service(request)
    tenant, namespace = _namespace_policies(service, request)
    value = service.policies.namespace(tenant, namespace, STRATEGY_POLICY)
    return _json(value or "UNDEFINED")


@api.operation(
    "PUT",
    NAMESPACE + "/schemaCompatibilityStrategy",
    "setSchemaCompatibilityStrategy",
    tag="namespaces",
    summary="set a namespace's schema compatibility strategy",
    body=STRATEGY_BODY,
    success=Success(204, "set; the namespace's topics check new schemas with it."),
    errors={**NO_NAMESPACE, 400: "bad names; a body that is not a strategy name."},
    description="""
        Body: a strategy as a JSON string: `"ALWAYS_INCOMPATIBLE"`, `"ALWAYS_COMPATIBLE"`,
        `"BACKWARD"`, `"FORWARD"`, `"FULL"`, `"BACKWARD_TRANSITIVE"`, `"FORWARD_TRANSITIVE"`,
        `"FULL_TRANSITIVE"`, or `"UNDEFINED"` to unset it. A topic's own policy
        (`PUT /admin/v2/persistent/.../schemaCompatibilityStrategy`) takes precedence.
    """,
)
async def set_namespace_strategy(request: web.Request) -> web.Response:
    service = _service(request)
    tenant, namespace = _namespace_policies(service, request)
    strategy = await STRATEGY_BODY.read(request)
    if strategy == "UNDEFINED":
        await service.policies.remove_namespace(tenant, namespace, STRATEGY_POLICY)
    else:
        await service.policies.set_namespace(tenant, namespace, STRATEGY_POLICY, strategy)
    return web.Response(status=204)


def _flag_routes(
    path: str, policy: str, noun: str, default_doc: str, get_id: str, set_id: str
) -> None:
    @api.operation(
        "GET",
        NAMESPACE + path,
        get_id,
        tag="namespaces",
        summary=f"a namespace's {noun} flag",
        success=Success(200, "`true` or `false`.", {"type": "boolean"}),
        errors=NO_NAMESPACE,
        description=f"The namespace's `{policy}` policy; when not set, {default_doc}.",
    )
    async def get_flag(request: web.Request) -> web.Response:
        service = _service(request)
        tenant, namespace = _namespace_policies(service, request)
        value = service.policies.namespace(tenant, namespace, policy)
        if not isinstance(value, bool):
            value = (
                service.config.allow_auto_update_schema
                if policy == AUTO_UPDATE_POLICY
                else service.config.schema_validation_enforced
            )
        return _json(value)

    @api.operation(
        "POST",
        NAMESPACE + path,
        set_id,
        tag="namespaces",
        summary=f"set a namespace's {noun} flag",
        body=FLAG_BODY,
        success=Success(204, "set; it applies to the next producers."),
        errors={**NO_NAMESPACE, 400: "bad names; a body that is not `true` or `false`."},
        description=f"Body: `true` or `false`. Sets the namespace's `{policy}` policy.",
    )
    async def set_flag(request: web.Request) -> web.Response:
        service = _service(request)
        tenant, namespace = _namespace_policies(service, request)
        value = await FLAG_BODY.read(request)
        await service.policies.set_namespace(tenant, namespace, policy, value)
        return web.Response(status=204)


_flag_routes(
    "/isAllowAutoUpdateSchema",
    AUTO_UPDATE_POLICY,
    "schema auto-update",
    "`isAllowAutoUpdateSchemaEnabled` of broker.conf (true): producers may add compatible "
    "schema versions",
    "getIsAllowAutoUpdateSchema",
    "setIsAllowAutoUpdateSchema",
)
_flag_routes(
    "/schemaValidationEnforced",
    VALIDATION_POLICY,
    "schema validation",
    "`isSchemaValidationEnforced` of broker.conf (false); `true` refuses producers without a "
    "schema on topics that have one",
    "getSchemaValidationEnforced",
    "setSchemaValidationEnforced",
)


APPLIED = FlagQuery(
    "applied", "Answer the strategy that applies (namespace's, broker's) when unset."
)


async def _topic_exists(service: BrokerService, name: TopicName) -> None:
    if name in service.topics or await service.partitions.exists(name):
        return
    if await service.metadata.get(metadata_key(str(name))) is None:
        raise NotFoundError(f"Topic {name} does not exist")


@api.operation(
    "GET",
    ADMIN_TOPIC + "/schemaCompatibilityStrategy",
    "getTopicSchemaCompatibilityStrategy",
    tag="topics",
    summary="a topic's schema compatibility strategy",
    query=(APPLIED,),
    success=Success(200, 'the strategy, a JSON string (`"FULL"`).', STRATEGY_SCHEMA),
    errors={400: "bad topic name; `applied` not `true` or `false`.", 404: "no such topic."},
    description="""
        The topic's own `schema_compatibility_strategy` policy, `"UNDEFINED"` when not set;
        with `applied=true`, the one its schemas are checked with (the topic's, else its
        namespace's, else broker.conf's). A partition's is its partitioned topic's.
    """,
)
async def get_topic_strategy(request: web.Request) -> web.Response:
    service = _service(request)
    name = _topic(request)
    applied = APPLIED.read(request)
    await _topic_exists(service, name)
    if applied:
        return _json(service.schemas.strategy(name))
    return _json(service.policies.topic(name, STRATEGY_POLICY) or "UNDEFINED")


@api.operation(
    "PUT",
    ADMIN_TOPIC + "/schemaCompatibilityStrategy",
    "setTopicSchemaCompatibilityStrategy",
    tag="topics",
    summary="set a topic's schema compatibility strategy",
    body=STRATEGY_BODY,
    success=Success(204, "set; it takes precedence over the namespace's."),
    errors={400: "bad topic name; a body that is not a strategy name.", 404: "no such topic."},
    description='Body: a strategy as a JSON string, as for a namespace; `"UNDEFINED"` unsets it.',
)
async def set_topic_strategy(request: web.Request) -> web.Response:
    service = _service(request)
    name = _topic(request)
    strategy = await STRATEGY_BODY.read(request)
    await _topic_exists(service, name)
    if strategy == "UNDEFINED":
        await service.policies.remove_topic(name, STRATEGY_POLICY)
    else:
        await service.policies.set_topic(name, STRATEGY_POLICY, strategy)
    return web.Response(status=204)


@api.operation(
    "DELETE",
    ADMIN_TOPIC + "/schemaCompatibilityStrategy",
    "removeTopicSchemaCompatibilityStrategy",
    tag="topics",
    summary="unset a topic's schema compatibility strategy",
    success=Success(204, "unset; the namespace's applies again."),
    errors={400: "bad topic name.", 404: "no such topic."},
)
async def remove_topic_strategy(request: web.Request) -> web.Response:
    service = _service(request)
    name = _topic(request)
    await _topic_exists(service, name)
    await service.policies.remove_topic(name, STRATEGY_POLICY)
    return web.Response(status=204)
