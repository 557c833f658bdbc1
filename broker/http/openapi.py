"""The HTTP contract: every operation of the API, and the OpenAPI 3.1 document
generated from them.

The operations here are the route table: the handlers attach to them by operation id
(:class:`broker.http.contract.RouteTable`), read their query parameters through the
declarations here, and validate their bodies with the pydantic types of
``broker/http/models.py`` that the document's request schemas are generated from.
:func:`openapi_spec` is served at ``GET /openapi.json``. ``tests/http/test_routes_contract.py``
checks the served routes against it both ways; ``tests/http/test_openapi_doc.py`` checks
that ``docs/api.md`` has the same routes and statuses: change the two together.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import TypeAdapter
from pydantic.json_schema import GenerateJsonSchema

from broker.cluster import RESTART_MODES
from broker.http.contract import (
    ChoiceQuery,
    FlagQuery,
    IntQuery,
    JsonBody,
    PatternQuery,
    Query,
)
from broker.http.errors import ERRORS, REDIRECT_CODE
from broker.http.models import (
    DEFAULTS,
    AckRequest,
    ConsumerRequest,
    FaultSetting,
    MessageIdRequest,
    MessageIdsRequest,
    NamespacePolicies,
    PartitionCount,
    ProduceRequest,
    StartMessageId,
    SubscriptionStart,
    TenantInfo,
)
from broker.http.schemas import ANSWERS

Json = dict[str, Any]

#: A topic part (tenant, namespace, topic) or a subscription name: never ``.`` or ``..``.
NAME_PATTERN = r"^(?!\.\.?$)[A-Za-z0-9_.=:-]{1,128}$"
#: A namespace bundle: the range of topic-name hashes ``0x{lower}_0x{upper}``.
BUNDLE_PATTERN = r"^0x[0-9a-f]{8}_0x[0-9a-f]{8}$"

#: The one code that goes with each error status (the table of broker.http.errors).
ERROR_CODES: dict[int, str] = {status: code for status, (code, _) in ERRORS.items()}

#: Statuses any route can return (security, see docs/api.md); added to every operation.
COMMON_ERRORS: dict[int, str] = {
    401: "Authentication is enabled (authenticationEnabled) and the request has no valid "
    "token: none, expired, badly signed, or not `Authorization: Bearer <token>`.",
    403: "Not allowed: the token's role is not a super-user (authorizationEnabled) or the "
    "consumer is another role's; or the Host is not a name of this broker (bound to "
    "loopback); or a web page of another origin asks to change state.",
}
#: Statuses every route that changes state (not GET) can return; added to those operations.
CHANGING_ERRORS: dict[int, str] = {
    415: "The request has a body of a type a web page may send to any site without asking "
    "(text/plain, a form type, or no Content-Type): send Content-Type: application/json.",
}

_BODY_TOO_LARGE = "The request body is over maxHttpRequestBodyBytes (default 16 MiB)."
_BAD_TOPIC = "Bad tenant, namespace or topic name"
_NO_TOPIC = "The topic does not exist and allowAutoTopicCreation=false."
_UNKNOWN_TOPIC = "Unknown topic."
_UNKNOWN_CONSUMER = "Unknown or closed consumer id."
#: What a 307 means on a route naming a topic.
_NOT_OWNER = (
    "Another broker of the cluster owns the topic's bundle: Location names this path and "
    "query on it; repeat the request there (method and body kept)."
)
#: Why a route that needs this broker's service answers 503 besides storage faults.
_DOWN = "This broker is down (restarting, or not started yet)."
_ALSO_DOWN = "Also while this broker is down (restarting, or not started yet)."
_PARTITIONED_NAME = (
    "The topic is a partitioned topic (use its partitions), a partition past its "
    "count, or a partition of one being deleted."
)


# --- small builders ----------------------------------------------------------------------


def _ref(kind: str, name: str) -> Json:
    return {"$ref": f"#/components/{kind}/{name}"}


def _schema(name: str) -> Json:
    return _ref("schemas", name)


def _integer(
    description: str,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    default: int | None = None,
) -> Json:
    schema: Json = {"type": "integer", "format": "int64", "description": description}
    if minimum is not None:
        schema["minimum"] = minimum
    if maximum is not None:
        schema["maximum"] = maximum
    if default is not None:
        schema["default"] = default
    return schema


def _string(description: str, **constraints: Any) -> Json:
    return {"type": "string", "description": description, **constraints}


def _object(
    description: str,
    properties: Json,
    *,
    required: list[str] | None = None,
    additional: bool | Json | None = None,
) -> Json:
    schema: Json = {"type": "object", "description": description, "properties": properties}
    if required:
        schema["required"] = required
    if additional is not None:
        schema["additionalProperties"] = additional
    return schema


def _json_answer(description: str, schema: Json) -> Json:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _text_answer(description: str, media_type: str, schema: Json | None = None) -> Json:
    return {
        "description": description,
        "content": {media_type: {"schema": schema or {"type": "string"}}},
    }


def _no_content(description: str) -> Json:
    return {"description": description}


def _error(status: int, when: str) -> Json:
    """An error answer: the Error body with this status's code, plus its headers."""
    code = ERROR_CODES[status]
    response: Json = {
        "description": f"`{code}`: {when}",
        "content": {
            "application/json": {
                "schema": {
                    "allOf": [
                        _schema("Error"),
                        {
                            "type": "object",
                            "properties": {"code": {"type": "string", "enum": [code]}},
                        },
                    ]
                }
            }
        },
    }
    if status == 503:
        response["headers"] = {"Retry-After": _ref("headers", "RetryAfter")}
    return response


def _redirect(when: str) -> Json:
    """A 307 to the broker owning the topic: Location, and the Error body with
    REDIRECT_CODE."""
    return {
        "description": f"`{REDIRECT_CODE}`: {when}",
        "headers": {"Location": _ref("headers", "Location")},
        "content": {
            "application/json": {
                "schema": {
                    "allOf": [
                        _schema("Error"),
                        {
                            "type": "object",
                            "properties": {"code": {"type": "string", "enum": [REDIRECT_CODE]}},
                        },
                    ]
                }
            }
        },
    }


def _operation(
    operation_id: str,
    tag: str,
    summary: str,
    description: str,
    *,
    success: tuple[int, Json],
    errors: dict[int, str],
    query: list[Query] | None = None,
    body: JsonBody[Any] | None = None,
    redirect: str | None = None,
    down: bool = True,
) -> Json:
    """One operation. ``redirect``: when it answers 307 (the topic is another broker's).
    ``down``: the route needs this broker's service, so it also answers 503 while the
    broker is down: said in its 503 answer, or added as one. Routes that answer from the
    process alone (health, stats, metrics, faults, the cluster's brokers) pass False."""
    status, answer = success
    responses: Json = {str(status): answer}
    if redirect is not None:
        responses["307"] = _redirect(redirect)
    errors = dict(errors)
    if down:
        errors[503] = f"{errors[503]} {_ALSO_DOWN}" if 503 in errors else _DOWN
    for error_status, when in sorted({**errors, **COMMON_ERRORS}.items()):
        responses[str(error_status)] = _error(error_status, when)
    operation: Json = {
        "operationId": operation_id,
        "tags": [tag],
        "summary": summary,
        "description": description,
        "parameters": [parameter.parameter() for parameter in query or ()],
        "responses": responses,
    }
    if body is not None:
        operation["requestBody"] = body  # its schema is generated with all the others
    return operation


# --- what requests carry: read by the handlers, described here ---------------------------

PRODUCE_BODY = JsonBody[ProduceRequest](ProduceRequest, "Messages to produce.")
CONSUMER_BODY = JsonBody[ConsumerRequest](ConsumerRequest, "Consumer settings.", required=False)
ACK_BODY = JsonBody[AckRequest](AckRequest, "What to acknowledge.")
NACK_BODY = JsonBody[MessageIdsRequest](MessageIdsRequest, "What to redeliver.")
RESET_CURSOR_BODY = JsonBody[MessageIdRequest](MessageIdRequest, "Where to move the cursor.")
OFFLOAD_BODY = JsonBody[MessageIdRequest](MessageIdRequest, "Offload closed ledgers up to here.")
FAULT_BODY = JsonBody[FaultSetting](FaultSetting, "The fault.")
SUBSCRIPTION_START_BODY = JsonBody[str | StartMessageId](
    SubscriptionStart,
    "Pulsar's form of the start, instead of messageId (not with it).",
    required=False,
)
PARTITIONS_BODY = JsonBody[int](PartitionCount, "The number of partitions.")
NEW_PARTITIONS_BODY = JsonBody[int](PartitionCount, "The new number of partitions.")
TENANT_BODY = JsonBody[TenantInfo](TenantInfo, "The tenant (optional).", required=False)
POLICIES_BODY = JsonBody[dict[str, Any]](NamespacePolicies, "Ignored (optional).", required=False)

MAX_MESSAGES = IntQuery(
    "maxMessages", "Most entries to return the messages of (a batch comes whole).", 100, 1, 1000
)
TIMEOUT_MS = IntQuery("timeoutMs", "Longest wait; 0 answers at once.", 1000, 0, 30_000)
START_MESSAGE_ID = PatternQuery(
    "messageId",
    "Start position: earliest, latest or L:E (inclusive).",
    r"^(earliest|latest|[0-9]+:[0-9]+)$",
    "latest",
)
FORCE_TOPIC_DELETE = FlagQuery("force", "Close connected consumers first.")
RESTART_MODE = ChoiceQuery("mode", "The kind of restart.", RESTART_MODES, "graceful")
#: The longest a restarted broker may be asked to stay down.
MAX_DOWNTIME_MS = 3_600_000
DOWNTIME_MS = IntQuery(
    "downtimeMs", "How long it stays down before it starts again.", 0, 0, MAX_DOWNTIME_MS
)
CHECK_AUTO_CREATION = FlagQuery(
    "checkAllowAutoCreation",
    "A missing topic answers 0 when auto-creation is on, or, with "
    "allowAutoTopicCreationType=partitioned, is created partitioned.",
)
FORCE_UPDATE_PARTITIONS = FlagQuery("force", "Accepted; no effect.")
FORCE_PARTITIONS_DELETE = FlagQuery("force", "Close connected consumers first.")
PER_PARTITION = FlagQuery("perPartition", "Include each partition's stats.", True)
FORCE_TENANT_DELETE = FlagQuery("force", "Delete its namespaces first.")
FORCE_NAMESPACE_DELETE = FlagQuery("force", "Delete its topics first.")
TOPICS_MODE = ChoiceQuery(
    "mode",
    "Which topics; NON_PERSISTENT answers [].",
    ("PERSISTENT", "NON_PERSISTENT", "ALL"),
    "PERSISTENT",
)


# --- components --------------------------------------------------------------------------


def _name_parameter(name: str, description: str) -> Json:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": {"type": "string", "pattern": NAME_PATTERN},
    }


def _parameters() -> Json:
    return {
        "tenant": _name_parameter("tenant", "Tenant of the topic or namespace."),
        "namespace": _name_parameter("namespace", "Namespace within the tenant."),
        "topic": _name_parameter("topic", "Local name of the persistent topic."),
        "subscription": _name_parameter("subscription", "Subscription name."),
        "consumerId": {
            "name": "consumerId",
            "in": "path",
            "required": True,
            "description": "Opaque consumer session id returned by consumer creation.",
            "schema": {"type": "string", "minLength": 1},
        },
        "timestampMs": {
            "name": "timestampMs",
            "in": "path",
            "required": True,
            "description": "Epoch milliseconds.",
            "schema": {"type": "integer", "format": "int64", "minimum": 0},
        },
        "bundle": {
            "name": "bundle",
            "in": "path",
            "required": True,
            "description": "A namespace bundle, `0x{lower}_0x{upper}` (8 lowercase hex digits "
            "each): one of the defaultNumberOfNamespaceBundles equal ranges of the CRC32 of "
            "the full topic name, e.g. `0x00000000_0x40000000` of 4.",
            "schema": {"type": "string", "pattern": BUNDLE_PATTERN},
        },
        "index": {
            "name": "index",
            "in": "path",
            "required": True,
            "description": "A broker's index in the cluster: 0 .. brokers - 1.",
            "schema": {"type": "integer", "format": "int32", "minimum": 0},
        },
    }


def _headers() -> Json:
    return {
        "RetryAfter": {
            "description": "Whole seconds to wait before retrying.",
            "required": True,
            "schema": {"type": "integer", "minimum": 1},
        },
        "Location": {
            "description": "The same path and query on the owning broker: its httpUrl (see "
            "GET /admin/v2/brokerlab/brokers) followed by this request's path and query.",
            "required": True,
            "schema": {"type": "string", "format": "uri"},
        },
    }


# --- routes ------------------------------------------------------------------------------

_TOPIC = "/persistent/{tenant}/{namespace}/{topic}"
_ADMIN_TOPIC = "/admin/v2" + _TOPIC
_SUBSCRIPTION = _ADMIN_TOPIC + "/subscription/{subscription}"
_CONSUMER = "/consumers/{consumerId}"


def _produce_routes() -> list[tuple[str, str, Json]]:
    produce = _operation(
        "produce",
        "produce",
        "Produce messages",
        "Stores the messages durably under the configured sync mode, all or none; a 200 "
        "means every stored message will reach every subscription that existed then. "
        "Auto-creates the topic when allowAutoTopicCreation=true.",
        body=PRODUCE_BODY,
        redirect=_NOT_OWNER,
        success=(200, _json_answer("Stored.", _schema("ProduceResponse"))),
        errors={
            400: f"{_BAD_TOPIC}; body not an object; messages missing or empty; a field of "
            "the wrong type or over its limit; bad base64.",
            404: _NO_TOPIC,
            409: _PARTITIONED_NAME + " Nothing is stored.",
            413: _BODY_TOO_LARGE + " Or a payload over maxMessageSize, or more than "
            "maxMessagesPerProduceRequest messages, or a batch's payloads over maxMessageSize "
            "together. Nothing is stored.",
            503: "Storage fault or timeout, or the bookie is read-only; nothing is stored.",
        },
    )
    return [("post", "/topics" + _TOPIC, produce)]


def _subscription_routes() -> list[tuple[str, str, Json]]:
    reset_errors = {
        400: "Bad topic or subscription name, or a bad position.",
        404: "Unknown topic or subscription.",
        503: "Storage fault or timeout; the cursor did not move.",
    }
    reset_text = (
        "Moves the cursor; consumers stay connected, their receiver queues and "
        "pending acks are dropped, and dispatch goes on from the new position."
    )
    return [
        (
            "put",
            _SUBSCRIPTION,
            _operation(
                "createSubscription",
                "subscriptions",
                "Create a subscription",
                "Creates the subscription with no consumers (and the topic when missing and "
                "allowAutoTopicCreation=true).",
                query=[START_MESSAGE_ID],
                body=SUBSCRIPTION_START_BODY,
                redirect=_NOT_OWNER + " Not on a partitioned topic's name: each partition is "
                "reached at its owner.",
                success=(204, _no_content("Created.")),
                errors={
                    400: "Bad topic or subscription name, or a bad messageId; a body not "
                    "one of the SubscriptionStart forms, or given with messageId; a "
                    "message id on a partitioned topic.",
                    404: _NO_TOPIC,
                    409: "The subscription already exists (on the topic, or on a partition "
                    "of the partitioned topic); a partition past its count.",
                    413: _BODY_TOO_LARGE,
                    503: "Storage fault or timeout; nothing was created.",
                },
            ),
        ),
        (
            "delete",
            _SUBSCRIPTION,
            _operation(
                "deleteSubscription",
                "subscriptions",
                "Delete a subscription",
                "Removes the subscription and its cursor.",
                redirect=_NOT_OWNER,
                success=(204, _no_content("Deleted.")),
                errors={
                    400: "Bad topic or subscription name.",
                    404: "Unknown topic or subscription.",
                    412: "Consumers are connected to the subscription.",
                    503: "Storage fault or timeout; the subscription still exists.",
                },
            ),
        ),
        (
            "post",
            _SUBSCRIPTION + "/resetcursor/{timestampMs}",
            _operation(
                "resetCursorToTimestamp",
                "subscriptions",
                "Reset a cursor to a time",
                "The next message delivered is the first with publishTime >= timestampMs. "
                + reset_text,
                redirect=_NOT_OWNER,
                success=(204, _no_content("Moved.")),
                errors=reset_errors,
            ),
        ),
        (
            "post",
            _SUBSCRIPTION + "/resetcursor",
            _operation(
                "resetCursorToMessageId",
                "subscriptions",
                "Reset a cursor to a message id",
                "The message at messageId (or the first stored after it) is the next "
                "delivered. " + reset_text,
                body=RESET_CURSOR_BODY,
                redirect=_NOT_OWNER,
                success=(204, _no_content("Moved.")),
                errors={**reset_errors, 413: _BODY_TOO_LARGE},
            ),
        ),
    ]


def _consumer_routes() -> list[tuple[str, str, Json]]:
    message_ids_errors = {
        400: "Body not an object; messageIds missing, empty or with an id neither L:E nor L:E:I.",
        404: _UNKNOWN_CONSUMER,
        413: _BODY_TOO_LARGE,
    }
    return [
        (
            "post",
            "/consumers" + _TOPIC + "/{subscription}",
            _operation(
                "createConsumer",
                "consumers",
                "Create a consumer",
                "Opens a consumer session on the subscription, creating the subscription (and "
                "the topic, when allowAutoTopicCreation=true) if missing.",
                body=CONSUMER_BODY,
                redirect=_NOT_OWNER,
                success=(200, _json_answer("Created.", _schema("ConsumerCreated"))),
                errors={
                    400: "Bad topic or subscription name; a field of the wrong type, "
                    "unknown value or out of range.",
                    404: _NO_TOPIC,
                    409: "Exclusive subscription already has a consumer, or the type "
                    "differs from the type of its connected consumers. " + _PARTITIONED_NAME,
                    413: _BODY_TOO_LARGE,
                    503: "Storage fault or timeout; no consumer was created.",
                },
            ),
        ),
        (
            "get",
            _CONSUMER + "/messages",
            _operation(
                "receiveMessages",
                "consumers",
                "Receive messages (long poll)",
                "Drains the receiver queue: returns as soon as at least one message is "
                "available, or empty after timeoutMs. Returned messages are pending until "
                "acked, nacked or redelivered.",
                query=[MAX_MESSAGES, TIMEOUT_MS],
                success=(200, _json_answer("Messages, possibly none.", _schema("ReceiveResponse"))),
                errors={
                    400: "maxMessages or timeoutMs not an integer or out of range.",
                    404: _UNKNOWN_CONSUMER,
                },
            ),
        ),
        (
            "post",
            _CONSUMER + "/ack",
            _operation(
                "acknowledge",
                "consumers",
                "Acknowledge messages",
                "Acks messages pending for this consumer; other ids are ignored.",
                body=ACK_BODY,
                success=(204, _no_content("Applied.")),
                errors={
                    **message_ids_errors,
                    400: message_ids_errors[400] + " Unknown ackType; Cumulative on Shared "
                    "or Key_Shared.",
                    503: "Storage fault or timeout; nothing of the ack was applied: the "
                    "messages stay held by the consumer, and a retry records it.",
                },
            ),
        ),
        (
            "post",
            _CONSUMER + "/nack",
            _operation(
                "negativeAcknowledge",
                "consumers",
                "Negatively acknowledge messages",
                "Redelivers the listed pending messages after negativeAckRedeliveryDelayMillis "
                "with redeliveryCount + 1; other ids are ignored.",
                body=NACK_BODY,
                success=(204, _no_content("Scheduled.")),
                errors=message_ids_errors,
            ),
        ),
        (
            "post",
            _CONSUMER + "/redeliverUnacknowledged",
            _operation(
                "redeliverUnacknowledged",
                "consumers",
                "Redeliver every unacked message",
                "Everything dispatched to this consumer and not acked goes back to the "
                "subscription and is delivered again with redeliveryCount + 1.",
                success=(204, _no_content("Done.")),
                errors={404: _UNKNOWN_CONSUMER},
            ),
        ),
        (
            "delete",
            _CONSUMER,
            _operation(
                "closeConsumer",
                "consumers",
                "Close a consumer",
                "Its unacked and queued messages go back to the subscription (the replay "
                "queue) for the remaining or next consumers.",
                success=(204, _no_content("Closed.")),
                errors={404: _UNKNOWN_CONSUMER},
            ),
        ),
    ]


def _topic_routes() -> list[tuple[str, str, Json]]:
    load_fault = "Storage fault or timeout while loading the topic."
    return [
        (
            "get",
            "/admin/v2/persistent/{tenant}/{namespace}",
            _operation(
                "listTopics",
                "topics",
                "List the topics of a namespace",
                "Every stored topic of the namespace, loaded or not; [] when none.",
                success=(200, _json_answer("Full topic names.", _schema("TopicList"))),
                errors={
                    400: "Bad tenant or namespace name.",
                    503: "Storage fault or timeout while listing.",
                },
            ),
        ),
        (
            "delete",
            _ADMIN_TOPIC,
            _operation(
                "deleteTopic",
                "topics",
                "Delete a topic",
                "Deletes the topic with its subscriptions, cursors and ledgers.",
                query=[FORCE_TOPIC_DELETE],
                redirect=_NOT_OWNER,
                success=(204, _no_content("Deleted.")),
                errors={
                    400: f"{_BAD_TOPIC}; force not true or false.",
                    404: _UNKNOWN_TOPIC,
                    412: "Consumers are connected and force is not true.",
                    503: "Storage fault or timeout; nothing was deleted (the topic was unloaded).",
                },
            ),
        ),
        (
            "get",
            _ADMIN_TOPIC + "/stats",
            _operation(
                "getTopicStats",
                "topics",
                "Topic stats",
                "Pulsar's field names, exactly these fields (no publishers).",
                redirect=_NOT_OWNER,
                success=(200, _json_answer("Stats.", _schema("TopicStats"))),
                errors={400: _BAD_TOPIC + ".", 404: _UNKNOWN_TOPIC, 503: load_fault},
            ),
        ),
        (
            "get",
            _ADMIN_TOPIC + "/internalStats",
            _operation(
                "getTopicInternalStats",
                "topics",
                "Managed-ledger internal stats",
                "Ledgers and cursors of the topic.",
                redirect=_NOT_OWNER,
                success=(
                    200,
                    _json_answer("Internal stats.", _schema("PersistentTopicInternalStats")),
                ),
                errors={400: _BAD_TOPIC + ".", 404: _UNKNOWN_TOPIC, 503: load_fault},
            ),
        ),
        (
            "get",
            _ADMIN_TOPIC + "/lastMessageId",
            _operation(
                "getLastMessageId",
                "topics",
                "Last message id",
                "Loads a topic that is not loaded, which asks the storage for the last entry "
                "of its last ledger.",
                redirect=_NOT_OWNER,
                success=(200, _json_answer("Last message id.", _schema("TopicLastMessageId"))),
                errors={400: _BAD_TOPIC + ".", 404: _UNKNOWN_TOPIC, 503: load_fault},
            ),
        ),
        (
            "put",
            _ADMIN_TOPIC + "/offload",
            _operation(
                "triggerOffload",
                "topics",
                "Offload to tiered storage",
                "Offloads every closed ledger up to messageId, before answering.",
                body=OFFLOAD_BODY,
                redirect=_NOT_OWNER,
                success=(204, _no_content("Offloaded.")),
                errors={
                    400: f"{_BAD_TOPIC}; messageId missing or not L:E.",
                    404: _UNKNOWN_TOPIC,
                    409: "An offload of this topic is already running.",
                    413: _BODY_TOO_LARGE,
                    503: "Storage fault or timeout; nothing was marked offloaded.",
                },
            ),
        ),
        (
            "get",
            _ADMIN_TOPIC + "/offload",
            _operation(
                "getOffloadStatus",
                "topics",
                "Offload status",
                "State of the topic's last offload.",
                redirect=_NOT_OWNER,
                success=(200, _json_answer("Status.", _schema("OffloadStatus"))),
                errors={400: _BAD_TOPIC + ".", 404: _UNKNOWN_TOPIC},
            ),
        ),
        (
            "post",
            "/admin/v2/namespaces/{tenant}/{namespace}/unload",
            _operation(
                "unloadNamespace",
                "namespaces",
                "Unload a namespace",
                "Unloads every topic of the namespace as a bundle move or broker failover "
                "would: consumers are closed (unacked messages return to the replay queue), "
                "cache entries are dropped, the next request reloads the topic from storage. "
                "With several brokers: every bundle of the namespace at its owner, each "
                "released, so the next lookup assigns it to another live broker if there is "
                "one.",
                success=(204, _no_content("Unloaded.")),
                errors={400: "Bad tenant or namespace name."},
            ),
        ),
    ]


def _broker_routes() -> list[tuple[str, str, Json]]:
    faults = "/admin/v2/brokerlab/faults"
    return [
        (
            "get",
            "/admin/v2/brokers/health",
            _operation(
                "healthCheck",
                "broker",
                "Health check",
                "Answers the text `ok`.",
                down=False,
                success=(
                    200,
                    _text_answer("Healthy.", "text/plain", {"type": "string", "enum": ["ok"]}),
                ),
                errors={},
            ),
        ),
        (
            "get",
            "/admin/v2/broker-stats/cache",
            _operation(
                "getCacheStats",
                "broker",
                "Entry cache stats",
                "This broker's own cache. Counters since its first start, continued across "
                "its restarts (each restart starts with an empty cache: sizeBytes and entries "
                "drop, the counters do not); while it is down, its last incarnation's.",
                down=False,
                success=(200, _json_answer("Cache stats.", _schema("CacheStats"))),
                errors={503: "The broker has not started yet."},
            ),
        ),
        (
            "get",
            "/admin/v2/broker-stats/storage",
            _operation(
                "getStorageStats",
                "broker",
                "Storage stats",
                "Counters since start.",
                down=False,
                success=(200, _json_answer("Storage stats.", _schema("StorageStats"))),
                errors={},
            ),
        ),
        (
            "get",
            "/admin/v2/broker-stats/trace",
            _operation(
                "getTraceStats",
                "broker",
                "Access trace stats",
                "Whether an access trace is recorded, and its counters since start.",
                down=False,
                success=(200, _json_answer("Trace stats.", _schema("TraceStats"))),
                errors={},
            ),
        ),
        (
            "get",
            "/metrics",
            _operation(
                "getMetrics",
                "broker",
                "Prometheus metrics",
                "Prometheus text format (`text/plain; version=0.0.4`). Every series carries "
                "a `broker` label, this broker's index in its cluster (0 alone). Cache "
                "series and latency histograms continue across the broker's restarts, "
                "dispatch counters start again from 0; while the broker is down only the "
                "storage and trace series are given.",
                down=False,
                success=(200, _text_answer("Metrics.", "text/plain")),
                errors={},
            ),
        ),
        (
            "get",
            "/dashboard",
            _operation(
                "getDashboard",
                "broker",
                "Live dashboard",
                "The dashboard page; needs no external network.",
                down=False,
                success=(200, _text_answer("The page.", "text/html")),
                errors={},
            ),
        ),
        (
            "get",
            "/dashboard/data",
            _operation(
                "getDashboardData",
                "broker",
                "The dashboard's snapshot",
                "Counters since start that the dashboard charts: cache stats, storage "
                "stats, message totals, backlog and the top topics by backlog; this broker's "
                "index and every broker of the cluster with its cache stats.",
                success=(200, _json_answer("The snapshot.", _schema("DashboardData"))),
                errors={},
            ),
        ),
        (
            "get",
            "/openapi.json",
            _operation(
                "getOpenApi",
                "broker",
                "This contract as OpenAPI 3.1",
                "This document.",
                down=False,
                success=(200, _json_answer("OpenAPI 3.1 document.", {"type": "object"})),
                errors={},
            ),
        ),
        (
            "put",
            faults,
            _operation(
                "setFault",
                "brokerlab",
                "Set the fault of one storage operation",
                "Replaces the operation's setting; errorRate 0 with delayMs 0 clears it.",
                body=FAULT_BODY,
                down=False,
                success=(204, _no_content("Set.")),
                errors={
                    400: "Body not an object; operation missing or unknown; errorRate or "
                    "delayMs of the wrong type or out of range.",
                    413: _BODY_TOO_LARGE,
                },
            ),
        ),
        (
            "get",
            faults,
            _operation(
                "getFaults",
                "brokerlab",
                "Current fault settings",
                "One key per operation that has a setting, with its injected error count.",
                down=False,
                success=(200, _json_answer("Settings.", _schema("FaultSettings"))),
                errors={},
            ),
        ),
        (
            "delete",
            faults,
            _operation(
                "clearFaults",
                "brokerlab",
                "Clear every fault",
                "Removes every setting.",
                down=False,
                success=(204, _no_content("Cleared.")),
                errors={},
            ),
        ),
    ]


# --- the brokers of the cluster (brokerlab serve --brokers N) ----------------------------


def _cluster_routes() -> list[tuple[str, str, Json]]:
    brokers = "/admin/v2/brokerlab/brokers"
    return [
        (
            "get",
            brokers,
            _operation(
                "listBrokers",
                "cluster",
                "The brokers of the cluster",
                "Each broker's state, URLs, incarnation, restarts, owned bundles and loaded "
                "topics, in index order; one broker when not run with --brokers.",
                down=False,
                success=(
                    200,
                    _json_answer("The brokers.", {"type": "array", "items": _schema("Broker")}),
                ),
                errors={},
            ),
        ),
        (
            "post",
            brokers + "/{index}/restart",
            _operation(
                "restartBroker",
                "cluster",
                "Restart one broker",
                "graceful: its bundles are unloaded one by one and handed over (clients told "
                "to look the topics up again); kill: connections cut at once, ledgers left "
                "open for the next owner to recover, bundles kept until "
                "metadataStoreSessionTimeoutMillis passes or it starts again. It stays down "
                "downtimeMs, then starts with an empty cache (its cache counters continue). "
                "Asked of another broker the answer comes once that broker is up again "
                "(200). Asked of the broker itself the answer is 202 at once, the "
                "RestartAccepted object (one success status is listed per route; "
                "docs/api.md gives both); a restart already under way then makes it do "
                "nothing.",
                query=[RESTART_MODE, DOWNTIME_MS],
                down=False,
                success=(200, _json_answer("Up again.", _schema("Broker"))),
                errors={
                    400: "index not a number or not a broker of the cluster; an unknown "
                    "mode; downtimeMs not an integer or out of range.",
                    409: "That broker is restarting already.",
                },
            ),
        ),
    ]


# --- Pulsar's admin and lookup routes (broker/http/pulsar_admin.py) ----------------------


def _pulsar_admin_routes() -> list[tuple[str, str, Json]]:
    partitions = _ADMIN_TOPIC + "/partitions"
    namespace = "/admin/v2/namespaces/{tenant}/{namespace}"
    fault = "Storage fault or timeout."
    bad_count = "A body that is not a JSON integer; a count below 1 or over the limit"
    names = _schema("NameList")
    return [
        (
            "put",
            namespace + "/unload",
            _operation(
                "unloadNamespacePut",
                "namespaces",
                "Unload a namespace (Pulsar's verb)",
                "The same as POST on this path.",
                success=(204, _no_content("Unloaded.")),
                errors={400: "Bad tenant or namespace name."},
            ),
        ),
        (
            "put",
            namespace + "/{bundle}/unload",
            _operation(
                "unloadNamespaceBundle",
                "namespaces",
                "Unload a namespace bundle",
                "Unloads the bundle's topics at its owner, as the namespace unload does, and "
                "releases it: the next lookup of its topics (or request needing one) assigns "
                "it to another live broker when there is one. A killed broker's bundle is "
                "released at once, before its session expires. A bundle without an owner: "
                "nothing to do.",
                success=(204, _no_content("Unloaded and released.")),
                errors={
                    400: "Bad tenant or namespace name; a bundle that is not one of the "
                    "cluster's defaultNumberOfNamespaceBundles.",
                },
            ),
        ),
        (
            "put",
            _ADMIN_TOPIC + "/unload",
            _operation(
                "unloadTopic",
                "topics",
                "Unload a topic",
                "Closes its consumers, drops its cache entries; the next request reloads "
                "it. A partitioned topic: every partition, each at its owner.",
                redirect=_NOT_OWNER + " Not on a partitioned topic's name: each partition is "
                "reached at its owner.",
                success=(204, _no_content("Unloaded.")),
                errors={
                    400: _BAD_TOPIC + ".",
                    404: "Neither a topic nor a partitioned topic.",
                    503: fault,
                },
            ),
        ),
        (
            "get",
            _ADMIN_TOPIC + "/subscriptions",
            _operation(
                "getSubscriptions",
                "topics",
                "List subscriptions",
                "The topic's subscription names; a partitioned topic's, of every partition.",
                redirect=_NOT_OWNER + " Not on a partitioned topic's name: each partition is "
                "reached at its owner.",
                success=(200, _json_answer("Subscription names.", names)),
                errors={400: _BAD_TOPIC + ".", 404: _UNKNOWN_TOPIC, 503: fault},
            ),
        ),
        (
            "put",
            partitions,
            _operation(
                "createPartitionedTopic",
                "partitioned topics",
                "Create a partitioned topic",
                "Its partitions {topic}-partition-{i} exist from now on (created on use).",
                body=PARTITIONS_BODY,
                success=(204, _no_content("Created.")),
                errors={
                    400: f"{_BAD_TOPIC}, or one ending in -partition-<n>. {bad_count}; "
                    "partition names over 128 characters.",
                    409: "The partitioned topic exists (or is being deleted), or a topic of "
                    "that name does.",
                    413: _BODY_TOO_LARGE,
                    503: fault + " Nothing was created.",
                },
            ),
        ),
        (
            "get",
            partitions,
            _operation(
                "getPartitionedMetadata",
                "partitioned topics",
                "Partitioned-topic metadata",
                "The count of a partitioned topic; 0 for a topic. What Pulsar clients ask "
                "before producing or consuming.",
                query=[CHECK_AUTO_CREATION],
                success=(
                    200,
                    _json_answer("The metadata.", _schema("PartitionedTopicMetadata")),
                ),
                errors={
                    400: f"{_BAD_TOPIC}; checkAllowAutoCreation not true or false.",
                    404: "Neither a topic nor a partitioned topic, and no auto-creation applies.",
                    503: fault,
                },
            ),
        ),
        (
            "post",
            partitions,
            _operation(
                "updatePartitionedTopic",
                "partitioned topics",
                "Raise the partition count",
                "Counts only grow; new partitions get partition 0's subscriptions.",
                query=[FORCE_UPDATE_PARTITIONS],
                body=NEW_PARTITIONS_BODY,
                success=(204, _no_content("Updated.")),
                errors={
                    400: f"{_BAD_TOPIC}. {bad_count}; force not true or false.",
                    409: "Not a partitioned topic; fewer partitions than it has.",
                    413: _BODY_TOO_LARGE,
                    503: fault,
                },
            ),
        ),
        (
            "delete",
            partitions,
            _operation(
                "deletePartitionedTopic",
                "partitioned topics",
                "Delete a partitioned topic",
                "With every partition's topic. Marked deleted first: a retry completes a "
                "delete that failed half-way.",
                query=[FORCE_PARTITIONS_DELETE],
                success=(204, _no_content("Deleted.")),
                errors={
                    400: f"{_BAD_TOPIC}; force not true or false.",
                    404: "Not a partitioned topic.",
                    412: "A partition has connected consumers and force is not true.",
                    503: fault,
                },
            ),
        ),
        (
            "get",
            _ADMIN_TOPIC + "/partitioned-stats",
            _operation(
                "getPartitionedStats",
                "partitioned topics",
                "Partitioned-topic stats",
                "Topic stats added up over the partitions, and each partition's.",
                query=[PER_PARTITION],
                success=(200, _json_answer("Stats.", _schema("PartitionedTopicStats"))),
                errors={
                    400: f"{_BAD_TOPIC}; perPartition not true or false.",
                    404: "Not a partitioned topic.",
                    503: "Storage fault or timeout while loading a partition.",
                },
            ),
        ),
        (
            "get",
            "/admin/v2/persistent/{tenant}/{namespace}/partitioned",
            _operation(
                "listPartitionedTopics",
                "partitioned topics",
                "List partitioned topics",
                "The namespace's partitioned topics, full names.",
                success=(200, _json_answer("Full names.", names)),
                errors={400: "Bad tenant or namespace name.", 503: fault},
            ),
        ),
        (
            "get",
            "/lookup/v2/topic" + _TOPIC,
            _operation(
                "lookupTopic",
                "lookup",
                "Look a topic up",
                "The URLs of the broker owning the topic's bundle (assigned now if it has no "
                "owner: to the live broker owning the fewest bundles); brokerUrl null when "
                "the binary protocol is off.",
                success=(200, _json_answer("LookupData.", _schema("LookupData"))),
                errors={
                    400: _BAD_TOPIC + ".",
                    404: "No such topic and allowAutoTopicCreation=false.",
                    503: fault + " Or no broker of the cluster is up.",
                },
            ),
        ),
        (
            "get",
            "/admin/v2/clusters",
            _operation(
                "getClusters",
                "tenants",
                "List clusters",
                "The one cluster, clusterName.",
                down=False,
                success=(200, _json_answer("Cluster names.", names)),
                errors={},
            ),
        ),
        (
            "get",
            "/admin/v2/tenants",
            _operation(
                "getTenants",
                "tenants",
                "List tenants",
                "public exists from the start.",
                success=(200, _json_answer("Tenant names.", names)),
                errors={503: fault},
            ),
        ),
        (
            "put",
            "/admin/v2/tenants/{tenant}",
            _operation(
                "createTenant",
                "tenants",
                "Create a tenant",
                "Registers the tenant; topics never need one.",
                body=TENANT_BODY,
                success=(204, _no_content("Created.")),
                errors={
                    400: "Bad tenant name; a body not a TenantInfo object; a cluster other "
                    "than clusterName.",
                    409: "The tenant exists.",
                    413: _BODY_TOO_LARGE,
                    503: fault + " Nothing was created.",
                },
            ),
        ),
        (
            "get",
            "/admin/v2/tenants/{tenant}",
            _operation(
                "getTenant",
                "tenants",
                "A tenant's TenantInfo",
                "Its admin roles and clusters.",
                success=(200, _json_answer("The tenant.", _schema("TenantInfo"))),
                errors={400: "Bad tenant name.", 404: "No such tenant.", 503: fault},
            ),
        ),
        (
            "delete",
            "/admin/v2/tenants/{tenant}",
            _operation(
                "deleteTenant",
                "tenants",
                "Delete a tenant",
                "force=true deletes its namespaces (and their topics) first.",
                query=[FORCE_TENANT_DELETE],
                success=(204, _no_content("Deleted.")),
                errors={
                    400: "Bad tenant name; force not true or false.",
                    404: "No such tenant.",
                    409: "The tenant has namespaces and force is not true.",
                    503: fault,
                },
            ),
        ),
        (
            "get",
            "/admin/v2/namespaces/{tenant}",
            _operation(
                "getNamespaces",
                "namespaces",
                "List a tenant's namespaces",
                "tenant/namespace names.",
                success=(200, _json_answer("Namespace names.", names)),
                errors={400: "Bad tenant name.", 404: "No such tenant.", 503: fault},
            ),
        ),
        (
            "put",
            namespace,
            _operation(
                "createNamespace",
                "namespaces",
                "Create a namespace",
                "Registers the namespace; topics never need one.",
                body=POLICIES_BODY,
                success=(204, _no_content("Created.")),
                errors={
                    400: "Bad tenant or namespace name; a body not a JSON object.",
                    404: "No such tenant.",
                    409: "The namespace exists.",
                    413: _BODY_TOO_LARGE,
                    503: fault + " Nothing was created.",
                },
            ),
        ),
        (
            "delete",
            namespace,
            _operation(
                "deleteNamespace",
                "namespaces",
                "Delete a namespace",
                "force=true deletes its partitioned topics and topics first.",
                query=[FORCE_NAMESPACE_DELETE],
                success=(204, _no_content("Deleted.")),
                errors={
                    400: "Bad tenant or namespace name; force not true or false.",
                    404: "No such namespace.",
                    409: "The namespace holds topics and force is not true.",
                    503: fault,
                },
            ),
        ),
        (
            "get",
            namespace + "/topics",
            _operation(
                "getNamespaceTopics",
                "namespaces",
                "List a namespace's topics",
                "As GET /admin/v2/persistent/{tenant}/{namespace}, partitions included.",
                query=[TOPICS_MODE],
                success=(200, _json_answer("Full topic names.", _schema("TopicList"))),
                errors={400: "Bad tenant or namespace name; an unknown mode.", 503: fault},
            ),
        ),
    ]


def _routes() -> list[tuple[str, str, Json]]:
    """Every operation of the contract: (method, path template, operation)."""
    return [
        *_produce_routes(),
        *_subscription_routes(),
        *_consumer_routes(),
        *_topic_routes(),
        *_pulsar_admin_routes(),
        *_broker_routes(),
        *_cluster_routes(),
    ]


#: Path prefixes the app serves outside this document: the WebSocket API's upgrades
#: (``/ws/v2/...``), which OpenAPI cannot describe; docs/api.md documents them.
NOT_IN_SPEC = ("/ws/",)

#: The route table: each operation id's method and path. The app's handlers attach to
#: operations by id (:class:`broker.http.contract.RouteTable`), so what is served is
#: what this document says.
ROUTES: dict[str, tuple[str, str]] = {
    operation["operationId"]: (method, path) for method, path, operation in _routes()
}


class _SchemaGenerator(GenerateJsonSchema):
    """pydantic's JSON Schema, without a title on every property."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


#: The answers' types (``broker/http/schemas.py``), and request types an answer names:
#: each becomes a component named as its class, which the operations refer to.
_COMPONENTS: tuple[Any, ...] = (*ANSWERS, TenantInfo)


def _generate_schemas(paths: Json, schemas: Json) -> None:
    """Every schema of the document, generated in one pass by pydantic: the answers'
    components, and each operation's JsonBody replaced by its Request Body Object
    (named types become components)."""
    bodies: list[tuple[Json, JsonBody[Any]]] = [
        (operation, operation["requestBody"])
        for item in paths.values()
        for operation in item.values()
        if "requestBody" in operation
    ]
    adapters = [body.adapter for _, body in bodies]
    adapters += [TypeAdapter(kind) for kind in _COMPONENTS]
    mode: Literal["validation"] = "validation"
    inputs = [(index, mode, adapter) for index, adapter in enumerate(adapters)]
    generated, definitions = TypeAdapter.json_schemas(
        inputs, ref_template="#/components/schemas/{model}", schema_generator=_SchemaGenerator
    )
    for name, schema in definitions.get("$defs", {}).items():
        for field, default in DEFAULTS.get(name, {}).items():
            schema["properties"][field]["default"] = default
        schemas[name] = schema
    for index, (operation, body) in enumerate(bodies):
        operation["requestBody"] = {
            "description": body.description,
            "required": body.required,
            "content": {"application/json": {"schema": generated[(index, "validation")]}},
        }


def _paths() -> Json:
    paths: Json = {}
    for method, path, operation in _routes():
        path_parameters = [_ref("parameters", name) for name in re.findall(r"{(\w+)}", path)]
        operation["parameters"] = path_parameters + operation["parameters"]
        if method != "get":
            responses = operation["responses"]
            for status, when in CHANGING_ERRORS.items():
                responses[str(status)] = _error(status, when)
            operation["responses"] = dict(sorted(responses.items()))
        paths.setdefault(path, {})[method] = operation
    return paths


def openapi_spec() -> dict[str, Any]:
    """The whole contract as an OpenAPI 3.1 document (a fresh dict on each call)."""
    paths = _paths()
    schemas: Json = {}
    _generate_schemas(paths, schemas)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "brokerlab",
            "version": "0.1.0",
            "description": "HTTP contract of brokerlab, a Pulsar broker emulator. The prose "
            "twin is docs/api.md. Every non-2xx answer has the Error body. In a cluster of "
            "several brokers, routes serving a topic another broker owns answer 307 to it.",
        },
        "servers": [
            {
                "url": "/",
                "description": "The broker serving this document (default http://127.0.0.1:8080).",
            }
        ],
        "tags": [
            {"name": "produce", "description": "Storing messages."},
            {"name": "subscriptions", "description": "Subscriptions and their cursors."},
            {"name": "consumers", "description": "Consumer sessions: receive and ack."},
            {"name": "topics", "description": "Topic administration and stats."},
            {"name": "namespaces", "description": "Namespace administration."},
            {"name": "partitioned topics", "description": "Pulsar's partitioned topics."},
            {"name": "lookup", "description": "Which broker serves a topic (its owner)."},
            {"name": "tenants", "description": "Clusters and tenants, as Pulsar's admin API."},
            {"name": "broker", "description": "Broker health, stats and pages."},
            {"name": "brokerlab", "description": "Extensions: storage fault injection."},
            {"name": "cluster", "description": "Extensions: the brokers of the cluster."},
        ],
        "paths": paths,
        # a token when authenticationEnabled=true; none otherwise (the default)
        "security": [{"bearerAuth": []}, {}],
        "components": {
            "securitySchemes": {
                "bearerAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "JWT",
                    "description": "Pulsar's token authentication: a JWT whose `sub` claim "
                    "(tokenAuthClaim) is the role, signed with tokenSecretKey (HS256) or the "
                    "private key of tokenPublicKey (RS256). Make them with `brokerlab token`.",
                }
            },
            "parameters": _parameters(),
            "headers": _headers(),
            "schemas": dict(sorted(schemas.items())),
        },
    }
