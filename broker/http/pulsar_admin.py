"""Pulsar's admin and lookup routes, the ones Pulsar clients and ``pulsar-admin`` call:
partitioned topics, topic lookup, clusters, tenants and namespaces, a topic's
subscriptions, unloads, and Pulsar's forms of subscription creation and lastMessageId.

Paths, verbs and JSON field names are Pulsar's (``admin/v2/PersistentTopics``,
``Namespaces``, ``Tenants``, ``Clusters``, ``lookup/v2/TopicLookup``); errors are
brokerlab's ``{"reason", "code"}``. Where Pulsar answers a status brokerlab has no code
for (406 and 422 for a bad partition count), the nearest of ours is used and
``docs/api.md`` says so.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from broker.cluster import http_url
from broker.dispatch.errors import InvalidRequestError, NotFoundError
from broker.dispatch.names import TopicName, check_name_part
from broker.dispatch.partitions import partition_name, partition_of
from broker.dispatch.service import BrokerService
from broker.http import security
from broker.http.app_state import NODE, SETTINGS, request_port
from broker.http.contract import RouteTable
from broker.http.models import TenantInfo
from broker.http.openapi import (
    CHECK_AUTO_CREATION,
    FORCE_NAMESPACE_DELETE,
    FORCE_PARTITIONS_DELETE,
    FORCE_TENANT_DELETE,
    FORCE_UPDATE_PARTITIONS,
    NEW_PARTITIONS_BODY,
    PARTITIONS_BODY,
    PER_PARTITION,
    POLICIES_BODY,
    ROUTES,
    START_MESSAGE_ID,
    SUBSCRIPTION_START_BODY,
    TENANT_BODY,
    TOPICS_MODE,
)
from broker.http.parsing import MAX_INT64, message_id
from broker.ledger.entry import EntryFormatError, metadata_of
from broker.ledger.position import Position

api = RouteTable(ROUTES)
routes = api.routes


#: Pulsar's MessageId.latest and MessageId.earliest as (ledgerId, entryId)
_LATEST = (MAX_INT64, MAX_INT64)
_EARLIEST = (-1, -1)


# ---------------------------------------------------------------------- helpers


def _json(data: Any) -> web.Response:
    return web.Response(body=orjson.dumps(data), content_type="application/json")


def _no_content() -> web.Response:
    return web.Response(status=204)


def _service(request: web.Request) -> BrokerService:
    return request.app[NODE].running_service()


def _topic(request: web.Request) -> TopicName:
    info = request.match_info
    return TopicName.of(info["tenant"], info["namespace"], info["topic"])


def _tenant(request: web.Request) -> str:
    return check_name_part("tenant", request.match_info["tenant"])


def _namespace(request: web.Request) -> tuple[str, str]:
    return _tenant(request), check_name_part("namespace", request.match_info["namespace"])


# ---------------------------------------------------------------------- partitioned topics


@api.implements("createPartitionedTopic")
async def create_partitioned_topic(request: web.Request) -> web.Response:
    name = _topic(request)
    count = await PARTITIONS_BODY.read(request)
    await _service(request).partitions.create(name, count)
    return _no_content()


@api.implements("updatePartitionedTopic")
async def update_partitioned_topic(request: web.Request) -> web.Response:
    name = _topic(request)
    FORCE_UPDATE_PARTITIONS.read(request)  # skips a check of stray partitions: none here
    count = await NEW_PARTITIONS_BODY.read(request)
    await _service(request).partitions.update(name, count)
    return _no_content()


@api.implements("getPartitionedMetadata")
async def get_partitioned_metadata(request: web.Request) -> web.Response:
    name = _topic(request)
    auto_create = CHECK_AUTO_CREATION.read(request)
    partitions = _service(request).partitions
    record = await partitions.metadata(name)
    if record is not None:
        return _json(record.to_json())
    count = await partitions.metadata_for_client(name, auto_create)
    return _json({"partitions": count, "deleted": False})


@api.implements("deletePartitionedTopic")
async def delete_partitioned_topic(request: web.Request) -> web.Response:
    name = _topic(request)
    force = FORCE_PARTITIONS_DELETE.read(request)
    await _service(request).partitions.delete(name, force)
    return _no_content()


def _addable(a: object, b: object) -> bool:
    """Numbers (a rate may be the int 0 in one partition), or lists."""
    numbers = int | float
    return (isinstance(a, numbers) and isinstance(b, numbers)) or (
        isinstance(a, list) and isinstance(b, list)
    )


def _merge_stats(total: dict[str, Any], part: dict[str, Any]) -> None:
    """Add one partition's stats into ``total``: numbers add up, lists (consumers)
    join, objects (subscriptions) merge by name, anything else keeps the first seen."""
    for key, value in part.items():
        if key not in total:
            total[key] = orjson.loads(orjson.dumps(value))  # a copy: later merges change it
        elif isinstance(value, bool) or isinstance(total[key], bool):
            continue
        elif _addable(total[key], value):
            total[key] += value
        elif isinstance(value, dict) and isinstance(total[key], dict):
            _merge_stats(total[key], value)
        elif key == "type" and total[key] == "None":
            total[key] = value  # a subscription's type, from a partition that has consumers


@api.implements("getPartitionedStats")
async def partitioned_stats(request: web.Request) -> web.Response:
    name = _topic(request)
    per_partition = PER_PARTITION.read(request)
    topics = await _service(request).partitions.partition_topics(name)
    total: dict[str, Any] = {}
    by_partition = {}
    for topic in topics:
        stats = topic.stats()
        _merge_stats(total, stats)
        by_partition[str(topic.name)] = stats
    # Pulsar's PartitionedTopicMetadata; one being deleted answers 404 above
    total["metadata"] = {"partitions": len(topics), "deleted": False}
    total["partitions"] = by_partition if per_partition else {}
    return _json(total)


@api.implements("listPartitionedTopics")
async def list_partitioned_topics(request: web.Request) -> web.Response:
    tenant, namespace = _namespace(request)
    names = await _service(request).partitions.names(tenant, namespace)
    return _json([str(name) for name in names])


# ---------------------------------------------------------------------- lookup


def lookup_data(http_url: str, broker_url: str | None) -> dict[str, Any]:
    """Pulsar's LookupData for a broker. ``broker_url`` None: the binary protocol is
    off, so there is no pulsar:// URL to give. TLS is never offered: its URLs are null
    (Pulsar leaves null fields out). ``brokerUrlSsl`` is the legacy field Pulsar still
    sends: the C++ client under the Python one refuses (or crashes on) an answer with
    neither it nor ``brokerUrlTls``."""
    return {
        "brokerUrl": broker_url,
        "brokerUrlTls": None,
        "httpUrl": http_url,
        "httpUrlTls": None,
        "nativeUrl": broker_url,
        "brokerUrlSsl": "",
    }


def _broker_url(request: web.Request) -> str | None:
    """This broker's pulsar:// URL: the protocol server's once it listens; the configured
    brokerServicePort before that; None when the protocol is off (port 0) or its port
    is not known yet (-1, any free port)."""
    server = request.app[NODE].protocol
    if server is not None and server.service_url:
        return server.service_url
    broker = request.app[SETTINGS].broker
    if broker.brokerServicePort <= 0:
        return None
    return f"pulsar://{broker.advertisedAddress}:{broker.brokerServicePort}"


@api.implements("lookupTopic")
async def lookup_topic(request: web.Request) -> web.Response:
    name = _topic(request)
    service = _service(request)
    partitions = service.partitions
    known = await partitions.metadata(name) is not None or await partitions.exists(name)
    if not known and not service.config.allow_auto_topic_creation:
        raise NotFoundError(f"topic {name} not found")
    owner = service.ownership.owner(name)
    if owner.index != service.index and owner.http_url:
        # the owning broker's addresses: the client goes there
        return _json(lookup_data(owner.http_url, owner.service_url or None))
    address = request.app[SETTINGS].broker.advertisedAddress
    return _json(lookup_data(http_url(address, request_port(request)), _broker_url(request)))


# ---------------------------------------------------------------------- clusters, tenants


@api.implements("getClusters")
async def list_clusters(request: web.Request) -> web.Response:
    return _json([request.app[SETTINGS].broker.clusterName])


@api.implements("getTenants")
async def list_tenants(request: web.Request) -> web.Response:
    return _json(await _service(request).namespaces.tenants())


@api.implements("createTenant")
async def create_tenant(request: web.Request) -> web.Response:
    tenant = _tenant(request)
    body = await TENANT_BODY.read_optional(request) or TenantInfo()
    registry = _service(request).namespaces
    info = registry.tenant_info(body.get("adminRoles") or [], body.get("allowedClusters"))
    await registry.create_tenant(tenant, info)
    return _no_content()


@api.implements("getTenant")
async def get_tenant(request: web.Request) -> web.Response:
    return _json(await _service(request).namespaces.tenant(_tenant(request)))


@api.implements("deleteTenant")
async def delete_tenant(request: web.Request) -> web.Response:
    tenant = _tenant(request)
    force = FORCE_TENANT_DELETE.read(request)
    await _service(request).namespaces.delete_tenant(tenant, force)
    return _no_content()


# ---------------------------------------------------------------------- namespaces


@api.implements("getNamespaces")
async def list_namespaces(request: web.Request) -> web.Response:
    return _json(await _service(request).namespaces.namespaces(_tenant(request)))


@api.implements("createNamespace")
async def create_namespace(request: web.Request) -> web.Response:
    tenant, namespace = _namespace(request)
    await POLICIES_BODY.read_optional(request)  # accepted and ignored
    await _service(request).namespaces.create_namespace(tenant, namespace)
    return _no_content()


@api.implements("deleteNamespace")
async def delete_namespace(request: web.Request) -> web.Response:
    tenant, namespace = _namespace(request)
    force = FORCE_NAMESPACE_DELETE.read(request)
    await _service(request).namespaces.delete_namespace(tenant, namespace, force)
    return _no_content()


@api.implements("getNamespaceTopics")
async def namespace_topics(request: web.Request) -> web.Response:
    tenant, namespace = _namespace(request)
    mode = TOPICS_MODE.read(request)
    if mode == "NON_PERSISTENT":
        return _json([])  # brokerlab has persistent topics only
    return _json(await _service(request).list_topics(tenant, namespace))


@api.implements("unloadNamespacePut")
async def unload_namespace(request: web.Request) -> web.Response:
    tenant, namespace = _namespace(request)
    _service(request)  # a broker that is down answers 503
    await request.app[NODE].cluster.unload_namespace(tenant, namespace)
    return _no_content()


@api.implements("unloadNamespaceBundle")
async def unload_bundle(request: web.Request) -> web.Response:
    """Unload one bundle (``0x00000000_0x40000000``) at its owner; the next lookup of
    its topics assigns it to another live broker when there is one."""
    tenant, namespace = _namespace(request)
    _service(request)
    bundle = request.match_info["bundle"]
    await request.app[NODE].cluster.unload_bundle(f"{tenant}/{namespace}", bundle)
    return _no_content()


# ---------------------------------------------------------------------- topics


@api.implements("getSubscriptions")
async def list_subscriptions(request: web.Request) -> web.Response:
    name = _topic(request)
    service = _service(request)
    if await service.partitions.get(name):
        topics = await service.partitions.partition_topics(name)
    else:
        topics = [await service.get_topic(name, create=False)]
    return _json(sorted({s for topic in topics for s in topic.subscriptions}))


@api.implements("unloadTopic")
async def unload_topic(request: web.Request) -> web.Response:
    name = _topic(request)
    service = _service(request)
    cluster = request.app[NODE].cluster
    count = await service.partitions.get(name)
    if count:
        # each partition at its owner (the partitions of a topic may be on any broker)
        for index in range(count):
            partition = partition_name(name, index)
            await cluster.service_for(partition).unload_topic(partition)
    elif await service.partitions.exists(name):
        service.check_owner(name)  # another broker's topic: 307 to it
        await service.unload_topic(name)
    else:
        raise NotFoundError(f"topic {name} not found")
    return _no_content()


async def _subscription_start(request: web.Request) -> str | Position:
    """Where a new subscription starts: Pulsar's body (a MessageId such as
    ``{"ledgerId": 3, "entryId": 17}``, or the string ``"latest"``/``"earliest"``), or
    brokerlab's ``messageId`` query parameter; latest when neither is given."""
    body = await SUBSCRIPTION_START_BODY.read_optional(request)
    query = START_MESSAGE_ID.read(request)
    if body is None:
        if query is None or query in ("earliest", "latest"):
            return query or "latest"
        return message_id(query)
    if query is not None:
        raise InvalidRequestError("give the start in the body or in messageId, not in both")
    if isinstance(body, str):
        return body  # latest or earliest
    ledger_id, entry_id = body["ledgerId"], body["entryId"]
    if (ledger_id, entry_id) == _LATEST:
        return "latest"
    if (ledger_id, entry_id) == _EARLIEST:
        return "earliest"
    if not (0 <= ledger_id <= MAX_INT64 and 0 <= entry_id < MAX_INT64):
        raise InvalidRequestError(
            "ledgerId and entryId must be within 0..9223372036854775807, or be "
            "MessageId.latest or MessageId.earliest"
        )
    excluded = body.get("isExcluded", False)
    return Position(ledger_id, entry_id + 1 if excluded else entry_id)


@api.implements("createSubscription")
@security.client_route
async def create_subscription(request: web.Request) -> web.Response:
    name = _topic(request)
    subscription = check_name_part("subscription", request.match_info["subscription"])
    start = await _subscription_start(request)
    service = _service(request)
    if await service.partitions.get(name):
        if isinstance(start, Position):
            raise InvalidRequestError(
                f"{name} is partitioned: a message id names a position in one partition; "
                "create the subscription on that partition, or start at latest or earliest"
            )
        await service.partitions.create_subscription(name, subscription, start)
        return _no_content()
    topic = await service.get_topic(name, create=True)
    service.check_new_subscription(topic, subscription)
    await topic.create_subscription(subscription, start)
    return _no_content()


@api.implements("getLastMessageId")
async def last_message_id(request: web.Request) -> web.Response:
    name = _topic(request)
    topic = await _service(request).get_topic(name, create=False)
    last = topic.ledger.last_confirmed
    batch_index = -1
    if last.entry_id >= 0:
        # as Pulsar, read the entry to tell a batch (through the cache, by no cursor)
        entries = await topic.ledger.read_entries(last, 1, "")
        if entries:
            try:
                metadata = metadata_of(entries[0].data)
            except EntryFormatError:
                pass
            else:
                if metadata.HasField("num_messages_in_batch"):
                    batch_index = metadata.num_messages_in_batch - 1
    partition = partition_of(name)
    return _json(
        {
            "ledgerId": last.ledger_id,
            "entryId": last.entry_id,
            "partitionIndex": partition[1] if partition is not None else -1,
            "batchIndex": batch_index,
        }
    )
