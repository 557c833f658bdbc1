"""Pulsar's admin and lookup routes, the ones Pulsar clients and ``pulsar-admin`` call:
partitioned topics, topic lookup, clusters, tenants and namespaces, a topic's
subscriptions, unloads, and Pulsar's forms of subscription creation and lastMessageId.

Paths, verbs and JSON field names are Pulsar's (``admin/v2/PersistentTopics``,
``Namespaces``, ``Tenants``, ``Clusters``, ``lookup/v2/TopicLookup``); errors are
brokerlab's ``{"reason", "code"}``. Where Pulsar answers a status brokerlab has no code
for (406 and 422 for a bad partition count), the nearest of ours is used and
``docs/api.md`` says so.

Each handler's ``@api.operation(...)`` is its part of the contract, from which
``/openapi.json`` and docs/api.md's route sections are rendered.
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
from broker.http.contract import (
    ADMIN_TOPIC,
    NAMESPACE,
    PARTITION_OWNER,
    SUBSCRIPTION,
    TOPIC,
    TOPIC_OWNER,
    ChoiceQuery,
    FlagQuery,
    JsonBody,
    PatternQuery,
    RouteTable,
    Success,
)
from broker.http.models import (
    NamespacePolicies,
    PartitionCount,
    StartMessageId,
    SubscriptionStart,
    TenantInfo,
)
from broker.http.parsing import MAX_INT64, message_id
from broker.http.schemas import (
    LookupData,
    NameList,
    PartitionedTopicMetadata,
    PartitionedTopicStats,
    TopicLastMessageId,
    TopicList,
)
from broker.ledger.entry import EntryFormatError, metadata_of
from broker.ledger.position import Position
from broker.tasks import cooperative

api = RouteTable()
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


PARTITIONS_BODY = JsonBody[int](PartitionCount, "The number of partitions.")


@api.operation(
    "PUT",
    ADMIN_TOPIC + "/partitions",
    "createPartitionedTopic",
    tag="partitioned topics",
    summary="create a partitioned topic",
    body=PARTITIONS_BODY,
    success=Success(204, "created; no partition is loaded until used."),
    errors={
        400: "bad topic name, or one ending in `-partition-<n>`; a body that is not a JSON "
        'integer (`"3"`, `3.0`, `true`, none); a count below 1 or over the limit; partition '
        "names that would be over 128 characters.",
        409: "the partitioned topic exists (or is being deleted), or a topic of that name does.",
        413: "body over `maxHttpRequestBodyBytes`.",
        503: "storage fault or timeout; nothing was created.",
    },
    description="""
        Body: the number of partitions as a JSON number (`3`), as Pulsar takes it: an integer
        ≥ 1 and at most `maxNumPartitionsPerPartitionedTopic`, or, while that is 0 (Pulsar:
        no limit), at most `brokerlabMaxPartitionsCeiling` (10,000; brokerlab only: the
        routes that walk every partition stay bounded).
    """,
)
async def create_partitioned_topic(request: web.Request) -> web.Response:
    name = _topic(request)
    count = await PARTITIONS_BODY.read(request)
    await _service(request).partitions.create(name, count)
    return _no_content()


NEW_PARTITIONS_BODY = JsonBody[int](PartitionCount, "The new number of partitions.")
FORCE_UPDATE_PARTITIONS = FlagQuery("force", "Accepted; no effect.")


@api.operation(
    "POST",
    ADMIN_TOPIC + "/partitions",
    "updatePartitionedTopic",
    tag="partitioned topics",
    summary="raise the partition count",
    query=(FORCE_UPDATE_PARTITIONS,),
    body=NEW_PARTITIONS_BODY,
    success=Success(204, "the partitioned topic has that many partitions."),
    errors={
        400: "bad topic name; a body that is not a JSON integer; a count below 1 or over "
        "`maxNumPartitionsPerPartitionedTopic` (while 0, `brokerlabMaxPartitionsCeiling`); "
        "`force` not `true` or `false`.",
        409: "not a partitioned topic; fewer partitions than it has.",
        413: "body over `maxHttpRequestBodyBytes`.",
        503: "storage fault or timeout. If it came after the new count was stored, the count "
        "stands and some new partitions may lack partition 0's subscriptions (create them with "
        "`PUT .../subscription/{subscription}` on the partition).",
    },
    description="""
        Body: the new number of partitions as a JSON number. The count only grows, as in
        Pulsar; the same count changes nothing (204). The new partitions get the subscriptions
        partition 0 has, starting at their beginning, as Pulsar copies them. Query `force`
        (`true`/`false`) is accepted and has no effect.
    """,
)
async def update_partitioned_topic(request: web.Request) -> web.Response:
    name = _topic(request)
    FORCE_UPDATE_PARTITIONS.read(request)  # skips a check of stray partitions: none here
    count = await NEW_PARTITIONS_BODY.read(request)
    await _service(request).partitions.update(name, count)
    return _no_content()


CHECK_AUTO_CREATION = FlagQuery(
    "checkAllowAutoCreation",
    "A missing topic answers 0 when auto-creation is on, or, with "
    "allowAutoTopicCreationType=partitioned, is created partitioned.",
)


@api.operation(
    "GET",
    ADMIN_TOPIC + "/partitions",
    "getPartitionedMetadata",
    tag="partitioned topics",
    summary="partitioned-topic metadata",
    query=(CHECK_AUTO_CREATION,),
    success=Success(200, '`{"partitions": 3, "deleted": false}`.', PartitionedTopicMetadata),
    errors={
        400: "bad topic name; `checkAllowAutoCreation` not `true` or `false`.",
        404: "neither a topic nor a partitioned topic, and no auto-creation applies.",
        503: "storage fault or timeout.",
    },
    description="""
        Pulsar's PartitionedTopicMetadata: `{"partitions": 3, "deleted": false}`. A topic that
        is not partitioned (a partition among them) answers `{"partitions": 0, "deleted": false}`.
        `deleted` is `true` while a delete of the partitioned topic is under way (see `DELETE`).

        Query parameters:

        | parameter | type | default | meaning |
        |---|---|---|---|
        | `checkAllowAutoCreation` | `true` or `false` | `false` | what Pulsar clients send (`true`): a name that is neither a topic nor a partitioned topic answers 0 when `allowAutoTopicCreation=true` (the client will create a non-partitioned topic), or, with `allowAutoTopicCreationType=partitioned`, creates a partitioned topic of `defaultNumPartitions` partitions (capped at the limit) and answers its count; never one named like a partition |
    """,  # noqa: E501
)
async def get_partitioned_metadata(request: web.Request) -> web.Response:
    name = _topic(request)
    auto_create = CHECK_AUTO_CREATION.read(request)
    partitions = _service(request).partitions
    record = await partitions.metadata(name)
    if record is not None:
        return _json(record.to_json())
    count = await partitions.metadata_for_client(name, auto_create)
    return _json({"partitions": count, "deleted": False})


FORCE_PARTITIONS_DELETE = FlagQuery("force", "Close connected consumers first.")


@api.operation(
    "DELETE",
    ADMIN_TOPIC + "/partitions",
    "deletePartitionedTopic",
    tag="partitioned topics",
    summary="delete a partitioned topic",
    query=(FORCE_PARTITIONS_DELETE,),
    success=Success(204, "deleted; the name is free again."),
    errors={
        400: "bad topic name; `force` not `true` or `false`.",
        404: "not a partitioned topic.",
        412: "a partition has connected consumers and `force` is not `true`; nothing was deleted.",
        503: "storage fault or timeout; retry it (see above).",
    },
    description="""
        Deletes the partitioned topic and every partition's topic (subscriptions, cursors,
        ledgers). Query `force` (`true`/`false`, default `false`): `true` closes connected
        consumers first; `false` refuses while a partition has any, before changing anything.
        The partitioned topic is marked `deleted` first: until the delete completes, no
        partition can be created (409), and a delete that failed half-way is completed by its
        retry.
    """,
)
async def delete_partitioned_topic(request: web.Request) -> web.Response:
    name = _topic(request)
    force = FORCE_PARTITIONS_DELETE.read(request)
    service = _service(request)
    await service.partitions.delete(name, force)
    await service.policies.drop_topic(name)  # as Pulsar drops a deleted topic's policies
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


PER_PARTITION = FlagQuery("perPartition", "Include each partition's stats.", True)


@api.operation(
    "GET",
    ADMIN_TOPIC + "/partitioned-stats",
    "getPartitionedStats",
    tag="partitioned topics",
    summary="partitioned-topic stats",
    query=(PER_PARTITION,),
    success=Success(200, "the stats object.", PartitionedTopicStats),
    errors={
        400: "bad topic name; `perPartition` not `true` or `false`.",
        404: "not a partitioned topic.",
        503: "storage fault or timeout while loading a partition.",
    },
    description="""
        Pulsar's PartitionedTopicStats: the fields of a topic's `GET .../stats`
        added up over the partitions (counters, rates and sizes summed; each subscription's
        counters summed and its consumers listed from every partition), plus `metadata`
        (`{"partitions": 3, "deleted": false}`, as Pulsar's PartitionedTopicMetadata) and `partitions`, each partition's own stats by full name. Query
        `perPartition` (`true`/`false`, default `true`): `false` leaves `partitions` empty.
        Partitions not loaded are loaded to answer.
    """,  # noqa: E501
)
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
    rate_in = total.get("msgRateIn", 0)
    total["averageMsgSize"] = total.get("msgThroughputIn", 0) / rate_in if rate_in > 0 else 0.0
    # Pulsar's PartitionedTopicMetadata; one being deleted answers 404 above
    total["metadata"] = {"partitions": len(topics), "deleted": False}
    total["partitions"] = by_partition if per_partition else {}
    return _json(total)


@api.operation(
    "GET",
    "/admin/v2/persistent/{tenant}/{namespace}/partitioned",
    "listPartitionedTopics",
    tag="partitioned topics",
    summary="list partitioned topics",
    success=Success(200, "the names.", NameList),
    errors={
        400: "bad tenant or namespace name.",
        503: "storage fault or timeout while reading partitioned topics.",
    },
    description="""
        The full names of the namespace's partitioned topics, sorted:
        `["persistent://t1/ns1/orders"]`; `[]` when none.
    """,
)
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


@api.operation(
    "GET",
    "/lookup/v2/topic" + TOPIC,
    "lookupTopic",
    tag="lookup",
    summary="look a topic up",
    success=Success(200, "the LookupData object.", LookupData),
    errors={
        400: "bad topic name.",
        404: "no such topic and `allowAutoTopicCreation=false`.",
        503: "storage fault or timeout while looking the topic up; no broker of the cluster is "
        "up to own the topic.",
    },
    description="""
        **Extension**, Pulsar's route: which broker serves the topic, for clients given an
        `http://` service URL: the broker owning the topic's bundle (see
        [Brokers of the cluster](#brokers-of-the-cluster)). A bundle without an owner is assigned
        by the lookup: to the live broker owning the fewest bundles (the lowest index on a tie).
        With one broker, that is this one. Pulsar's LookupData:

        ```json
        {"brokerUrl": "pulsar://127.0.0.1:6650", "brokerUrlTls": null,
         "httpUrl": "http://127.0.0.1:8080", "httpUrlTls": null,
         "nativeUrl": "pulsar://127.0.0.1:6650", "brokerUrlSsl": ""}
        ```

        - `brokerUrl` (and its legacy twin `nativeUrl`): `pulsar://{advertisedAddress}:{port}`,
          the port the binary protocol listens on (the actual one with `brokerServicePort=-1`).
          `null` when the protocol is off (`brokerServicePort=0`): such a broker serves HTTP
          only, and a Pulsar client cannot produce or consume through it.
        - `httpUrl`: `http://{advertisedAddress}:{port}`, the port this request came in on.
        - When another broker owns the topic, both are that broker's: its `serviceUrl` and
          `httpUrl` as `GET /admin/v2/brokerlab/brokers` lists them.
        - TLS is never offered: `brokerUrlTls` and `httpUrlTls` are `null` (Pulsar leaves null
          fields out). `brokerUrlSsl` is the legacy field Pulsar always sends (`""`): the C++
          client (under the Python one) refuses a lookup answer with neither it nor
          `brokerUrlTls`.

        A topic, a partitioned topic or a partition of one is found; any other name is found
        too when `allowAutoTopicCreation=true` (the client will create it), else 404.
    """,
)
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


@api.operation(
    "GET",
    "/admin/v2/clusters",
    "getClusters",
    tag="tenants",
    summary="list clusters",
    success=Success(200, '`["standalone"]`.', NameList),
    down=False,
    errors={},
    description="""
        The one cluster, `clusterName` of `conf/broker.conf`: `["standalone"]`.
    """,
)
async def list_clusters(request: web.Request) -> web.Response:
    return _json([request.app[SETTINGS].broker.clusterName])


@api.operation(
    "GET",
    "/admin/v2/tenants",
    "getTenants",
    tag="tenants",
    summary="list tenants",
    success=Success(200, 'the tenant names, sorted: `["public"]`.', NameList),
    errors={
        503: "storage fault or timeout.",
    },
    description="""
        `public` exists from the start.
    """,
)
async def list_tenants(request: web.Request) -> web.Response:
    return _json(await _service(request).namespaces.tenants())


TENANT_BODY = JsonBody[TenantInfo](TenantInfo, "The tenant (optional).", required=False)


@api.operation(
    "PUT",
    "/admin/v2/tenants/{tenant}",
    "createTenant",
    tag="tenants",
    summary="create a tenant",
    body=TENANT_BODY,
    success=Success(204, "created."),
    errors={
        400: "bad tenant name; a body that is not a JSON object; a field of the wrong type; a "
        "cluster other than `clusterName`.",
        409: "the tenant exists.",
        413: "body over `maxHttpRequestBodyBytes`.",
        503: "storage fault or timeout; nothing was created.",
    },
    description="""
        Body (optional; none is `{}`): Pulsar's TenantInfo.

        | field | type | required | default | limits |
        |---|---|---|---|---|
        | `adminRoles` | array of strings | no | `[]` | kept and shown, not enforced |
        | `allowedClusters` | array of strings | no | `[clusterName]` | only `clusterName` |
    """,
)
async def create_tenant(request: web.Request) -> web.Response:
    tenant = _tenant(request)
    body = await TENANT_BODY.read_optional(request) or TenantInfo()
    registry = _service(request).namespaces
    info = registry.tenant_info(body.get("adminRoles") or [], body.get("allowedClusters"))
    await registry.create_tenant(tenant, info)
    return _no_content()


@api.operation(
    "GET",
    "/admin/v2/tenants/{tenant}",
    "getTenant",
    tag="tenants",
    summary="a tenant's TenantInfo",
    success=Success(200, '`{"adminRoles": [], "allowedClusters": ["standalone"]}`.', TenantInfo),
    errors={
        400: "bad tenant name.",
        404: "no such tenant.",
        503: "storage fault or timeout.",
    },
    description="""
        Its admin roles and clusters.
    """,
)
async def get_tenant(request: web.Request) -> web.Response:
    return _json(await _service(request).namespaces.tenant(_tenant(request)))


FORCE_TENANT_DELETE = FlagQuery("force", "Delete its namespaces first.")


@api.operation(
    "DELETE",
    "/admin/v2/tenants/{tenant}",
    "deleteTenant",
    tag="tenants",
    summary="delete a tenant",
    query=(FORCE_TENANT_DELETE,),
    success=Success(204, "deleted."),
    errors={
        400: "bad tenant name; `force` not `true` or `false`.",
        404: "no such tenant.",
        409: "the tenant has namespaces and `force` is not `true`.",
        503: "storage fault or timeout; what was deleted before it stays deleted, and a retry "
        "continues.",
    },
    description="""
        Query `force` (`true`/`false`, default `false`): `true` deletes the tenant's namespaces
        first, as `DELETE .../namespaces/{tenant}/{namespace}?force=true` does; `false` refuses
        while it has any. Topics in namespaces of the tenant that were never registered are
        not touched.
    """,
)
async def delete_tenant(request: web.Request) -> web.Response:
    tenant = _tenant(request)
    force = FORCE_TENANT_DELETE.read(request)
    await _service(request).namespaces.delete_tenant(tenant, force)
    return _no_content()


# ---------------------------------------------------------------------- namespaces


@api.operation(
    "GET",
    "/admin/v2/namespaces/{tenant}",
    "getNamespaces",
    tag="namespaces",
    summary="list a tenant's namespaces",
    success=Success(200, '`tenant/namespace` names, sorted: `["public/default"]`.', NameList),
    errors={
        400: "bad tenant name.",
        404: "no such tenant.",
        503: "storage fault or timeout.",
    },
    description="""
        `tenant/namespace` names.
    """,
)
async def list_namespaces(request: web.Request) -> web.Response:
    return _json(await _service(request).namespaces.namespaces(_tenant(request)))


POLICIES_BODY = JsonBody[dict[str, Any]](NamespacePolicies, "Ignored (optional).", required=False)


@api.operation(
    "PUT",
    NAMESPACE,
    "createNamespace",
    tag="namespaces",
    summary="create a namespace",
    body=POLICIES_BODY,
    success=Success(204, "created."),
    errors={
        400: "bad tenant or namespace name; a body that is not a JSON object.",
        404: "no such tenant.",
        409: "the namespace exists.",
        413: "body over `maxHttpRequestBodyBytes`.",
        503: "storage fault or timeout; nothing was created.",
    },
    description="""
        Body (optional): Pulsar's Policies object, accepted and ignored.
    """,
)
async def create_namespace(request: web.Request) -> web.Response:
    tenant, namespace = _namespace(request)
    await POLICIES_BODY.read_optional(request)  # accepted and ignored
    await _service(request).namespaces.create_namespace(tenant, namespace)
    return _no_content()


FORCE_NAMESPACE_DELETE = FlagQuery("force", "Delete its topics first.")


@api.operation(
    "DELETE",
    NAMESPACE,
    "deleteNamespace",
    tag="namespaces",
    summary="delete a namespace",
    query=(FORCE_NAMESPACE_DELETE,),
    success=Success(204, "deleted."),
    errors={
        400: "bad tenant or namespace name; `force` not `true` or `false`.",
        404: "no such namespace.",
        409: "the namespace holds topics and `force` is not `true`.",
        503: "storage fault or timeout; what was deleted before it stays deleted, and a retry "
        "continues.",
    },
    description="""
        Query `force` (`true`/`false`, default `false`): `true` deletes the namespace's
        partitioned topics and topics first (closing their consumers); `false` refuses while
        it holds any.
    """,
)
async def delete_namespace(request: web.Request) -> web.Response:
    tenant, namespace = _namespace(request)
    force = FORCE_NAMESPACE_DELETE.read(request)
    await _service(request).namespaces.delete_namespace(tenant, namespace, force)
    return _no_content()


TOPICS_MODE = ChoiceQuery(
    "mode",
    "Which topics; NON_PERSISTENT answers [].",
    ("PERSISTENT", "NON_PERSISTENT", "ALL"),
    "PERSISTENT",
)


@api.operation(
    "GET",
    NAMESPACE + "/topics",
    "getNamespaceTopics",
    tag="namespaces",
    summary="list a namespace's topics",
    query=(TOPICS_MODE,),
    success=Success(200, '`["persistent://public/default/orders", ...]`.', TopicList),
    errors={
        400: "bad tenant or namespace name; `mode` not one of the three.",
        503: "storage fault or timeout while listing.",
    },
    description="""
        Pulsar's route (Pulsar clients read it for pattern subscriptions): the same list as
        `GET /admin/v2/persistent/{tenant}/{namespace}`, partitions included. Query `mode`:
        `PERSISTENT` (default) or `ALL` list them; `NON_PERSISTENT` answers `[]` (brokerlab has
        persistent topics only). Any namespace answers, registered or not.
    """,
)
async def namespace_topics(request: web.Request) -> web.Response:
    tenant, namespace = _namespace(request)
    mode = TOPICS_MODE.read(request)
    if mode == "NON_PERSISTENT":
        return _json([])  # brokerlab has persistent topics only
    return _json(await _service(request).list_topics(tenant, namespace))


@api.operation(
    "PUT",
    NAMESPACE + "/unload",
    "unloadNamespacePut",
    tag="namespaces",
    summary="unload a namespace (Pulsar's verb)",
    success=Success(204, "every topic of the namespace is unloaded, as with `POST`."),
    errors={
        400: "bad tenant or namespace name.",
    },
    description="""
        **Extension:** Pulsar's verb for the route above (`pulsar-admin namespaces unload`);
        the same effect and answers. No body.
    """,
)
async def unload_namespace(request: web.Request) -> web.Response:
    tenant, namespace = _namespace(request)
    _service(request)  # a broker that is down answers 503
    await request.app[NODE].cluster.unload_namespace(tenant, namespace)
    return _no_content()


@api.operation(
    "PUT",
    NAMESPACE + "/{bundle}/unload",
    "unloadNamespaceBundle",
    tag="namespaces",
    summary="unload a namespace bundle",
    success=Success(204, "unloaded and released."),
    errors={
        400: "bad tenant or namespace name; a bundle that is not one of the cluster's (the "
        "`reason` lists them).",
    },
    description="""
        **Extension**, Pulsar's route (`pulsar-admin namespaces unload --bundle`): unloads one
        bundle of the namespace, `{bundle}` such as `0x00000000_0x40000000` (one of the
        `defaultNumberOfNamespaceBundles` equal ranges of the CRC32 of the full topic name; see
        [Brokers of the cluster](#brokers-of-the-cluster)), at its owner, asked of any broker:
        its loaded topics are unloaded as the namespace unload does (consumers closed, cache
        entries dropped), and the bundle is released. The next lookup of one of its topics (or
        request needing one) assigns it to another live broker when there is one, else to the
        same one again. A bundle of a killed broker is released at once, without waiting for
        `metadataStoreSessionTimeoutMillis`; a bundle without an owner answers 204 and nothing
        changes. No body.
    """,
)
async def unload_bundle(request: web.Request) -> web.Response:
    """Unload one bundle (``0x00000000_0x40000000``) at its owner; the next lookup of
    its topics assigns it to another live broker when there is one."""
    tenant, namespace = _namespace(request)
    _service(request)
    bundle = request.match_info["bundle"]
    await request.app[NODE].cluster.unload_bundle(f"{tenant}/{namespace}", bundle)
    return _no_content()


# ---------------------------------------------------------------------- topics


@api.operation(
    "GET",
    ADMIN_TOPIC + "/subscriptions",
    "getSubscriptions",
    tag="topics",
    summary="list subscriptions",
    redirect=PARTITION_OWNER,
    success=Success(200, '`["billing", "shipping"]`.', NameList),
    errors={
        400: "bad topic name.",
        404: "unknown topic.",
        503: "storage fault or timeout while loading the topic.",
    },
    description="""
        **Extension**, Pulsar's route: the names of the topic's subscriptions, sorted, as a JSON
        array of strings. On a partitioned topic, the subscriptions of all its partitions (each
        once). A stored topic that is not loaded is loaded to answer.
    """,
)
async def list_subscriptions(request: web.Request) -> web.Response:
    name = _topic(request)
    service = _service(request)
    if await service.partitions.get(name):
        topics = await service.partitions.partition_topics(name)
    else:
        topics = [await service.get_topic(name, create=False)]
    return _json(sorted({s for topic in topics for s in topic.subscriptions}))


@api.operation(
    "PUT",
    ADMIN_TOPIC + "/unload",
    "unloadTopic",
    tag="topics",
    summary="unload a topic",
    redirect=PARTITION_OWNER,
    success=Success(204, "unloaded."),
    errors={
        400: "bad topic name.",
        404: "neither a topic nor a partitioned topic.",
        503: "storage fault or timeout while looking the topic up.",
    },
    description="""
        **Extension**, Pulsar's route: unloads one topic as the namespace unload does (its
        consumers are closed, its cache entries dropped, the next request reloads it from
        storage); a topic that is not loaded answers 204 too. On a partitioned topic, every
        partition is unloaded. No body.

        With several brokers a topic is unloaded at its owner: asked of another broker, a
        topic answers 307 to the owner, and a partitioned topic's partitions are each unloaded
        at theirs. The topic stays with its owner (unload its bundle to move it).
    """,
)
async def unload_topic(request: web.Request) -> web.Response:
    name = _topic(request)
    service = _service(request)
    cluster = request.app[NODE].cluster
    count = await service.partitions.get(name)
    if count:
        # each partition at its owner (the partitions of a topic may be on any broker)
        # yielding as it goes: most partitions are not loaded, and their unload is done
        # without an await that waits
        async for index in cooperative(range(count)):
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


SUBSCRIPTION_START_BODY = JsonBody[str | StartMessageId](
    SubscriptionStart,
    "Pulsar's form of the start, instead of messageId (not with it).",
    required=False,
)
START_MESSAGE_ID = PatternQuery(
    "messageId",
    "Start position: earliest, latest or L:E (inclusive).",
    r"^(earliest|latest|[0-9]+:[0-9]+)$",
    "latest",
)


@api.operation(
    "PUT",
    SUBSCRIPTION,
    "createSubscription",
    tag="subscriptions",
    summary="create a subscription",
    query=(START_MESSAGE_ID,),
    body=SUBSCRIPTION_START_BODY,
    redirect=PARTITION_OWNER,
    success=Success(204, "the subscription exists now, with no consumers."),
    errors={
        400: "bad topic or subscription name; `messageId` not `earliest`, `latest` or `L:E`; a "
        "body that is not JSON, not one of the forms above, or given with `messageId`; a message "
        "id on a partitioned topic.",
        404: "the topic does not exist and `allowAutoTopicCreation=false`.",
        409: "a subscription of that name already exists on the topic, or on a partition of the "
        "partitioned topic (nothing changes); the name of a partition past its partitioned "
        "topic's count; `pulsar.dedup`, the name of the broker's deduplication cursor.",
        413: "body over `maxHttpRequestBodyBytes`.",
        503: "storage fault or timeout; the subscription was not created (the topic itself may "
        "have been created, by auto-creation, before the fault).",
    },
    description="""
        `PUT /admin/v2/persistent/{t}/{ns}/{topic}/subscription/{sub}?messageId=earliest|latest|L:E` → 204; 409 if it exists.

        Query parameters (**Extension**):

        | parameter | type | default | meaning |
        |---|---|---|---|
        | `messageId` | `earliest`, `latest` or `L:E` | `latest` | where the new subscription starts: `earliest` = the first stored message; `latest` = the next message produced; `L:E` = the message at that position (or, if there is none there, the first stored after it) is the first delivered |

        Request body (**Extension**: Pulsar's form, which `pulsar-admin topics
        create-subscription` sends): optional; when given, it is the start position instead of
        the `messageId` parameter (giving both is 400). Either the JSON string `"latest"` or
        `"earliest"`, or Pulsar's MessageId / ResetCursorData object:

        | field | type | required | default | meaning |
        |---|---|---|---|---|
        | `ledgerId`, `entryId` | integer | yes | — | the first message delivered is the one at `ledgerId:entryId` (or the first stored after it); both 9223372036854775807 (Pulsar's `MessageId.latest`) = `latest`; both -1 (`MessageId.earliest`) = `earliest`; other negatives: 400 |
        | `isExcluded` | boolean | no | `false` | `true`: start after that message instead |
        | `batchIndex`, `partitionIndex` | integer | no | -1 | accepted and ignored: a subscription starts at an entry, a batch's messages with it |

        Unknown fields (`properties`) are ignored. The topic is created when missing and
        `allowAutoTopicCreation=true`.

        On a partitioned topic (**Extension**, as Pulsar) the subscription is created on every
        partition, starting at `latest` or `earliest`; a message id is 400 there (it names a
        position in one partition: create the subscription on that partition).
    """,  # noqa: E501
)
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


@api.operation(
    "GET",
    ADMIN_TOPIC + "/lastMessageId",
    "getLastMessageId",
    tag="topics",
    summary="last message id",
    redirect=TOPIC_OWNER,
    success=Success(
        200,
        '`{"ledgerId": 3, "entryId": 17, "partitionIndex": -1, "batchIndex": -1}`.',
        TopicLastMessageId,
    ),
    errors={
        400: "bad topic name.",
        404: "unknown topic.",
        503: "storage fault or timeout while loading the topic.",
    },
    description="""
        `GET .../{topic}/lastMessageId` → `{"ledgerId": 3, "entryId": 17}`; on a topic that is not
        loaded this loads it, which asks the storage for the last entry of its last ledger.

        **Extension:** Pulsar's MessageId fields: `ledgerId`, `entryId`, `partitionIndex` (the
        index of a partition `{topic}-partition-{i}`, else -1) and `batchIndex` (the last
        message's index when the last entry is a batch, else -1), all integers. A topic with
        no message yet answers entry id -1 in its current ledger, as Pulsar does. As Pulsar,
        the last entry is read to tell a batch (through the entry cache, by no cursor: a miss
        is one storage read, counted in the cache stats). A partitioned topic's own name is
        404: ask a partition.
    """,
)
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
