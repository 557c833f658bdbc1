"""A producer session of the WebSocket API (``/ws/v2/producer/persistent/...``): every
message is answered with ``{"result": "ok", "messageId", "context"}`` once it is stored,
or ``{"result": "send-error:N", "errorMsg", "context"}`` (N is Pulsar's WebSocketError
code: 3 bad JSON, 7 bad payload encoding, 8 anything else); with
``batchingEnabled=true`` messages are grouped into batched entries as Pulsar's batching
producer groups them.
"""

from __future__ import annotations

import asyncio
import binascii
import itertools
import logging
import time
from typing import Any

import orjson
from aiohttp import WSCloseCode, WSMsgType, web

from broker.config import BrokerConfig
from broker.dispatch.deduplication import NOT_DUP, UNKNOWN
from broker.dispatch.delayed import delay_refusal
from broker.dispatch.errors import InvalidRequestError, TooLargeError
from broker.dispatch.names import TopicName
from broker.http.app_state import CLOCK, METRICS, SETTINGS, client_address, topic_service
from broker.http.b64 import decode_base64_strict
from broker.http.contract import ChoiceQuery, FlagQuery, IntQuery
from broker.http.websocket.common import (
    FAILED_TO_DESERIALIZE_FROM_JSON,
    MAX_INT32,
    PAYLOAD_ENCODING_ERROR,
    SOCKETS,
    STORAGE_ERRORS,
    TOPIC_PATH,
    UNKNOWN_ERROR,
    check_upgrade,
    new_socket,
    query_str,
    read_supported,
    refuse_unsupported,
    send_json,
    topic_of,
)
from broker.http.websocket.formats import encode_message_id, parse_event_time, partition_index
from broker.ledger.entry import BatchItem, encode_batch, encode_message
from broker.ledger.position import Position
from broker.session.message_ids import MAX_INT64
from broker.session.payload import check_key, check_payload
from broker.session.producer import DUPLICATE_POSITION, ProducerSession, Sent
from broker.tasks import TaskOwner

log = logging.getLogger(__name__)

#: defaults of Pulsar's WebSocket producer (its documented query parameters)
DEFAULT_SEND_TIMEOUT_MS = 30_000
DEFAULT_MAX_PENDING_MESSAGES = 1000
DEFAULT_BATCH_MAX_MESSAGES = 1000
DEFAULT_BATCH_DELAY_MS = 10
_producer_names = itertools.count()

routes = web.RouteTableDef()

# the producer's query parameters (as the HTTP routes' declarations read them)
COMPRESSION_TYPE = ChoiceQuery(
    "compressionType", "NONE only.", ("NONE", "LZ4", "ZLIB", "ZSTD", "SNAPPY"), "NONE"
)
# they choose a partition of a partitioned topic; this topic is a single one
ROUTING_MODE = ChoiceQuery(
    "messageRoutingMode",
    "Accepted; no effect.",
    ("SinglePartition", "RoundRobinPartition", "CustomPartition"),
    "SinglePartition",
)
HASHING_SCHEME = ChoiceQuery(
    "hashingScheme", "Accepted; no effect.", ("JavaStringHash", "Murmur3_32Hash"), "JavaStringHash"
)
INITIAL_SEQUENCE_ID = IntQuery(
    "initialSequenceId", "Sequence ids start after it.", 0, 0, MAX_INT64 - 1
)
SEND_TIMEOUT = IntQuery(
    "sendTimeoutMillis", "Send timeout; 0: none.", DEFAULT_SEND_TIMEOUT_MS, 0, MAX_INT32
)
BATCHING = FlagQuery("batchingEnabled", "Group messages into batched entries.")
BATCH_MAX_MESSAGES = IntQuery(
    "batchingMaxMessages", "Messages in a batch.", DEFAULT_BATCH_MAX_MESSAGES, 1, MAX_INT32
)
BATCH_DELAY = IntQuery(
    "batchingMaxPublishDelay", "Wait for a batch to fill.", DEFAULT_BATCH_DELAY_MS, 0, MAX_INT32
)
MAX_PENDING = IntQuery(
    "maxPendingMessages", "Messages queued.", DEFAULT_MAX_PENDING_MESSAGES, 0, MAX_INT32
)


class _Send:
    """A validated message waiting for its write."""

    __slots__ = (
        "context",
        "deliver_at",
        "event_time",
        "key",
        "payload",
        "properties",
        "received",
    )

    def __init__(
        self,
        payload: bytes,
        key: str | None,
        properties: dict[str, str] | None,
        event_time: int,
        context: str | None,
        received: float,
        deliver_at: int | None = None,
    ) -> None:
        self.payload = payload
        self.key = key
        self.properties = properties
        self.event_time = event_time
        self.context = context
        self.received = received
        #: epoch ms the message is due (delayed delivery); None: at once
        self.deliver_at = deliver_at


class _ProducerError(Exception):
    def __init__(self, error: int, reason: str) -> None:
        super().__init__(reason)
        self.error = error


def _context(body: dict[str, Any]) -> str | None:
    """The request context, echoed in the answer (a number is read as its text, as
    Pulsar's JSON reader does)."""
    context = body.get("context")
    if context is None or isinstance(context, str):
        return context
    if isinstance(context, int | float) and not isinstance(context, bool):
        return str(context)
    raise _ProducerError(FAILED_TO_DESERIALIZE_FROM_JSON, "context must be a string")


#: ids the topic's stats give WebSocket producers (Pulsar's WebSocket service's own
#: client numbers its producers the same way)
_websocket_producer_ids = itertools.count()


class WebSocketProducer(ProducerSession):
    """A producer session. Messages are validated as they arrive (a bad one is
    answered at once and stores nothing); valid ones queue and are written group by
    group, one write in flight, each answered once its group is stored. With batching,
    a group's messages become batched entries of at most ``batch_max_messages``; a
    group waits up to ``batch_delay_s`` after its first message to fill up. The
    session gives messages their sequence ids.

    The session is one of its topic's producers, counted against maxProducersPerTopic
    as a binary producer is. When the topic unloads, the next write counts it again
    on the topic loaded anew, as Pulsar's WebSocket service's client reconnects."""

    __slots__ = (
        "_full",
        "_queue",
        "_queued_bytes",
        "_room",
        "_wake",
        "_writing",
        "batch_delay_s",
        "batch_max_messages",
        "batching",
        "clock",
        "config",
        "max_pending",
        "metrics",
        "partition",
        "send_timeout_s",
        "ws",
    )

    def __init__(
        self,
        request: web.Request,
        ws: web.WebSocketResponse,
        name: TopicName,
        producer_name: str,
        first_sequence_id: int,
        send_timeout_ms: int,
        max_pending: int,
        batching: bool,
        batch_max_messages: int,
        batch_delay_ms: int,
    ) -> None:
        super().__init__(topic_service(request, name), name, producer_name, first_sequence_id)
        self.stats.address = client_address(request)
        self.stats.producer_id = next(_websocket_producer_ids)
        self.ws = ws
        self.config: BrokerConfig = request.app[SETTINGS].broker
        self.clock = request.app[CLOCK]
        self.metrics = request.app[METRICS]
        self.partition = partition_index(name)
        self.send_timeout_s = send_timeout_ms / 1000
        self.max_pending = max_pending
        self.batching = batching
        self.batch_max_messages = batch_max_messages
        self.batch_delay_s = batch_delay_ms / 1000
        self._queue: list[_Send] = []
        self._writing = 0
        self._wake = asyncio.Event()
        self._full = asyncio.Event()
        #: payload bytes queued or being written
        self._queued_bytes = 0
        #: set while ``_queued_bytes`` is below maxMessageSize
        self._room = asyncio.Event()
        self._room.set()

    async def receive(self, text: str) -> None:
        """One message from the client: queued for a write, or refused at once. While
        the messages queued and being written hold maxMessageSize bytes of payload, the
        next one waits (and no more is read from the socket): the session holds at most
        about that much, whatever ``maxPendingMessages`` allows (0: no limit), for a
        client faster than storage or one that does not read its answers (which holds
        the writes up). O(1) but the message's decoding."""
        if not self._room.is_set():
            await self._room.wait()
        context: str | None = None
        try:
            try:
                body = orjson.loads(text)
            except orjson.JSONDecodeError as error:
                raise _ProducerError(FAILED_TO_DESERIALIZE_FROM_JSON, str(error)) from None
            if not isinstance(body, dict):
                raise _ProducerError(FAILED_TO_DESERIALIZE_FROM_JSON, "expected a JSON object")
            context = _context(body)
            send = self._validated(body, context)
        except _ProducerError as error:
            await self._answer_error(error.error, str(error), context)
            return
        if self.max_pending and len(self._queue) + self._writing >= self.max_pending:
            await self._answer_error(
                UNKNOWN_ERROR,
                f"producer send queue is full ({self.max_pending} messages, maxPendingMessages)",
                context,
            )
            return
        self._queue.append(send)
        self._queued_bytes += len(send.payload)
        if self._queued_bytes >= self.config.maxMessageSize:
            self._room.clear()
        self._wake.set()
        if len(self._queue) >= self.batch_max_messages:
            self._full.set()

    def _validated(self, body: dict[str, Any], context: str | None) -> _Send:
        """The message's fields checked and decoded (Pulsar's error for each kind)."""
        payload_text = body.get("payload")
        if not isinstance(payload_text, str):
            raise _ProducerError(PAYLOAD_ENCODING_ERROR, "payload must be a base64 string")
        try:
            payload = decode_base64_strict(payload_text)
        except (binascii.Error, ValueError) as error:
            raise _ProducerError(
                PAYLOAD_ENCODING_ERROR, f"Invalid Base64 message-payload error={error}"
            ) from None
        key = body.get("key")
        if key is not None and not isinstance(key, str):
            raise _ProducerError(FAILED_TO_DESERIALIZE_FROM_JSON, "key must be a string")
        properties = body.get("properties")
        if properties is not None and not (
            isinstance(properties, dict) and all(isinstance(v, str) for v in properties.values())
        ):
            raise _ProducerError(
                FAILED_TO_DESERIALIZE_FROM_JSON, "properties must be an object of strings"
            )
        event_time = 0
        if body.get("eventTime") is not None:
            try:
                event_time = parse_event_time(body["eventTime"])
            except ValueError as error:
                raise _ProducerError(PAYLOAD_ENCODING_ERROR, str(error)) from None
        delays: dict[str, int] = {}
        for field in ("deliverAt", "deliverAfterMs"):
            value = body.get(field)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise _ProducerError(FAILED_TO_DESERIALIZE_FROM_JSON, f"{field} must be a number")
            if value > 0:  # as Pulsar's handler: 0 or less is not set
                delays[field] = value
        now_ms = self.clock.wall_ms()
        # as Pulsar's handler sets them on its message builder: deliverAfterMs last wins
        deliver_at = delays.get("deliverAt")
        if "deliverAfterMs" in delays:
            deliver_at = now_ms + delays["deliverAfterMs"]
        if deliver_at is not None:
            refused = delay_refusal(deliver_at, now_ms, self.service.config.dispatch.delayed)
            if refused is not None:
                raise _ProducerError(UNKNOWN_ERROR, refused)
        try:
            check_payload(payload, self.config.maxMessageSize, "message")
            check_key(key, "message")
        except (TooLargeError, InvalidRequestError) as error:
            raise _ProducerError(UNKNOWN_ERROR, str(error)) from None
        return _Send(payload, key, properties, event_time, context, time.monotonic(), deliver_at)

    async def _answer_error(self, error: int, reason: str, context: str | None) -> None:
        answer: dict[str, Any] = {"result": f"send-error:{error}", "errorMsg": reason}
        if context is not None:
            answer["context"] = context
        await send_json(self.ws, answer)

    async def write_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._queue:
                self._wake.clear()
                await self._wake.wait()
                continue
            if self.batching and len(self._queue) < self.batch_max_messages:
                wait_s = self._queue[0].received + self.batch_delay_s - time.monotonic()
                if wait_s > 0:
                    self._full.clear()
                    try:
                        async with asyncio.timeout(wait_s):
                            await self._full.wait()
                    except TimeoutError:
                        pass
            group, self._queue = self._queue, []
            self._writing = len(group)
            try:
                await self._write(group, loop)
            finally:
                self._writing = 0
                self._queued_bytes -= sum(len(send.payload) for send in group)
                if self._queued_bytes < self.config.maxMessageSize:
                    self._room.set()

    def _encode(self, group: list[_Send]) -> tuple[list[Sent], list[int]]:
        """The group's entries as sends (with their sequence ids) and the messages in
        each (0: unbatched)."""
        now_ms = self.clock.wall_ms()
        entries: list[Sent] = []
        sizes: list[int] = []
        if not self.batching:
            for send in group:
                entries.append(self._encode_one(send, now_ms))
                sizes.append(0)
            return entries, sizes
        max_size = self.config.maxMessageSize
        batch: list[BatchItem] = []
        nbytes = 0

        def close_batch() -> None:
            first = self.sequence_ids(len(batch))
            entry = encode_batch(batch, now_ms, self.name, first)
            entries.append((first, first + len(batch) - 1, len(batch), entry, False))
            sizes.append(len(batch))

        for send in group:
            if send.deliver_at is not None:
                # as Pulsar's client: a delayed message is never batched
                if batch:
                    close_batch()
                    batch, nbytes = [], 0
                entries.append(self._encode_one(send, now_ms))
                sizes.append(0)
                continue
            if batch and (
                len(batch) == self.batch_max_messages or nbytes + len(send.payload) > max_size
            ):
                close_batch()
                batch, nbytes = [], 0
            batch.append((send.payload, send.key, send.properties, send.event_time))
            nbytes += len(send.payload)
        if batch:
            close_batch()
        return entries, sizes

    def _encode_one(self, send: _Send, now_ms: int) -> Sent:
        """One message as an unbatched entry, with its sequence id."""
        sequence_id = self.sequence_ids(1)
        entry = encode_message(
            send.payload,
            now_ms,
            send.event_time,
            send.key,
            send.properties,
            self.name,
            sequence_id,
            send.deliver_at,
        )
        return sequence_id, sequence_id, 1, entry, False

    async def _write(self, group: list[_Send], loop: asyncio.AbstractEventLoop) -> None:
        started = time.perf_counter()
        timeout_s = self.send_timeout_s
        if timeout_s and time.monotonic() - group[0].received >= timeout_s:
            await self._fail(group, f"send timed out after {timeout_s * 1000:.0f} ms")
            return
        entries, sizes = self._encode(group)
        try:
            topic = await self.current_topic()  # loaded anew: counted again
        except STORAGE_ERRORS as error:
            await self._fail(group, f"{type(error).__name__}: {error}")
            return
        del topic  # counted in it: the session's write goes there
        publish = loop.create_task(self.publish_sequenced(entries))
        try:
            if timeout_s:
                remaining = group[0].received + timeout_s - time.monotonic()
                done, _ = await asyncio.wait({publish}, timeout=max(remaining, 0))
                if not done:
                    # as Pulsar's client: the sends fail; the write may still complete
                    await self._fail(group, f"send timed out after {timeout_s * 1000:.0f} ms")
                    try:
                        await publish  # one write in flight: the next waits for it
                    except STORAGE_ERRORS as error:
                        log.info("timed-out websocket send failed too: %s", error)
                    return
            first, verdicts = await publish
        except STORAGE_ERRORS as error:
            await self._fail(group, f"{type(error).__name__}: {error}")
            return
        finally:
            if not publish.done():
                publish.cancel()
                await asyncio.gather(publish, return_exceptions=True)
        self.metrics.produce_latency.observe(time.perf_counter() - started)
        index = 0
        stored = 0
        for offset, size in enumerate(sizes):
            verdict = NOT_DUP if verdicts is None else verdicts[offset]
            if verdict == NOT_DUP:
                position = Position(first.ledger_id, first.entry_id + stored)
                stored += 1
            else:
                position = DUPLICATE_POSITION  # as Pulsar's client reports a duplicate
            for batch_index in range(size) if size else (-1,):
                context = group[index].context
                index += 1
                if verdict == UNKNOWN:
                    await self._answer_error(
                        UNKNOWN_ERROR,
                        "cannot determine whether the message is a duplicate at this time",
                        context,
                    )
                    continue
                answer: dict[str, Any] = {
                    "result": "ok",
                    "messageId": encode_message_id(position, batch_index, size, self.partition),
                }
                if context is not None:
                    answer["context"] = context
                if not await send_json(self.ws, answer):
                    return

    async def _fail(self, group: list[_Send], reason: str) -> None:
        for send in group:
            await self._answer_error(UNKNOWN_ERROR, reason, send.context)


@routes.get("/ws/v2/producer" + TOPIC_PATH)
async def producer_session(request: web.Request) -> web.StreamResponse:
    check_upgrade(request)
    name = topic_of(request)
    refuse_unsupported(request, "encryptionKeys")
    read_supported(COMPRESSION_TYPE, request, ("NONE",))
    ROUTING_MODE.read(request)
    HASHING_SCHEME.read(request)
    broker = request.app[SETTINGS].broker
    producer_name = query_str(request, "producerName") or (
        f"{broker.clusterName}-ws-{next(_producer_names)}"
    )
    initial_sequence_id = INITIAL_SEQUENCE_ID.read(request)
    first_sequence_id = initial_sequence_id + 1 if "initialSequenceId" in request.query else 0
    send_timeout_ms = SEND_TIMEOUT.read(request)
    batching = BATCHING.read(request)
    max_pending = DEFAULT_MAX_PENDING_MESSAGES
    batch_max_messages, batch_delay_ms = 1, 0
    if batching:
        # as Pulsar, these are read only for a batching producer
        batch_max_messages = BATCH_MAX_MESSAGES.read(request)
        batch_delay_ms = BATCH_DELAY.read(request)
        max_pending = MAX_PENDING.read(request)
    service = topic_service(request, name)
    ws = new_socket(request)
    producer = WebSocketProducer(
        request,
        ws,
        name,
        producer_name,
        first_sequence_id,
        send_timeout_ms,
        max_pending,
        batching,
        batch_max_messages,
        batch_delay_ms,
    )
    # the producer's topic must exist or be creatable and have room for one more
    # producer, else the handshake is refused (ProducerBusy: 409, as Pulsar's
    # WebSocket service answers); it produces bytes, refused on a topic with a schema
    # when schema validation is enforced (IncompatibleSchema: 409); Pulsar's WebSocket
    # producer has no access mode: it is Shared, refused (ProducerBusy) while an
    # exclusive producer holds the topic
    topic = await service.get_topic(name, create=True)
    await producer.use_schema(topic, None)
    await producer.attach_with_access(topic)
    if "initialSequenceId" not in request.query:
        # as Pulsar's client under its WebSocket service: a producer's sequence ids go on
        # from the last its name published (deduplication on; else from 0)
        producer.next_sequence_id = producer.last_sequence_id() + 1
    try:
        await ws.prepare(request)
        sockets = request.app[SOCKETS].sockets
        sockets.add(ws)
        owner = TaskOwner("websocket producer")
        try:
            owner.spawn(producer.write_loop(), f"websocket producer {producer_name}")
            async for message in ws:
                if message.type == WSMsgType.TEXT:
                    await producer.receive(message.data)
                elif message.type == WSMsgType.ERROR:
                    break
        except Exception:
            log.exception("websocket producer %s failed", producer_name)
            await ws.close(code=WSCloseCode.INTERNAL_ERROR, message=b"internal error")
        finally:
            sockets.discard(ws)
            # messages not yet stored were never acknowledged: the client resends them
            await owner.close()
    finally:
        producer.detach()
    return ws
