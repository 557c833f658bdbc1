"""Pulsar's namespace and topic policy routes for retention, message TTL and backlog
quotas (``admin/v2/Namespaces``, ``PersistentTopics``), and a namespace's Policies
object, over the broker's policy store (``broker.dispatch.policies``).

Statuses are Pulsar's: a body that does not parse is 400; a value Pulsar's checks refuse
(a negative TTL, a retention with one limit 0, a quota over the retention) is 412; an
unknown namespace or topic is 404; an unset policy reads as 204 with no body (Pulsar's
``null``). Nothing is stored when a request is refused.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

import orjson
from aiohttp import web
from pydantic import ConfigDict, Field, with_config
from typing_extensions import TypedDict

from broker.dispatch.backlog_quota import (
    DESTINATION_STORAGE,
    MESSAGE_AGE,
    QUOTA_TYPES,
    default_quota,
    quota_json,
)
from broker.dispatch.errors import InvalidRequestError, NotFoundError, PreconditionFailedError
from broker.dispatch.names import TopicName, check_name_part
from broker.dispatch.ownership import bundle_boundaries
from broker.dispatch.policies import BACKLOG_QUOTA, MESSAGE_TTL, RETENTION
from broker.dispatch.service import BrokerService
from broker.http.app_state import NODE, SETTINGS
from broker.http.contract import (
    ADMIN_TOPIC,
    NAMESPACE,
    ChoiceQuery,
    FlagQuery,
    JsonBody,
    PatternQuery,
    RouteTable,
    Success,
)

api = RouteTable()
routes = api.routes

INT32_MAX = 2_147_483_647
INT64_MAX = 2**63 - 1
STRICT = ConfigDict(strict=True)


@with_config(STRICT)
class RetentionPolicies(TypedDict):
    """Pulsar's RetentionPolicies."""

    retentionTimeInMinutes: NotRequired[
        Annotated[int, Field(ge=-INT32_MAX, le=INT32_MAX, description="-1: no time limit.")]
    ]
    retentionSizeInMB: NotRequired[
        Annotated[int, Field(ge=-INT64_MAX, le=INT64_MAX, description="-1: no size limit.")]
    ]


@with_config(STRICT)
class BacklogQuota(TypedDict):
    """Pulsar's BacklogQuota."""

    limitSize: NotRequired[
        Annotated[int, Field(ge=-INT64_MAX, le=INT64_MAX, description="Bytes; -1: none.")]
    ]
    limit: NotRequired[
        Annotated[int, Field(ge=-INT64_MAX, le=INT64_MAX, description="Deprecated limitSize.")]
    ]
    limitTime: NotRequired[
        Annotated[int, Field(ge=-INT32_MAX, le=INT32_MAX, description="Seconds; -1: none.")]
    ]
    policy: Literal["producer_request_hold", "producer_exception", "consumer_backlog_eviction"]


RETENTION_BODY = JsonBody[RetentionPolicies](RetentionPolicies, "The retention policy.")
QUOTA_BODY = JsonBody[BacklogQuota](BacklogQuota, "The backlog quota.")
TTL_BODY = JsonBody[int](
    Annotated[int, Field(ge=-INT32_MAX, le=INT32_MAX, strict=True)],
    "The message TTL in seconds, a bare JSON number.",
)
QUOTA_TYPE = ChoiceQuery(
    "backlogQuotaType", "Which quota.", (DESTINATION_STORAGE, MESSAGE_AGE), DESTINATION_STORAGE
)
APPLIED = FlagQuery(
    "applied", "The policy that applies (the topic's, else its namespace's, else the broker's)."
)
TOPIC_TTL = PatternQuery(
    "messageTTL", "The message TTL in seconds (0: none); required.", r"^-?[0-9]{1,10}$", "0"
)


def _topic_ttl(request: web.Request) -> int:
    """The ``messageTTL`` query: 400 when absent or not an integer, 412 when negative or
    over Java's int, as Pulsar's checks answer."""
    raw = TOPIC_TTL.read(request)
    digits = raw[1:] if raw is not None and raw.startswith("-") else raw
    if digits is None or not digits.isascii() or not digits.isdigit() or len(digits) > 10:
        raise InvalidRequestError("query parameter messageTTL must be an integer (seconds)")
    ttl = int(raw or "0")
    if ttl < 0 or ttl > INT32_MAX:
        raise PreconditionFailedError("Invalid value for message TTL")
    return ttl


#: the 204 of a policy read
UNSET = "none is set (Pulsar's `null`): no body."
APPLIED_UNSET = "none is set on the topic and `applied` is `false` (Pulsar's `null`): no body."


def _json(data: Any) -> web.Response:
    return web.Response(body=orjson.dumps(data), content_type="application/json")


def _value_or_no_content(value: Any) -> web.Response:
    """Pulsar answers an unset policy with ``null``, which its REST layer sends as 204."""
    return web.Response(status=204) if value is None else _json(value)


def _service(request: web.Request) -> BrokerService:
    return request.app[NODE].running_service()


async def _namespace(request: web.Request) -> tuple[str, str]:
    """The namespace of the path; NotFoundError if it does not exist."""
    tenant = check_name_part("tenant", request.match_info["tenant"])
    namespace = check_name_part("namespace", request.match_info["namespace"])
    if not await _service(request).namespaces.namespace_exists(tenant, namespace):
        raise NotFoundError(f"Namespace {tenant}/{namespace} does not exist")
    return tenant, namespace


async def _topic(request: web.Request) -> TopicName:
    """The topic of the path (a topic or a partitioned topic); NotFoundError if it is
    neither."""
    info = request.match_info
    name = TopicName.of(info["tenant"], info["namespace"], info["topic"])
    partitions = _service(request).partitions
    if not await partitions.exists(name) and await partitions.metadata(name) is None:
        raise NotFoundError(f"Topic not found: {name}")
    return name


# ---------------------------------------------------------------------- checks


def _check_retention(retention: dict[str, Any]) -> None:
    """Pulsar's checks of a RetentionPolicies: limits of -1 or more, and either both 0 or
    neither. PreconditionFailedError otherwise."""
    minutes = retention["retentionTimeInMinutes"]
    megabytes = retention["retentionSizeInMB"]
    if megabytes < -1:
        raise PreconditionFailedError("Invalid retention policy: size limit must be >= -1")
    if minutes < -1:
        raise PreconditionFailedError("Invalid retention policy: time limit must be >= -1")
    if (minutes == 0) != (megabytes == 0):
        raise PreconditionFailedError(
            "Invalid retention policy: Setting a single time or size limit to 0 is invalid when "
            "one of the limits has a non-zero value. Use the value of -1 instead of 0 to ignore "
            "a specific limit. To disable retention both limits must be set to 0."
        )


def _quota_within_retention(
    quota: dict[str, Any] | None, retention: dict[str, Any] | None, default: dict[str, Any]
) -> bool:
    """Pulsar's ``checkBacklogQuota``: the destination_storage quota (``default``, the
    broker's, when there is none) must stay below a retention's positive limits, its size
    below the retention size and its time below the retention time."""
    if retention is None:
        return True
    minutes = retention["retentionTimeInMinutes"]
    megabytes = retention["retentionSizeInMB"]
    if megabytes <= 0 and minutes <= 0:
        return True
    if quota is None:
        quota = default
    if megabytes > 0 and int(quota.get("limitSize", -1)) >= megabytes * 1024 * 1024:
        return False
    return not (minutes > 0 and int(quota.get("limitTime", -1)) >= minutes * 60)


def _retention_json(body: RetentionPolicies) -> dict[str, Any]:
    return {
        "retentionTimeInMinutes": body.get("retentionTimeInMinutes", 0),
        "retentionSizeInMB": body.get("retentionSizeInMB", 0),
    }


def _quota_from(body: BacklogQuota) -> dict[str, Any]:
    size = body.get("limitSize", body.get("limit", -1))
    return quota_json(size, body.get("limitTime", -1), body["policy"])


# ---------------------------------------------------------------------- namespace object


def _default_policies(request: web.Request) -> dict[str, Any]:
    """Pulsar's Policies of a new namespace, as its REST API shows it (nulls left out)."""
    broker_config = request.app[SETTINGS].broker
    bundles = bundle_boundaries(broker_config.defaultNumberOfNamespaceBundles)
    return {
        "auth_policies": {
            "namespace_auth": {},
            "destination_auth": {},
            "subscription_auth_roles": {},
        },
        "replication_clusters": [broker_config.clusterName],
        "bundles": {
            "boundaries": [f"0x{boundary:08x}" for boundary in bundles],
            "numBundles": len(bundles) - 1,
        },
        "backlog_quota_map": {},
        "clusterDispatchRate": {},
        "topicDispatchRate": {},
        "subscriptionDispatchRate": {},
        "replicatorDispatchRate": {},
        "clusterSubscribeRate": {},
        "publishMaxMessageRate": {},
        "latency_stats_sample_rate": {},
        "deleted": False,
        "encryption_required": False,
        "subscription_auth_mode": "None",
        "offload_threshold": -1,
        "schema_auto_update_compatibility_strategy": "Full",
        "schema_compatibility_strategy": "UNDEFINED",
        "is_allow_auto_update_schema": True,
        "schema_validation_enforced": False,
        "subscription_types_enabled": [],
        "properties": {},
    }


@api.operation(
    "GET",
    NAMESPACE,
    "getPolicies",
    tag="namespace and topic policies",
    summary="a namespace's policies",
    success=Success(200, "Pulsar's Policies object.", {"type": "object"}),
    errors={400: "bad tenant or namespace name.", 404: "the namespace does not exist."},
    description="""
        `GET /admin/v2/namespaces/{t}/{ns}` → Pulsar's Policies, as `pulsar-admin namespaces
        policies` prints it: the defaults of a new namespace (`replication_clusters` this
        cluster, `bundles` the `defaultNumberOfNamespaceBundles` boundaries, empty maps,
        `schema_compatibility_strategy: "UNDEFINED"`...) with every policy set on it
        (`retention_policies`, `message_ttl_in_seconds`, `backlog_quota_map`,
        `deduplicationEnabled`, ...). Fields Pulsar leaves `null` are left out, as Pulsar's
        REST API does.
    """,
)
async def get_policies(request: web.Request) -> web.Response:
    tenant, namespace = await _namespace(request)
    stored = _service(request).policies.namespace_policies(tenant, namespace) or {}
    return _json(_default_policies(request) | stored)


# ---------------------------------------------------------------------- retention


@api.operation(
    "GET",
    NAMESPACE + "/retention",
    "getRetention",
    tag="namespace and topic policies",
    summary="a namespace's retention",
    success=Success(
        200,
        '`{"retentionTimeInMinutes": 60, "retentionSizeInMB": 1024}`.',
        {"type": "object"},
        unset=UNSET,
    ),
    errors={400: "bad tenant or namespace name.", 404: "the namespace does not exist."},
    description="""
        `GET /admin/v2/namespaces/{t}/{ns}/retention` → Pulsar's RetentionPolicies.
    """,
)
async def get_namespace_retention(request: web.Request) -> web.Response:
    tenant, namespace = await _namespace(request)
    return _value_or_no_content(_service(request).policies.namespace(tenant, namespace, RETENTION))


@api.operation(
    "POST",
    NAMESPACE + "/retention",
    "setRetention",
    tag="namespace and topic policies",
    summary="set a namespace's retention",
    body=RETENTION_BODY,
    success=Success(204, "set; its topics trim under it from their next upkeep."),
    errors={
        400: "bad tenant or namespace name; a body that is not a JSON object of integers.",
        404: "the namespace does not exist.",
        412: "a limit below -1; one limit 0 and the other not; a backlog quota of the "
        "namespace that the retention would not keep.",
        413: "body over `maxHttpRequestBodyBytes`.",
        503: "storage fault or timeout; nothing was stored.",
    },
    description="""
        `POST /admin/v2/namespaces/{t}/{ns}/retention` with
        `{"retentionTimeInMinutes": 60, "retentionSizeInMB": 1024}` → 204, as
        `pulsar-admin namespaces set-retention`. A ledger every subscription has consumed is
        deleted once it is older than the time or once what remains without it is still at
        least the size (-1: no such limit; -1 and -1: kept forever; 0 and 0: deleted once
        consumed). Unlike the broker's defaults, a retention set on a namespace or a topic
        trims topics with no subscription too, as Pulsar does.

        **Extension:** a ledger's age runs from its creation (Pulsar's, from its close).
    """,
)
async def set_namespace_retention(request: web.Request) -> web.Response:
    tenant, namespace = await _namespace(request)
    retention = _retention_json(await RETENTION_BODY.read(request))
    _check_retention(retention)
    service = _service(request)
    policies = service.policies
    quotas = policies.namespace(tenant, namespace, BACKLOG_QUOTA) or {}
    quota = quotas.get(DESTINATION_STORAGE)
    if quotas and not _quota_within_retention(quota, retention, default_quota(service.config)):
        raise PreconditionFailedError(
            "Retention Quota must exceed configured backlog quota for namespace."
        )
    await policies.set_namespace(tenant, namespace, RETENTION, retention)
    return web.Response(status=204)


@api.operation(
    "DELETE",
    NAMESPACE + "/retention",
    "removeRetention",
    tag="namespace and topic policies",
    summary="remove a namespace's retention",
    success=Success(204, "removed: the broker's defaults apply."),
    errors={
        400: "bad tenant or namespace name.",
        404: "the namespace does not exist.",
        503: "storage fault or timeout; nothing was removed.",
    },
    description="""
        `DELETE /admin/v2/namespaces/{t}/{ns}/retention` → 204.
    """,
)
async def remove_namespace_retention(request: web.Request) -> web.Response:
    tenant, namespace = await _namespace(request)
    await _service(request).policies.remove_namespace(tenant, namespace, RETENTION)
    return web.Response(status=204)


# ---------------------------------------------------------------------- message TTL


@api.operation(
    "GET",
    NAMESPACE + "/messageTTL",
    "getNamespaceMessageTTL",
    tag="namespace and topic policies",
    summary="a namespace's message TTL",
    success=Success(200, "the TTL in seconds.", {"type": "integer"}, unset=UNSET),
    errors={400: "bad tenant or namespace name.", 404: "the namespace does not exist."},
    description="""
        `GET /admin/v2/namespaces/{t}/{ns}/messageTTL` → an integer.
    """,
)
async def get_namespace_ttl(request: web.Request) -> web.Response:
    tenant, namespace = await _namespace(request)
    return _value_or_no_content(
        _service(request).policies.namespace(tenant, namespace, MESSAGE_TTL)
    )


@api.operation(
    "POST",
    NAMESPACE + "/messageTTL",
    "setNamespaceMessageTTL",
    tag="namespace and topic policies",
    summary="set a namespace's message TTL",
    body=TTL_BODY,
    success=Success(204, "set; the next expiry check applies it."),
    errors={
        400: "bad tenant or namespace name; a body that is not a JSON integer.",
        404: "the namespace does not exist.",
        412: "a negative TTL.",
        413: "body over `maxHttpRequestBodyBytes`.",
        503: "storage fault or timeout; nothing was stored.",
    },
    description="""
        `POST /admin/v2/namespaces/{t}/{ns}/messageTTL` with body `3600` → 204, as
        `pulsar-admin namespaces set-message-ttl`. Every `messageExpiryCheckIntervalInMinutes`
        (on the broker's clock, so virtual time runs it too), each subscription of each loaded
        topic acknowledges the messages published longer ago than the TTL (0: no TTL).
    """,
)
async def set_namespace_ttl(request: web.Request) -> web.Response:
    tenant, namespace = await _namespace(request)
    ttl = await TTL_BODY.read(request)
    if ttl < 0:
        raise PreconditionFailedError("Invalid value for message TTL")
    await _service(request).policies.set_namespace(tenant, namespace, MESSAGE_TTL, ttl)
    return web.Response(status=204)


@api.operation(
    "DELETE",
    NAMESPACE + "/messageTTL",
    "removeNamespaceMessageTTL",
    tag="namespace and topic policies",
    summary="remove a namespace's message TTL",
    success=Success(204, "removed: `ttlDurationDefaultInSeconds` applies."),
    errors={
        400: "bad tenant or namespace name.",
        404: "the namespace does not exist.",
        503: "storage fault or timeout; nothing was removed.",
    },
    description="""
        `DELETE /admin/v2/namespaces/{t}/{ns}/messageTTL` → 204.
    """,
)
async def remove_namespace_ttl(request: web.Request) -> web.Response:
    tenant, namespace = await _namespace(request)
    await _service(request).policies.remove_namespace(tenant, namespace, MESSAGE_TTL)
    return web.Response(status=204)


# ---------------------------------------------------------------------- backlog quotas


QUOTA_MAP = {"type": "object", "additionalProperties": {"type": "object"}}


@api.operation(
    "GET",
    NAMESPACE + "/backlogQuotaMap",
    "getBacklogQuotaMap",
    tag="namespace and topic policies",
    summary="a namespace's backlog quotas",
    success=Success(
        200,
        '`{"destination_storage": {"limit": 1048576, "limitSize": 1048576, "limitTime": -1, '
        '"policy": "producer_request_hold"}}`; `{}` when none is set.',
        QUOTA_MAP,
    ),
    errors={400: "bad tenant or namespace name.", 404: "the namespace does not exist."},
    description="""
        `GET /admin/v2/namespaces/{t}/{ns}/backlogQuotaMap` → Pulsar's map of BacklogQuota by
        type (`destination_storage`, `message_age`).
    """,
)
async def get_namespace_quotas(request: web.Request) -> web.Response:
    tenant, namespace = await _namespace(request)
    return _json(_service(request).policies.namespace(tenant, namespace, BACKLOG_QUOTA) or {})


@api.operation(
    "POST",
    NAMESPACE + "/backlogQuota",
    "setBacklogQuota",
    tag="namespace and topic policies",
    summary="set a namespace's backlog quota",
    query=(QUOTA_TYPE,),
    body=QUOTA_BODY,
    success=Success(204, "set; checked on producers from now on, enforced by the next check."),
    errors={
        400: "bad tenant or namespace name; `backlogQuotaType` unknown; a body that is not a "
        "BacklogQuota (`policy` one of the three).",
        404: "the namespace does not exist.",
        412: "the quota is over the namespace's retention.",
        413: "body over `maxHttpRequestBodyBytes`.",
        503: "storage fault or timeout; nothing was stored.",
    },
    description="""
        `POST /admin/v2/namespaces/{t}/{ns}/backlogQuota?backlogQuotaType=destination_storage`
        with `{"limitSize": 1048576, "limitTime": -1, "policy": "producer_request_hold"}` →
        204, as `pulsar-admin namespaces set-backlog-quota`. `destination_storage` limits the
        bytes of the slowest subscription's backlog (`limitSize`), `message_age` the age of its
        oldest unacknowledged message (`limitTime`, seconds). Over the quota: a producer that
        connects is refused (`producer_request_hold`: ProducerBlockedQuotaExceededError, which
        clients retry, holding their sends; `producer_exception`:
        ProducerBlockedQuotaExceededException, their sends fail), and every
        `backlogQuotaCheckIntervalInSeconds` connected producers are disconnected (then
        refused), or, with `consumer_backlog_eviction`, the slowest subscriptions' oldest
        messages are acknowledged down to 90% of the size limit (or the age limit).

        **Extension:** a message's age is its ledger's (from the ledger's creation), as
        Pulsar's default, non-precise check dates it by ledger.
    """,
)
async def set_namespace_quota(request: web.Request) -> web.Response:
    tenant, namespace = await _namespace(request)
    quota_type = QUOTA_TYPE.read(request)
    quota = _quota_from(await QUOTA_BODY.read(request))
    service = _service(request)
    policies = service.policies
    retention = policies.namespace(tenant, namespace, RETENTION)
    checked = quota if quota_type == DESTINATION_STORAGE else None
    if checked is not None and not _quota_within_retention(
        checked, retention, default_quota(service.config)
    ):
        raise PreconditionFailedError(
            "Backlog Quota exceeds configured retention quota for namespace. "
            "Please increase retention quota and retry"
        )
    quotas = dict(policies.namespace(tenant, namespace, BACKLOG_QUOTA) or {})
    quotas[quota_type] = quota
    await policies.set_namespace(tenant, namespace, BACKLOG_QUOTA, quotas)
    return web.Response(status=204)


@api.operation(
    "DELETE",
    NAMESPACE + "/backlogQuota",
    "removeBacklogQuota",
    tag="namespace and topic policies",
    summary="remove a namespace's backlog quota",
    query=(QUOTA_TYPE,),
    success=Success(204, "removed: the broker's default applies to that type."),
    errors={
        400: "bad tenant or namespace name; `backlogQuotaType` unknown.",
        404: "the namespace does not exist.",
        503: "storage fault or timeout; nothing was removed.",
    },
    description="""
        `DELETE /admin/v2/namespaces/{t}/{ns}/backlogQuota?backlogQuotaType=...` → 204.
    """,
)
async def remove_namespace_quota(request: web.Request) -> web.Response:
    tenant, namespace = await _namespace(request)
    quota_type = QUOTA_TYPE.read(request)
    policies = _service(request).policies
    quotas = dict(policies.namespace(tenant, namespace, BACKLOG_QUOTA) or {})
    if quotas.pop(quota_type, None) is not None:
        if quotas:
            await policies.set_namespace(tenant, namespace, BACKLOG_QUOTA, quotas)
        else:
            await policies.remove_namespace(tenant, namespace, BACKLOG_QUOTA)
    return web.Response(status=204)


# ---------------------------------------------------------------------- topic level

TOPIC_ERRORS_READ = {400: "bad topic name; `applied` not `true` or `false`.", 404: "unknown topic."}
TOPIC_ERRORS_CHANGE = {
    400: "bad topic name; a body or query that does not parse.",
    404: "unknown topic (neither a topic nor a partitioned topic).",
    412: "a value Pulsar refuses (see the namespace route).",
    413: "body over `maxHttpRequestBodyBytes`.",
    503: "storage fault or timeout; nothing was stored.",
}
TOPIC_ERRORS_REMOVE = {
    400: "bad topic name.",
    404: "unknown topic.",
    503: "storage fault or timeout; nothing was removed.",
}
TOPIC_NOTE = """

    Topic-level policies are kept in the metadata store, one record per topic (Pulsar keeps
    them in its `__change_events` system topic); a partitioned topic's reach its partitions.
    A deleted topic's policies are deleted with it.
"""


@api.operation(
    "GET",
    ADMIN_TOPIC + "/retention",
    "getTopicRetention",
    tag="namespace and topic policies",
    summary="a topic's retention",
    query=(APPLIED,),
    success=Success(200, "RetentionPolicies.", {"type": "object"}, unset=APPLIED_UNSET),
    errors=TOPIC_ERRORS_READ,
    description="""
        `GET /admin/v2/persistent/{t}/{ns}/{topic}/retention?applied=false` → the topic's own
        retention; `applied=true`: the one that applies (the topic's, else its namespace's,
        else the broker's defaults).
    """
    + TOPIC_NOTE,
)
async def get_topic_retention(request: web.Request) -> web.Response:
    name = await _topic(request)
    service = _service(request)
    if APPLIED.read(request):
        config = service.config
        default = {
            "retentionTimeInMinutes": config.retention_time_minutes,
            "retentionSizeInMB": config.retention_size_mb,
        }
        return _json(service.policies.effective(name, RETENTION, default))
    return _value_or_no_content(service.policies.topic(name, RETENTION))


@api.operation(
    "POST",
    ADMIN_TOPIC + "/retention",
    "setTopicRetention",
    tag="namespace and topic policies",
    summary="set a topic's retention",
    body=RETENTION_BODY,
    success=Success(204, "set."),
    errors=TOPIC_ERRORS_CHANGE,
    description="""
        `POST .../{topic}/retention` with a RetentionPolicies → 204; checked as the namespace
        route checks it (against the topic's backlog quotas).
    """
    + TOPIC_NOTE,
)
async def set_topic_retention(request: web.Request) -> web.Response:
    name = await _topic(request)
    retention = _retention_json(await RETENTION_BODY.read(request))
    _check_retention(retention)
    service = _service(request)
    policies = service.policies
    quotas = policies.topic(name, BACKLOG_QUOTA) or {}
    quota = quotas.get(DESTINATION_STORAGE)
    if quotas and not _quota_within_retention(quota, retention, default_quota(service.config)):
        raise PreconditionFailedError(
            "Retention Quota must exceed configured backlog quota for topic."
        )
    await policies.set_topic(name, RETENTION, retention)
    return web.Response(status=204)


@api.operation(
    "DELETE",
    ADMIN_TOPIC + "/retention",
    "removeTopicRetention",
    tag="namespace and topic policies",
    summary="remove a topic's retention",
    success=Success(204, "removed."),
    errors=TOPIC_ERRORS_REMOVE,
    description="`DELETE .../{topic}/retention` → 204." + TOPIC_NOTE,
)
async def remove_topic_retention(request: web.Request) -> web.Response:
    name = await _topic(request)
    await _service(request).policies.remove_topic(name, RETENTION)
    return web.Response(status=204)


@api.operation(
    "GET",
    ADMIN_TOPIC + "/messageTTL",
    "getTopicMessageTTL",
    tag="namespace and topic policies",
    summary="a topic's message TTL",
    query=(APPLIED,),
    success=Success(200, "seconds.", {"type": "integer"}, unset=APPLIED_UNSET),
    errors=TOPIC_ERRORS_READ,
    description="""
        `GET .../{topic}/messageTTL?applied=false` → the topic's own TTL; `applied=true`: the
        one that applies (the topic's, else its namespace's, else
        `ttlDurationDefaultInSeconds`).
    """
    + TOPIC_NOTE,
)
async def get_topic_ttl(request: web.Request) -> web.Response:
    name = await _topic(request)
    service = _service(request)
    if APPLIED.read(request):
        return _json(service.policies.effective(name, MESSAGE_TTL, service.config.message_ttl_s))
    return _value_or_no_content(service.policies.topic(name, MESSAGE_TTL))


@api.operation(
    "POST",
    ADMIN_TOPIC + "/messageTTL",
    "setTopicMessageTTL",
    tag="namespace and topic policies",
    summary="set a topic's message TTL",
    query=(TOPIC_TTL,),
    success=Success(204, "set."),
    errors=TOPIC_ERRORS_CHANGE,
    description="""
        `POST .../{topic}/messageTTL?messageTTL=3600` → 204 (the TTL in the query, as Pulsar's
        topic route takes it; negative: 412).
    """
    + TOPIC_NOTE,
)
async def set_topic_ttl(request: web.Request) -> web.Response:
    name = await _topic(request)
    ttl = _topic_ttl(request)
    await _service(request).policies.set_topic(name, MESSAGE_TTL, ttl)
    return web.Response(status=204)


@api.operation(
    "DELETE",
    ADMIN_TOPIC + "/messageTTL",
    "removeTopicMessageTTL",
    tag="namespace and topic policies",
    summary="remove a topic's message TTL",
    success=Success(204, "removed."),
    errors=TOPIC_ERRORS_REMOVE,
    description="`DELETE .../{topic}/messageTTL` → 204." + TOPIC_NOTE,
)
async def remove_topic_ttl(request: web.Request) -> web.Response:
    name = await _topic(request)
    await _service(request).policies.remove_topic(name, MESSAGE_TTL)
    return web.Response(status=204)


@api.operation(
    "GET",
    ADMIN_TOPIC + "/backlogQuotaMap",
    "getTopicBacklogQuotaMap",
    tag="namespace and topic policies",
    summary="a topic's backlog quotas",
    query=(APPLIED,),
    success=Success(200, "the map of BacklogQuota by type; `{}` when none is set.", QUOTA_MAP),
    errors=TOPIC_ERRORS_READ,
    description="""
        `GET .../{topic}/backlogQuotaMap?applied=false` → the topic's own quotas;
        `applied=true`: per type, the one that applies (the topic's, else its namespace's,
        else the broker's `backlogQuotaDefault*`).
    """
    + TOPIC_NOTE,
)
async def get_topic_quotas(request: web.Request) -> web.Response:
    name = await _topic(request)
    service = _service(request)
    policies = service.policies
    own = policies.topic(name, BACKLOG_QUOTA) or {}
    if not APPLIED.read(request):
        return _json(own)
    namespace = policies.namespace(name.tenant, name.namespace, BACKLOG_QUOTA) or {}
    applied = {}
    for quota_type in QUOTA_TYPES:
        quota = own.get(quota_type) or namespace.get(quota_type)
        if quota is None and quota_type == DESTINATION_STORAGE:
            quota = default_quota(service.config)
        if quota is not None:
            applied[quota_type] = quota
    return _json(applied)


@api.operation(
    "POST",
    ADMIN_TOPIC + "/backlogQuota",
    "setTopicBacklogQuota",
    tag="namespace and topic policies",
    summary="set a topic's backlog quota",
    query=(QUOTA_TYPE,),
    body=QUOTA_BODY,
    success=Success(204, "set."),
    errors=TOPIC_ERRORS_CHANGE,
    description="""
        `POST .../{topic}/backlogQuota?backlogQuotaType=...` with a BacklogQuota → 204; as the
        namespace route, checked against the topic's retention (else its namespace's).
    """
    + TOPIC_NOTE,
)
async def set_topic_quota(request: web.Request) -> web.Response:
    name = await _topic(request)
    quota_type = QUOTA_TYPE.read(request)
    quota = _quota_from(await QUOTA_BODY.read(request))
    service = _service(request)
    policies = service.policies
    retention = policies.effective(name, RETENTION, None)
    checked = quota if quota_type == DESTINATION_STORAGE else None
    if checked is not None and not _quota_within_retention(
        checked, retention, default_quota(service.config)
    ):
        raise PreconditionFailedError(
            "Backlog Quota exceeds configured retention quota for topic. "
            "Please increase retention quota and retry"
        )
    quotas = dict(policies.topic(name, BACKLOG_QUOTA) or {})
    quotas[quota_type] = quota
    await policies.set_topic(name, BACKLOG_QUOTA, quotas)
    return web.Response(status=204)


@api.operation(
    "DELETE",
    ADMIN_TOPIC + "/backlogQuota",
    "removeTopicBacklogQuota",
    tag="namespace and topic policies",
    summary="remove a topic's backlog quota",
    query=(QUOTA_TYPE,),
    success=Success(204, "removed."),
    errors={**TOPIC_ERRORS_REMOVE, 400: "bad topic name; `backlogQuotaType` unknown."},
    description="`DELETE .../{topic}/backlogQuota?backlogQuotaType=...` → 204." + TOPIC_NOTE,
)
async def remove_topic_quota(request: web.Request) -> web.Response:
    name = await _topic(request)
    quota_type = QUOTA_TYPE.read(request)
    policies = _service(request).policies
    quotas = dict(policies.topic(name, BACKLOG_QUOTA) or {})
    if quotas.pop(quota_type, None) is not None:
        if quotas:
            await policies.set_topic(name, BACKLOG_QUOTA, quotas)
        else:
            await policies.remove_topic(name, BACKLOG_QUOTA)
    return web.Response(status=204)
