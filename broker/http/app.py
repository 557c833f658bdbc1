"""The aiohttp application: routes translate HTTP to broker calls and back.

Each handler's ``@api.operation(...)`` declares its operation of the HTTP contract
(``broker/http/contract.py``): ``/openapi.json`` and the route sections of docs/api.md
are rendered from these declarations (``python -m broker.http.apidoc --write``)."""

from __future__ import annotations

import logging
import pathlib
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from broker.clock import Clock, SystemClock
from broker.cluster import RESTART_MODES, BrokerNode, Cluster, Settings, http_url, service_config  # noqa: F401 (re-exported)
from broker.dispatch.delayed import DelayedDeliveryConfig, delay_error
from broker.dispatch.errors import (
    InvalidRequestError,
    NotFoundError,
    UnavailableError,
)
from broker.dispatch.names import TopicName, check_name_part
from broker.dispatch.service import BrokerService, ConsumerOptions
from broker.http import (
    admin_brokers,
    admin_policies,
    admin_topics,
    deduplication,
    pulsar_admin,
    pulsar_schemas,
    security,
    websocket,
)
from broker.http.app_state import (
    CLOCK,
    CLUSTER,
    CODEC,
    METRICS,
    NODE,
    SETTINGS,
    STORAGE,
    client_address,
    learn_own_url,
)
from broker.http.b64 import encode_base64
from broker.http.codec import MIN_BODY_BYTES as CODEC_MIN_BODY_BYTES
from broker.http.codec import CodecError, CodecPool, Encoded, default_codec_processes
from broker.http.contract import (
    ADMIN_TOPIC,
    CONSUMER,
    NAMESPACE,
    SUBSCRIPTION,
    TOPIC,
    TOPIC_OWNER,
    ChoiceQuery,
    FlagQuery,
    IntQuery,
    JsonBody,
    Operation,
    RouteTable,
    Success,
)
from broker.http.errors import error_middleware
from broker.http.metrics import BrokerMetrics, CodecCollector, watch_loop_lag
from broker.http.models import (
    CONSUMER_DEFAULTS,
    AckRequest,
    ConsumerRequest,
    FaultSetting,
    MessageIdRequest,
    MessageIdsRequest,
    ProduceRequest,
)
from broker.http.openapi import openapi_spec, schema_ref
from broker.http.parsing import decimal, message_id, message_ids_with_index
from broker.http.produce_encoding import encode_body, publish_results
from broker.http.schemas import (
    Broker,
    CacheStats,
    ClusterStats,
    ConsumerCreated,
    DashboardData,
    DashboardHistory,
    FaultSettings,
    OffloadStatus,
    PersistentTopicInternalStats,
    ProduceResponse,
    ReceiveResponse,
    StorageStats,
    TopicList,
    TopicStats,
    TraceStats,
)
from broker.ledger.entry import (
    EntryFormatError,
)
from broker.session.consumer import ConsumerSession
from broker.tasks import TaskOwner
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


async def _loop_lag_context(app: web.Application) -> AsyncIterator[None]:
    """The event-loop lag watcher (``brokerlab_event_loop_lag_seconds``), owned by the
    app: started with it, cancelled and awaited when it closes."""
    owner = TaskOwner("event loop lag")
    sampler = app[NODE].sampler if NODE in app else None
    also = None if sampler is None else sampler.note_loop_lag
    owner.spawn(watch_loop_lag(app[METRICS].loop_lag, also), name="event loop lag")
    try:
        yield
    finally:
        await owner.close()


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
    app.add_routes(deduplication.routes)
    app.add_routes(admin_topics.routes)
    app.add_routes(admin_brokers.routes)
    app.add_routes(admin_policies.routes)
    app.add_routes(pulsar_schemas.routes)


def create_app(settings: Settings, clock: Clock | None = None) -> web.Application:
    """An app that runs a one-broker cluster for its lifetime (tests, embedding)."""
    app = _new_app(settings, clock or SystemClock())
    app.cleanup_ctx.append(_one_broker_context)
    app.cleanup_ctx.append(_codec_context)
    app.cleanup_ctx.append(_loop_lag_context)
    _add_routes(app, settings)
    return app


def node_app(node: BrokerNode) -> web.Application:
    """The HTTP front end of one broker of a cluster that its owner opens and closes."""
    app = _new_app(node.settings, node.cluster.clock)
    _attach(app, node)
    app.cleanup_ctx.append(_codec_context)
    app.cleanup_ctx.append(_loop_lag_context)
    _add_routes(app, node.settings)
    return app


# ---------------------------------------------------------------------- helpers

api = RouteTable()
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


def _service(request: web.Request) -> BrokerService:
    return request.app[NODE].running_service()


class HttpConsumer(ConsumerSession):
    """A consumer made over HTTP, polled from the broker's receiver queue: it belongs
    to the role that made it (None with authentication off), and only that role may
    poll, ack or close it."""

    __slots__ = ("role",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.role: str | None = None


def _consumer(request: web.Request, service: BrokerService | None = None) -> HttpConsumer:
    """The consumer of the path's id: 404 if unknown (or not an HTTP consumer), 403 if
    another role's."""
    consumer = (service or _service(request)).consumer(request.match_info["consumerId"])
    if not isinstance(consumer, HttpConsumer):
        raise NotFoundError("consumer not found (it is not an HTTP consumer)")
    security.check_consumer_owner(request, consumer)
    return consumer


_b64 = encode_base64


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


def _check_delays(entries: list[bytes], config: DelayedDeliveryConfig) -> None:
    """InvalidRequestError, naming the message, for a deliver-at time beyond the max delay
    (Pulsar's NotAllowedError; nothing is stored). O(entries x metadata size)."""
    for index, entry in enumerate(entries):
        refused = delay_error(entry, config)
        if refused is not None:
            raise InvalidRequestError(f"messages[{index}]: {refused}")


PRODUCE_BODY = JsonBody[ProduceRequest](ProduceRequest, "Messages to produce.")


@api.operation(
    "POST",
    "/topics" + TOPIC,
    "produce",
    tag="produce",
    summary="produce messages",
    body=PRODUCE_BODY,
    redirect=TOPIC_OWNER,
    success=Success(
        200,
        '`{"messagePublishResults": [{"messageId": "3:17", "errorCode": 0}]}`, one '
        "result per message (`L:E:I` ids for a batch).",
        ProduceResponse,
    ),
    errors={
        400: "bad topic name; body not a JSON object; `messages` missing, not a list or empty; a "
        "field of the wrong type or over its limit (except the 413 cases), `batch` not a boolean "
        "among them; bad base64; a delayed message in a batch, or due beyond "
        "`delayedDeliveryMaxDelayInMillis`. Nothing is stored.",
        404: "the topic does not exist and `allowAutoTopicCreation=false`.",
        409: "the topic is a partitioned topic (produce to its partitions, "
        "`{topic}-partition-{i}`), a partition past its partitioned topic's count, or a "
        "partition of one being deleted. Nothing is stored.",
        413: "body over `maxHttpRequestBodyBytes`; a decoded payload over `maxMessageSize`; with "
        "`batch`, payloads over `maxMessageSize` together; more than "
        "`maxMessagesPerProduceRequest` messages. Nothing is stored.",
        503: "storage fault or timeout, or the bookie is read-only (the reason says so); nothing "
        "is stored. Also when the topic needed a new ledger and could not create it or record it "
        "in the topic's metadata: no message is written to a ledger the metadata does not name, "
        "and the next produce tries the rollover again.",
    },
    description="""
        Topics are auto-created when `allowAutoTopicCreation=true` (default).

        ```json request
        {"producerName": "p1",
         "messages": [{"payload": "aGVsbG8=", "key": "k1", "properties": {"a": "b"}, "eventTime": 0}]}
        ```
        `key`, `properties`, `eventTime`, `deliverAt`, `deliverAfterMs`, `producerName` are
        optional. 200:
        ```json
        {"messagePublishResults": [{"messageId": "3:17", "errorCode": 0}]}
        ```
        A 200 means every listed message is stored durably under the configured sync mode
        (see `conf/storage.conf`) and will be delivered to every subscription that existed when
        it was stored.

        Request body (**Extension**: types, defaults and limits):

        | field | type | required | default | limits |
        |---|---|---|---|---|
        | `producerName` | string | no | none | 1..256 characters; informational, as in Pulsar's REST produce |
        | `messages` | array of message objects | yes | — | 1..`maxMessagesPerProduceRequest` (1000) items; empty: 400; more: 413 |
        | `messages[].payload` | string, base64 | yes | — | standard alphabet with padding (RFC 4648 §4), no whitespace or line breaks (else 400); decoded length ≤ `maxMessageSize` (5242880 bytes), else 413; may decode to zero bytes |
        | `messages[].key` | string | no | no key | ≤ 65535 bytes in UTF-8 |
        | `messages[].properties` | object of string → string | no | `{}` | every value a string |
        | `messages[].eventTime` | integer | no | `0` (not set, as in Pulsar) | ≥ 0, epoch ms |
        | `messages[].deliverAt` | integer | no | `0` (not set) | ≥ 0, epoch ms: delayed delivery, see below |
        | `messages[].deliverAfterMs` | integer | no | `0` (not set) | ≥ 0, ms after the broker received the request |
        | `batch` | boolean | no | `false` | `true` or `false` only (`"yes"`, `1`, `null`: 400); `true`: all the request's messages become one batched entry, see below; their payloads together ≤ `maxMessageSize`, else 413 |

        Delayed delivery, as Pulsar's REST produce names it: a message with `deliverAt` (epoch
        ms) or `deliverAfterMs` above 0 carries that time as its `deliver_at_time`, and Shared
        and Key_Shared subscriptions hold it until then (Exclusive and Failover deliver it at
        once; see docs/broker.md, Delayed delivery). `deliverAt` wins when both are set. 400
        for a delayed message in a `batch` (a Pulsar client never batches them), and for a
        deliver-at time more than `delayedDeliveryMaxDelayInMillis` (when set) after the
        request's publish time; nothing is stored. **Difference from Pulsar**: Pulsar's
        REST produce counts `deliverAfterMs` from the message's `eventTime` (and, in recent
        versions, reads `deliverAt` only when an `eventTime` is set); here `deliverAt` is
        taken as is and `deliverAfterMs` counts from the broker's receipt.

        Stored entries (**Extension**): every entry is stored in Pulsar's format, byte for byte
        as a Pulsar client's SEND carries it: magic `0x0e01`, CRC32C, `MessageMetadata`,
        payload. Without `batch` each message is one entry with id `L:E`. With `"batch": true`
        the request's messages are ONE entry holding a batch, as a batching Pulsar producer
        sends it (`num_messages_in_batch` messages, each with its `SingleMessageMetadata`: key,
        properties, event time): it takes one ledger entry (`internalStats` `numberOfEntries` +1)
        and one entry cache slot, and the answer gives each message the id `L:E:I`, its index
        `I` in the batch (`"3:17:0"`, `"3:17:1"`, ...; a batch of one message too).
        `msgInCounter` counts messages (a batch of 5 counts 5). On Key_Shared a batch is
        dispatched whole by its first message's key, as Pulsar's key-based batching expects:
        put one key per batch.

        Answer (**Extension**): `messagePublishResults` has one result per message, in request
        order. Messages of one request are stored in that order, with increasing message ids.
        A request's messages are stored all together or not at all: when storage fails the
        answer is 503 and none is stored. Should a request ever be stored in parts, the answer
        is 200 with per-message results instead: the stored messages (always a prefix of the
        list) have `errorCode` 0 and their `messageId`; each message not stored has
        `errorCode` 1 (storage failure; retrying it is safe), an `errorMsg` string and no
        `messageId`.
    """,  # noqa: E501
)
async def produce(request: web.Request) -> web.Response:
    started = time.perf_counter()
    name = _topic(request)
    encoded, batch_size = await _encoded_body(request)
    delayed = request.app[SETTINGS].broker.delayedDeliveryMaxDelayInMillis
    if delayed:  # delayedDeliveryMaxDelayInMillis: no parse for entries without the field
        _check_delays(encoded, _service(request).config.dispatch.delayed)
    topic = await _service(request).get_topic(name, create=True)
    first = await topic.publish(encoded, batch_size or len(encoded))
    request.app[METRICS].produce_latency.observe(time.perf_counter() - started)
    return web.Response(
        body=publish_results(first, batch_size, len(encoded)), content_type="application/json"
    )


# ---------------------------------------------------------------------- subscriptions


@api.operation(
    "DELETE",
    SUBSCRIPTION,
    "deleteSubscription",
    tag="subscriptions",
    summary="delete a subscription",
    redirect=TOPIC_OWNER,
    success=Success(204, "deleted."),
    errors={
        400: "bad topic or subscription name.",
        404: "unknown topic or subscription.",
        412: "consumers are connected to the subscription (close them first).",
        503: "storage fault or timeout; the subscription still exists, with its acknowledgements.",
    },
    description="""
        `DELETE /admin/v2/persistent/{t}/{ns}/{topic}/subscription/{sub}` → 204; 412 with consumers connected.

        Its cursor is removed; messages that only it still needed become deletable.
    """,  # noqa: E501
)
@security.client_route
async def delete_subscription(request: web.Request) -> web.Response:
    name = _topic(request)
    subscription = _subscription_name(request)
    topic = await _service(request).get_topic(name, create=False)
    await topic.delete_subscription(subscription)
    return _no_content()


@api.operation(
    "POST",
    SUBSCRIPTION + "/resetcursor/{timestampMs}",
    "resetCursorToTimestamp",
    tag="subscriptions",
    summary="reset a cursor to a time",
    redirect=TOPIC_OWNER,
    success=Success(204, "the cursor was moved."),
    errors={
        400: "bad topic or subscription name; `timestampMs` not a non-negative integer.",
        404: "unknown topic or subscription.",
        503: "storage fault or timeout; the cursor did not move and consumers keep what they hold.",
    },
    description="""
        `POST /admin/v2/persistent/{t}/{ns}/{topic}/subscription/{sub}/resetcursor/{timestampMs}` → 204 (the catch-up tool).

        **Extension:** `{timestampMs}` is a non-negative integer (epoch ms). The cursor moves so
        that the next message delivered is the first with `publishTime` ≥ `timestampMs` (the
        end of the topic if there is none; found by binary search, as Pulsar finds it, so where
        overlapping produce requests were stored out of publish-time order it may land a few
        entries off). The search covers the messages stored when the reset begins: a message
        stored after that comes after the new position even if its `publishTime` is earlier (a
        produce request takes its time when it is read, then may wait for a new ledger or a
        topic load). Everything before the position counts as acknowledged and
        everything from it on as unacknowledged. Consumers stay connected: what sat in their
        receiver queues or was pending their ack is dropped, and dispatch goes on from the new
        position. No body.
    """,  # noqa: E501
)
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


RESET_CURSOR_BODY = JsonBody[MessageIdRequest](MessageIdRequest, "Where to move the cursor.")


@api.operation(
    "POST",
    SUBSCRIPTION + "/resetcursor",
    "resetCursorToMessageId",
    tag="subscriptions",
    summary="reset a cursor to a message id",
    body=RESET_CURSOR_BODY,
    redirect=TOPIC_OWNER,
    success=Success(204, "the cursor was moved."),
    errors={
        400: "bad topic or subscription name; body not a JSON object; `messageId` missing or not "
        "`L:E`.",
        404: "unknown topic or subscription.",
        413: "body over `maxHttpRequestBodyBytes`.",
        503: "storage fault or timeout; the cursor did not move and consumers keep what they hold.",
    },
    description="""
        `POST .../subscription/{sub}/resetcursor` with body `{"messageId": "L:E"}` → 204 (the catch-up tool).

        Request body (**Extension**):

        | field | type | required | default | limits |
        |---|---|---|---|---|
        | `messageId` | string `L:E` | yes | — | a message id; the message at that position (or the first stored after it) is the next delivered |

        Consumers are treated as for the reset to a time.
    """,  # noqa: E501
)
@security.client_route
async def reset_cursor_to_id(request: web.Request) -> web.Response:
    name = _topic(request)
    subscription_name = _subscription_name(request)
    position = message_id((await RESET_CURSOR_BODY.read(request))["messageId"])
    await _service(request).reset_cursor(name, subscription_name, position)
    return _no_content()


# ---------------------------------------------------------------------- consumers


CONSUMER_BODY = JsonBody[ConsumerRequest](ConsumerRequest, "Consumer settings.", required=False)


@api.operation(
    "POST",
    "/consumers" + TOPIC + "/{subscription}",
    "createConsumer",
    tag="consumers",
    summary="create a consumer",
    body=CONSUMER_BODY,
    redirect=TOPIC_OWNER,
    success=Success(200, '`{"consumerId": "<opaque, unguessable>"}`.', ConsumerCreated),
    errors={
        400: "bad topic or subscription name; body not a JSON object; a field of the wrong type, "
        "an unknown enum value or out of range.",
        404: "the topic does not exist and `allowAutoTopicCreation=false`.",
        409: "Exclusive subscription already has a consumer; the requested type differs from the "
        "type of the subscription's connected consumers; the topic is a partitioned topic "
        "(consume its partitions) or a partition past its count.",
        413: "body over `maxHttpRequestBodyBytes`.",
        503: "storage fault or timeout while loading the topic or creating the subscription; no "
        "consumer was created.",
    },
    description="""
        ```json request
        {"consumerName": "c1", "subscriptionType": "Exclusive|Failover|Shared|Key_Shared",
         "receiverQueueSize": 1000, "subscriptionInitialPosition": "Latest|Earliest",
         "priorityLevel": 0, "ackTimeoutMillis": 0, "negativeAckRedeliveryDelayMillis": 60000}
        ```
        Only `subscriptionType` is required (default `Exclusive`). Creates the subscription if
        missing. 200 `{"consumerId": "<opaque, unguessable>"}`. 409 when Exclusive is taken or
        the type differs from the subscription's current consumers' type.

        Request body (**Extension**). As `subscriptionType` has a default, a body of `{}` (or
        no body) creates an Exclusive consumer with every default:

        | field | type | required | default | limits |
        |---|---|---|---|---|
        | `consumerName` | string | no | generated by the broker | 1..256 characters |
        | `subscriptionType` | `Exclusive`, `Failover`, `Shared` or `Key_Shared` | see above | `Exclusive` | exact spelling |
        | `receiverQueueSize` | integer | no | 1000 | 1..100000 |
        | `subscriptionInitialPosition` | `Latest` or `Earliest` | no | `Latest` | applies only when this call creates the subscription; ignored for an existing one |
        | `priorityLevel` | integer | no | 0 | 0..2147483647; lower is dispatched to first (Shared, Key_Shared) or preferred as active (Failover), as in Pulsar |
        | `ackTimeoutMillis` | integer | no | 0 (off) | 0..2147483647; a message delivered and not acked within this time is redelivered with `redeliveryCount` + 1 |
        | `negativeAckRedeliveryDelayMillis` | integer | no | 60000 | 0..2147483647 |

        The topic is created when missing and `allowAutoTopicCreation=true`. The consumer's idle
        clock starts at creation.
    """,  # noqa: E501
)
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
        address=client_address(request),
    )
    consumer = await _service(request).create_consumer(name, subscription, options, HttpConsumer)
    assert isinstance(consumer, HttpConsumer)
    consumer.role = request.get(security.ROLE)
    return _json({"consumerId": consumer.consumer_id})


MAX_MESSAGES = IntQuery(
    "maxMessages", "Most entries to return the messages of (a batch comes whole).", 100, 1, 1000
)
TIMEOUT_MS = IntQuery("timeoutMs", "Longest wait; 0 answers at once.", 1000, 0, 30_000)


@api.operation(
    "GET",
    CONSUMER + "/messages",
    "receiveMessages",
    tag="consumers",
    summary="receive messages (long poll)",
    query=(
        MAX_MESSAGES,
        TIMEOUT_MS,
    ),
    success=Success(
        200,
        '`{"messages": [...]}`, possibly empty after the timeout.',
        ReceiveResponse,
    ),
    errors={
        400: "`maxMessages` or `timeoutMs` not an integer or out of range.",
        404: "unknown or closed consumer id.",
    },
    description="""
        `GET /consumers/{consumerId}/messages?maxMessages=100&timeoutMs=1000` — long poll
        (`timeoutMs` ≤ 30000): returns as soon as at least one message is available, or empty
        after the timeout.
        ```json
        {"messages": [{"messageId": "3:17", "payload": "aGVsbG8=", "key": "k1", "properties": {},
                       "publishTime": 1763700000000, "eventTime": 0, "redeliveryCount": 0}]}
        ```

        Query parameters (**Extension**):

        | parameter | type | default | limits |
        |---|---|---|---|
        | `maxMessages` | integer | 100 | 1..1000 |
        | `timeoutMs` | integer | 1000 | 0..30000; 0 returns at once with what is queued |

        Answer (**Extension**): the messages of at most `maxMessages` entries (an entry is one
        message unless batched, see below), in dispatch order, taken from the receiver queue
        (which frees as many permits); once the answer holds the larger of
        `maxUnwrittenBytesPerConsumer` and `maxMessageSize` in payloads (a ZLIB entry
        inflates to up to `maxMessageSize`), the entries left stay at the head of the queue
        for the next poll. Each returned message is pending (unacked) for this
        consumer until it is acked, nacked, redelivered or the consumer closes. Fields:
        `messageId` (`L:E`; `L:E:I` for message `I` of a batch), `payload` (base64), `key`
        (present only when the message has a key), `properties` (object, `{}` when none),
        `publishTime` (epoch ms, set by the broker when it reads the produce request; requests
        to one topic that overlap may be stored in another order than their publish times, as
        messages of different Pulsar producers can: with a codec process, see
        `httpCodecProcesses`, a small request can overtake a large one), `eventTime` (0 when not set),
        `redeliveryCount` (integer ≥ 0). A poll only drains the receiver queue; storage faults
        delay dispatch but never fail a poll. An entry that cannot be trusted (stored past the
        produce checks: metadata that does not parse, an impossible batch count, a batch whose
        messages do not decode) is acknowledged for the subscription and left out, as Pulsar's
        dispatcher and client discard it; the messages around it come as ever (see
        docs/broker.md, Pulsar's binary protocol).

        Batched entries (**Extension**): the receiver queue holds entries, so `maxMessages`
        counts entries: a batch is delivered whole and a poll can return more messages than
        `maxMessages`. Each message of a batch comes as its own message with id `L:E:I` and
        its own `key`, `properties` and `eventTime`; they share the entry's `publishTime` and
        `redeliveryCount`. When a batch is delivered again (nack, `redeliverUnacknowledged`,
        ack timeout, a consumer closing), its messages acknowledged already by `L:E:I` are left
        out.
    """,  # noqa: E501
)
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
    # an answer holds at most this much payload past its first entry: the receiver
    # queue bounds stored bytes, and a ZLIB entry of a few KiB may inflate to
    # maxMessageSize (1,000 of them were one answer of gigabytes)
    dispatch_config = consumer.subscription.config
    payload_room = max(
        dispatch_config.max_unwritten_bytes_per_consumer, dispatch_config.max_message_size
    )
    messages = []
    delivered_ms = clock.wall_ms()
    observe = request.app[METRICS].dispatch_latency.observe
    # each run of messages with one publish time is observed at once: same latency
    run_time = run_length = 0
    for index, delivery in enumerate(deliveries):
        if payload_room <= 0:
            consumer.give_back(deliveries[index:])
            break
        entry = delivery.entry
        try:
            decoded, batch_size = consumer.unacked_messages(entry)
        except EntryFormatError as error:
            await consumer.unreadable(entry, error)
            continue
        position = str(entry.position)
        for message in decoded:
            payload_room -= len(message.payload)
            if message.publish_time != run_time:
                if run_length:
                    observe(max(delivered_ms - run_time, 0) / 1000, run_length)
                run_time = message.publish_time
                run_length = 0
            run_length += 1
            out: dict[str, Any] = {
                "messageId": f"{position}:{message.batch_index}" if batch_size else position,
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


ACK_BODY = JsonBody[AckRequest](AckRequest, "What to acknowledge.")


@api.operation(
    "POST",
    CONSUMER + "/ack",
    "acknowledge",
    tag="consumers",
    summary="acknowledge messages",
    body=ACK_BODY,
    success=Success(204, "applied."),
    errors={
        400: "body not a JSON object; `messageIds` missing, empty or with an id that is neither "
        "`L:E` nor `L:E:I` (`3:17:x`, `3:17:-1`); unknown `ackType`; `Cumulative` on a Shared or "
        "Key_Shared subscription (with any id). Nothing of the request is applied.",
        404: "unknown or closed consumer id.",
        413: "body over `maxHttpRequestBodyBytes`.",
        503: "storage fault or timeout while recording the ack; nothing of it was applied: the "
        "messages stay unacknowledged and held by the consumer (`redeliverUnacknowledged` "
        "returns them), and a retry records the ack.",
    },
    description="""
        `POST /consumers/{consumerId}/ack` `{"messageIds": ["3:17"], "ackType": "Individual|Cumulative"}` → 204.
        Cumulative ack is refused (400) on Shared and Key_Shared, as in Pulsar. An id pending
        for another consumer of the same subscription is acknowledged for that consumer, as
        Pulsar's broker does (and as the WebSocket API and the binary protocol do); an id
        pending for no consumer is ignored.

        Request body (**Extension**):

        | field | type | required | default | limits |
        |---|---|---|---|---|
        | `messageIds` | array of `L:E` or `L:E:I` strings | yes | — | at least one item; empty: 400 |
        | `ackType` | `Individual` or `Cumulative` | no | `Individual` | Cumulative only on Exclusive and Failover |

        `Cumulative` acknowledges every message of the subscription up to and including the
        greatest id listed.

        Messages of a batch (**Extension**): `L:E:I` (the regular expression is
        `^[0-9]+:[0-9]+:[0-9]+$`, `I` below 1048576) names message `I` of the batched entry
        `L:E`. `Individual` acknowledges that message; the entry itself is acknowledged, and
        durably so before the 204, when its last unacknowledged message is, as Pulsar's cursor
        does with an entry's ack set. Until then the entry counts in `msgBacklog`, and which of
        its messages are acknowledged is written with the subscription's cursor before the 204
        (Pulsar's `batchDeletedIndexes`): after a broker restart or a namespace unload only the
        batch's unacknowledged messages are delivered again. `Cumulative` with `L:E:I`
        acknowledges messages `0..I` of that batch and every entry before it. `L:E` of a
        batched entry acknowledges all its messages. An index beyond the batch, one on a batch
        this consumer has not received yet, or `L:E:I` with `I` > 0 on an unbatched entry is an
        id that is not pending: ignored (`L:E:0` of a received unbatched entry is that entry).
    """,  # noqa: E501
)
async def acknowledge(request: web.Request) -> web.Response:
    consumer = _consumer(request)
    body = await ACK_BODY.read(request)
    whole, indexed = message_ids_with_index(body["messageIds"])
    cumulative = body.get("ackType", "Individual") == "Cumulative"
    finish = consumer.acknowledge(whole, indexed, cumulative)
    if finish is not None:
        await finish
    return _no_content()


NACK_BODY = JsonBody[MessageIdsRequest](MessageIdsRequest, "What to redeliver.")


@api.operation(
    "POST",
    CONSUMER + "/nack",
    "negativeAcknowledge",
    tag="consumers",
    summary="negatively acknowledge messages",
    body=NACK_BODY,
    success=Success(204, "the listed messages are scheduled for redelivery."),
    errors={
        400: "body not a JSON object; `messageIds` missing, empty or with an id that is neither "
        "`L:E` nor `L:E:I`. Nothing is redelivered.",
        404: "unknown or closed consumer id.",
        413: "body over `maxHttpRequestBodyBytes`.",
    },
    description="""
        `POST /consumers/{consumerId}/nack` `{"messageIds": ["3:17"]}` → 204: redelivered after
        `negativeAckRedeliveryDelayMillis`, `redeliveryCount` + 1.

        Request body (**Extension**):

        | field | type | required | default | limits |
        |---|---|---|---|---|
        | `messageIds` | array of `L:E` or `L:E:I` strings | yes | — | at least one item; empty: 400 |

        An id pending for another consumer of the same subscription is redelivered for that
        consumer; ids pending for no consumer are ignored. On Shared and Key_Shared the
        redelivery may go to another consumer (Key_Shared: the one that owns the key).

        Messages of a batch (**Extension**): `L:E:I` redelivers its whole entry, once however
        many of its messages are listed, with `redeliveryCount` + 1; the messages of it already
        acknowledged by `L:E:I` are left out of the redelivery. An index that is not a message
        this consumer received (see ack) is ignored.
    """,  # noqa: E501
)
async def negative_acknowledge(request: web.Request) -> web.Response:
    consumer = _consumer(request)
    whole, indexed = message_ids_with_index((await NACK_BODY.read(request))["messageIds"])
    consumer.negative_acknowledge(whole, indexed)
    return _no_content()


@api.operation(
    "POST",
    CONSUMER + "/redeliverUnacknowledged",
    "redeliverUnacknowledged",
    tag="consumers",
    summary="redeliver every unacked message",
    success=Success(204, "done."),
    errors={
        404: "unknown or closed consumer id.",
    },
    description="""
        `POST /consumers/{consumerId}/redeliverUnacknowledged` → 204.

        **Extension:** every message dispatched to this consumer and not acked (received by a
        poll, or still in its receiver queue) goes back to the subscription at once and is
        delivered again with `redeliveryCount` + 1, as Pulsar's
        `redeliverUnacknowledgedMessages`. No body.
    """,
)
async def redeliver_unacknowledged(request: web.Request) -> web.Response:
    _consumer(request).redeliver(None)
    return _no_content()


@api.operation(
    "DELETE",
    CONSUMER,
    "closeConsumer",
    tag="consumers",
    summary="close a consumer",
    success=Success(204, "closed."),
    errors={
        404: "unknown or already closed consumer id.",
    },
    description="""
        `DELETE /consumers/{consumerId}` → 204: its unacked messages go back to the
        subscription (the replay queue) for the remaining or next consumers.

        **Extension:** so do the messages still in its receiver queue (their `redeliveryCount`
        is unchanged: they were never received). The id is unknown afterwards.
    """,
)
async def close_consumer(request: web.Request) -> web.Response:
    service = _service(request)
    service.close_consumer(_consumer(request, service))
    return _no_content()


# ---------------------------------------------------------------------- topics


@api.operation(
    "GET",
    "/admin/v2/persistent/{tenant}/{namespace}",
    "listTopics",
    tag="topics",
    summary="list the topics of a namespace",
    success=Success(200, '`["persistent://t1/ns1/orders", ...]`.', TopicList),
    errors={
        400: "bad tenant or namespace name.",
        503: "storage fault or timeout while listing.",
    },
    description="""
        `GET /admin/v2/persistent/{t}/{ns}` → list of topic names.

        **Extension:** a JSON array of full names (`"persistent://t1/ns1/orders"`), sorted, of
        every topic stored in the namespace, loaded or not, and, as Pulsar lists them, every
        partition of every partitioned topic of the namespace, used yet or not (not the
        partitioned topics' own names: see `GET .../partitioned`). Namespaces need no
        creation: a namespace with no topics answers `[]`.
    """,
)
async def list_topics(request: web.Request) -> web.Response:
    tenant = check_name_part("tenant", request.match_info["tenant"])
    namespace = check_name_part("namespace", request.match_info["namespace"])
    return _json(await _service(request).list_topics(tenant, namespace))


FORCE_TOPIC_DELETE = FlagQuery("force", "Close connected consumers first.")


@api.operation(
    "DELETE",
    ADMIN_TOPIC,
    "deleteTopic",
    tag="topics",
    summary="delete a topic",
    query=(FORCE_TOPIC_DELETE,),
    redirect=TOPIC_OWNER,
    success=Success(204, "deleted."),
    errors={
        400: "bad topic name; `force` not `true` or `false`.",
        404: "unknown topic.",
        412: "consumers are connected and `force` is not `true`.",
        503: "storage fault or timeout; nothing was deleted (the topic, its subscriptions and "
        "their acknowledgements are as before; it was unloaded, and consumers closed by "
        "`force=true` stay closed): retry it. Once the topic's own record is deleted the "
        "deletion has happened and the answer is 204; a cursor record or ledger that could not "
        "be removed afterwards is cleaned up later and never reappears.",
    },
    description="""
        `DELETE /admin/v2/persistent/{t}/{ns}/{topic}?force=true` → 204.

        Query parameters (**Extension**):

        | parameter | type | default | meaning |
        |---|---|---|---|
        | `force` | `true` or `false` | `false` | `true` closes connected consumers first; `false` refuses while any is connected |

        The topic's subscriptions, cursors and ledgers are deleted with it; its cache entries
        are dropped.
    """,  # noqa: E501
)
async def delete_topic(request: web.Request) -> web.Response:
    force = FORCE_TOPIC_DELETE.read(request)
    await _service(request).delete_topic(_topic(request), force)
    return _no_content()


@api.operation(
    "GET",
    ADMIN_TOPIC + "/stats",
    "getTopicStats",
    tag="topics",
    summary="topic stats",
    redirect=TOPIC_OWNER,
    success=Success(200, "the stats object.", TopicStats),
    errors={
        400: "bad topic name.",
        404: "unknown topic.",
        503: "storage fault or timeout while loading the topic.",
    },
    description="""
        `GET /admin/v2/persistent/{t}/{ns}/{topic}/stats` → Pulsar field names: `msgRateIn`,
        `msgThroughputIn`, `msgRateOut`, `msgThroughputOut`, `msgInCounter`, `bytesInCounter`,
        `msgOutCounter`, `bytesOutCounter`, `storageSize`, `backlogSize`, `offloadedStorageSize`,
        `deduplicationStatus` (`Disabled`, `Recovering`, `Enabled`, `Removing`, `Failed`),
        `subscriptions: {name: {type, msgBacklog, msgRateOut, msgRateRedeliver, msgOutCounter,
        bytesOutCounter, unackedMessages, msgDelayed, consumers: [{consumerName,
        availablePermits, unackedMessages, msgRateOut}]}}` (`msgDelayed`: messages held
        back until their deliver-at time, on Shared and Key_Shared). As in Pulsar, a
        subscription's `msgOutCounter` and `bytesOutCounter` keep what consumers that have
        left were delivered, and the topic's keep what deleted subscriptions were: since the
        topic was loaded, they never go down.

        `averageMsgSize`, `waitingPublishers`, `deduplicationStatus`, `publishers: [{accessMode,
        msgRateIn, msgThroughputIn, averageMsgSize, chunkedMessageRate, producerId,
        supportsPartialProducer, producerName, address, connectedSince, clientVersion,
        metadata}]` (producers of binary-protocol and WebSocket clients; HTTP produce has
        none), and each consumer's `address` (`/ip:port`, as Pulsar prints it),
        `connectedSince` (ISO 8601, UTC), `clientVersion` and `metadata`.

        **Extension:** exactly these fields, and each consumer's `msgThroughputOut`,
        `msgOutCounter` and `bytesOutCounter` (bytes delivered per second, messages and bytes
        delivered since it connected). Rates are numbers
        per second (`msgRate*` messages/s, `msgThroughput*` bytes/s); counters and sizes are
        integers (bytes for sizes). A subscription's `type` is the type of its connected
        consumers or, with none, of its last ones; `None` when no consumer has connected since
        the topic was loaded (a subscription created by the admin route, or any after an unload
        or a restart). A stored topic that is not loaded is loaded to answer.
    """,
)
async def topic_stats(request: web.Request) -> web.Response:
    topic = await _service(request).get_topic(_topic(request), create=False)
    return _json(topic.stats())


@api.operation(
    "GET",
    ADMIN_TOPIC + "/internalStats",
    "getTopicInternalStats",
    tag="topics",
    summary="managed-ledger internal stats",
    redirect=TOPIC_OWNER,
    success=Success(200, "the internal stats object.", PersistentTopicInternalStats),
    errors={
        400: "bad topic name.",
        404: "unknown topic.",
        503: "storage fault or timeout while loading the topic.",
    },
    description="""
        `GET .../{topic}/internalStats` → `entriesAddedCounter`, `numberOfEntries`, `totalSize`,
        `currentLedgerEntries`, `lastConfirmedEntry` ("L:E"), `ledgers: [{ledgerId, entries, size,
        offloaded}]`, `cursors: {name: {markDeletePosition, readPosition,
        individuallyDeletedMessages, messagesConsumedCounter}}`.

        **Extension:** also `currentLedgerSize`, the bytes in the current ledger; counters and
        sizes are integers; `offloaded` is a boolean;
        `lastConfirmedEntry`, `markDeletePosition` and `readPosition` are positions that may
        have entry id -1 (see [Names and ids](#names-and-ids));
        `individuallyDeletedMessages` is Pulsar's string form of the acked ranges past the
        mark-delete position, e.g. `"[(3:4..3:7], (3:9..3:10]]"` (`"[]"` when none). More fields
        may be added. A stored topic that is not loaded is loaded to answer.
    """,
)
async def topic_internal_stats(request: web.Request) -> web.Response:
    topic = await _service(request).get_topic(_topic(request), create=False)
    return _json(topic.internal_stats())


OFFLOAD_BODY = JsonBody[MessageIdRequest](MessageIdRequest, "Offload closed ledgers up to here.")


@api.operation(
    "PUT",
    ADMIN_TOPIC + "/offload",
    "triggerOffload",
    tag="topics",
    summary="offload to tiered storage",
    body=OFFLOAD_BODY,
    redirect=TOPIC_OWNER,
    success=Success(204, "the ledgers are offloaded."),
    errors={
        400: "bad topic name; body not a JSON object; `messageId` missing or not `L:E`.",
        404: "unknown topic.",
        409: "an offload of this topic is already running.",
        413: "body over `maxHttpRequestBodyBytes`.",
        503: "storage fault or timeout; nothing was marked offloaded.",
    },
    description="""
        `PUT .../{topic}/offload` `{"messageId": "L:E"}` → 204: offload every closed ledger up to
        that position to tiered storage now.

        Request body (**Extension**):

        | field | type | required | default | limits |
        |---|---|---|---|---|
        | `messageId` | string `L:E` | yes | — | closed ledgers whose entries are all at or before it are offloaded |

        **Extension:** the offload completes before the answer: the ledgers are uploaded to the
        tiered store as one stream set object and marked offloaded (reads of them go to the
        tiered store from then on); their bookie copies are deleted after
        `managedLedgerOffloadDeletionLagMs`. `GET .../offload` reports the outcome.
    """,  # noqa: E501
)
async def offload(request: web.Request) -> web.Response:
    name = _topic(request)
    position = message_id((await OFFLOAD_BODY.read(request))["messageId"])
    await _service(request).offload_topic(name, position)
    return _no_content()


@api.operation(
    "GET",
    ADMIN_TOPIC + "/offload",
    "getOffloadStatus",
    tag="topics",
    summary="offload status",
    redirect=TOPIC_OWNER,
    success=Success(200, "the status object.", OffloadStatus),
    errors={
        400: "bad topic name.",
        404: "unknown topic.",
    },
    description="""
        `GET .../offload` → status.

        **Extension:** Pulsar's `OffloadProcessStatus`:
        `{"status": "NOT_RUN|RUNNING|SUCCESS|ERROR", "lastError": "", "firstUnoffloadedMessage": {"ledgerId": 3, "entryId": 0}}`,
        `lastError` is `""` unless `status` is `ERROR`.
    """,  # noqa: E501
)
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


@api.operation(
    "POST",
    NAMESPACE + "/unload",
    "unloadNamespace",
    tag="namespaces",
    summary="unload a namespace",
    success=Success(
        204,
        "every topic of the namespace is unloaded. A topic whose ledger could not be closed (a "
        "storage fault) is unloaded all the same: the next load recovers the ledger as a new "
        "owner does after a crash, so nothing acknowledged is lost.",
    ),
    errors={
        400: "bad tenant or namespace name.",
    },
    description="""
        `POST /admin/v2/namespaces/{t}/{ns}/unload` → 204: unload every topic of the namespace as
        a load-balancer bundle move or a broker failover would: consumers are disconnected (their
        unacked messages return to the replay queue), cache entries of those topics are dropped,
        and the next request reloads the topic from storage.

        **Extension:** disconnected consumers are closed (their ids answer 404 afterwards). A
        namespace with no loaded topic answers 204 too. No body.

        With several brokers, asked of any broker, it unloads the namespace on every broker:
        each bundle of the namespace (see [Brokers of the cluster](#brokers-of-the-cluster)) is
        unloaded at its owner and released, as `PUT .../{bundle}/unload` does, so the next
        lookup assigns it to another live broker when there is one.
    """,
)
async def unload_namespace(request: web.Request) -> web.Response:
    tenant = check_name_part("tenant", request.match_info["tenant"])
    namespace = check_name_part("namespace", request.match_info["namespace"])
    _service(request)  # a broker that is down answers 503
    await request.app[NODE].cluster.unload_namespace(tenant, namespace)
    return _no_content()


# ---------------------------------------------------------------------- broker


@api.operation(
    "GET",
    "/admin/v2/brokers/health",
    "healthCheck",
    tag="broker",
    summary="health check",
    success=Success(200, "`ok` (`text/plain`).", {"type": "string", "enum": ["ok"]}, "text/plain"),
    down=False,
    errors={},
    description="""
        `GET /admin/v2/brokers/health` → 200 `ok`.

        **Extension:** the body is the text `ok` (`text/plain`), as Pulsar's.
    """,
)
async def health(request: web.Request) -> web.Response:
    return web.Response(text="ok")


@api.operation(
    "GET",
    "/admin/v2/broker-stats/cache",
    "getCacheStats",
    tag="broker",
    summary="entry cache stats",
    success=Success(200, "the cache stats object.", CacheStats),
    down=False,
    errors={
        503: "the broker has not started yet (`brokerlab serve` opens its HTTP service a moment "
        "before).",
    },
    description="""
        `GET /admin/v2/broker-stats/cache` → `{"implementation", "maxSizeBytes", "sizeBytes",
        "entries", "hits", "misses", "hitBytes", "missBytes", "joined", "requested", "inserted",
        "evicted": {"ttl", "size", "invalidated"}, "evictionRuns", "shadows": {name: {"hits", "misses"}}}`
        (counters since start).

        `hits` counts entries served from the cache. `misses` counts entries read from storage
        (bookie or tiered store) for reads, one per entry each storage read fetches: a reader
        that waits for a storage read another reader started counts neither, as Pulsar counts
        it, so `misses` equals the entries the cache design sent to storage.

        **Extension:** `joined` counts the entries a reader waited for from a storage read
        another reader started (those Pulsar counts neither hit nor miss), and `requested` every
        entry asked for by a read, so `1 - misses / requested` is the share of asked-for entries
        that did not cost a storage read (`readHitRatio` in `brokerlab loadgen` results).

        **Extension:** `implementation` is the value of `managedLedgerCacheImplementation`
        (`brokerlab designs` lists them: `pip430`, `legacy`, `segmented`; `disabled` at size 0);
        `evictionCpuSeconds` is the
        CPU time (seconds, a float) the broker thread spent in eviction passes: timer rounds and
        size passes, and the segmented ring's rotations; every other value is an integer
        (bytes for the `*Bytes` fields); `entriesWithExpectedReads` counts cached entries that
        some cursor is still expected to read (PIP-430's expected read count >= 1; always 0 for
        the other designs; computed on request, O(entries)); `shadows` maps each shadow's design
        name to its counters (`hits`, `misses`, `joined`, `requested`, `hitBytes`, `missBytes`, `sizeBytes`,
        `entries`, `evicted`; `{}` when none is configured). A shadow is another design run
        beside the live one on the same cache events, sizes only
        (`brokerlabShadowCacheImplementations`): its hits are the entries it would have served,
        its misses the entries it would have read from storage.

        **Extension**, several brokers: each broker has its own cache, and this route reports
        the one of the broker asked (add them up for the cluster). A restarted broker starts
        with an empty cache (`sizeBytes`, `entries` and the shadows' sizes start again from 0)
        but its counters (`hits`, `misses`, `evicted`, ... and the shadows') continue from its
        previous incarnation, so a run's totals stay whole; a restarted Pulsar broker starts
        them from zero. While the broker is down, the stats of its last incarnation.
    """,  # noqa: E501
)
async def cache_stats(request: web.Request) -> web.Response:
    """This broker's own cache (its counters continue across its restarts)."""
    return _json(request.app[NODE].cache_stats())


@api.operation(
    "GET",
    "/admin/v2/broker-stats/storage",
    "getStorageStats",
    tag="broker",
    summary="storage stats",
    success=Success(200, "the storage stats object.", StorageStats),
    down=False,
    errors={},
    description="""
        `GET /admin/v2/broker-stats/storage` → `{"bookie": {"readRequests", "entriesRead",
        "bytesRead", "getFloorCalls", "lastEntryCacheHits", "lastEntryCacheMisses", ...},
        "tiered": {"objectGets", "bytesRead", "indexLoads", "bloomSkips", ...}}`.

        **Extension:** every counter is an integer counted since start; `...` means more integer
        counters may be present beside the named ones. The bookie also reports
        `lastEntryCacheSize` (ledgers cached), `readCacheHits`, `readCacheMisses` and
        `readAheadEntries` (the bookie read cache; 0 while it is off), `entriesAdded`,
        `bytesAdded`, and `<operation>Calls` / `<operation>Errors` for every storage operation.
        `getFloorCalls` counts real floor seeks on the location index: answers from the
        last-entry cache make none. Two fields are not counters: `readOnly` is 1 while the
        bookie is read-only (its disk at `diskUsageThreshold` or above; adds answer 503) and 0
        otherwise, and `diskUsage` is the used fraction (0..1) of the data directory's file
        system at the last disk check (0 with `storageMode=memory`).
    """,
)
async def storage_stats(request: web.Request) -> web.Response:
    storage = request.app[STORAGE]
    return _json({"bookie": storage.stats(), "tiered": storage.tiered.stats()})


@api.operation(
    "GET",
    "/admin/v2/brokerlab/stats",
    "getClusterStats",
    tag="cluster",
    summary="every broker's cache stats and the storage stats, of one instant",
    success=Success(200, "the cluster stats object.", ClusterStats),
    down=False,
    errors={503: "a broker of the cluster has not started yet."},
    description="""
        `GET /admin/v2/brokerlab/stats` → `{"cache": [<cache stats of broker 0>, ...],
        "storage": <storage stats>}`: what `GET /admin/v2/broker-stats/cache` answers at each
        broker, in index order, and what `GET /admin/v2/broker-stats/storage` answers, read
        at one instant (one step of the brokers' event loop). Any broker answers, up or not.

        **Extension.** Read together, the brokers' `misses` add up to the storage's entries
        read (`bookie.entriesRead` + `tiered.entriesRead`) whatever reads are in flight:
        a storage read's entries count in both at once. The separate routes are read at
        different moments (one request each), between which reads complete; the load
        generator's samples use this route.
    """,
)
async def cluster_stats(request: web.Request) -> web.Response:
    """Every broker's cache stats and the storage's, with no await in between."""
    cluster = request.app[NODE].cluster
    cache = [node.cache_stats() for node in cluster.nodes]
    storage = request.app[STORAGE]
    return _json(
        {"cache": cache, "storage": {"bookie": storage.stats(), "tiered": storage.tiered.stats()}}
    )


@api.operation(
    "GET",
    "/admin/v2/broker-stats/trace",
    "getTraceStats",
    tag="broker",
    summary="access trace stats",
    success=Success(200, "the trace stats object.", TraceStats),
    down=False,
    errors={},
    description="""
        **Extension:** `GET /admin/v2/broker-stats/trace` → `{"enabled": false}` when
        `brokerlabTraceDir` is `none`; otherwise `{"enabled": true, "directory", "broker",
        "events", "dropped", "files", "pendingFiles", "writeErrors"}`: the recording broker's
        index (as in its files' names), events recorded and dropped (the writer fell
        `brokerlabTraceMaxPendingFiles` files behind), Parquet files written and waiting, and
        files that failed to write. The format of the files is in
        `docs/trace-format.md`.
    """,
)
async def trace_stats(request: web.Request) -> web.Response:
    trace = request.app[NODE].trace
    if trace is None:
        return _json({"enabled": False})
    return _json(trace.stats())


@api.operation(
    "GET",
    "/metrics",
    "getMetrics",
    tag="broker",
    summary="Prometheus metrics",
    success=Success(200, "Prometheus text exposition format.", None, "text/plain"),
    down=False,
    errors={},
    description="""
        `GET /metrics` → Prometheus text format.

        **Extension:** `text/plain; version=0.0.4`. Every series carries a `broker` label, the
        broker's index in its cluster (`"0"` alone; see
        [Brokers of the cluster](#brokers-of-the-cluster)), so the brokers of a cluster scraped
        together stay apart. Across a broker's restarts the cache series continue as its cache
        stats do, and so do the latency histograms; the dispatch counters
        (`brokerlab_messages_*_total`) start again from 0 with each incarnation, as a restarted
        Pulsar broker's do. While the broker is down, only the storage and access trace series
        are given. Series:

        - Pulsar's cache gauges, rates over the last `statsUpdateFrequencyInSecs`:
          `pulsar_ml_count`, `pulsar_ml_cache_used_size`, `pulsar_ml_cache_entries`,
          `pulsar_ml_cache_hits_rate`, `pulsar_ml_cache_misses_rate`,
          `pulsar_ml_cache_hits_throughput`, `pulsar_ml_cache_misses_throughput`,
          `pulsar_ml_cache_evictions` (size evictions in the last period),
          `pulsar_ml_cache_inserted_entries_total`, `pulsar_ml_cache_evicted_entries_total`.
        - Counters since start, by `design` and `role` (`live`, `shadow`):
          `brokerlab_cache_hits_total`, `brokerlab_cache_misses_total`,
          `brokerlab_cache_hit_bytes_total`, `brokerlab_cache_miss_bytes_total`,
          `brokerlab_cache_evictions_total` (also by `reason`: `ttl`, `size`, `invalidated`);
          gauges `brokerlab_cache_size_bytes`, `brokerlab_cache_entries`; for the live design
          `brokerlab_cache_inserts_total`, `brokerlab_cache_eviction_runs_total`,
          `brokerlab_cache_eviction_cpu_seconds_total`,
          `brokerlab_cache_max_size_bytes`, `brokerlab_cache_watermark_bytes`,
          `brokerlab_cache_entries_with_expected_reads`.
        - Access trace (only while `brokerlabTraceDir` is set): `brokerlab_trace_events_total`,
          `brokerlab_trace_dropped_events_total`.
        - Storage, by `tier`: `brokerlab_storage_read_requests_total`,
          `brokerlab_storage_read_entries_total`, `brokerlab_storage_read_bytes_total`; the bookie's
          `brokerlab_bookie_last_entry_cache_hits_total`, `..._misses_total`,
          `brokerlab_bookie_floor_seeks_total`, `brokerlab_bookie_read_cache_hits_total`,
          `..._misses_total`; gauges `brokerlab_bookie_read_only` (1 while the disk is too full
          for writes) and `brokerlab_bookie_disk_usage_ratio`.
        - Dispatch: `brokerlab_messages_produced_total`, `brokerlab_messages_dispatched_total`,
          `brokerlab_messages_redelivered_total`, gauges `brokerlab_backlog_messages`,
          `brokerlab_replay_queue_messages`; histograms `brokerlab_produce_latency_seconds` and
          `brokerlab_dispatch_latency_seconds` (publishTime to the poll that returns a message),
          buckets from 0.5 ms to an hour (a catch-up read's latency is minutes).
        - Event loop: histogram `brokerlab_event_loop_lag_seconds`, how late the loop ran a
          timer due every 0.1 s (the longest anything waited behind work holding the loop).
        - Codec processes (only with `httpCodecProcesses` above 0, or -1 on a machine of three
          or more cores): `brokerlab_http_codec_requests_total` by `outcome`, `encoded` (the
          produce body's entries came from a codec process) or `refused` (the process would not
          encode it; the broker encoded it on its loop and reported the error).
        - Upkeep: `brokerlab_upkeep_topics_visited_total` (topics looked at by the broker's
          upkeep rounds and inactive-topic checks, each once per round: it grows with the topics
          in use, not with the topics loaded), gauge `brokerlab_upkeep_active_topics` (topics
          each round visits now), `brokerlab_inactive_topics_deleted_total` and
          `brokerlab_inactive_topics_unloaded_total` (see [Inactive topics](#inactive-topics)).
        - With `exposeTopicLevelMetricsInPrometheus=true` (the default, as in Pulsar), per topic
          and labelled as Pulsar labels them (`namespace`: `tenant/namespace`; `topic`: the full
          name; Pulsar's `cluster` comes from the scrape target, see conf/prometheus.yml):
          `pulsar_msg_backlog`, `pulsar_rate_in`, `pulsar_rate_out`, `pulsar_storage_size`, and
          `brokerlab_replay_queue_messages_by_subscription` (also by `subscription`), for at most
          `brokerlabMetricsMaxTopics` topics (default 1000; brokerlab only): those with the
          largest backlogs (ties: the larger storage size). The other topics are summed, per
          namespace, into one series per family labelled `topic="_other"` (and
          `subscription="_other"`), and the gauge
          `brokerlab_metrics_topics_aggregated` says how many they are; so the sums over `topic`
          stay the broker's totals, and a scrape of 50,000 topics is about 0.3 MB (15 MB and
          200,000 series uncapped). With `exposeTopicLevelMetricsInPrometheus=false`, as
          Pulsar then, `pulsar_msg_backlog`, `pulsar_rate_in`, `pulsar_rate_out` and
          `pulsar_storage_size` are per `namespace` only. Either way `pulsar_topics_count`
          counts the loaded topics per `namespace`.

        #### Inactive topics

        As Pulsar's `brokerDeleteInactiveTopics*` settings say, every
        `brokerDeleteInactiveTopicsFrequencySeconds` (60) the broker looks at the topics inactive
        for `brokerDeleteInactiveTopicsMaxInactiveDurationSeconds` (-1: the frequency): no
        producer or consumer connected, and nothing produced, acknowledged, subscribed or reset
        since. With `brokerDeleteInactiveTopicsEnabled=true` (the default, as in Pulsar) it
        deletes those that `brokerDeleteInactiveTopicsMode` allows: `delete_when_no_subscriptions`
        (the default) those with no subscription, `delete_when_subscriptions_caught_up` those
        whose subscriptions have no backlog (deleted with it). A topic with a subscription that
        has a backlog is never deleted. With `brokerlabUnloadInactiveTopicsEnabled=true` (the
        default; brokerlab only) the inactive topics not deleted are unloaded as a bundle unload
        unloads them: cursors and ledger closed durably, memory freed; the next produce, consumer
        or admin call loads the topic again from storage (its rates and counters start again
        from 0, as after any unload). A produce that races a deletion is stored in the topic
        created anew, never in the deleted one.
    """,
)
async def metrics(request: web.Request) -> web.Response:
    body = generate_latest(request.app[METRICS].registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


DASHBOARD_PAGE = pathlib.Path(__file__).with_name("static") / "dashboard.html"
TOP_TOPICS = 10


@api.operation(
    "GET",
    "/dashboard",
    "getDashboard",
    tag="broker",
    summary="live dashboard",
    success=Success(200, "the HTML page.", None, "text/html"),
    down=False,
    errors={},
    description="""
        `GET /dashboard` → the live dashboard page (no external network needed).

        **Extension:** `text/html`, one self-contained page (inline script and SVG charts, no
        external resources, works offline) that draws the broker's history (`GET
        /dashboard/history`) from the run's start and polls it and `GET /dashboard/data` every
        second: cache hit % over time (live design and every shadow), in/out messages against
        cache hits and misses, cache size against the limit and the watermark, evictions by
        reason, storage reads by tier, the bookie's last-entry cache and the tiered index, on
        a time axis from the run's start to now; the cluster's brokers and the top topics by
        backlog. With `authenticationEnabled`, open it as `/dashboard#token=<token>`: the page
        keeps the token for the tab (sessionStorage), takes it out of the address bar and
        sends it as a Bearer token with its data requests.
    """,
)
async def dashboard(request: web.Request) -> web.Response:
    return web.Response(body=DASHBOARD_PAGE.read_bytes(), content_type="text/html", charset="utf-8")


@api.operation(
    "GET",
    "/dashboard/data",
    "getDashboardData",
    tag="broker",
    summary="the dashboard's snapshot",
    success=Success(200, "the snapshot object.", DashboardData),
    errors={},
    description="""
        **Extension.** One snapshot of the counters the dashboard shows (the page draws its
        header and tables from it, its charts from `GET /dashboard/history`; rates are
        differences between snapshots): `{"timeMs", "cache": <the cache stats object>,
        "cacheWatermarkBytes", "storage": <the storage stats object>, "messages": {"produced",
        "dispatched", "redelivered"}, "backlog", "topTopics": [{"topic", "backlog", "replay"}],
        "broker", "brokers"}` (counters since start; `topTopics` holds the ten topics with the
        largest backlog). `broker` is this broker's index; `brokers` lists every broker of the
        cluster in index order, each as `GET /admin/v2/brokerlab/brokers` lists it plus
        `cache`, its cache stats object (`null` before its first start), so the dashboard of
        any broker shows them side by side.
    """,
)
async def dashboard_data(request: web.Request) -> web.Response:
    """One snapshot of the counters the dashboard charts; the page computes the rates."""
    learn_own_url(request)
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


SINCE_MS = IntQuery("sinceMs", "Only the samples after this time (epoch ms); 0: all.", 0, 0, 2**62)


@api.operation(
    "GET",
    "/dashboard/history",
    "getDashboardHistory",
    tag="broker",
    summary="the dashboard's series since the run started",
    query=(SINCE_MS,),
    success=Success(200, "the history object.", DashboardHistory),
    down=False,
    errors={400: "`sinceMs` not an integer or out of range."},
    description="""
        **Extension.** What the dashboard charts, sampled by the broker every
        `brokerlabDashboardSampleIntervalMs` (1000) of its clock since it started (virtual
        time in a virtual run), restarts included, so a page opened at any time draws the run
        from its start:

        ```json
        {"sampleIntervalMs": 1000, "recentMs": 900000, "olderStepMs": 10000,
         "startMs": 1764410677000, "implementation": "pip430", "shadows": ["legacy"],
         "columns": ["timeMs", "produced", "dispatched", "hits", "misses", "joined",
                     "sizeBytes", "maxSizeBytes", "watermarkBytes", "evictedTtl",
                     "evictedSize", "evictedInvalidated", "bookieEntriesRead",
                     "tieredEntriesRead", "lastEntryCacheHits", "lastEntryCacheMisses",
                     "getFloorCalls", "tieredIndexLoads", "loopLagMaxUs",
                     "shadow.legacy.hits", "shadow.legacy.misses"],
         "rows": [[1764410677000, 0, 0, 0, 0, 0, 0, 104857600, 94371840, 0, 0, 0, 0, 0,
                   0, 0, 0, 0, 1250, 0, 0]]}
        ```

        Each row is one sample, its items in `columns` order: the time (epoch ms: the broker
        clock's wall time at the first sample plus its monotonic time since, so rows stay in
        order if the wall clock is stepped), counters since the broker started (messages
        produced and dispatched over every incarnation, the live cache's hits, misses, joined
        reads and evictions by reason, storage entries read by tier, the bookie's last-entry
        cache and floor seeks, the tiered index loads, each shadow's hits and misses) and
        gauges (cache size, its limit, the watermark a size pass frees down to, and
        `loopLagMaxUs`: the longest the event loop ran a timer late since the row before,
        in microseconds, what `brokerlab_event_loop_lag_seconds` observes), all
        integers. A rate is the
        difference of a counter between two rows over their time difference.

        Retention: every sample of the last `brokerlabDashboardHistoryMinutes` (15 min,
        `recentMs`); before that one sample per `olderStepMs` (10 s to start with) and at
        most `brokerlabDashboardHistoryOlderSamples` (600) of them: when there would be more,
        the step doubles (20 s, 40 s, ...) and the older samples are thinned to it. The first
        sample (the run's start) is always kept, so the history covers the whole run in
        bounded memory. `sinceMs` (**Extension**): only the rows after that time, for a page
        that has the rest (a page fetches everything now and then, as rows it has may since
        have been thinned).
    """,
)
async def dashboard_history(request: web.Request) -> web.Response:
    """This broker's sampled dashboard series, the whole run (thinned beyond its recent
    part); O(rows returned)."""
    since_ms = SINCE_MS.read(request)
    node = request.app[NODE]
    sampler = node.sampler
    history = node.history
    stream = node.cache_stream
    return _json(
        {
            "sampleIntervalMs": sampler.interval_ms,
            "recentMs": history.recent_ms,
            "olderStepMs": history.step_ms,
            "startMs": history.first_time_ms(),
            "implementation": stream.live.manager.implementation if stream else "",
            "shadows": list(sampler.shadows),
            "columns": sampler.columns(),
            "rows": [row.tolist() for row in history.rows(since_ms or None)],
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


@api.operation(
    "GET",
    "/admin/v2/brokerlab/brokers",
    "listBrokers",
    tag="cluster",
    summary="the brokers of the cluster",
    success=Success(200, "the array of brokers.", {"type": "array", "items": schema_ref(Broker)}),
    down=False,
    errors={},
    description="""
        Any broker answers, up or not, with every broker of the cluster in index order:

        ```json
        [{"index": 0, "state": "up", "httpUrl": "http://127.0.0.1:8080",
          "serviceUrl": "pulsar://127.0.0.1:6650", "incarnation": 1, "restarts": 0,
          "bundles": ["public/default/0x00000000_0x40000000"], "topics": 12}]
        ```

        | field | type | meaning |
        |---|---|---|
        | `index` | integer | the broker's index |
        | `state` | string | `up` (serving), `stopping` (a graceful restart unloading its bundles one by one; those not yet unloaded still serve their loaded topics), `down` (stopped; also before its first start), `restarting` (down for the restart's `downtimeMs`, then starting) |
        | `httpUrl` | string | its HTTP service, `http://{advertisedAddress}:{port}`; `""` until known |
        | `serviceUrl` | string | its binary protocol, `pulsar://...`; `""` when the protocol is off (or before it first listens) |
        | `incarnation` | integer | its starts so far: 1 after the first, + 1 per restart |
        | `restarts` | integer | its restarts so far |
        | `bundles` | array of strings | the bundles it owns, `{tenant}/{namespace}/0x{lower}_0x{upper}` |
        | `topics` | integer | the topics it has loaded (0 while down) |
    """,  # noqa: E501
)
async def list_brokers(request: web.Request) -> web.Response:
    """The brokers of this cluster: state, URLs, bundles owned, restarts."""
    learn_own_url(request)
    return _json([node.describe() for node in request.app[NODE].cluster.nodes])


RESTART_MODE = ChoiceQuery("mode", "The kind of restart.", RESTART_MODES, "graceful")
#: The longest a restarted broker may be asked to stay down.
MAX_DOWNTIME_MS = 3_600_000
DOWNTIME_MS = IntQuery(
    "downtimeMs", "How long it stays down before it starts again.", 0, 0, MAX_DOWNTIME_MS
)


@api.operation(
    "POST",
    "/admin/v2/brokerlab/brokers/{index}/restart",
    "restartBroker",
    tag="cluster",
    summary="restart one broker",
    query=(
        RESTART_MODE,
        DOWNTIME_MS,
    ),
    success=Success(200, "the broker, up again (asked of another broker).", Broker),
    down=False,
    errors={
        400: "`index` not a number, or not a broker of the cluster; `mode` not `graceful` or "
        "`kill`; `downtimeMs` not an integer or out of range.",
        409: "that broker is restarting already.",
    },
    description="""
        Restarts broker `{index}`, asked of any broker of the cluster, itself included. No body.

        | parameter | type | default | meaning |
        |---|---|---|---|
        | `mode` | `graceful` or `kill` | `graceful` | `graceful`: its bundles are unloaded one by one and handed over, clients told to look the topics up again; `kill`: its connections are cut at once, its ledgers left open for the next owner to recover, its bundles kept until `metadataStoreSessionTimeoutMillis` passes or it starts again (see above) |
        | `downtimeMs` | integer | 0 | 0..3600000: how long it stays down (state `restarting`) before it starts again |

        The restarted broker starts with an empty cache; its cache counters continue (see
        `GET /admin/v2/broker-stats/cache`). Its HTTP service stays up meanwhile. While a
        graceful restart unloads its bundles (state `stopping`) it goes on serving the topics
        it has loaded whose bundle's turn has not come, as Pulsar's graceful shutdown does; it
        loads no topic and answers 503 for a bundle in its unload. Once it is down (state
        `restarting`), it answers 503 on the routes that need the broker (see
        [Conventions](#conventions)).

        Asked of another broker, the answer comes once the restarted broker is up again: 200
        with its object as `GET /admin/v2/brokerlab/brokers` lists it. Asked of the broker
        itself (the restart stops the very service that would answer), the answer comes at
        once: 202 `{"broker": 0, "mode": "graceful", "state": "restarting"}`, and the restart
        goes on in the background (if one of it is under way already, the answer is 409).
        The 202 is not in the list below nor in `GET /openapi.json`, which give one success
        status per route: follow a restart asked this way with
        `GET /admin/v2/brokerlab/brokers`.
    """,  # noqa: E501
)
async def restart_broker(request: web.Request) -> web.Response:
    """Restart broker ``index``: ``mode`` graceful (default) or kill, down for
    ``downtimeMs`` (default 0). Asked of another broker, the answer comes when the
    restarted broker is up again (200); asked of the broker itself, at once (202), since
    the restart closes it."""
    learn_own_url(request)
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


@api.operation(
    "GET",
    "/openapi.json",
    "getOpenApi",
    tag="broker",
    summary="this contract as OpenAPI 3.1",
    success=Success(200, "the OpenAPI document (JSON).", {"type": "object"}),
    down=False,
    errors={},
    description="""
        `GET /openapi.json` → this contract as OpenAPI 3.

        **Extension:** OpenAPI 3.1, generated by `broker.http.openapi.openapi_spec()`.
    """,
)
async def openapi(request: web.Request) -> web.Response:
    return _json(openapi_spec(contract()))


def contract() -> list[Operation]:
    """Every operation of the HTTP contract, in declaration order: this module's, then
    those of Pulsar's admin and lookup routes (``pulsar_admin``), of its admin routes on
    a topic's messages (``admin_topics``), of its broker routes (``admin_brokers``), of
    its retention, TTL and backlog quota policies (``admin_policies``), of its
    deduplication policies (``deduplication``) and of its schema registry
    (``pulsar_schemas``)."""
    return [
        *api.operations,
        *pulsar_admin.api.operations,
        *admin_topics.api.operations,
        *admin_brokers.api.operations,
        *admin_policies.api.operations,
        *deduplication.api.operations,
        *pulsar_schemas.api.operations,
    ]


# ---------------------------------------------------------------------- fault injection


def _fault_injectors(storage: Storage) -> tuple[FaultInjector, FaultInjector]:
    """The bookie's injector and the object store's."""
    return storage.faults, storage.tiered.store.object_store.faults


FAULT_BODY = JsonBody[FaultSetting](FaultSetting, "The fault.")


@api.operation(
    "PUT",
    "/admin/v2/brokerlab/faults",
    "setFault",
    tag="brokerlab",
    summary="set the fault of one storage operation",
    body=FAULT_BODY,
    success=Success(204, "set."),
    down=False,
    errors={
        400: "body not a JSON object; `operation` missing or unknown; `errorRate` or `delayMs` "
        "of the wrong type or out of range.",
        413: "body over `maxHttpRequestBodyBytes`.",
    },
    description="""
        ```json request
        {"operation": "addEntries", "errorRate": 1.0, "delayMs": 0}
        ```

        | field | type | required | default | limits |
        |---|---|---|---|---|
        | `operation` | string | yes | — | one of the operations above |
        | `errorRate` | number | no | 0.0 | 0.0..1.0: the probability that a call fails (the call changes nothing) |
        | `delayMs` | number (ms, may have a fraction) | no | 0 | 0..600000: added to every call's latency, before it succeeds or fails |

        The setting replaces the operation's previous one; `errorRate` 0 with `delayMs` 0
        clears it.
    """,  # noqa: E501
)
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


@api.operation(
    "DELETE",
    "/admin/v2/brokerlab/faults",
    "clearFaults",
    tag="brokerlab",
    summary="clear every fault",
    success=Success(204, "every operation runs without injected faults again."),
    down=False,
    errors={},
    description="""
        Removes every setting.
    """,
)
async def clear_faults(request: web.Request) -> web.Response:
    for injector in _fault_injectors(request.app[STORAGE]):
        injector.clear()
    return _no_content()


@api.operation(
    "GET",
    "/admin/v2/brokerlab/faults",
    "getFaults",
    tag="brokerlab",
    summary="current fault settings",
    success=Success(
        200,
        '`{"addEntries": {"errorRate": 1.0, "delayMs": 0.0, "injectedErrors": 0}, '
        "...}`, one key per operation with a setting.",
        FaultSettings,
    ),
    down=False,
    errors={},
    description="""
        ```json
        {"addEntries": {"errorRate": 1.0, "delayMs": 0.0, "injectedErrors": 3}}
        ```
        One key per operation that has a setting (`{}` when none): its `errorRate`, its
        `delayMs` and `injectedErrors`, the number of calls it made fail since it was set.
    """,
)
async def get_faults(request: web.Request) -> web.Response:
    bookie_faults, object_faults = _fault_injectors(request.app[STORAGE])
    return _json(bookie_faults.snapshot() | object_faults.snapshot())
