"""A consumer session of the WebSocket API (``/ws/v2/consumer/persistent/...``), a
:class:`WebSocketConsumer`: the dispatcher fills its receiver queue (``receiverQueueSize``
messages, the permits), a sender task pushes the messages one JSON text frame each, at
most ``receiverQueueSize`` of them unacknowledged (push mode) or as many as the client's
``permit`` commands allow (``pullMode=true``). The client's commands (acks, negative
acks, permits, ``isEndOfTopic``, ``unsubscribe``) are read by :class:`_ConsumerCommands`;
acks are made durable in order by :class:`_AckWriter`. A reader's session
(:mod:`broker.http.websocket.reader`) is served by the same :func:`serve_consumer`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Coroutine
from typing import Any

import orjson
from aiohttp import WSCloseCode, WSMsgType, web

from broker.dispatch.consumer import NOT_RECEIVED, Delivery
from broker.dispatch.errors import InvalidRequestError, PreconditionFailedError
from broker.dispatch.names import check_name_part
from broker.dispatch.service import BrokerService, ConsumerOptions
from broker.dispatch.subscription import SUBSCRIPTION_TYPES
from broker.http.app_state import client_address, topic_service
from broker.http.b64 import encode_base64
from broker.http.contract import ChoiceQuery, FlagQuery, IntQuery
from broker.http.websocket.common import (
    FAILED_TO_DESERIALIZE_FROM_JSON,
    MAX_INT32,
    SOCKETS,
    STORAGE_ERRORS,
    TOPIC_PATH,
    UNKNOWN_ERROR,
    check_upgrade,
    close_for,
    new_socket,
    query_str,
    read_supported,
    receiver_queue_size,
    refuse_unsupported,
    send_json,
    topic_of,
)
from broker.http.websocket.formats import (
    decode_message_id,
    encode_message_id,
    iso_time,
    partition_index,
)
from broker.ledger.entry import EntryFormatError, Message
from broker.ledger.position import Position
from broker.session.consumer import ConsumerSession
from broker.session.message_ids import WHOLE_ENTRY
from broker.tasks import TaskOwner

log = logging.getLogger(__name__)

#: Pulsar's client refuses a shorter ack timeout (other than 0, no timeout)
MIN_ACK_TIMEOUT_MS = 1000

routes = web.RouteTableDef()

# the consumer's query parameters (as the HTTP routes' declarations read them)
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
                    except STORAGE_ERRORS as error:
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
            "payload": encode_base64(message.payload),
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
                if not await send_json(ws, out):
                    return
            await wake.wait()


# ---------------------------------------------------------------------- consumer sessions


async def serve_consumer(
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
        ws = new_socket(request)
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
            return await send_json(self.ws, {"endOfTopic": False})
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
        await close_for(self.ws, FAILED_TO_DESERIALIZE_FROM_JSON, reason)
        return False

    async def _unsubscribe(self) -> bool:
        """Delete the subscription (none of its other consumers may be connected) and
        end the session."""
        consumer = self.consumer
        consumer.unbind()
        try:
            await consumer.unsubscribe(self.service, False, self.acks.flush())
        except PreconditionFailedError as error:
            await close_for(self.ws, UNKNOWN_ERROR, str(error))
            return False
        except STORAGE_ERRORS as error:
            await close_for(self.ws, UNKNOWN_ERROR, f"unsubscribe failed: {error}")
            return False
        await self.ws.close(code=WSCloseCode.OK, message=b"unsubscribed")
        return False


@routes.get("/ws/v2/consumer" + TOPIC_PATH + "/{subscription}")
async def consumer_session(request: web.Request) -> web.StreamResponse:
    check_upgrade(request)
    name = topic_of(request)
    subscription = check_name_part("subscription", request.match_info["subscription"])
    refuse_unsupported(request, "maxRedeliverCount", "deadLetterTopic")
    read_supported(SUBSCRIPTION_MODE, request, ("Durable",))
    ack_timeout_ms = ACK_TIMEOUT.read(request)
    if 0 < ack_timeout_ms < MIN_ACK_TIMEOUT_MS:
        raise InvalidRequestError(
            f"ackTimeoutMillis must be 0 (none) or at least {MIN_ACK_TIMEOUT_MS}"
        )
    sub_type = SUBSCRIPTION_TYPE.read(request)
    options = ConsumerOptions(
        name=query_str(request, "consumerName"),
        subscription_type=sub_type,
        receiver_queue_size=receiver_queue_size(request),
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
    return await serve_consumer(request, consumer, pull_mode, reader=False)
