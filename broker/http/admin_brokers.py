"""Pulsar's broker and cluster routes that admin tools call when they start
(``pulsar-admin brokers``, pulsarctl, Pulsar Manager): the active brokers, the leader,
the configuration, the version, readiness, and a cluster's ClusterData.

Paths and shapes are Pulsar's (``admin/v2/Brokers``, ``BrokersBase``, ``Clusters``);
errors are brokerlab's ``{"reason", "code"}``.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

import broker
from broker.cluster import BrokerNode
from broker.dispatch.errors import NotFoundError
from broker.dispatch.names import check_name_part
from broker.dispatch.ownership import bundle_boundaries
from broker.http.app_state import NODE, SETTINGS, learn_own_url
from broker.http.contract import RouteTable, Success
from storage_stub.confkeys import format_value

api = RouteTable()
routes = api.routes

#: what ``/admin/v2/brokers/version`` answers
VERSION = f"brokerlab-{broker.__version__}"
#: keys whose values the runtime configuration does not show (Pulsar's admin API shows
#: everything to a super-user; a token signing key is a secret a page should not echo)
SECRET_KEYS = frozenset({"tokenSecretKey"})
MASK = "******"


def _json(data: Any) -> web.Response:
    return web.Response(body=orjson.dumps(data), content_type="application/json")


def _broker_id(url: str) -> str:
    """Pulsar's broker id: ``host:port`` of its web service."""
    return url.removeprefix("http://").removeprefix("https://")


def _active(request: web.Request) -> list[BrokerNode]:
    learn_own_url(request)
    nodes = request.app[NODE].cluster.nodes
    return [node for node in nodes if node.state == "up" and node.address.http_url]


def _check_cluster(request: web.Request) -> None:
    cluster = check_name_part("cluster", request.match_info["cluster"])
    own = request.app[SETTINGS].broker.clusterName
    if cluster != own:
        raise NotFoundError(f"Cluster {cluster} does not exist (this one is {own!r})")


# ---------------------------------------------------------------------- brokers


BROKER_LIST = {"type": "array", "items": {"type": "string"}}


@api.operation(
    "GET",
    "/admin/v2/brokers",
    "getActiveBrokersOfThisCluster",
    tag="broker",
    summary="active brokers",
    success=Success(200, '`["127.0.0.1:8080"]`.', BROKER_LIST),
    down=False,
    errors={},
    description="""
        `GET /admin/v2/brokers` → the ids (`host:port` of the web service) of the brokers of
        this cluster that are up, as `pulsar-admin brokers list` without a cluster.
    """,
)
async def active_brokers_here(request: web.Request) -> web.Response:
    return _json([_broker_id(node.address.http_url) for node in _active(request)])


@api.operation(
    "GET",
    "/admin/v2/brokers/leaderBroker",
    "getLeaderBroker",
    tag="broker",
    summary="the leader broker",
    success=Success(
        200,
        '`{"serviceUrl": "http://127.0.0.1:8080", "brokerId": "127.0.0.1:8080"}`.',
        {
            "type": "object",
            "properties": {"serviceUrl": {"type": "string"}, "brokerId": {"type": "string"}},
            "required": ["serviceUrl", "brokerId"],
        },
    ),
    down=False,
    errors={404: "no broker of the cluster is up."},
    description="""
        `GET /admin/v2/brokers/leaderBroker` → Pulsar's BrokerInfo of the leader.

        **Extension:** brokerlab elects no leader: the leader is the broker of lowest index
        that is up (the one Pulsar's load manager election would keep while it lives).
    """,
)
async def leader_broker(request: web.Request) -> web.Response:
    active = _active(request)
    if not active:
        raise NotFoundError("no broker of the cluster is up")
    url = active[0].address.http_url
    return _json({"serviceUrl": url, "brokerId": _broker_id(url)})


@api.operation(
    "GET",
    "/admin/v2/brokers/configuration",
    "getDynamicConfigurationNames",
    tag="broker",
    summary="dynamic configuration names",
    success=Success(200, "`[]`.", BROKER_LIST),
    down=False,
    errors={},
    description="""
        `GET /admin/v2/brokers/configuration` → the keys that may be changed at run time:
        none in brokerlab (`[]`), so `pulsar-admin brokers list-dynamic-config` shows none.
    """,
)
async def dynamic_configuration_names(request: web.Request) -> web.Response:
    return _json([])


@api.operation(
    "GET",
    "/admin/v2/brokers/configuration/values",
    "getAllDynamicConfigurations",
    tag="broker",
    summary="dynamic configuration values",
    success=Success(200, "`{}`.", {"type": "object", "additionalProperties": {"type": "string"}}),
    down=False,
    errors={},
    description="""
        `GET /admin/v2/brokers/configuration/values` → the dynamic keys set at run time:
        `{}` (brokerlab has none).
    """,
)
async def dynamic_configuration_values(request: web.Request) -> web.Response:
    return _json({})


@api.operation(
    "GET",
    "/admin/v2/brokers/configuration/runtime",
    "getRuntimeConfiguration",
    tag="broker",
    summary="runtime configuration",
    success=Success(
        200,
        'every key of conf/broker.conf with its value, as strings: `{"clusterName": '
        '"standalone", ...}`.',
        {"type": "object", "additionalProperties": {"type": "string"}},
    ),
    down=False,
    errors={},
    description="""
        `GET /admin/v2/brokers/configuration/runtime` → every key of conf/broker.conf and the
        value this broker runs with, as strings (as `pulsar-admin brokers
        get-runtime-config` prints them; lists comma-separated, as the file writes them).

        **Extension:** `tokenSecretKey` is shown as `******` when set.
    """,
)
async def runtime_configuration(request: web.Request) -> web.Response:
    config = request.app[NODE].config
    values: dict[str, str] = {}
    for name in type(config).model_fields:
        value = getattr(config, name)
        text = format_value(value)
        values[name] = MASK if name in SECRET_KEYS and text else text
    return _json(values)


@api.operation(
    "GET",
    "/admin/v2/brokers/version",
    "getBrokerVersion",
    tag="broker",
    summary="broker version",
    success=Success(200, "`brokerlab-0.1.0` (`text/plain`).", {"type": "string"}, "text/plain"),
    down=False,
    errors={},
    description="""
        `GET /admin/v2/brokers/version` → the broker's version as text, as
        `pulsar-admin brokers version` prints it.

        **Extension:** brokerlab's version (`brokerlab-0.1.0`), not a Pulsar release's.
    """,
)
async def broker_version(request: web.Request) -> web.Response:
    return web.Response(text=VERSION)


@api.operation(
    "GET",
    "/admin/v2/brokers/ready",
    "isReady",
    tag="broker",
    summary="readiness probe",
    success=Success(200, "`ok` (`text/plain`).", {"type": "string", "enum": ["ok"]}, "text/plain"),
    errors={},
    description="""
        `GET /admin/v2/brokers/ready` → 200 `ok` once the broker serves; 503 while it is down
        (restarting, not started yet).
    """,
)
async def ready(request: web.Request) -> web.Response:
    request.app[NODE].running_service()
    return web.Response(text="ok")


@api.operation(
    "GET",
    "/admin/v2/brokers/{cluster}",
    "getActiveBrokers",
    tag="broker",
    summary="active brokers of a cluster",
    success=Success(200, '`["127.0.0.1:8080"]`.', BROKER_LIST),
    down=False,
    errors={
        400: "bad cluster name.",
        404: "not this cluster (`clusterName`).",
    },
    description="""
        `GET /admin/v2/brokers/{cluster}` → the ids (`host:port` of the web service) of the
        brokers of the cluster that are up, as `pulsar-admin brokers list {cluster}` and Pulsar
        Manager call it.
    """,
)
async def active_brokers(request: web.Request) -> web.Response:
    _check_cluster(request)
    return _json([_broker_id(node.address.http_url) for node in _active(request)])


@api.operation(
    "GET",
    "/admin/v2/brokers/{cluster}/{broker}/ownedNamespaces",
    "getOwnedNamespaces",
    tag="broker",
    summary="the bundles a broker owns",
    success=Success(
        200,
        '`{"public/default/0x00000000_0x40000000": {"broker_assignment": "shared", '
        '"is_controlled": false, "is_active": true}}`.',
        {"type": "object", "additionalProperties": {"type": "object"}},
    ),
    down=False,
    errors={
        400: "bad cluster name.",
        404: "not this cluster, or no broker of it has that id (`host:port`).",
    },
    description="""
        `GET /admin/v2/brokers/{cluster}/{broker}/ownedNamespaces` → Pulsar's map of
        NamespaceOwnershipStatus by bundle (`{tenant}/{namespace}/0x{lower}_0x{upper}`), as
        Pulsar Manager's broker page reads it. `{broker}` is a broker id of
        `GET /admin/v2/brokers/{cluster}`.

        **Extension:** any broker of the cluster answers for any other (Pulsar redirects to
        the broker named).
    """,
)
async def owned_namespaces(request: web.Request) -> web.Response:
    _check_cluster(request)
    learn_own_url(request)
    wanted = request.match_info["broker"]
    cluster = request.app[NODE].cluster
    for node in cluster.nodes:
        if node.address.http_url and _broker_id(node.address.http_url) == wanted:
            status = {"broker_assignment": "shared", "is_controlled": False, "is_active": True}
            return _json(
                {
                    f"{namespace}/{bundle}": status
                    for namespace, bundle in sorted(cluster.ownership.bundles_of(node.index))
                }
            )
    raise NotFoundError(f"no broker {wanted!r} in this cluster")


# ---------------------------------------------------------------------- clusters


@api.operation(
    "GET",
    "/admin/v2/clusters/{cluster}/failureDomains",
    "getFailureDomains",
    tag="clusters, tenants and namespaces",
    summary="a cluster's failure domains",
    success=Success(200, "`{}`.", {"type": "object"}),
    down=False,
    errors={400: "bad cluster name.", 404: "not this cluster (`clusterName`)."},
    description="""
        `GET /admin/v2/clusters/{cluster}/failureDomains` → `{}`: brokerlab has no failure
        domains (Pulsar Manager's cluster page reads them).
    """,
)
async def failure_domains(request: web.Request) -> web.Response:
    _check_cluster(request)
    return _json({})


@api.operation(
    "GET",
    "/admin/v2/clusters/{cluster}",
    "getCluster",
    tag="clusters, tenants and namespaces",
    summary="a cluster's data",
    success=Success(
        200,
        'Pulsar\'s ClusterData: `{"serviceUrl": "http://127.0.0.1:8080", "brokerServiceUrl": '
        '"pulsar://127.0.0.1:6650", ...}`.',
        {"type": "object"},
    ),
    down=False,
    errors={
        400: "bad cluster name.",
        404: "not this cluster (`clusterName`).",
    },
    description="""
        `GET /admin/v2/clusters/{cluster}` → Pulsar's ClusterData: `serviceUrl` (this broker's
        HTTP URL), `serviceUrlTls` (`null`), `brokerServiceUrl` (its `pulsar://` URL; `null` when
        the binary protocol is off), `brokerServiceUrlTls` (`null`), `proxyServiceUrl` (`null`),
        `peerClusterNames` (`[]`), `brokerClientTlsEnabled` (`false`).
    """,
)
async def get_cluster(request: web.Request) -> web.Response:
    _check_cluster(request)
    learn_own_url(request)
    address = request.app[NODE].address
    return _json(
        {
            "serviceUrl": address.http_url,
            "serviceUrlTls": None,
            "brokerServiceUrl": address.service_url or None,
            "brokerServiceUrlTls": None,
            "proxyServiceUrl": None,
            "proxyProtocol": None,
            "peerClusterNames": [],
            "authenticationPlugin": None,
            "authenticationParameters": None,
            "brokerClientTlsEnabled": False,
            "tlsAllowInsecureConnection": False,
        }
    )


# ---------------------------------------------------------------------- namespaces


@api.operation(
    "GET",
    "/admin/v2/namespaces/{tenant}/{namespace}/bundles",
    "getBundlesData",
    tag="clusters, tenants and namespaces",
    summary="a namespace's bundles",
    success=Success(
        200,
        '`{"boundaries": ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", '
        '"0xffffffff"], "numBundles": 4}`.',
        {"type": "object"},
    ),
    errors={400: "bad tenant or namespace name.", 404: "the namespace does not exist."},
    description="""
        `GET /admin/v2/namespaces/{t}/{ns}/bundles` → Pulsar's BundlesData: the
        `defaultNumberOfNamespaceBundles` equal ranges of topic-name hashes every namespace
        has (brokerlab does not split bundles).
    """,
)
async def namespace_bundles(request: web.Request) -> web.Response:
    tenant = check_name_part("tenant", request.match_info["tenant"])
    namespace = check_name_part("namespace", request.match_info["namespace"])
    service = request.app[NODE].running_service()
    if not await service.namespaces.namespace_exists(tenant, namespace):
        raise NotFoundError(f"Namespace {tenant}/{namespace} does not exist")
    boundaries = bundle_boundaries(request.app[SETTINGS].broker.defaultNumberOfNamespaceBundles)
    return _json(
        {
            "boundaries": [f"0x{boundary:08x}" for boundary in boundaries],
            "numBundles": len(boundaries) - 1,
        }
    )


@api.operation(
    "GET",
    "/admin/v2/non-persistent/{tenant}/{namespace}",
    "listNonPersistentTopics",
    tag="topics",
    summary="non-persistent topics of a namespace",
    success=Success(200, "`[]`.", {"type": "array", "items": {"type": "string"}}),
    errors={400: "bad tenant or namespace name."},
    description="""
        `GET /admin/v2/non-persistent/{t}/{ns}` → `[]`: brokerlab has persistent topics only
        (tools that list both kinds, as Pulsar Manager does, get an empty list).
    """,
)
async def non_persistent_topics(request: web.Request) -> web.Response:
    check_name_part("tenant", request.match_info["tenant"])
    check_name_part("namespace", request.match_info["namespace"])
    request.app[NODE].running_service()
    return _json([])
