"""Pulsar's admin routes on a topic's messages, as ``pulsar-admin topics`` and Pulsar
Manager call them: create a non-partitioned topic, peek a subscription's messages, skip
them, clear a backlog, expire messages.

Paths, verbs, statuses and headers are Pulsar's (``admin/v2/PersistentTopics``,
``Namespaces.clearNamespaceBacklog``); errors are brokerlab's ``{"reason", "code"}``.
"""

from __future__ import annotations

import base64
from typing import Any

from aiohttp import web

from broker.dispatch.errors import (
    InvalidRequestError,
    MethodNotAllowedError,
    NotFoundError,
    NotImplementedYetError,
    StoredEntryError,
)
from broker.dispatch.names import TopicName, check_name_part
from broker.dispatch.partitions import partition_name
from broker.dispatch.service import BrokerService
from broker.dispatch.stats import iso_time
from broker.dispatch.subscription import Subscription
from broker.dispatch.topic import PersistentTopic
from broker.http import security
from broker.http.app_state import NODE
from broker.http.contract import (
    ADMIN_TOPIC,
    NAMESPACE,
    PARTITION_OWNER,
    SUBSCRIPTION,
    TOPIC_OWNER,
    JsonBody,
    RouteTable,
    Success,
)
from broker.ledger.entry import (
    HEAD_SIZE,
    MAX_INFLATED_BYTES,
    EntryFormatError,
    inflate,
    metadata_of,
)
from broker.ledger.entry import Entry as LedgerEntry
from broker.pulsar_api import COMPRESSION_NONE, COMPRESSION_ZLIB
from broker.tasks import cooperative

api = RouteTable()
routes = api.routes

#: Pulsar's CompressionType names, for the X-Pulsar-compression header
COMPRESSION_NAMES = {0: "NONE", 1: "LZ4", 2: "ZLIB", 3: "ZSTD", 4: "SNAPPY"}
#: the largest count a path segment may give (Java's int, as Pulsar's @PathParam int)
MAX_INT32 = 2_147_483_647


def _service(request: web.Request) -> BrokerService:
    return request.app[NODE].running_service()


def _topic(request: web.Request) -> TopicName:
    info = request.match_info
    return TopicName.of(info["tenant"], info["namespace"], info["topic"])


def _subscription_name(request: web.Request) -> str:
    return check_name_part("subscription", request.match_info["subscription"])


def _count(request: web.Request, name: str, minimum: int) -> int:
    """A path segment that is a decimal integer in ``minimum..MAX_INT32``."""
    raw = request.match_info[name]
    if not raw.isascii() or not raw.isdigit() or int(raw) > MAX_INT32 or int(raw) < minimum:
        raise InvalidRequestError(
            f"{name} must be a decimal integer within {minimum}..{MAX_INT32}, got {raw[:32]!r}"
        )
    return int(raw)


async def _topics_of(service: BrokerService, name: TopicName) -> list[PersistentTopic]:
    """The topic ``name``, or each partition of the partitioned topic ``name`` (at
    their owners), as Pulsar applies subscription operations to every partition."""
    if await service.partitions.metadata(name) is not None:
        return await service.partitions.partition_topics(name)
    return [await service.get_topic(name, create=False)]


def _subscriptions_named(topics: list[PersistentTopic], subscription: str) -> list[Subscription]:
    """Each topic's subscription ``subscription``; NotFoundError, before anything
    changes, if one of them lacks it."""
    found = []
    for topic in topics:
        if subscription not in topic.subscriptions:
            raise NotFoundError(f"Subscription not found: {subscription} on {topic.name}")
        found.append(topic.subscriptions[subscription])
    return found


# ---------------------------------------------------------------------- create


CREATE_BODY = JsonBody[dict[str, str]](
    dict[str, str], "Topic properties (accepted, not stored).", required=False
)


@api.operation(
    "PUT",
    ADMIN_TOPIC,
    "createNonPartitionedTopic",
    tag="topics",
    summary="create a non-partitioned topic",
    body=CREATE_BODY,
    redirect=TOPIC_OWNER,
    success=Success(204, "created."),
    errors={
        400: "bad topic name; a body that is not a JSON object of strings.",
        409: "the topic exists; a partitioned topic has that name; it names a partition past "
        "its partitioned topic's count; `maxTopicsPerNamespace` is reached.",
        413: "body over `maxHttpRequestBodyBytes`.",
        503: "storage fault or timeout; nothing was created.",
    },
    description="""
        `PUT /admin/v2/persistent/{t}/{ns}/{topic}` → 204, as `pulsar-admin topics create`.
        The topic is created whatever `allowAutoTopicCreation` says, with no subscription.
        An optional body of topic properties (`{"k": "v"}`) is accepted as Pulsar's; brokerlab
        does not store them.
    """,
)
async def create_topic(request: web.Request) -> web.Response:
    name = _topic(request)
    await CREATE_BODY.read_optional(request)
    await _service(request).create_topic(name)
    return web.Response(status=204)


# ---------------------------------------------------------------------- peek


def _decompressed(metadata: Any, payload: bytes, max_inflated: int) -> bytes:
    compression = metadata.compression
    if compression == COMPRESSION_NONE:
        return payload
    if compression == COMPRESSION_ZLIB:
        try:
            return inflate(payload, metadata.uncompressed_size, max_inflated)
        except EntryFormatError as error:
            raise NotImplementedYetError(str(error)) from None
    name = COMPRESSION_NAMES.get(compression, str(compression))
    raise NotImplementedYetError(
        f"this entry is compressed with {name}, which brokerlab does not decompress "
        "(NONE and ZLIB only); consume it with a Pulsar client"
    )


def _header_value(value: str) -> str:
    """A header-safe value: line breaks would end the header (Pulsar's client would
    not send them in a property it reads back anyway)."""
    return value.replace("\r", " ").replace("\n", " ")


def peek_response(entry: LedgerEntry, max_inflated: int = MAX_INFLATED_BYTES) -> web.Response:
    """The entry as Pulsar's peek answers it: its payload (decompressed, into at most
    ``max_inflated`` bytes; a batch's messages in their batch framing) and the metadata
    as ``X-Pulsar-*`` headers."""
    data = entry.data
    try:
        metadata = metadata_of(data)
    except EntryFormatError as error:
        raise StoredEntryError(f"entry {entry.position} cannot be read: {error}") from None
    start = HEAD_SIZE + int.from_bytes(data[6:HEAD_SIZE], "big")
    payload = data[start:]
    headers: dict[str, str] = {"X-Pulsar-Message-ID": str(entry.position)}
    for item in metadata.properties:
        headers["X-Pulsar-PROPERTY-" + _header_value(item.key)] = _header_value(item.value)
    headers["X-Pulsar-publish-time"] = iso_time(metadata.publish_time)
    if metadata.event_time:
        headers["X-Pulsar-event-time"] = iso_time(metadata.event_time)
    if metadata.HasField("deliver_at_time"):
        headers["X-Pulsar-deliver-at-time"] = iso_time(metadata.deliver_at_time)
    if metadata.HasField("num_messages_in_batch"):
        headers["X-Pulsar-num-batch-message"] = str(metadata.num_messages_in_batch)
        headers["X-Pulsar-batch-size"] = str(len(payload))
    if metadata.null_value:
        headers["X-Pulsar-null-value"] = "true"
    headers["X-Pulsar-producer-name"] = _header_value(metadata.producer_name)
    headers["X-Pulsar-sequence-id"] = str(metadata.sequence_id)
    if metadata.HasField("replicated_from"):
        headers["X-Pulsar-replicated-from"] = _header_value(metadata.replicated_from)
    if metadata.HasField("partition_key"):
        headers["X-Pulsar-partition-key"] = _header_value(metadata.partition_key)
    if metadata.partition_key_b64_encoded:
        headers["X-Pulsar-partition-key-b64-encoded"] = "true"
    if metadata.compression != COMPRESSION_NONE:
        headers["X-Pulsar-compression"] = COMPRESSION_NAMES.get(
            metadata.compression, str(metadata.compression)
        )
    if metadata.HasField("uncompressed_size"):
        headers["X-Pulsar-uncompressed-size"] = str(metadata.uncompressed_size)
    if metadata.HasField("marker_type"):
        headers["X-Pulsar-marker-type"] = str(metadata.marker_type)
    if metadata.HasField("highest_sequence_id"):
        headers["X-Pulsar-highest-sequence-id"] = str(metadata.highest_sequence_id)
    if metadata.HasField("uuid"):
        headers["X-Pulsar-uuid"] = _header_value(metadata.uuid)
    for field, header in (
        ("num_chunks_from_msg", "X-Pulsar-num-chunks-from-msg"),
        ("total_chunk_msg_size", "X-Pulsar-total-chunk-msg-size"),
        ("chunk_id", "X-Pulsar-chunk-id"),
    ):
        if metadata.HasField(field):
            headers[header] = str(getattr(metadata, field))
    if metadata.null_partition_key:
        headers["X-Pulsar-null-partition-key"] = "true"
    if metadata.HasField("ordering_key"):
        headers["X-Pulsar-Base64-ordering-key"] = _b64(metadata.ordering_key)
    if metadata.HasField("schema_version"):
        headers["X-Pulsar-Base64-schema-version-b64encoded"] = _b64(metadata.schema_version)
    body = _decompressed(metadata, payload, max_inflated)
    return web.Response(body=body, headers=headers, content_type="application/octet-stream")


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


@api.operation(
    "GET",
    SUBSCRIPTION + "/position/{messagePosition}",
    "peekNthMessage",
    tag="subscriptions",
    summary="peek the n-th message of a backlog",
    redirect=TOPIC_OWNER,
    success=Success(
        200,
        "the entry's payload (`application/octet-stream`), its metadata in `X-Pulsar-*` headers.",
        {"type": "string", "format": "binary"},
        "application/octet-stream",
    ),
    errors={
        400: "bad topic or subscription name; `messagePosition` not an integer from 1.",
        404: "unknown topic or subscription; the backlog holds fewer entries.",
        405: "the name is a partitioned topic's (peek a partition).",
        500: "the entry's metadata does not parse (as Pulsar's, the reason says so).",
        501: "the entry is compressed with LZ4, ZSTD or SNAPPY (brokerlab decompresses ZLIB).",
        503: "storage fault or timeout reading the entry.",
    },
    description="""
        `GET .../{topic}/subscription/{sub}/position/{n}` → the `n`-th (from 1) entry after the
        subscription's mark-delete position that is not acknowledged, as `pulsar-admin topics
        peek-messages` reads it (one request per message). Nothing moves: no cursor, no
        consumer, nothing cached for the subscription.

        Headers, as Pulsar's: `X-Pulsar-Message-ID` (`L:E`), `X-Pulsar-publish-time` (ISO 8601,
        UTC), `X-Pulsar-producer-name`, `X-Pulsar-sequence-id`, `X-Pulsar-PROPERTY-{key}` per
        property, and when the message has them `X-Pulsar-event-time`,
        `X-Pulsar-deliver-at-time`, `X-Pulsar-partition-key`,
        `X-Pulsar-partition-key-b64-encoded`, `X-Pulsar-num-batch-message` and
        `X-Pulsar-batch-size` (a batched entry: the body is the batch, each message after its
        4-byte size and SingleMessageMetadata, as Pulsar's admin client splits it),
        `X-Pulsar-compression`, `X-Pulsar-uncompressed-size`, `X-Pulsar-null-value`,
        `X-Pulsar-replicated-from`, `X-Pulsar-highest-sequence-id`, `X-Pulsar-uuid`, the
        chunk headers, `X-Pulsar-Base64-ordering-key`,
        `X-Pulsar-Base64-schema-version-b64encoded`. The body is the payload, decompressed.

        **Extension:** line breaks in a property are sent as spaces.
    """,
)
async def peek_nth_message(request: web.Request) -> web.Response:
    name = _topic(request)
    subscription_name = _subscription_name(request)
    position = _count(request, "messagePosition", 1)
    service = _service(request)
    if await service.partitions.metadata(name) is not None:
        raise MethodNotAllowedError("Peek messages on a partitioned topic is not allowed")
    topic = await service.get_topic(name, create=False)
    [subscription] = _subscriptions_named([topic], subscription_name)
    entry = await subscription.peek(position)
    return peek_response(entry, subscription.config.max_message_size)


# ---------------------------------------------------------------------- skip, clear, expire


@api.operation(
    "POST",
    SUBSCRIPTION + "/skip/{numMessages}",
    "skipMessages",
    tag="subscriptions",
    summary="skip messages of a backlog",
    redirect=TOPIC_OWNER,
    success=Success(204, "skipped; durable."),
    errors={
        400: "bad topic or subscription name; `numMessages` not an integer from 0.",
        404: "unknown topic or subscription.",
        405: "the name is a partitioned topic's (skip on a partition).",
        503: "storage fault or timeout; the cursor did not move.",
    },
    description="""
        `POST .../subscription/{sub}/skip/{n}` → 204: the next `n` unacknowledged entries are
        acknowledged (all of them when fewer remain), as `pulsar-admin topics skip`. Consumers
        that hold some of them have them acknowledged: they are not redelivered.
    """,
)
@security.client_route
async def skip_messages(request: web.Request) -> web.Response:
    name = _topic(request)
    subscription_name = _subscription_name(request)
    count = _count(request, "numMessages", 0)
    service = _service(request)
    if await service.partitions.metadata(name) is not None:
        raise MethodNotAllowedError("Skip messages on a partitioned topic is not allowed")
    topic = await service.get_topic(name, create=False)
    [subscription] = _subscriptions_named([topic], subscription_name)
    if count:
        await subscription.skip(count)
    return web.Response(status=204)


@api.operation(
    "POST",
    SUBSCRIPTION + "/skip_all",
    "skipAllMessages",
    tag="subscriptions",
    summary="clear a subscription's backlog",
    redirect=PARTITION_OWNER,
    success=Success(204, "the backlog is empty; durable."),
    errors={
        400: "bad topic or subscription name.",
        404: "unknown topic or subscription (on any partition).",
        503: "storage fault or timeout; the cursor did not move (on a partitioned topic, "
        "partitions done before it stay done).",
    },
    description="""
        `POST .../subscription/{sub}/skip_all` → 204: everything published so far is
        acknowledged, as `pulsar-admin topics clear-backlog`. On a partitioned topic's name, on
        every partition.
    """,
)
@security.client_route
async def skip_all_messages(request: web.Request) -> web.Response:
    name = _topic(request)
    subscription_name = _subscription_name(request)
    topics = await _topics_of(_service(request), name)
    for subscription in _subscriptions_named(topics, subscription_name):
        await subscription.skip_all()
    return web.Response(status=204)


def _expire_seconds(request: web.Request) -> int:
    return _count(request, "expireTimeInSeconds", 0)


@api.operation(
    "POST",
    SUBSCRIPTION + "/expireMessages/{expireTimeInSeconds}",
    "expireTopicMessages",
    tag="subscriptions",
    summary="expire a subscription's old messages",
    redirect=PARTITION_OWNER,
    success=Success(204, "expired; durable."),
    errors={
        400: "bad topic or subscription name; `expireTimeInSeconds` not an integer from 0.",
        404: "unknown topic or subscription (on any partition).",
        503: "storage fault or timeout; the cursor did not move.",
    },
    description="""
        `POST .../subscription/{sub}/expireMessages/{seconds}` → 204: every message published
        more than `seconds` ago (on the broker's clock) is acknowledged, as the message TTL
        does, as `pulsar-admin topics expire-messages`. On a partitioned topic's name, on every
        partition.
    """,
)
@security.client_route
async def expire_messages(request: web.Request) -> web.Response:
    name = _topic(request)
    subscription_name = _subscription_name(request)
    seconds = _expire_seconds(request)
    service = _service(request)
    topics = await _topics_of(service, name)
    now_ms = service.clock.wall_ms()
    for subscription in _subscriptions_named(topics, subscription_name):
        await subscription.expire_messages(now_ms, seconds)
    return web.Response(status=204)


@api.operation(
    "POST",
    ADMIN_TOPIC + "/all_subscription/expireMessages/{expireTimeInSeconds}",
    "expireMessagesForAllSubscriptions",
    tag="subscriptions",
    summary="expire old messages on every subscription",
    redirect=PARTITION_OWNER,
    success=Success(204, "expired; durable."),
    errors={
        400: "bad topic name; `expireTimeInSeconds` not an integer from 0.",
        404: "unknown topic.",
        503: "storage fault or timeout; subscriptions done before it stay done.",
    },
    description="""
        `POST .../{topic}/all_subscription/expireMessages/{seconds}` → 204: as the subscription
        route, on each subscription of the topic (of each partition).
    """,
)
@security.client_route
async def expire_all_subscriptions(request: web.Request) -> web.Response:
    name = _topic(request)
    seconds = _expire_seconds(request)
    service = _service(request)
    now_ms = service.clock.wall_ms()
    for topic in await _topics_of(service, name):
        for subscription in list(topic.subscriptions.values()):
            await subscription.expire_messages(now_ms, seconds)
    return web.Response(status=204)


# ---------------------------------------------------------------------- namespace


async def _clear_namespace(request: web.Request, subscription: str | None) -> web.Response:
    tenant = check_name_part("tenant", request.match_info["tenant"])
    namespace = check_name_part("namespace", request.match_info["namespace"])
    service = _service(request)
    if not await service.namespaces.namespace_exists(tenant, namespace):
        raise NotFoundError(f"Namespace {tenant}/{namespace} does not exist")
    cluster = request.app[NODE].cluster
    names = [TopicName.parse(full) for full in await service.list_topics(tenant, namespace)]
    for partitioned in await service.partitions.names(tenant, namespace):
        record = await service.partitions.metadata(partitioned)
        count = record.partitions if record is not None else 0
        names += [partition_name(partitioned, index) for index in range(count)]
    async for name in cooperative(dict.fromkeys(names)):
        try:
            topic = await cluster.service_for(name).get_topic(name, create=False)
        except NotFoundError:
            continue  # deleted meanwhile, or a partition never used
        targets = (
            list(topic.subscriptions.values())
            if subscription is None
            else [topic.subscriptions[subscription]]
            if subscription in topic.subscriptions
            else []
        )
        for target in targets:
            await target.skip_all()
    return web.Response(status=204)


@api.operation(
    "POST",
    NAMESPACE + "/clearBacklog",
    "clearNamespaceBacklog",
    tag="namespaces",
    summary="clear every backlog of a namespace",
    success=Success(204, "every subscription of every topic of the namespace is caught up."),
    errors={
        400: "bad tenant or namespace name.",
        404: "the namespace does not exist.",
        503: "storage fault or timeout; subscriptions done before it stay done.",
    },
    description="""
        `POST /admin/v2/namespaces/{t}/{ns}/clearBacklog` → 204, as `pulsar-admin namespaces
        clear-backlog`: skip-all on every subscription of every topic of the namespace
        (partitions included), at each topic's owner.
    """,
)
async def clear_namespace_backlog(request: web.Request) -> web.Response:
    return await _clear_namespace(request, None)


@api.operation(
    "POST",
    NAMESPACE + "/clearBacklog/{subscription}",
    "clearNamespaceBacklogForSubscription",
    tag="namespaces",
    summary="clear one subscription's backlogs in a namespace",
    success=Success(204, "that subscription is caught up on every topic of the namespace."),
    errors={
        400: "bad tenant, namespace or subscription name.",
        404: "the namespace does not exist.",
        503: "storage fault or timeout; topics done before it stay done.",
    },
    description="""
        `POST /admin/v2/namespaces/{t}/{ns}/clearBacklog/{sub}` → 204: as `clearBacklog`, for
        the subscription `sub` only (topics without it are left alone).
    """,
)
async def clear_namespace_subscription_backlog(request: web.Request) -> web.Response:
    return await _clear_namespace(request, _subscription_name(request))
