"""Pulsar's deduplication policy routes: a namespace's
(``/admin/v2/namespaces/{tenant}/{namespace}/deduplication``, Pulsar's ``Namespaces``
``getDeduplication``, ``modifyDeduplication``, ``removeDeduplication``) and a topic's
(``/admin/v2/persistent/{tenant}/{namespace}/{topic}/deduplicationEnabled``, Pulsar's
``PersistentTopics`` ones), as ``pulsar-admin namespaces set-deduplication`` and
``pulsar-admin topics set-deduplication`` call them.

The values live in the broker's policy store (:mod:`broker.dispatch.policies`, field
``deduplicationEnabled``); the broker service hears of each change and turns
deduplication on or off on the loaded topics it reaches
(:mod:`broker.dispatch.deduplication`). A topic deduplicates by its own policy, else its
namespace's, else ``brokerDeduplicationEnabled``.
"""

from __future__ import annotations

from typing import Annotated

import orjson
from aiohttp import web
from pydantic import Field

from broker.dispatch.errors import NotFoundError
from broker.dispatch.names import TopicName, check_name_part
from broker.dispatch.partitions import partition_of
from broker.dispatch.policies import DEDUPLICATION
from broker.dispatch.service import BrokerService
from broker.http.app_state import NODE
from broker.http.contract import ADMIN_TOPIC, NAMESPACE, FlagQuery, JsonBody, RouteTable, Success

api = RouteTable()
routes = api.routes

DeduplicationFlag = Annotated[
    bool,
    Field(description="A bare JSON boolean: `true` deduplicates, `false` does not.", strict=True),
]
NAMESPACE_BODY = JsonBody[bool](DeduplicationFlag, "Deduplication on (`true`) or off (`false`).")
TOPIC_BODY = JsonBody[bool](
    DeduplicationFlag,
    "Deduplication on (`true`) or off (`false`); no body removes the topic's policy.",
    required=False,
)
APPLIED = FlagQuery(
    "applied", "`true`: the value that applies (topic, else namespace, else broker)."
)
IS_GLOBAL = FlagQuery("isGlobal", "Accepted; brokerlab has one cluster.")

#: what a route answers for a boolean
_SCHEMA = {"type": "boolean"}


def _service(request: web.Request) -> BrokerService:
    return request.app[NODE].running_service()


def _flag(value: object) -> web.Response:
    """A policy's value, or 204 without a body when it is unset (Pulsar answers its
    null so)."""
    if value is None:
        return web.Response(status=204)
    return web.Response(body=orjson.dumps(bool(value)), content_type="application/json")


def _namespace(request: web.Request, service: BrokerService) -> tuple[str, str]:
    """The route's namespace; 404 (Pulsar's message) if it does not exist."""
    tenant = check_name_part("tenant", request.match_info["tenant"])
    namespace = check_name_part("namespace", request.match_info["namespace"])
    if not service.policies.namespace_exists(tenant, namespace):
        raise NotFoundError(f"Namespace {tenant}/{namespace} does not exist")
    return tenant, namespace


async def _topic(request: web.Request, service: BrokerService) -> TopicName:
    """The route's topic; 404 (Pulsar's message) unless it is a topic, a partition of
    a partitioned topic, or a partitioned topic (whose partitions the policy reaches)."""
    info = request.match_info
    name = TopicName.of(info["tenant"], info["namespace"], info["topic"])
    if not service.policies.namespace_exists(name.tenant, name.namespace):
        raise NotFoundError(f"Namespace {name.tenant}/{name.namespace} does not exist")
    partitions = service.partitions
    if await partitions.exists(name):
        return name
    record = await partitions.metadata(name)
    if record is not None and not record.deleted:
        return name
    raise NotFoundError(f"Topic {name} not found")


_NAMESPACE_ERRORS = {
    400: "bad tenant or namespace name.",
    404: "no such namespace.",
    503: "storage fault or timeout; nothing changed.",
}


@api.operation(
    "GET",
    NAMESPACE + "/deduplication",
    "getDeduplication",
    tag="namespaces",
    summary="a namespace's deduplication policy",
    success=Success(
        200, "`true` or `false`; 204 without a body when the namespace sets none.", _SCHEMA
    ),
    errors={400: "bad tenant or namespace name.", 404: "no such namespace."},
    description="""
        The namespace's own policy, as Pulsar's `getDeduplication`: unset (204) means its
        topics follow `brokerDeduplicationEnabled` unless a topic sets its own.
    """,
)
async def get_namespace_deduplication(request: web.Request) -> web.Response:
    service = _service(request)
    tenant, namespace = _namespace(request, service)
    return _flag(service.policies.namespace(tenant, namespace, DEDUPLICATION))


@api.operation(
    "POST",
    NAMESPACE + "/deduplication",
    "modifyDeduplication",
    tag="namespaces",
    summary="turn deduplication on or off for a namespace's topics",
    body=NAMESPACE_BODY,
    success=Success(204, "set; its loaded topics turn deduplication on or off at once."),
    errors={
        **_NAMESPACE_ERRORS,
        400: "bad tenant or namespace name; a body that is not a JSON boolean.",
        413: "body over `maxHttpRequestBodyBytes`.",
    },
    description="""
        Body: `true` or `false`. Durable; each topic of the namespace without a policy of
        its own follows it. A topic turning deduplication on recovers the producers'
        sequence ids from its `pulsar.dedup` cursor (created if missing); turning it off
        deletes that cursor and forgets them (topic stats' `deduplicationStatus` shows the
        transition).
    """,
)
async def set_namespace_deduplication(request: web.Request) -> web.Response:
    service = _service(request)
    tenant, namespace = _namespace(request, service)
    enabled = await NAMESPACE_BODY.read(request)
    await service.policies.set_namespace(tenant, namespace, DEDUPLICATION, enabled)
    return web.Response(status=204)


@api.operation(
    "DELETE",
    NAMESPACE + "/deduplication",
    "removeDeduplication",
    tag="namespaces",
    summary="remove a namespace's deduplication policy",
    success=Success(204, "removed (also when none was set)."),
    errors=_NAMESPACE_ERRORS,
    description="""
        The namespace's topics follow `brokerDeduplicationEnabled` again (unless a topic
        sets its own).
    """,
)
async def remove_namespace_deduplication(request: web.Request) -> web.Response:
    service = _service(request)
    tenant, namespace = _namespace(request, service)
    await service.policies.remove_namespace(tenant, namespace, DEDUPLICATION)
    return web.Response(status=204)


_TOPIC_ERRORS = {
    400: "bad topic name.",
    404: "no such namespace or topic.",
    503: "storage fault or timeout; nothing changed.",
}


@api.operation(
    "GET",
    ADMIN_TOPIC + "/deduplicationEnabled",
    "getTopicDeduplication",
    tag="topics",
    summary="a topic's deduplication policy",
    query=(APPLIED, IS_GLOBAL),
    success=Success(
        200,
        "`true` or `false`; 204 without a body when the topic sets none and `applied` is `false`.",
        _SCHEMA,
    ),
    errors={
        400: "bad topic name; `applied` or `isGlobal` not `true` or `false`.",
        404: "no such namespace or topic.",
        503: "storage fault or timeout.",
    },
    description="""
        The topic's own policy (a partition's is its partitioned topic's); with
        `applied=true`, the value that applies: the topic's, else its namespace's, else
        `brokerDeduplicationEnabled`, as Pulsar's `getDeduplication(applied)`.
    """,
)
async def get_topic_deduplication(request: web.Request) -> web.Response:
    service = _service(request)
    name = await _topic(request, service)
    IS_GLOBAL.read(request)
    if APPLIED.read(request):
        return _flag(service.deduplication_enabled(name))
    value = service.policies.topic(name, DEDUPLICATION)
    if value is None and (partition := partition_of(name)) is not None:
        value = service.policies.topic(partition[0], DEDUPLICATION)
    return _flag(value)


@api.operation(
    "POST",
    ADMIN_TOPIC + "/deduplicationEnabled",
    "setTopicDeduplication",
    tag="topics",
    summary="turn deduplication on or off for one topic",
    query=(IS_GLOBAL,),
    body=TOPIC_BODY,
    success=Success(204, "set; the topic (or the partitioned topic's partitions) follows it."),
    errors={
        **_TOPIC_ERRORS,
        400: "bad topic name; a body that is not a JSON boolean.",
        413: "body over `maxHttpRequestBodyBytes`.",
    },
    description="""
        Body: `true` or `false`, over the namespace's policy and `brokerDeduplicationEnabled`;
        no body removes the topic's policy (Pulsar takes a null so). Durable.
    """,
)
async def set_topic_deduplication(request: web.Request) -> web.Response:
    service = _service(request)
    name = await _topic(request, service)
    IS_GLOBAL.read(request)
    enabled = await TOPIC_BODY.read_optional(request)
    if enabled is None:
        await service.policies.remove_topic(name, DEDUPLICATION)
    else:
        await service.policies.set_topic(name, DEDUPLICATION, enabled)
    return web.Response(status=204)


@api.operation(
    "DELETE",
    ADMIN_TOPIC + "/deduplicationEnabled",
    "removeTopicDeduplication",
    tag="topics",
    summary="remove a topic's deduplication policy",
    query=(IS_GLOBAL,),
    success=Success(204, "removed (also when none was set)."),
    errors=_TOPIC_ERRORS,
    description="""
        The topic follows its namespace's policy, else `brokerDeduplicationEnabled`.
    """,
)
async def remove_topic_deduplication(request: web.Request) -> web.Response:
    service = _service(request)
    name = await _topic(request, service)
    IS_GLOBAL.read(request)
    await service.policies.remove_topic(name, DEDUPLICATION)
    return web.Response(status=204)
