"""The HTTP app's typed state (``web.AppKey``) and the lookups its route modules share.

Below ``broker.http.app`` and its route modules (``pulsar_admin``, ``websocket``): the app
adds their routes, and they read the app's state through these keys, so they import this
module and not the app.
"""

from __future__ import annotations

from aiohttp import web

from broker.clock import Clock
from broker.cluster import BrokerNode, Cluster, Settings, http_url
from broker.dispatch.names import TopicName
from broker.dispatch.service import BrokerService
from broker.http.codec import CodecPool
from broker.http.metrics import BrokerMetrics
from storage_stub.bookie import Storage

SETTINGS = web.AppKey("settings", Settings)
STORAGE = web.AppKey("storage", Storage)
CLOCK = web.AppKey("clock", Clock)
METRICS = web.AppKey("metrics", BrokerMetrics)
#: the broker this app is the HTTP front end of (its service changes with restarts)
NODE = web.AppKey("node", BrokerNode)
#: the cluster, when this app started it (one broker, tests and embedding)
CLUSTER = web.AppKey("cluster", Cluster)
#: the codec processes that encode produce bodies (absent with httpCodecProcesses=0)
CODEC = web.AppKey("codec", CodecPool)


def request_port(request: web.Request) -> int:
    """The port this request came in on (the listening socket's, whatever Host says)."""
    transport = request.transport
    sockname = transport.get_extra_info("sockname") if transport is not None else None
    if isinstance(sockname, tuple) and len(sockname) >= 2:
        return int(sockname[1])
    return request.url.port or 80


def learn_own_url(request: web.Request) -> None:
    """A broker that ``brokerlab serve`` did not start (``create_app``: tests, embedding)
    learns its HTTP URL from the first request that lists it: serve sets it when it
    binds, before any request."""
    node = request.app[NODE]
    if not node.address.http_url:
        node.address.http_url = http_url(node.config.advertisedAddress, request_port(request))


def client_address(request: web.Request) -> str:
    """The client's address as Pulsar's stats print it: ``/127.0.0.1:50000``."""
    transport = request.transport
    peer = transport.get_extra_info("peername") if transport is not None else None
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"/{peer[0]}:{peer[1]}"
    return f"/{request.remote or '?'}"


def topic_service(request: web.Request, name: TopicName) -> BrokerService:
    """The service of the broker owning ``name``, for front ends that act for a client
    wherever the topic lives (the WebSocket API, as Pulsar's WebSocket service is a
    client of the owning broker). UnavailableError while that broker is down."""
    node = request.app[NODE]
    node.running_service()
    owner = node.cluster.ownership.owner(name)
    return node.cluster.nodes[owner.index].running_service()
