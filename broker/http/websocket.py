"""Pulsar's WebSocket API (``/ws/v2/producer|consumer|reader/persistent/...``) on
aiohttp's WebSocket support: a thin front end over the broker service, as the binary
protocol is.

Pulsar serves this API with a Java client inside the broker; brokerlab has no client in
between, so each session talks to the service directly and behaves as that client would
towards the WebSocket peer:

- a producer answers every message with ``{"result": "ok", "messageId", "context"}``
  once it is stored, or ``{"result": "send-error:N", "errorMsg", "context"}`` (N is
  Pulsar's WebSocketError code: 3 bad JSON, 7 bad payload encoding, 8 anything else);
  with ``batchingEnabled=true`` messages are grouped into batched entries as Pulsar's
  batching producer groups them;
- a consumer is a :class:`WebSocketConsumer`: the dispatcher fills its receiver queue
  (``receiverQueueSize`` messages, the permits), a sender task pushes the messages one
  JSON text frame each, at most ``receiverQueueSize`` of them unacknowledged (push mode)
  or as many as the client's ``permit`` commands allow (``pullMode=true``);
- a reader is a consumer of its own subscription (``reader-...``, deleted when the
  session ends) that acknowledges what it sends, as Pulsar's reader does; the client's
  acks only free room in its window.

Message ids travel as base64 of the serialized ``MessageIdData``, as Pulsar's clients
write them. Times are ISO 8601 strings (UTC), as Pulsar formats them. A command the
server cannot read closes the session with close code 4000 + Pulsar's WebSocketError
code (Pulsar's own codes 1-8 are not valid WebSocket close codes): 4003 for bad JSON.
"""

from __future__ import annotations

import asyncio
import binascii
import contextlib
import datetime
import itertools
import logging
import re
import secrets
import time
from collections import deque
from collections.abc import Coroutine
from typing import Any

import orjson
from aiohttp import WSCloseCode, WSMsgType, web

from broker.config import BrokerConfig
from broker.dispatch.consumer import NOT_RECEIVED, Delivery
from broker.dispatch.deduplication import NOT_DUP, UNKNOWN
from broker.dispatch.delayed import delay_refusal
from broker.dispatch.errors import (
    BrokerError,
    InvalidRequestError,
    PreconditionFailedError,
    TooLargeError,
)
from broker.dispatch.names import TopicName, check_name_part
from broker.dispatch.service import BrokerService, ConsumerOptions
from broker.dispatch.subscription import SUBSCRIPTION_TYPES
from broker.http.app_state import CLOCK, METRICS, SETTINGS, client_address, topic_service
from broker.http.b64 import decode_base64_strict, encode_base64
from broker.http.contract import ChoiceQuery, FlagQuery, IntQuery
from broker.ledger.entry import (
    BatchItem,
    EntryFormatError,
    Message,
    encode_batch,
    encode_message,
)
from broker.ledger.managed_ledger import ManagedLedgerError
from broker.ledger.position import Position
from broker.pulsar_api import MessageIdData
from broker.session.consumer import ConsumerSession
from broker.session.message_ids import MAX_INT64, WHOLE_ENTRY, start_of
from broker.session.payload import check_key, check_payload
from broker.session.producer import DUPLICATE_POSITION, ProducerSession, Sent
from broker.tasks import TaskOwner
from storage_stub.bookie.api import BookieError

log = logging.getLogger(__name__)

#: Pulsar's WebSocketError codes
FAILED_TO_DESERIALIZE_FROM_JSON = 3
PAYLOAD_ENCODING_ERROR = 7
UNKNOWN_ERROR = 8
_DESCRIPTIONS = {
    FAILED_TO_DESERIALIZE_FROM_JSON: "Failed to de-serialize from JSON",
    PAYLOAD_ENCODING_ERROR: "Invalid payload encoding",
    UNKNOWN_ERROR: "Unknown error",
}
#: close code of a session closed for a WebSocketError: this plus Pulsar's code
CLOSE_CODE_BASE = 4000

#: Pulsar's WebSocket service caps receiverQueueSize at this (consumers and readers)
MAX_RECEIVER_QUEUE_SIZE = 1000
#: Pulsar's client refuses a shorter ack timeout (other than 0, no timeout)
MIN_ACK_TIMEOUT_MS = 1000
MAX_INT32 = 2**31 - 1
#: defaults of Pulsar's WebSocket producer (its documented query parameters)
DEFAULT_SEND_TIMEOUT_MS = 30_000
DEFAULT_MAX_PENDING_MESSAGES = 1000
DEFAULT_BATCH_MAX_MESSAGES = 1000
DEFAULT_BATCH_DELAY_MS = 10

_STORAGE_ERRORS = (BrokerError, BookieError, ManagedLedgerError, OSError)
_PARTITION = re.compile(r"-partition-([0-9]{1,9})\Z")
_producer_names = itertools.count()


class OpenSockets:
    """The app's open WebSocket sessions, closed when it shuts down."""

    __slots__ = ("sockets",)

    def __init__(self) -> None:
        self.sockets: set[web.WebSocketResponse] = set()


SOCKETS = web.AppKey("websockets", OpenSockets)

routes = web.RouteTableDef()
_TOPIC = "/persistent/{tenant}/{namespace}/{topic}"


def setup(app: web.Application) -> None:
    """Serve the WebSocket API on ``app``; open sessions close when it shuts down."""
    app[SOCKETS] = OpenSockets()
    app.on_shutdown.append(_close_sessions)
    app.add_routes(routes)


async def _close_sessions(app: web.Application) -> None:
    """Before the server stops waiting for handlers: every session ends now (its
    consumer closed, its unacked messages back to the subscription)."""
    sockets = list(app[SOCKETS].sockets)
    await asyncio.gather(
        *(ws.close(code=WSCloseCode.GOING_AWAY, message=b"broker shutting down") for ws in sockets),
        return_exceptions=True,
    )


# ---------------------------------------------------------------------- formats


_b64 = encode_base64


def iso_time(epoch_ms: int) -> str:
    """Epoch milliseconds as Pulsar's WebSocket API writes times: ISO 8601 with an
    offset (here always UTC, ``Z``)."""
    seconds, millis = divmod(epoch_ms, 1000)
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{millis:03d}Z"


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def parse_event_time(value: object) -> int:
    """A producer's ``eventTime``: ISO 8601 with an offset as Pulsar reads it, or (a
    brokerlab extension) epoch milliseconds. ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError("eventTime must be an ISO 8601 time or epoch milliseconds")
    if isinstance(value, int):
        millis = value
    elif isinstance(value, str):
        moment = datetime.datetime.fromisoformat(value)
        if moment.tzinfo is None:
            raise ValueError(f"eventTime {value!r} has no offset (e.g. Z or +02:00)")
        millis = (moment - _EPOCH) // datetime.timedelta(milliseconds=1)
    else:
        raise ValueError("eventTime must be an ISO 8601 time or epoch milliseconds")
    if not 0 <= millis <= MAX_INT64:
        raise ValueError(f"eventTime {value!r} is before 1970 or too far ahead")
    return millis


def partition_index(name: TopicName) -> int:
    """The partition a topic name is (``...-partition-N``), else -1."""
    match = _PARTITION.search(name.local_name)
    return int(match[1]) if match else -1


_U64 = (1 << 64) - 1


def encode_message_id(position: Position, batch_index: int, batch_size: int, partition: int) -> str:
    """A message id as Pulsar's clients serialize it (``MessageId.toByteArray``), in
    base64: a batch's message carries its index and the batch's size."""
    # -1:-1 (a duplicate's) as the uint64s Pulsar's Java writes for -1
    data = MessageIdData(ledgerId=position.ledger_id & _U64, entryId=position.entry_id & _U64)
    if partition >= 0:
        data.partition = partition
    if batch_index >= 0:
        data.batch_index = batch_index
        data.batch_size = batch_size
    else:
        data.batch_size = 0
    return _b64(data.SerializeToString())


def decode_message_id(value: object) -> Any:
    """A base64 ``MessageIdData``; ValueError if it is not one."""
    if not isinstance(value, str):
        raise ValueError("messageId must be a base64 string")
    try:
        raw = decode_base64_strict(value)
    except (binascii.Error, ValueError):
        raise ValueError("messageId is not valid base64") from None
    try:
        data = MessageIdData.FromString(raw)
    except Exception:  # protobuf's DecodeError
        raise ValueError("messageId is not a serialized MessageIdData") from None
    if not (data.HasField("ledgerId") and data.HasField("entryId")):
        raise ValueError("messageId lacks a ledger id or an entry id")
    return data


# ---------------------------------------------------------------------- query parameters

# Pulsar's query parameters, read by the same declarations as the HTTP routes' (one
# spelling of booleans, choices and integers for both front ends)
RECEIVER_QUEUE_SIZE = IntQuery(
    "receiverQueueSize", "Receiver queue (capped).", MAX_RECEIVER_QUEUE_SIZE, 0, MAX_INT32
)
SUBSCRIPTION_MODE = ChoiceQuery(
    "subscriptionMode", "Durable only.", ("Durable", "NonDurable"), "Durable"
)
SUBSCRIPTION_TYPE = ChoiceQuery(
    "subscriptionType", "Subscription type.", SUBSCRIPTION_TYPES, "Exclusive"
)
INITIAL_POSITION = ChoiceQuery(
    "subscriptionInitialPosition",
    "Where a new subscription starts.",
    ("Latest", "Earliest"),
    "Latest",
)
ACK_TIMEOUT = IntQuery("ackTimeoutMillis", "Ack timeout; 0: none.", 0, 0, MAX_INT32)
PRIORITY_LEVEL = IntQuery("priorityLevel", "Priority level.", 0, 0, MAX_INT32)
NACK_DELAY = IntQuery(
    "negativeAckRedeliveryDelay", "Redelivery delay of a nack.", 60000, 0, MAX_INT32
)
PULL_MODE = FlagQuery("pullMode", "Messages only as permits allow.")
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


def _supported(query: ChoiceQuery, request: web.Request, supported: tuple[str, ...]) -> str:
    """The choice, refused by name when brokerlab does not support it (rather than
    ignored)."""
    value = query.read(request)
    if value not in supported:
        raise InvalidRequestError(f"{query.name}={value} is not supported by brokerlab")
    return value


def _query_str(request: web.Request, name: str) -> str | None:
    raw = request.query.get(name)
    if raw is None:
        return None
    if not 1 <= len(raw) <= 256:
        raise InvalidRequestError(f"query parameter {name} must be 1..256 characters long")
    return raw


def _refuse(request: web.Request, *names: str) -> None:
    for name in names:
        if name in request.query:
            raise InvalidRequestError(f"query parameter {name} is not supported by brokerlab")


def _check_upgrade(request: web.Request) -> None:
    """A plain HTTP request to a WebSocket route changes nothing: 400."""
    if not web.WebSocketResponse().can_prepare(request).ok:
        raise InvalidRequestError("this route speaks Pulsar's WebSocket API: send an upgrade")


def _topic(request: web.Request) -> TopicName:
    info = request.match_info
    return TopicName.of(info["tenant"], info["namespace"], info["topic"])


def _new_socket(request: web.Request) -> web.WebSocketResponse:
    broker = request.app[SETTINGS].broker
    # a message of maxMessageSize in base64, with room for its JSON fields
    return web.WebSocketResponse(
        max_msg_size=broker.maxMessageSize * 4 // 3 + (1 << 20),
        heartbeat=broker.keepAliveIntervalSeconds,
    )


async def _send(ws: web.WebSocketResponse, data: dict[str, Any]) -> bool:
    """Write one JSON text frame; False if the session is closing."""
    try:
        await ws.send_str(orjson.dumps(data).decode())
    except ConnectionError:
        return False
    return True


async def _close_for(ws: web.WebSocketResponse, error: int, reason: str) -> None:
    """Close the session for a WebSocketError, as Pulsar does, with the reason."""
    message = f"{_DESCRIPTIONS[error]}: {reason}"
    # a close frame's reason is at most 123 bytes (cut on a character boundary)
    reason_bytes = message.encode()[:120].decode(errors="ignore").encode()
    await ws.close(code=CLOSE_CODE_BASE + error, message=reason_bytes)


# ---------------------------------------------------------------------- acks


class _AckWriter:
    """Makes acknowledgements durable, in the order they were applied, in one task of
    the session. A write that fails is logged: its messages stay unacknowledged and are
    delivered again, as after any lost ack."""

    __slots__ = ("_idle", "_wake", "_work")

    def __init__(self, owner: TaskOwner) -> None:
        self._work: deque[Coroutine[Any, Any, None]] = deque()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        owner.spawn(self._run(), "websocket acks")

    def add(self, work: Coroutine[Any, Any, None] | None) -> None:
        if work is None:
            return
        self._work.append(work)
        self._idle.clear()
        self._wake.set()

    async def flush(self) -> None:
        """Return once every ack added so far is durable (or failed)."""
        await self._idle.wait()

    async def _run(self) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._work:
                    try:
                        await self._work.popleft()
                    except _STORAGE_ERRORS as error:
                        log.warning("websocket ack not made durable: %s", error)
                self._idle.set()
        finally:
            while self._work:
                self._work.popleft().close()


# ---------------------------------------------------------------------- consumer


class _Outgoing:
    """The entry being sent: its messages not yet written to the socket."""

    __slots__ = ("batch_size", "delivery", "messages", "publish_time")

    def __init__(self, delivery: Delivery, messages: deque[Message], batch_size: int) -> None:
        self.delivery = delivery
        self.messages = messages
        self.batch_size = batch_size
        self.publish_time = iso_time(messages[0].publish_time)


class WebSocketConsumer(ConsumerSession):
    """A consumer session whose client is a WebSocket session. The dispatcher fills the
    session's receiver queue (at most ``receiver_queue_size`` messages: a batched entry
    takes as many permits as it holds messages; the dispatcher reads
    ``available_permits`` entries, the free permits divided by the messages per entry
    seen). A sender task takes the queue apart into messages and writes them while the
    client's window is open: push mode, fewer than ``receiver_queue_size`` sent and
    neither acked nor negatively acked; pull mode, permits granted by ``permit``
    commands; a reader, fewer sent than acks received, any command counting as an ack
    (as in Pulsar). The sender waits on the session's ``_available`` event, which every
    change that may open the window sets. State: O(entries sent and unacked)."""

    __slots__ = (
        "_acks",
        "_current",
        "_owner",
        "_partition",
        "_permits",
        "_reader",
        "_sent",
        "_skip",
        "_unacked_sent",
        "_window",
        "pull_mode",
        "ws",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._current: _Outgoing | None = None
        #: (entry, batch indexes) sent and neither acked nor negatively acked (push mode)
        self._sent: dict[Position, set[int]] = {}
        self._unacked_sent = 0
        self._window = max(self.receiver_queue_size, 1)
        self._permits = 0
        self.pull_mode = False
        self._reader = False
        #: a reader starting after a message of a batch: (entry, last index to skip)
        self._skip: tuple[Position, int] | None = None
        self.ws: web.WebSocketResponse | None = None
        self._owner: TaskOwner | None = None
        self._acks: _AckWriter | None = None
        self._partition = partition_index(self.subscription.topic.name)
        # a connected client is never idle: its session tells when it is gone
        self.polls = 1

    def bind(
        self,
        ws: web.WebSocketResponse,
        owner: TaskOwner,
        acks: _AckWriter,
        pull_mode: bool,
        reader: bool,
        skip: tuple[Position, int] | None,
    ) -> None:
        """Start sending to ``ws``; the sender is a task of ``owner``."""
        self.ws = ws
        self._owner = owner
        self._acks = acks
        self.pull_mode = pull_mode
        self._reader = reader
        self._skip = skip
        owner.spawn(self._send_loop(), f"websocket consumer {self.name}")

    def unbind(self) -> None:
        """The session ends: nothing more is written to it."""
        self.ws = None

    # ------------------------------------------------------------------ dispatch side

    def client_permits(self) -> int:
        """The receiver queue's free permits (messages, with the entry being sent) in
        entries. O(1)."""
        current = self._current
        queue = self.queue
        held = queue.messages + (len(current.messages) if current is not None else 0)
        permits = max(self.receiver_queue_size, 1) - held
        if permits <= 0:
            return 0
        return max(int(permits / queue.average), 1)

    def unwritten_bytes(self) -> int:
        """The receiver queue's bytes and the entry being sent (the socket's own buffer
        is bounded by aiohttp: a send waits while its transport is paused). O(1)."""
        current = self._current
        held = self.queue.bytes
        return held if current is None else held + len(current.delivery.entry.data)

    def take_unacked(self) -> tuple[list[Position], set[Position]]:
        taken = super().take_unacked()
        self._current = None
        self._sent.clear()
        if not self._reader:
            self._unacked_sent = 0
        self._available.set()
        return taken

    def detached(self) -> None:
        """The broker closed this consumer (unload, topic deleted): the session ends;
        the client reconnects, as Pulsar's documentation asks of it."""
        ws, owner = self.ws, self._owner
        self.ws = None
        if ws is None or owner is None:
            return
        reason = b"the broker closed this consumer (topic unloaded or deleted); reconnect"
        with contextlib.suppress(RuntimeError):  # the session is ending already
            owner.spawn(ws.close(code=WSCloseCode.SERVICE_RESTART, message=reason), "close")

    # ------------------------------------------------------------------ client side

    def grant(self, permits: int) -> None:
        """Pull mode: the client's ``permit`` command."""
        self._permits += permits
        self._available.set()

    def reader_ack(self) -> None:
        """A reader's client acked (whatever id it names): room for one more message."""
        if self._unacked_sent > 0:
            self._unacked_sent -= 1
            self._available.set()

    def client_done(self, position: Position, batch_index: int) -> None:
        """A sent message was acked or negatively acked: room in the window. -1: every
        message of the entry."""
        sent = self._sent.get(position)
        if not sent:
            return
        if batch_index < 0 or (len(sent) == 1 and -1 in sent):
            freed = len(sent)
            sent.clear()
        elif batch_index in sent:
            freed = 1
            sent.discard(batch_index)
        else:
            return
        if not sent:
            del self._sent[position]
        self._unacked_sent -= freed
        self._available.set()

    def _window_open(self) -> bool:
        if self.pull_mode:
            return self._permits > 0
        if self._unacked_sent < self._window:
            return True
        if self._reader:
            return False
        # messages taken back meanwhile (ack timeout, a nack's redelivery, given to
        # another consumer) no longer count: O(entries sent and unacked), when full only
        pending = self.pending
        for position in [p for p in self._sent if pending.get(p, NOT_RECEIVED) == NOT_RECEIVED]:
            self._unacked_sent -= len(self._sent.pop(position))
        return self._unacked_sent < self._window

    def _next_message(self, now_ns: int) -> dict[str, Any] | None:
        """The next message to write, if the window and the queue allow. O(1) per
        message, plus decoding each entry once."""
        if not self._window_open():
            return None
        pending = self.pending
        while True:
            current = self._current
            if current is None:
                if not self.queue:
                    return None
                current = self._current = self._start(self.queue.popleft(), now_ns)
                if current is None:
                    continue
            position = current.delivery.entry.position
            if pending.get(position, NOT_RECEIVED) == NOT_RECEIVED:
                self._current = None  # taken back meanwhile (redelivered)
                continue
            message = current.messages.popleft()
            if not current.messages:
                self._current = None
                self._entry_done(position)
            if self.pull_mode:
                self._permits -= 1
            else:
                self._unacked_sent += 1
                if not self._reader:
                    self._sent.setdefault(position, set()).add(message.batch_index)
            return self._render(current, message)

    def _start(self, delivery: Delivery, now_ns: int) -> _Outgoing | None:
        """Begin sending an entry: the client has it as of now (its ack timeout runs)."""
        entry = delivery.entry
        position = entry.position
        self.pending[position] = now_ns
        stale = self._sent.pop(position, None)
        if stale:
            self._unacked_sent -= len(stale)
        skip = self._skip[1] if self._skip is not None and self._skip[0] == position else -1
        try:
            decoded, batch_size = self.unacked_messages(entry, skip)
        except EntryFormatError as error:
            self._entry_done(position)
            if self._acks is not None:
                self._acks.add(self.unreadable(entry, error))
            return None
        if not decoded:
            # nothing left to send of it (skipped by a reader's start, compacted out)
            self._entry_done(position)
            if not self._reader and self._acks is not None:
                self._acks.add(self.acknowledge([position], [], False))
            return None
        return _Outgoing(delivery, deque(decoded), batch_size)

    def _entry_done(self, position: Position) -> None:
        """Every message of the entry went out: its permits are free again; a reader
        acknowledges it, as Pulsar's reader does (one by one, in order: the same as its
        cumulative ack, without a pass over everything pending)."""
        dispatcher = self.subscription.dispatcher
        if dispatcher is not None:
            dispatcher.wake()
        if self._reader and self._acks is not None:
            self._acks.add(self.acknowledge([position], [], False))

    def _render(self, current: _Outgoing, message: Message) -> dict[str, Any]:
        """A message as Pulsar's WebSocket API pushes it (its field order too)."""
        position = current.delivery.entry.position
        out: dict[str, Any] = {
            "messageId": encode_message_id(
                position,
                message.batch_index,
                current.batch_size,
                self._partition,
            ),
            "payload": _b64(message.payload),
            "properties": message.properties,
            "publishTime": current.publish_time,
            "redeliveryCount": current.delivery.redelivery_count,
        }
        if message.event_time:
            out["eventTime"] = iso_time(message.event_time)
        if message.key is not None:
            out["key"] = message.key
        return out

    async def _send_loop(self) -> None:
        wake = self._available
        monotonic_ns = self.subscription.clock.monotonic_ns
        while True:
            wake.clear()
            while (ws := self.ws) is not None and (out := self._next_message(monotonic_ns())):
                if not await _send(ws, out):
                    return
            await wake.wait()


# ---------------------------------------------------------------------- consumer sessions


async def _serve_consumer(
    request: web.Request,
    consumer: WebSocketConsumer,
    pull_mode: bool,
    reader: bool,
    skip: tuple[Position, int] | None = None,
) -> web.WebSocketResponse:
    """Run a consumer's (or reader's) session until either side closes it; then the
    consumer is closed (its unacked messages go back to the subscription) and a
    reader's subscription deleted."""
    service = topic_service(request, consumer.subscription.topic.name)
    try:
        ws = _new_socket(request)
        await ws.prepare(request)
    except BaseException:
        service.close_consumer(consumer)
        if reader:
            await consumer.drop_subscription()
        raise
    sockets = request.app[SOCKETS].sockets
    sockets.add(ws)
    owner = TaskOwner("websocket consumer")
    acks = _AckWriter(owner)
    session = _ConsumerCommands(ws, consumer, acks, service, reader)
    try:
        consumer.bind(ws, owner, acks, pull_mode, reader, skip)
        if consumer.closed:
            consumer.detached()  # the topic went while the session was being set up
        async for message in ws:
            if message.type == WSMsgType.TEXT:
                if not await session.handle(message.data):
                    break
            elif message.type == WSMsgType.ERROR:
                break
    except Exception:
        log.exception("websocket consumer %s failed", consumer.name)
        await ws.close(code=WSCloseCode.INTERNAL_ERROR, message=b"internal error")
    finally:
        sockets.discard(ws)
        consumer.unbind()
        service.close_consumer(consumer)
        try:
            await acks.flush()
        finally:
            await owner.close()
        if reader:
            await consumer.drop_subscription()
    return ws


class _ConsumerCommands:
    """What a consumer's (or reader's) client sends: acks, negative acks, permits,
    ``isEndOfTopic``, ``unsubscribe``; ``handle`` returns False once the session is
    closed."""

    __slots__ = ("acks", "consumer", "reader", "service", "ws")

    def __init__(
        self,
        ws: web.WebSocketResponse,
        consumer: WebSocketConsumer,
        acks: _AckWriter,
        service: BrokerService,
        reader: bool,
    ) -> None:
        self.ws = ws
        self.consumer = consumer
        self.acks = acks
        self.service = service
        self.reader = reader

    async def handle(self, text: str) -> bool:
        try:
            command = orjson.loads(text)
        except orjson.JSONDecodeError as error:
            return await self._refuse(f"malformed JSON: {error}")
        if not isinstance(command, dict):
            return await self._refuse("a command must be a JSON object")
        kind = command.get("type")
        if kind is not None and not isinstance(kind, str):
            return await self._refuse("type must be a string")
        if kind == "isEndOfTopic":
            # brokerlab's topics are never terminated
            return await _send(self.ws, {"endOfTopic": False})
        if self.reader:
            # Pulsar's reader acknowledges what it reads itself: any other command
            # is taken as the client's ack, which frees room in its window
            self.consumer.reader_ack()
            return True
        if kind == "permit":
            permits = command.get("permitMessages")
            if isinstance(permits, bool) or not isinstance(permits, int) or permits < 0:
                return await self._refuse("permitMessages must be a non-negative integer")
            if self.consumer.pull_mode:
                self.consumer.grant(permits)
            return True
        if kind == "unsubscribe":
            return await self._unsubscribe()
        try:
            message_id = decode_message_id(command.get("messageId"))
        except ValueError as error:
            return await self._refuse(str(error))
        position = Position(message_id.ledgerId, message_id.entryId)
        index = message_id.batch_index if message_id.HasField("batch_index") else WHOLE_ENTRY
        whole, indexed = ([position], []) if index < 0 else ([], [(position, index)])
        if kind == "negativeAcknowledge":
            self.consumer.negative_acknowledge(whole, indexed)
        else:
            self.acks.add(self.consumer.acknowledge(whole, indexed, False))
        return True

    async def _refuse(self, reason: str) -> bool:
        """A command Pulsar cannot read ends the session (unacked messages return)."""
        log.info("closing websocket consumer %s: %s", self.consumer.name, reason)
        await _close_for(self.ws, FAILED_TO_DESERIALIZE_FROM_JSON, reason)
        return False

    async def _unsubscribe(self) -> bool:
        """Delete the subscription (none of its other consumers may be connected) and
        end the session."""
        consumer = self.consumer
        consumer.unbind()
        try:
            await consumer.unsubscribe(self.service, False, self.acks.flush())
        except PreconditionFailedError as error:
            await _close_for(self.ws, UNKNOWN_ERROR, str(error))
            return False
        except _STORAGE_ERRORS as error:
            await _close_for(self.ws, UNKNOWN_ERROR, f"unsubscribe failed: {error}")
            return False
        await self.ws.close(code=WSCloseCode.OK, message=b"unsubscribed")
        return False


def _receiver_queue_size(request: web.Request) -> int:
    return min(RECEIVER_QUEUE_SIZE.read(request), MAX_RECEIVER_QUEUE_SIZE)


@routes.get("/ws/v2/consumer" + _TOPIC + "/{subscription}")
async def consumer_session(request: web.Request) -> web.StreamResponse:
    _check_upgrade(request)
    name = _topic(request)
    subscription = check_name_part("subscription", request.match_info["subscription"])
    _refuse(request, "maxRedeliverCount", "deadLetterTopic")
    _supported(SUBSCRIPTION_MODE, request, ("Durable",))
    ack_timeout_ms = ACK_TIMEOUT.read(request)
    if 0 < ack_timeout_ms < MIN_ACK_TIMEOUT_MS:
        raise InvalidRequestError(
            f"ackTimeoutMillis must be 0 (none) or at least {MIN_ACK_TIMEOUT_MS}"
        )
    sub_type = SUBSCRIPTION_TYPE.read(request)
    options = ConsumerOptions(
        name=_query_str(request, "consumerName"),
        subscription_type=sub_type,
        receiver_queue_size=_receiver_queue_size(request),
        initial_position=INITIAL_POSITION.read(request),
        priority_level=PRIORITY_LEVEL.read(request),
        ack_timeout_ms=ack_timeout_ms,
        nack_delay_ms=NACK_DELAY.read(request),
        address=client_address(request),
    )
    pull_mode = PULL_MODE.read(request)
    consumer = await topic_service(request, name).create_consumer(
        name, subscription, options, WebSocketConsumer
    )
    assert isinstance(consumer, WebSocketConsumer)
    return await _serve_consumer(request, consumer, pull_mode, reader=False)


def _reader_start(request: web.Request) -> tuple[str, Position | None, tuple[Position, int] | None]:
    """The reader's start: (initial position, first position or None, a batch's
    messages to skip). Pulsar's reader starts after the message id it is given."""
    raw = request.query.get("messageId", "").strip()
    if raw in ("", "latest"):
        return "Latest", None, None
    if raw == "earliest":
        return "Earliest", None, None
    try:
        given = decode_message_id(raw)
    except ValueError as error:
        raise InvalidRequestError(
            f"query parameter messageId must be earliest, latest or a base64 message id: {error}"
        ) from None
    start = start_of(given.ledgerId, given.entryId)
    if start == "earliest":
        return "Earliest", None, None
    if start == "latest":
        return "Latest", None, None
    ledger_id, entry_id = start
    if given.HasField("batch_index") and given.batch_index >= 0:
        position = Position(ledger_id, max(entry_id, 0))
        return "Latest", position, (position, given.batch_index)
    return "Latest", Position(ledger_id, max(entry_id + 1, 0)), None


@routes.get("/ws/v2/reader" + _TOPIC)
async def reader_session(request: web.Request) -> web.StreamResponse:
    _check_upgrade(request)
    name = _topic(request)
    initial, start, skip = _reader_start(request)
    options = ConsumerOptions(
        name=_query_str(request, "readerName"),
        subscription_type="Exclusive",
        receiver_queue_size=_receiver_queue_size(request),
        initial_position=initial,
        address=client_address(request),
    )
    # as Pulsar names a reader's subscription
    subscription = f"reader-{secrets.token_hex(5)}"
    consumer = await topic_service(request, name).create_consumer(
        name, subscription, options, WebSocketConsumer, start
    )
    assert isinstance(consumer, WebSocketConsumer)
    return await _serve_consumer(request, consumer, pull_mode=False, reader=True, skip=skip)


# ---------------------------------------------------------------------- producer


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

    async def receive(self, text: str) -> None:
        """One message from the client: queued for a write, or refused at once."""
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
        await _send(self.ws, answer)

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
        except _STORAGE_ERRORS as error:
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
                    except _STORAGE_ERRORS as error:
                        log.info("timed-out websocket send failed too: %s", error)
                    return
            first, verdicts = await publish
        except _STORAGE_ERRORS as error:
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
                if not await _send(self.ws, answer):
                    return

    async def _fail(self, group: list[_Send], reason: str) -> None:
        for send in group:
            await self._answer_error(UNKNOWN_ERROR, reason, send.context)


@routes.get("/ws/v2/producer" + _TOPIC)
async def producer_session(request: web.Request) -> web.StreamResponse:
    _check_upgrade(request)
    name = _topic(request)
    _refuse(request, "encryptionKeys")
    _supported(COMPRESSION_TYPE, request, ("NONE",))
    ROUTING_MODE.read(request)
    HASHING_SCHEME.read(request)
    broker = request.app[SETTINGS].broker
    producer_name = _query_str(request, "producerName") or (
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
    ws = _new_socket(request)
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
