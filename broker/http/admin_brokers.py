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


# ---------------------------------------------------------------------- clusters


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
