"""The aiohttp application: routes translate HTTP to broker calls and back."""

from __future__ import annotations

import logging
import pathlib
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pybase64
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from broker.clock import Clock, SystemClock
from broker.cluster import RESTART_MODES, BrokerNode, Cluster, Settings, http_url, service_config  # noqa: F401 (re-exported)
from broker.dispatch.consumer import NOT_RECEIVED, Consumer
from broker.dispatch.errors import (
    InvalidRequestError,
    UnavailableError,
)
from broker.dispatch.names import TopicName, check_name_part
from broker.dispatch.service import BrokerService, ConsumerOptions
from broker.http import pulsar_admin, security, websocket
from broker.http.app_state import (
    CLOCK,
    CLUSTER,
    CODEC,
    METRICS,
    NODE,
    SETTINGS,
    STORAGE,
    request_port,
)
from broker.http.codec import MIN_BODY_BYTES as CODEC_MIN_BODY_BYTES
from broker.http.codec import CodecError, CodecPool, Encoded, default_codec_processes
from broker.http.contract import RouteTable
from broker.http.errors import error_middleware
from broker.http.metrics import BrokerMetrics, CodecCollector
from broker.http.models import CONSUMER_DEFAULTS
from broker.http.openapi import (
    ACK_BODY,
    CONSUMER_BODY,
    DOWNTIME_MS,
    FAULT_BODY,
    FORCE_TOPIC_DELETE,
    MAX_MESSAGES,
    NACK_BODY,
    OFFLOAD_BODY,
    PRODUCE_BODY,
    RESET_CURSOR_BODY,
    RESTART_MODE,
    ROUTES,
    TIMEOUT_MS,
    openapi_spec,
)
from broker.http.parsing import decimal, message_id, message_ids_with_index
from broker.http.produce_encoding import encode_body, publish_results
from broker.ledger.entry import (
    EntryFormatError,
)
from broker.ledger.position import Position
from storage_stub.bookie import Storage
from storage_stub.bookie.faults import FaultInjector
from storage_stub.tiered.api import OBJECT_OPERATIONS

log = logging.getLogger(__name__)


def _attach(app: web.Application, node: BrokerNode) -> None:
    app[NODE] = node
    app[STORAGE] = node.cluster.storage
    app[METRICS] = BrokerMetrics(
        node,
        node.cluster.storage,
        node.config.exposeTopicLevelMetricsInPrometheus,
        node.config.managedLedgerCacheEvictionWatermark,
    )


async def _one_broker_context(app: web.Application) -> AsyncIterator[None]:
    """A cluster of one broker, started with the app and closed with it."""
    cluster = Cluster(app[SETTINGS], app[CLOCK], brokers=1)
    await cluster.open()
    try:
        _attach(app, cluster.nodes[0])
        app[CLUSTER] = cluster
        await cluster.start()
        yield
    finally:
        await cluster.close()


async def _codec_context(app: web.Application) -> AsyncIterator[None]:
    """The app's codec processes (broker.http.codec), started with it and stopped with it."""
    processes = app[SETTINGS].broker.httpCodecProcesses
    if processes < 0:
        processes = default_codec_processes()
    if processes == 0:
        yield
        return
    pool = CodecPool(processes)
    collector = CodecCollector(pool, str(app[NODE].index))
    try:
        await pool.start()
        app[CODEC] = pool
        app[METRICS].registry.register(collector)
        yield
    finally:
        if CODEC in app:
            app[METRICS].registry.unregister(collector)
        await pool.close()


def _new_app(settings: Settings, clock: Clock) -> web.Application:
    # security first: it adds CORS headers to every answer, errors included
    app = web.Application(
        middlewares=[security.security_middleware, error_middleware],
        client_max_size=settings.broker.maxHttpRequestBodyBytes,
    )
    security.setup(app, settings.broker)
    app[SETTINGS] = settings
    app[CLOCK] = clock
    return app


def _add_routes(app: web.Application, settings: Settings) -> None:
    if settings.broker.webSocketServiceEnabled:
        websocket.setup(app)
    app.add_routes(routes)
    app.add_routes(pulsar_admin.routes)


def create_app(settings: Settings, clock: Clock | None = None) -> web.Application:
    """An app that runs a one-broker cluster for its lifetime (tests, embedding)."""
    app = _new_app(settings, clock or SystemClock())
    app.cleanup_ctx.append(_one_broker_context)
    app.cleanup_ctx.append(_codec_context)
    _add_routes(app, settings)
    return app


def node_app(node: BrokerNode) -> web.Application:
    """The HTTP front end of one broker of a cluster that its owner opens and closes."""
    app = _new_app(node.settings, node.cluster.clock)
    _attach(app, node)
    app.cleanup_ctx.append(_codec_context)
    _add_routes(app, node.settings)
    return app


# ---------------------------------------------------------------------- helpers

api = RouteTable(ROUTES)
routes = api.routes


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(data), content_type="application/json")


def _no_content() -> web.Response:
    return web.Response(status=204)


def _topic(request: web.Request) -> TopicName:
    info = request.match_info
    return TopicName.of(info["tenant"], info["namespace"], info["topic"])


def _subscription_name(request: web.Request) -> str:
    return check_name_part("subscription", request.match_info["subscription"])


def _learn_own_url(request: web.Request) -> None:
    """A broker that ``brokerlab serve`` did not start (``create_app``: tests, embedding)
    learns its HTTP URL from the first request that lists it: serve sets it when it
    binds, before any request."""
    node = request.app[NODE]
    if not node.address.http_url:
        node.address.http_url = http_url(node.config.advertisedAddress, request_port(request))


def _service(request: web.Request) -> BrokerService:
    return request.app[NODE].running_service()


class HttpConsumer(Consumer):
    """A consumer made over HTTP: it belongs to the role that made it (None with
    authentication off), and only that role may poll, ack or close it."""

    __slots__ = ("role",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.role: str | None = None


def _consumer(request: web.Request, service: BrokerService | None = None) -> Consumer:
    """The consumer of the path's id: 404 if unknown, 403 if another role's."""
    consumer = (service or _service(request)).consumer(request.match_info["consumerId"])
    security.check_consumer_owner(request, consumer)
    return consumer


#: standard base64 with padding, as binascii.b2a_base64 writes it, about 5x faster for
#: a 1 KiB payload (SIMD): 6% of the broker's CPU under produce+consume went to encoding
_b64 = pybase64.b64encode_as_string


# ---------------------------------------------------------------------- produce


async def _encoded_body(request: web.Request) -> Encoded:
    """The produce body's entries and batch size: encoded in a codec process when the
    broker has them and the body is large enough to be worth the trip, else (or where the
    process refused it, to raise the error) on the loop. The parsed body never outlives
    this call: with it alive across the storage wait, produce cost ~10% more loop CPU."""
    raw = await request.read()
    app = request.app
    config = app[SETTINGS].broker
    now_ms = app[CLOCK].wall_ms()
    limits = config.maxMessagesPerProduceRequest, config.maxMessageSize
    codec = app.get(CODEC)
    if codec is not None and len(raw) >= CODEC_MIN_BODY_BYTES:
        try:
            encoded = await codec.encode(raw, *limits, now_ms)
        except CodecError as error:
            raise UnavailableError(str(error)) from None
        if encoded is not None:
            return encoded
    return encode_body(raw, PRODUCE_BODY.parse, *limits, now_ms)


@api.implements("produce")
async def produce(request: web.Request) -> web.Response:
    started = time.perf_counter()
    name = _topic(request)
    encoded, batch_size = await _encoded_body(request)
    topic = await _service(request).get_topic(name, create=True)
    first = await topic.publish(encoded, batch_size or len(encoded))
    request.app[METRICS].produce_latency.observe(time.perf_counter() - started)
    return web.Response(
        body=publish_results(first, batch_size, len(encoded)), content_type="application/json"
    )


# ---------------------------------------------------------------------- subscriptions


@api.implements("deleteSubscription")
@security.client_route
async def delete_subscription(request: web.Request) -> web.Response:
    name = _topic(request)
    subscription = _subscription_name(request)
    topic = await _service(request).get_topic(name, create=False)
    await topic.delete_subscription(subscription)
    return _no_content()


@api.implements("resetCursorToTimestamp")
@security.client_route
async def reset_cursor_to_time(request: web.Request) -> web.Response:
    name = _topic(request)
    subscription_name = _subscription_name(request)
    timestamp = decimal(request.match_info["timestampMs"])
    if timestamp is None:
        raise InvalidRequestError("timestamp must be epoch milliseconds (a decimal integer)")
    subscription = await _service(request).subscription(name, subscription_name)
    position = await subscription.topic.find_position_by_publish_time(timestamp)
    await subscription.reset_cursor(position)
    return _no_content()


@api.implements("resetCursorToMessageId")
@security.client_route
async def reset_cursor_to_id(request: web.Request) -> web.Response:
    name = _topic(request)
    subscription_name = _subscription_name(request)
    position = message_id((await RESET_CURSOR_BODY.read(request))["messageId"])
    await _service(request).reset_cursor(name, subscription_name, position)
    return _no_content()


# ---------------------------------------------------------------------- consumers


@api.implements("createConsumer")
async def create_consumer(request: web.Request) -> web.Response:
    name = _topic(request)
    subscription = _subscription_name(request)
    given = await CONSUMER_BODY.read_optional(request)
    body: dict[str, Any] = CONSUMER_DEFAULTS | (given or {})
    options = ConsumerOptions(
        name=body.get("consumerName"),
        subscription_type=body["subscriptionType"],
        receiver_queue_size=body["receiverQueueSize"],
        initial_position=body["subscriptionInitialPosition"],
        priority_level=body["priorityLevel"],
        ack_timeout_ms=body["ackTimeoutMillis"],
        nack_delay_ms=body["negativeAckRedeliveryDelayMillis"],
    )
    consumer = await _service(request).create_consumer(name, subscription, options, HttpConsumer)
    assert isinstance(consumer, HttpConsumer)
    consumer.role = request.get(security.ROLE)
    return _json({"consumerId": consumer.consumer_id})


@api.implements("receiveMessages")
async def receive(request: web.Request) -> web.Response:
    service = _service(request)
    consumer = _consumer(request, service)
    max_messages = MAX_MESSAGES.read(request)
    timeout_ms = TIMEOUT_MS.read(request)
    clock = request.app[CLOCK]
    consumer.polls += 1
    try:
        await consumer.wait_for_messages(timeout_ms / 1000)
    finally:
        consumer.polls -= 1
        consumer.last_active_ns = clock.monotonic_ns()
    deliveries = consumer.drain(max_messages, clock.monotonic_ns())
    if deliveries and consumer.subscription.dispatcher is not None:
        consumer.subscription.dispatcher.wake()
    messages = []
    delivered_ms = clock.wall_ms()
    observe = request.app[METRICS].dispatch_latency.observe
    subscription = consumer.subscription
    ack_sets = subscription.ack_sets
    # each run of messages with one publish time is observed at once: same latency
    run_time = run_length = 0
    for delivery in deliveries:
        entry = delivery.entry
        try:
            decoded = entry.decoded_messages()
        except EntryFormatError as error:
            log.warning(
                "entry %s of %s is unreadable over HTTP: %s",
                entry.position,
                subscription.topic.name,
                error,
            )
            continue
        position = str(entry.position)
        batched = decoded[0].batch_index >= 0
        if batched:
            subscription.batch_sizes[entry.position] = decoded[0].batch_size
        remaining = ack_sets.get(entry.position, -1) if ack_sets else -1
        for message in decoded:
            index = message.batch_index
            if batched and not (remaining >> index) & 1:
                continue  # acknowledged already (a batch-index ack): not delivered again
            if message.publish_time != run_time:
                if run_length:
                    observe(max(delivered_ms - run_time, 0) / 1000, run_length)
                run_time = message.publish_time
                run_length = 0
            run_length += 1
            out: dict[str, Any] = {
                "messageId": f"{position}:{index}" if batched else position,
                "payload": _b64(message.payload),
                "properties": message.properties,
                "publishTime": message.publish_time,
                "eventTime": message.event_time,
                "redeliveryCount": delivery.redelivery_count,
            }
            if message.key is not None:
                out["key"] = message.key
            messages.append(out)
    if run_length:
        observe(max(delivered_ms - run_time, 0) / 1000, run_length)
    return _json({"messages": messages})


@api.implements("acknowledge")
async def acknowledge(request: web.Request) -> web.Response:
    consumer = _consumer(request)
    body = await ACK_BODY.read(request)
    whole, indexed = message_ids_with_index(body["messageIds"])
    ack_type = body.get("ackType", "Individual")
    subscription = consumer.subscription
    cumulative = ack_type == "Cumulative"
    partial: list[tuple[Position, int]] = []
    sizes = subscription.batch_sizes
    for position, index in indexed:
        size = sizes.get(position, 0)
        if index >= size:
            if size == 0 and index == 0 and _received(consumer, position):
                whole.append(position)  # message 0 of an unbatched entry: the entry
            continue  # not a message this consumer was given: ignored, as unknown ids
        everything = (1 << size) - 1
        # what stays unacknowledged: all but this message, or (cumulative) all after it
        acked = (2 << index) - 1 if cumulative else 1 << index
        partial.append((position, everything & ~acked))
    finish = subscription.begin_acknowledge_messages(consumer, whole, partial, cumulative)
    if finish is not None:
        await finish
    return _no_content()


@api.implements("negativeAcknowledge")
async def negative_acknowledge(request: web.Request) -> web.Response:
    consumer = _consumer(request)
    whole, indexed = message_ids_with_index((await NACK_BODY.read(request))["messageIds"])
    # a message of a batch: the entry is redelivered (its acked messages are skipped),
    # once however many of its messages are listed; other indexes are unknown ids
    positions = dict.fromkeys(whole)
    sizes = consumer.subscription.batch_sizes
    for position, index in indexed:
        if index < sizes.get(position, 0) or (index == 0 and _received(consumer, position)):
            positions[position] = None
    consumer.subscription.negative_acknowledge(consumer, list(positions))
    return _no_content()


def _received(consumer: Consumer, position: Position) -> bool:
    """Whether the consumer polled the entry (a batch still in its receiver queue has
    no known size yet, so ``L:E:0`` cannot tell it from an unbatched entry)."""
    return consumer.pending.get(position, NOT_RECEIVED) != NOT_RECEIVED


@api.implements("redeliverUnacknowledged")
async def redeliver_unacknowledged(request: web.Request) -> web.Response:
    consumer = _consumer(request)
    consumer.subscription.redeliver_unacknowledged(consumer)
    return _no_content()


@api.implements("closeConsumer")
async def close_consumer(request: web.Request) -> web.Response:
    service = _service(request)
    service.close_consumer(_consumer(request, service))
    return _no_content()


# ---------------------------------------------------------------------- topics


@api.implements("listTopics")
async def list_topics(request: web.Request) -> web.Response:
    tenant = check_name_part("tenant", request.match_info["tenant"])
    namespace = check_name_part("namespace", request.match_info["namespace"])
    return _json(await _service(request).list_topics(tenant, namespace))


@api.implements("deleteTopic")
async def delete_topic(request: web.Request) -> web.Response:
    force = FORCE_TOPIC_DELETE.read(request)
    await _service(request).delete_topic(_topic(request), force)
    return _no_content()


@api.implements("getTopicStats")
async def topic_stats(request: web.Request) -> web.Response:
    topic = await _service(request).get_topic(_topic(request), create=False)
    return _json(topic.stats())


@api.implements("getTopicInternalStats")
async def topic_internal_stats(request: web.Request) -> web.Response:
    topic = await _service(request).get_topic(_topic(request), create=False)
    return _json(topic.internal_stats())


@api.implements("triggerOffload")
async def offload(request: web.Request) -> web.Response:
    name = _topic(request)
    position = message_id((await OFFLOAD_BODY.read(request))["messageId"])
    await _service(request).offload_topic(name, position)
    return _no_content()


@api.implements("getOffloadStatus")
async def offload_status(request: web.Request) -> web.Response:
    topic = await _service(request).get_topic(_topic(request), create=False)
    first = topic.ledger.first_not_offloaded()
    return _json(
        {
            "status": topic.offload_status,
            "lastError": topic.offload_error,
            "firstUnoffloadedMessage": {"ledgerId": first.ledger_id, "entryId": first.entry_id},
        }
    )


@api.implements("unloadNamespace")
async def unload_namespace(request: web.Request) -> web.Response:
    tenant = check_name_part("tenant", request.match_info["tenant"])
    namespace = check_name_part("namespace", request.match_info["namespace"])
    _service(request)  # a broker that is down answers 503
    await request.app[NODE].cluster.unload_namespace(tenant, namespace)
    return _no_content()


# ---------------------------------------------------------------------- broker


@api.implements("healthCheck")
async def health(request: web.Request) -> web.Response:
    return web.Response(text="ok")


@api.implements("getCacheStats")
async def cache_stats(request: web.Request) -> web.Response:
    """This broker's own cache (its counters continue across its restarts)."""
    return _json(request.app[NODE].cache_stats())


@api.implements("getStorageStats")
async def storage_stats(request: web.Request) -> web.Response:
    storage = request.app[STORAGE]
    return _json({"bookie": storage.stats(), "tiered": storage.tiered.stats()})


@api.implements("getTraceStats")
async def trace_stats(request: web.Request) -> web.Response:
    trace = request.app[NODE].trace
    if trace is None:
        return _json({"enabled": False})
    return _json(trace.stats())


@api.implements("getMetrics")
async def metrics(request: web.Request) -> web.Response:
    body = generate_latest(request.app[METRICS].registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


DASHBOARD_PAGE = pathlib.Path(__file__).with_name("static") / "dashboard.html"
TOP_TOPICS = 10


@api.implements("getDashboard")
async def dashboard(request: web.Request) -> web.Response:
    return web.Response(body=DASHBOARD_PAGE.read_bytes(), content_type="text/html", charset="utf-8")


@api.implements("getDashboardData")
async def dashboard_data(request: web.Request) -> web.Response:
    """One snapshot of the counters the dashboard charts; the page computes the rates."""
    _learn_own_url(request)
    service = _service(request)
    settings = request.app[SETTINGS]
    node = request.app[NODE]
    cache = node.cache_stats()
    loads = service.topic_loads()
    top = sorted(loads, key=lambda load: load.backlog, reverse=True)[:TOP_TOPICS]
    totals = service.totals
    return _json(
        {
            "timeMs": request.app[CLOCK].wall_ms(),
            "cache": cache,
            "cacheWatermarkBytes": int(
                cache["maxSizeBytes"] * settings.broker.managedLedgerCacheEvictionWatermark
            ),
            "storage": {
                "bookie": request.app[STORAGE].stats(),
                "tiered": request.app[STORAGE].tiered.stats(),
            },
            "messages": {
                "produced": totals.produced,
                "dispatched": totals.dispatched,
                "redelivered": totals.redelivered,
            },
            "backlog": sum(load.backlog for load in loads),
            "topTopics": [
                {
                    "topic": load.topic,
                    "backlog": load.backlog,
                    "replay": sum(load.replay_by_subscription.values()),
                }
                for load in top
            ],
            "broker": node.index,
            "brokers": [_broker_summary(other) for other in node.cluster.nodes],
        }
    )


def _broker_summary(node: BrokerNode) -> dict[str, Any]:
    """A broker of the cluster as the dashboard shows them side by side."""
    summary = node.describe()
    try:
        cache = node.cache_stats()
    except UnavailableError:
        cache = None
    summary["cache"] = cache
    return summary


# ---------------------------------------------------------------------- cluster


@api.implements("listBrokers")
async def list_brokers(request: web.Request) -> web.Response:
    """The brokers of this cluster: state, URLs, bundles owned, restarts."""
    _learn_own_url(request)
    return _json([node.describe() for node in request.app[NODE].cluster.nodes])


@api.implements("restartBroker")
async def restart_broker(request: web.Request) -> web.Response:
    """Restart broker ``index``: ``mode`` graceful (default) or kill, down for
    ``downtimeMs`` (default 0). Asked of another broker, the answer comes when the
    restarted broker is up again (200); asked of the broker itself, at once (202), since
    the restart closes it."""
    _learn_own_url(request)
    node = request.app[NODE]
    cluster = node.cluster
    index = _path_int(request, "index")
    mode = RESTART_MODE.read(request)
    downtime_ms = DOWNTIME_MS.read(request)
    if index == node.index:
        cluster.spawn_restart(index, mode, downtime_ms / 1000)
        return _json({"broker": index, "mode": mode, "state": "restarting"}, status=202)
    await cluster.restart(index, mode, downtime_ms / 1000)
    return _json(cluster.node(index).describe())


def _path_int(request: web.Request, name: str) -> int:
    text = request.match_info[name]
    if not text.isdigit():
        raise InvalidRequestError(f"{name} must be a broker index (0, 1, ...), not {text!r}")
    return int(text)


@api.implements("getOpenApi")
async def openapi(request: web.Request) -> web.Response:
    return _json(openapi_spec())


# ---------------------------------------------------------------------- fault injection


def _fault_injectors(storage: Storage) -> tuple[FaultInjector, FaultInjector]:
    """The bookie's injector and the object store's."""
    return storage.faults, storage.tiered.store.object_store.faults


@api.implements("setFault")
async def set_fault(request: web.Request) -> web.Response:
    body = await FAULT_BODY.read(request)
    operation = body["operation"]
    error_rate = body.get("errorRate", 0.0)
    delay_ms = body.get("delayMs", 0.0)
    bookie_faults, object_faults = _fault_injectors(request.app[STORAGE])
    injector = object_faults if operation in OBJECT_OPERATIONS else bookie_faults
    try:
        injector.set(operation, float(error_rate), float(delay_ms))
    except ValueError as error:
        raise InvalidRequestError(str(error)) from None
    return _no_content()


@api.implements("clearFaults")
async def clear_faults(request: web.Request) -> web.Response:
    for injector in _fault_injectors(request.app[STORAGE]):
        injector.clear()
    return _no_content()


@api.implements("getFaults")
async def get_faults(request: web.Request) -> web.Response:
    bookie_faults, object_faults = _fault_injectors(request.app[STORAGE])
    return _json(bookie_faults.snapshot() | object_faults.snapshot())
