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
from broker.http.app import NODE, SETTINGS
from broker.http.parsing import MAX_INT64, message_id
from broker.ledger.entry import EntryFormatError, metadata_of
from broker.ledger.position import Position

routes = web.RouteTableDef()

_ADMIN_TOPIC = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
_NAMESPACE = "/admin/v2/namespaces/{tenant}/{namespace}"

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


def _flag(request: web.Request, name: str) -> bool:
    """A boolean query parameter: ``true`` or ``false``, false when absent."""
    value = request.query.get(name, "false")
    if value not in ("true", "false"):
        raise InvalidRequestError(f"query parameter {name} must be true or false")
    return value == "true"


async def _json_body(request: web.Request) -> object:
    """The body as any JSON value; ``None`` when the body is empty."""
    raw = await request.read()
    if not raw:
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise InvalidRequestError(f"malformed JSON: {error}") from None


async def _partition_count(request: web.Request) -> int:
    """The body of the partitions routes: the count as a JSON number, as Pulsar takes it."""
    body = await _json_body(request)
    if isinstance(body, bool) or not isinstance(body, int):
        raise InvalidRequestError("the body must be the number of partitions, a JSON integer")
    return body


def _int_field(body: dict[str, Any], name: str, default: int | None = None) -> int:
    value = body.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequestError(f"{name} must be an integer")
    return value


# ---------------------------------------------------------------------- partitioned topics


@routes.put(_ADMIN_TOPIC + "/partitions")
async def create_partitioned_topic(request: web.Request) -> web.Response:
    name = _topic(request)
    count = await _partition_count(request)
    await _service(request).partitions.create(name, count)
    return _no_content()


@routes.post(_ADMIN_TOPIC + "/partitions")
async def update_partitioned_topic(request: web.Request) -> web.Response:
    name = _topic(request)
    _flag(request, "force")  # Pulsar's: skip a check of stray partitions brokerlab never has
    count = await _partition_count(request)
    await _service(request).partitions.update(name, count)
    return _no_content()


@routes.get(_ADMIN_TOPIC + "/partitions")
async def get_partitioned_metadata(request: web.Request) -> web.Response:
    name = _topic(request)
    auto_create = _flag(request, "checkAllowAutoCreation")
    partitions = _service(request).partitions
    record = await partitions.metadata(name)
    if record is not None:
        return _json(record.to_json())
    count = await partitions.metadata_for_client(name, auto_create)
    return _json({"partitions": count, "deleted": False})


@routes.delete(_ADMIN_TOPIC + "/partitions")
async def delete_partitioned_topic(request: web.Request) -> web.Response:
    name = _topic(request)
    force = _flag(request, "force")
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


@routes.get(_ADMIN_TOPIC + "/partitioned-stats")
async def partitioned_stats(request: web.Request) -> web.Response:
    name = _topic(request)
    per_partition = request.query.get("perPartition", "true")
    if per_partition not in ("true", "false"):
        raise InvalidRequestError("query parameter perPartition must be true or false")
    topics = await _service(request).partitions.partition_topics(name)
    total: dict[str, Any] = {}
    by_partition = {}
    for topic in topics:
        stats = topic.stats()
        _merge_stats(total, stats)
        by_partition[str(topic.name)] = stats
    total["metadata"] = {"partitions": len(topics)}
    total["partitions"] = by_partition if per_partition == "true" else {}
    return _json(total)


@routes.get("/admin/v2/persistent/{tenant}/{namespace}/partitioned")
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


def _http_port(request: web.Request) -> int:
    """The port this request came in on (the listening socket's, whatever Host says)."""
    transport = request.transport
    sockname = transport.get_extra_info("sockname") if transport is not None else None
    if isinstance(sockname, tuple) and len(sockname) >= 2:
        return int(sockname[1])
    return request.url.port or 80


@routes.get("/lookup/v2/topic/persistent/{tenant}/{namespace}/{topic}")
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
    return _json(lookup_data(http_url(address, _http_port(request)), _broker_url(request)))


# ---------------------------------------------------------------------- clusters, tenants


@routes.get("/admin/v2/clusters")
async def list_clusters(request: web.Request) -> web.Response:
    return _json([request.app[SETTINGS].broker.clusterName])


@routes.get("/admin/v2/tenants")
async def list_tenants(request: web.Request) -> web.Response:
    return _json(await _service(request).namespaces.tenants())


def _string_list(body: dict[str, Any], name: str) -> list[str] | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise InvalidRequestError(f"{name} must be a list of strings")
    return value


@routes.put("/admin/v2/tenants/{tenant}")
async def create_tenant(request: web.Request) -> web.Response:
    tenant = _tenant(request)
    body = await _json_body(request)
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise InvalidRequestError("the body must be a TenantInfo JSON object")
    registry = _service(request).namespaces
    info = registry.tenant_info(
        _string_list(body, "adminRoles") or [], _string_list(body, "allowedClusters")
    )
    await registry.create_tenant(tenant, info)
    return _no_content()


@routes.get("/admin/v2/tenants/{tenant}")
async def get_tenant(request: web.Request) -> web.Response:
    return _json(await _service(request).namespaces.tenant(_tenant(request)))


@routes.delete("/admin/v2/tenants/{tenant}")
async def delete_tenant(request: web.Request) -> web.Response:
    tenant = _tenant(request)
    await _service(request).namespaces.delete_tenant(tenant, _flag(request, "force"))
    return _no_content()


# ---------------------------------------------------------------------- namespaces


@routes.get("/admin/v2/namespaces/{tenant}")
async def list_namespaces(request: web.Request) -> web.Response:
    return _json(await _service(request).namespaces.namespaces(_tenant(request)))


@routes.put(_NAMESPACE)
async def create_namespace(request: web.Request) -> web.Response:
    tenant, namespace = _namespace(request)
    body = await _json_body(request)
    if body is not None and not isinstance(body, dict):
        raise InvalidRequestError("the body, when given, must be a Policies JSON object")
    await _service(request).namespaces.create_namespace(tenant, namespace)
    return _no_content()


@routes.delete(_NAMESPACE)
async def delete_namespace(request: web.Request) -> web.Response:
    tenant, namespace = _namespace(request)
    force = _flag(request, "force")
    await _service(request).namespaces.delete_namespace(tenant, namespace, force)
    return _no_content()


@routes.get(_NAMESPACE + "/topics")
async def namespace_topics(request: web.Request) -> web.Response:
    tenant, namespace = _namespace(request)
    mode = request.query.get("mode", "PERSISTENT")
    if mode not in ("PERSISTENT", "NON_PERSISTENT", "ALL"):
        raise InvalidRequestError("mode must be PERSISTENT, NON_PERSISTENT or ALL")
    if mode == "NON_PERSISTENT":
        return _json([])  # brokerlab has persistent topics only
    return _json(await _service(request).list_topics(tenant, namespace))


@routes.put(_NAMESPACE + "/unload")
async def unload_namespace(request: web.Request) -> web.Response:
    tenant, namespace = _namespace(request)
    _service(request)  # a broker that is down answers 503
    await request.app[NODE].cluster.unload_namespace(tenant, namespace)
    return _no_content()


@routes.put(_NAMESPACE + "/{bundle}/unload")
async def unload_bundle(request: web.Request) -> web.Response:
    """Unload one bundle (``0x00000000_0x40000000``) at its owner; the next lookup of
    its topics assigns it to another live broker when there is one."""
    tenant, namespace = _namespace(request)
    _service(request)
    bundle = request.match_info["bundle"]
    await request.app[NODE].cluster.unload_bundle(f"{tenant}/{namespace}", bundle)
    return _no_content()


# ---------------------------------------------------------------------- topics


@routes.get(_ADMIN_TOPIC + "/subscriptions")
async def list_subscriptions(request: web.Request) -> web.Response:
    name = _topic(request)
    service = _service(request)
    if await service.partitions.get(name):
        topics = await service.partitions.partition_topics(name)
    else:
        topics = [await service.get_topic(name, create=False)]
    return _json(sorted({s for topic in topics for s in topic.subscriptions}))


@routes.put(_ADMIN_TOPIC + "/unload")
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
    body = await _json_body(request)
    query = request.query.get("messageId")
    if body is None:
        if query is None or query in ("earliest", "latest"):
            return query or "latest"
        return message_id(query)
    if query is not None:
        raise InvalidRequestError("give the start in the body or in messageId, not in both")
    if isinstance(body, str):
        if body not in ("earliest", "latest"):
            raise InvalidRequestError("a start position given as a string is latest or earliest")
        return body
    if not isinstance(body, dict):
        raise InvalidRequestError("the body must be a MessageId object, 'latest' or 'earliest'")
    ledger_id, entry_id = _int_field(body, "ledgerId"), _int_field(body, "entryId")
    if (ledger_id, entry_id) == _LATEST:
        return "latest"
    if (ledger_id, entry_id) == _EARLIEST:
        return "earliest"
    if not (0 <= ledger_id <= MAX_INT64 and 0 <= entry_id < MAX_INT64):
        raise InvalidRequestError(
            "ledgerId and entryId must be within 0..9223372036854775807, or be "
            "MessageId.latest or MessageId.earliest"
        )
    _int_field(body, "batchIndex", -1)
    _int_field(body, "partitionIndex", -1)
    excluded = body.get("isExcluded", False)
    if not isinstance(excluded, bool):
        raise InvalidRequestError("isExcluded must be true or false")
    return Position(ledger_id, entry_id + 1 if excluded else entry_id)


@routes.put(_ADMIN_TOPIC + "/subscription/{subscription}")
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


@routes.get(_ADMIN_TOPIC + "/lastMessageId")
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
