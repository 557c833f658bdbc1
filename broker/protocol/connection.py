"""One client connection speaking Pulsar's binary protocol: a thin front end that turns
commands into calls on the broker service and results into commands. Its producers are
:class:`~broker.protocol.binary_producer.BinaryProducer`, its consumers
:class:`~broker.protocol.binary_consumer.BinaryConsumer`; a broker error's ServerError
code comes from :func:`broker.protocol.errors.server_error`.

Write backpressure, as Pulsar's channel writability: a connection whose output not yet
taken by its client (queued in this turn plus the transport's buffer) passes
``pulsarChannelWriteBufferHighWaterMark`` is unwritable, and its consumers' sessions are
told (:meth:`~broker.session.consumer.ConsumerSession.set_writable`): the dispatcher
hands them nothing until the transport has drained below
``pulsarChannelWriteBufferLowWaterMark``. What one dispatch round may add before the gate
closes is bounded by ``maxUnwrittenBytesPerConsumer`` (the session counts this
connection's unsent output as its own).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import time
from collections.abc import Callable, Coroutine, Iterable
from typing import TYPE_CHECKING, Any

from broker.auth.errors import AuthenticationError
from broker.auth.service import TOKEN_METHOD
from broker.dispatch.errors import (
    BrokerError,
    CorruptEntryError,
    InvalidRequestError,
    InvalidSchemaError,
    NotFoundError,
    NotImplementedYetError,
)
from broker.dispatch.names import TopicName
from broker.dispatch.ownership import ServiceNotReadyError
from broker.dispatch.schema_registry import NONE, SchemaData, schema_id, version_bytes, version_of
from broker.dispatch.service import ConsumerOptions
from broker.ledger.entry import metadata_of, sent_payload_size
from broker.ledger.managed_ledger import ManagedLedgerError
from broker.ledger.position import Position
from broker.limits import peer_ip
from broker.protocol.binary_consumer import BinaryConsumer
from broker.protocol.binary_producer import BinaryProducer
from broker.protocol.errors import server_error
from broker.protocol.frames import (
    CUT_ENTRIES_MAX_BYTES,
    CUT_ENTRY_MAX_BYTES,
    CUT_ENTRY_MIN_BYTES,
    SIZES,
    U32,
    CutEntry,
    FrameError,
    command_frame,
    payload_frame_head,
    split_frame,
    split_frame_parts,
)
from broker.protocol.throttle import BUSY, PENDING_SENDS, UNWRITABLE
from broker.pulsar_api import (
    ACCESS_MODES,
    ACK_CUMULATIVE,
    COMMAND_FIELDS,
    LOOKUP_CONNECT,
    PARTITIONS_FAILED,
    PARTITIONS_SUCCESS,
    PROTOCOL_VERSION,
    SUB_TYPES,
    BaseCommand,
    ServerError,
    Type,
)
from broker.session.acks import mask_of
from broker.session.message_ids import Start, start_of
from broker.session.payload import check_entry
from broker.session.producer import Sent, access_of
from broker.tasks import COOPERATIVE_BATCH, FifoLock, TaskOwner, cooperative
from storage_stub.bookie.api import BookieError

if TYPE_CHECKING:
    from broker.protocol.server import ProtocolServer

log = logging.getLogger(__name__)

SERVER_VERSION = "brokerlab"
#: the request id of an ERROR that answers no request (Pulsar's -1, as a uint64)
NO_REQUEST_ID = (1 << 64) - 1
_producer_names = itertools.count()
#: frames of one connection handled in a turn of the event loop; the rest waits for the
#: next turn, the connection not read meanwhile (512 ACKs: about 6 ms)
FRAMES_PER_TURN = COOPERATIVE_BATCH

#: what a client may ask that brokerlab does not serve, answered as Pulsar's broker
#: answers it with the feature off (transactions: ``transactionCoordinatorEnabled=false``,
#: topic-list watchers: ``enableBrokerSideSubscriptionPatternEvaluation=false``, never
#: advertised in CONNECTED): the request fails, the connection and whatever else shares
#: it go on.
_NO_TRANSACTIONS = (ServerError.NotAllowedError, "Transaction manager is not not enabled")
REFUSED: dict[int, tuple[int, str]] = {
    Type.NEW_TXN: _NO_TRANSACTIONS,
    Type.ADD_PARTITION_TO_TXN: _NO_TRANSACTIONS,
    Type.ADD_SUBSCRIPTION_TO_TXN: _NO_TRANSACTIONS,
    Type.END_TXN: _NO_TRANSACTIONS,
    Type.END_TXN_ON_PARTITION: _NO_TRANSACTIONS,
    Type.END_TXN_ON_SUBSCRIPTION: _NO_TRANSACTIONS,
    Type.TC_CLIENT_CONNECT_REQUEST: _NO_TRANSACTIONS,
    Type.WATCH_TOPIC_LIST: (
        ServerError.NotAllowedError,
        "Unable to create topic list watcher: Evaluating subscription patterns is disabled.",
    ),
}


def topic_name(text: str) -> TopicName:
    """A client's topic: ``persistent://t/ns/x``, or a short name in public/default as
    Pulsar's clients expand it. InvalidRequestError otherwise."""
    if "://" not in text:
        parts = text.split("/")
        if len(parts) == 1:
            return TopicName.of("public", "default", text)
        if len(parts) == 3:
            return TopicName.of(*parts)
    return TopicName.parse(text)


#: the data of an AUTH_CHALLENGE that asks for new credentials (Pulsar's AuthData
#: REFRESH_AUTH_DATA)
REFRESH_AUTH_DATA = b"PulsarAuthRefresh"


class Connection(asyncio.BufferedProtocol):
    """One client connection. Frames are parsed as they arrive; a frame that breaks the
    protocol closes this connection (logged with its reason) and nothing else."""

    def __init__(self, server: ProtocolServer) -> None:
        self.server = server
        self.service = server.service
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.closed = False
        #: the client address counted by the server's ConnectionLimiter (None: refused)
        self.counted_ip: str | None = None
        self.connected = False
        #: the client's authenticated role (None: authentication is off)
        self.role: str | None = None
        #: CONNECT's client_version, shown in the topic stats of its producers and consumers
        self.client_version = ""
        #: when the client's credentials expire (epoch seconds, as a token's exp)
        self._auth_expires = math.inf
        #: the client said in CONNECT it can answer an AUTH_CHALLENGE with new credentials
        self._auth_refreshable = False
        #: an AUTH_CHALLENGE is waiting for its AUTH_RESPONSE
        self._auth_challenged = False
        self._auth_check: asyncio.TimerHandle | None = None
        self._protocol_version = 0
        self.producers: dict[int, BinaryProducer] = {}
        #: producers the broker closed lately, by id: until when (loop time) SENDs the
        #: client had in flight for them are dropped rather than closing the connection
        self._closed_producers: dict[int, float] = {}
        self._max_message_size = server.config.maxMessageSize
        self.consumers: dict[int, BinaryConsumer] = {}
        #: PRODUCERs and SUBSCRIBEs under way, not in ``producers`` / ``consumers`` yet
        self._producers_opening = 0
        self._consumers_opening = 0
        self.batch_index_acks = server.config.acknowledgmentAtBatchIndexLevelEnabled
        #: the frame cut at the end of what arrived, as its parts came (views of the
        #: chunks), waiting for the rest
        self._parts: list[memoryview] = []  # of bytes (the read buffer's: copied)
        #: the entry of a frame cut at the end of a read, being read into
        self._cut: CutEntry | None = None
        #: a frame whose entry was read into whole, to be handled (:meth:`_take_whole`)
        self._whole: CutEntry | None = None
        #: bytes in ``_parts``
        self._have = 0
        #: how many bytes ``_parts`` must hold before its frame is parsed again
        self._needed = 0
        #: what arrived and waits unparsed (from ``_held_at`` on): the client does not
        #: read its answers, or this turn of the loop had its frames' share
        self._held: bytes | None = None
        self._held_at = 0
        #: frames handled in this turn of the event loop, and whether the turn's end is
        #: scheduled (:meth:`_end_turn`)
        self._turn_frames = 0
        self._turn_end_scheduled = False
        self._max_frame = server.max_frame
        self._tasks = TaskOwner("pulsar connection")
        #: acks being made durable (not requests: not bounded by the pending requests)
        self._acks = TaskOwner("pulsar connection acks")
        self._request_ids = itertools.count(1 << 40)
        self._heard = True
        self._ping_sent = False
        self._keepalive: asyncio.TimerHandle | None = None
        self._out: list[bytes] = []
        #: a MESSAGE command reused by BinaryConsumer.send: only its consumer and message
        #: ids are ever set, and write_message serializes it before it is set again
        self.message_command = BaseCommand(type=Type.MESSAGE)
        self._message = self.message_command.message
        self._message_id = self._message.message_id
        #: bytes in ``_out``
        self._out_bytes = 0
        self._flush_scheduled = False
        #: the output's water marks; the high one kept below maxUnwrittenBytesPerConsumer,
        #: so that a consumer with no room left always waits for the gate to open
        config = server.config
        high = config.pulsarChannelWriteBufferHighWaterMark
        if config.maxUnwrittenBytesPerConsumer:
            high = max(min(high, config.maxUnwrittenBytesPerConsumer - 1), 1)
        self.high_water = high
        self._low_water = min(config.pulsarChannelWriteBufferLowWaterMark, high)
        #: the output is below the high water mark (or has drained below the low one
        #: since): its consumers may be dispatched to
        self.writable = True
        #: the transport said its buffer passed the high water mark (pause_writing)
        self._transport_paused = False
        #: pulsarChannelPauseReceivingRequestsIfUnwritable: while the transport's buffer
        #: is over the mark, no more requests are read, nor parsed out of what came
        self._pause_unwritable = config.pulsarChannelPauseReceivingRequestsIfUnwritable
        #: with it, answers as large as the client makes them (topic lists, schemas) are
        #: made one at a time, each once the output is below the mark: requests parsed
        #: before the output passed it wait unanswered, not as answers nobody reads
        self._large_answers = FifoLock()
        #: resolved when the transport's buffer drains below the low water mark
        self._drained: asyncio.Future[None] | None = None
        #: why reads are off (broker.protocol.throttle's reasons, or-ed; 0: reading)
        self._throttled = 0
        #: SENDs accepted and not answered yet, and their bytes
        self._pending_sends = 0
        self._pending_send_bytes = 0
        self._max_pending_sends = config.maxPendingPublishRequestsPerConnection
        self._loop = asyncio.get_running_loop()
        self._handlers: dict[int, Callable[[Any], None]] = {
            Type.CONNECT: self._connect,
            Type.PING: self._ping,
            Type.PONG: self._pong,
            Type.AUTH_RESPONSE: self._auth_response,
            Type.LOOKUP: self._lookup,
            Type.PARTITIONED_METADATA: self._partitioned_metadata,
            Type.PRODUCER: self._producer,
            Type.SUBSCRIBE: self._subscribe,
            Type.FLOW: self._flow,
            Type.ACK: self._ack,
            Type.REDELIVER_UNACKNOWLEDGED_MESSAGES: self._redeliver,
            Type.SEEK: self._seek,
            Type.GET_LAST_MESSAGE_ID: self._last_message_id,
            Type.UNSUBSCRIBE: self._unsubscribe,
            Type.CLOSE_PRODUCER: self._close_producer,
            Type.CLOSE_CONSUMER: self._close_consumer,
            Type.CONSUMER_STATS: self._consumer_stats,
            Type.GET_TOPICS_OF_NAMESPACE: self._topics_of_namespace,
            Type.GET_SCHEMA: self._get_schema,
            Type.GET_OR_CREATE_SCHEMA: self._get_or_create_schema,
            Type.WATCH_TOPIC_LIST_CLOSE: self._close_watcher,
            Type.SUCCESS: self._ignore,
            Type.ERROR: self._ignore,
        }

    # ------------------------------------------------------------------ transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is duck-typed
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        ip = peer_ip(peer)
        refused = self.server.limiter.admit(ip)
        if refused is not None:
            # as Pulsar's ConnectionController: the connection is closed, nothing said
            log.warning("refusing pulsar connection from %s: %s", self.peer, refused)
            self.closed = True
            transport.close()
            return
        self.counted_ip = ip
        self.server.connections.add(self)
        self.server.publish_buffer.join(self)
        transport.set_write_buffer_limits(high=self.high_water, low=self._low_water)  # type: ignore[attr-defined]
        self._schedule_keepalive()

    def get_buffer(self, sizehint: int) -> memoryview:
        """Where the next read lands: the rest of the entry of a frame cut at the end of
        the last read, when it is large (``_cut``: the read stops at the frame's end),
        else the server's read buffer, which every connection reads into
        (:meth:`buffer_updated` parses a read, and copies out what it keeps, before the
        loop reads anything else). O(1)."""
        cut = self._cut
        if cut is not None:
            return cut.view[cut.have :]
        return self.server.read_view

    def buffer_updated(self, nbytes: int) -> None:
        """Parse every complete frame received. O(bytes received), each byte of an
        entry copied at most once: the frames of a read are parsed out of the read
        buffer where they lie, each entry one copy out of it; a frame cut at the end of
        a read has its command and what there is of its entry copied out, and its entry
        is then read into where it stays (:class:`CutEntry`), unless it is small: then
        the cut frame keeps its parts as they came (``_parts``: views of bytes copied
        out of the read buffer) until the bytes it needs are there, and its entry is one
        join of them (:func:`split_frame_parts`). Reads that came as bytes (a copy of
        uvloop's read buffer) then copied out of again, or joined, took two copies of
        most entries of a batch of 1 KiB messages; a bytearray the parts were copied
        into, then copied out of, had taken three, and the reallocs of its growth.

        Parsing stops, and reading with it, with the rest held unparsed (``_held``):
        once a turn of the event loop has handled FRAMES_PER_TURN frames of the
        connection, until the next turn (a flood of cheap commands, read a buffer after
        another, held the loop 2.7 s for 300,000 ACKs); and, with
        pulsarChannelPauseReceivingRequestsIfUnwritable, while the transport's buffer is
        over the high water mark, until the client has read the answers."""
        self._heard = True
        cut = self._cut
        if cut is not None:  # the read went into the cut entry's bytes
            cut.have += nbytes
            if cut.have == cut.size:
                # whole: handled once the transport has let go of its view of the bytes
                # (right after this call; taken now, they would be copied), at the next
                # read of this connection or the loop's next callbacks, whichever first
                self._cut = None
                self.server.cut_entry_bytes -= cut.size
                self._whole = cut
                self._loop.call_soon(self._take_whole)
            return
        if self._whole is not None:
            self._take_whole()
            if self.closed:
                return
        held = self._held
        if held is not None:  # reads were off: not expected, but kept in order
            self._held = None
            self._parse(held[self._held_at :] + self.server.read_view[:nbytes])
            return
        self._parse(self.server.read_buffer, 0, nbytes)

    def data_received(self, data: bytes) -> None:
        """Bytes that arrived, taken as a transport's reads are: into :meth:`get_buffer`'s
        buffer, then :meth:`buffer_updated` (a transport reads into the buffer itself;
        this is for a caller that has the bytes). O(len(data))."""
        source = memoryview(data)
        offset, total = 0, len(data)
        while offset < total and not self.closed:
            buffer = self.get_buffer(total - offset)
            count = min(len(buffer), total - offset)
            buffer[:count] = source[offset : offset + count]
            if buffer is not self.server.read_view:
                buffer.release()  # as a transport lets go of it once the read is in
            offset += count
            self.buffer_updated(count)
            self._take_whole()

    def _holding(self) -> bool:
        """Whether frames wait unparsed now (see :meth:`data_received`). O(1)."""
        return self._turn_frames >= FRAMES_PER_TURN or (
            self._transport_paused and self._pause_unwritable
        )

    def _count_frame(self) -> None:
        """One more frame handled in this turn of the loop. O(1)."""
        self._turn_frames += 1
        if not self._turn_end_scheduled:
            self._turn_end_scheduled = True
            self._loop.call_soon(self._end_turn)

    def _end_turn(self) -> None:
        """The turn's frames are done: a new share for the next turn, reads on again if
        the share had turned them off, and what was held for it parsed."""
        self._turn_end_scheduled = False
        self._turn_frames = 0
        if self.closed:
            return
        if self._throttled & BUSY:
            self.throttle(BUSY, False)
        self._parse_held()

    def _parse_held(self) -> None:
        """Parse what was held back, unless it must wait still. O(frames parsed)."""
        held = self._held
        if held is not None and not self.closed and not self._holding():
            self._held = None
            self._parse(held, self._held_at)

    def _hold(self, data: bytes, offset: int) -> None:
        """Keep ``data`` from ``offset`` on unparsed, and stop reading meanwhile."""
        self._held = data
        self._held_at = offset
        if self._turn_frames >= FRAMES_PER_TURN:
            self.throttle(BUSY, True)

    def _parse(self, data: bytes | bytearray, offset: int = 0, length: int = -1) -> None:
        """:meth:`data_received`'s work on ``data[offset:length]`` (``length`` -1: to
        its end), after what waits in ``_parts`` (``offset`` 0 then). ``data`` is bytes,
        or the server's read buffer (a bytearray), which the next read overwrites: what
        is kept of it past this call (a cut frame's prefix, what is held) is copied."""
        if length < 0:
            length = len(data)
        parts = self._parts
        if parts:
            needed = self._needed
            have = self._have + length
            if have < needed:
                piece = memoryview(data)[:length]
                parts.append(piece if isinstance(data, bytes) else memoryview(bytes(piece)))
                self._have = have
                return  # the cut frame still arriving
            if needed <= 4:  # its size was cut: join what there is (a few bytes, rare)
                parts.append(memoryview(data)[:length])
                data = b"".join(parts)
                parts.clear()
                length = len(data)
            else:  # the cut frame's rest is here: that frame from its parts, then on
                offset = needed - self._have
                parts.append(memoryview(data)[:offset])
                try:
                    command, payload = split_frame_parts(parts, needed)
                    parts.clear()
                    self._handle(command, payload)
                except FrameError as error:
                    parts.clear()
                    self.abort(str(error))
                    return
                if self.closed:
                    return
                self._count_frame()
        view = memoryview(data)
        try:
            while length - offset >= 4:
                # _holding(), inline: once a frame
                if self._turn_frames >= FRAMES_PER_TURN or (
                    self._transport_paused and self._pause_unwritable
                ):
                    if isinstance(data, bytes):
                        self._hold(data, offset)
                    else:  # the read buffer's: copied out
                        self._hold(bytes(view[offset:length]), 0)
                    return
                total = U32.unpack_from(data, offset)[0]
                if total > self._max_frame:
                    raise FrameError(f"frame of {total} bytes is over the limit {self._max_frame}")
                if total < 4:
                    raise FrameError(f"frame size {total} is too small for a command")
                end = offset + 4 + total
                if end > length:
                    break
                command, payload = split_frame(data, view, offset + 4, end)
                offset = end
                self._handle(command, payload)
                if self.closed:
                    return
                # _count_frame(), inline: once a frame
                self._turn_frames += 1
                if not self._turn_end_scheduled:
                    self._turn_end_scheduled = True
                    self._loop.call_soon(self._end_turn)
            if offset < length:
                if length - offset >= 8 and self._cut_entry(view, offset, length):
                    self._needed = 0
                    return
                # a view of its own (``view`` is released below): it keeps ``data`` alive;
                # the read buffer's bytes are copied out
                if isinstance(data, bytes):
                    parts.append(memoryview(data)[offset:])
                else:
                    parts.append(memoryview(bytes(view[offset:length])))
                self._have = length - offset
                # what the cut frame needs in all: its size, once its 4 bytes are there
                head = length - offset >= 4
                self._needed = 4 + U32.unpack_from(data, offset)[0] if head else 4
            else:
                self._needed = 0
        except FrameError as error:
            self.abort(str(error))
        finally:
            view.release()

    def _take_whole(self) -> None:
        """Handle the frame whose entry was read into its bytes (``_whole``), if it was
        not handled yet: before anything that arrived after it. O(1) beyond handling."""
        whole = self._whole
        if whole is None or self.closed:
            return
        self._whole = None
        try:
            command, payload = whole.take()
            self._handle(command, payload)
        except FrameError as error:
            self.abort(str(error))
            return
        if not self.closed:
            self._count_frame()

    def _cut_entry(self, view: memoryview, offset: int, length: int) -> bool:
        """Whether the frame at ``offset``, cut at ``length`` with its command whole and
        an entry of CUT_ENTRY_MIN_BYTES to CUT_ENTRY_MAX_BYTES, is now ``_cut``: its rest
        read into its entry's bytes, unless the server's cut entries hold
        CUT_ENTRIES_MAX_BYTES already. O(what there is of it)."""
        total, size = SIZES.unpack_from(view, offset)
        start = offset + 8 + size  # where the entry starts
        rest = offset + 4 + total - start
        if start > length or not CUT_ENTRY_MIN_BYTES <= rest <= CUT_ENTRY_MAX_BYTES:
            return False
        server = self.server
        if server.cut_entry_bytes + rest > CUT_ENTRIES_MAX_BYTES:
            return False
        server.cut_entry_bytes += rest
        cut = CutEntry(bytes(view[offset + 8 : start]), rest)
        have = length - start
        cut.view[:have] = view[start:length]
        cut.have = have
        self._cut = cut
        return True

    def eof_received(self) -> None:
        """The client closed its side: the frame whose entry the last reads completed
        is handled now, as a frame whole in a read is, not at the loop's next callbacks:
        there, after the transport's close had scheduled connection_lost, its SEND was
        queued only for the producer's write to find the connection closed, and a client
        that sent a large message and closed lost it. Returns None: the transport
        closes."""
        self._take_whole()

    def connection_lost(self, exc: Exception | None) -> None:
        self._shutdown()

    def abort(self, reason: str) -> None:
        """Close this connection because the client broke the protocol."""
        if self.closed:
            return
        log.warning("closing pulsar connection from %s: %s", self.peer, reason)
        self._shutdown()

    def _shutdown(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._cut is not None:
            self.server.cut_entry_bytes -= self._cut.size
        for cut in (self._cut, self._whole):
            if cut is not None:
                cut.drop()
        self._cut = self._whole = None
        if self._keepalive is not None:
            self._keepalive.cancel()
        if self._auth_check is not None:
            self._auth_check.cancel()
        if self.transport is not None:
            if self._out:  # an ERROR or SEND_ERROR said before closing goes out first
                self.transport.writelines(self._out)
                self._out = []
            self.transport.close()
        self.server.connections.discard(self)
        publish_buffer = self.server.publish_buffer
        publish_buffer.leave(self)
        publish_buffer.remove(self._pending_send_bytes)  # nobody will answer them now
        self._pending_send_bytes = self._pending_sends = 0
        if self.counted_ip is not None:
            self.server.limiter.release(self.counted_ip)
            self.counted_ip = None
        producers = list(self.producers.values())
        self.producers.clear()
        consumers = list(self.consumers.values())
        self.consumers.clear()
        if len(producers) + len(consumers) <= COOPERATIVE_BATCH:
            self._detach_all(producers, consumers)
        else:
            # tens of thousands (a client that opened them one by one, each under the
            # pending-requests bound) are let go a batch per turn of the loop, so the
            # hang-up holds no other client for their whole count; meanwhile nothing
            # more is handed to the consumers (their messages go back as they go)
            for consumer in consumers:
                consumer.set_writable(False)
            self.server.spawn_detach(
                self._detach_in_turns(producers, consumers), f"detach from {self.peer}"
            )
        self.server.spawn(self._tasks.close(), f"close connection {self.peer}")
        self.server.spawn(self._acks.close(), f"close connection acks {self.peer}")

    def _detach_all(
        self, producers: Iterable[BinaryProducer], consumers: Iterable[BinaryConsumer]
    ) -> None:
        """Detach the closed connection's producers and release its consumers (their
        unacked messages go back to their subscriptions). O(producers + consumers)."""
        for producer in producers:
            producer.detach()
        for consumer in consumers:
            self._release(consumer)

    async def _detach_in_turns(
        self, producers: list[BinaryProducer], consumers: list[BinaryConsumer]
    ) -> None:
        """:meth:`_detach_all`, COOPERATIVE_BATCH of them a turn of the event loop."""
        async for producer in cooperative(producers):
            producer.detach()
        async for consumer in cooperative(consumers):
            self._release(consumer)

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> bool:
        """Run a request's work; a connection with brokerlabMaxPendingRequestsPerConnection
        requests pending already is closed instead (its requests cancelled; False): a
        client flooding requests is not served. O(1)."""
        limit = self.server.config.brokerlabMaxPendingRequestsPerConnection
        if self.closed or (limit and len(self._tasks) >= limit):
            coro.close()
            self.abort(
                f"more than {limit} requests pending (brokerlabMaxPendingRequestsPerConnection)"
            )
            return False
        self._tasks.spawn(coro, name=name)
        return True

    def _room_for(self, held: int, limit: int, what: str, key: str) -> bool:
        """Whether the connection may have one more of ``what`` (it holds ``held``, those
        being created included); if not, it is closed (brokerlabMaxProducersPerConnection,
        brokerlabMaxConsumersPerConnection). O(1)."""
        if limit and held >= limit:
            self.abort(f"more than {limit} {what} ({key})")
            return False
        return True

    def next_request_id(self) -> int:
        return next(self._request_ids)

    def write_command(self, command: Any) -> None:
        """Queue a frame; everything queued in one turn of the event loop goes out in
        one write (a group's receipts, a dispatch round's messages: one syscall, not
        one per frame). O(1)."""
        if self.closed:
            return
        frame = command_frame(command)
        self._out.append(frame)
        self._queued(len(frame))

    def write_frames(self, frames: list[bytes], size: int) -> None:
        """Queue frames framed already (``size`` bytes in all), as ``write_command``
        queues one. O(len(frames))."""
        if self.closed:
            return
        self._out += frames
        self._queued(size)

    def write_message(self, consumer_id: int, ledger_id: int, entry_id: int, entry: bytes) -> None:
        """Queue the usual MESSAGE frame (no redelivery count, no ack set): the
        connection's one MESSAGE command, its ids set and serialized at once, framed
        here (``write_payload``'s work in one call: this runs once per entry handed
        over), then the stored entry as it is. O(1)."""
        if self.closed:
            return
        message_id = self._message_id
        self._message.consumer_id = consumer_id
        message_id.ledgerId = ledger_id
        message_id.entryId = entry_id
        body = self.message_command.SerializeToString()
        size = len(body)
        out = self._out
        out.append(SIZES.pack(size + 4 + len(entry), size) + body)
        out.append(entry)
        self._queued(size + 8 + len(entry))

    def write_payload(self, command: Any, entry: bytes) -> None:
        """Queue a MESSAGE frame: its head, then the stored entry as it is (no copy)."""
        if self.closed:
            return
        out = self._out
        head = payload_frame_head(command, len(entry))
        out.append(head)
        out.append(entry)
        self._queued(len(head) + len(entry))

    def _queued(self, size: int) -> None:
        """``size`` more bytes wait in ``_out``. Once they pass the high water mark they
        go to the transport at once (Pulsar writes and flushes each message), and the
        connection turns unwritable only if the transport cannot pass them on (its buffer
        over the mark: :meth:`pause_writing`), as a Netty channel whose socket does not
        drain it; otherwise past the mark (the transport paused, or holding output from
        before) it is unwritable until the turn's flush (as a Netty channel counts what
        is written and not yet flushed). Closing the gate here and opening it at the
        turn's flush, whatever the transport did, cost two wakeups of the dispatcher per
        entry at least as large as the mark (a batch of 1 KiB messages), both with
        nothing to do. O(1)."""
        out_bytes = self._out_bytes = self._out_bytes + size
        high = self.high_water
        if out_bytes > high and not self._transport_paused:
            self._write_out()
            return
        if self.writable:
            transport = self.transport  # unsent_bytes(), inline: once per frame queued
            if transport is not None:
                out_bytes += transport.get_write_buffer_size()
            if out_bytes > high:
                self._set_writable(False)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def unsent_bytes(self) -> int:
        """Output its client has not taken yet: queued in this turn, and in the
        transport's buffer. O(1)."""
        transport = self.transport
        buffered = 0 if transport is None else transport.get_write_buffer_size()
        return self._out_bytes + buffered

    def _write_out(self) -> None:
        """Hand everything queued to the transport, in one write. O(frames queued)."""
        out, self._out = self._out, []
        self._out_bytes = 0
        if out and not self.closed and self.transport is not None:
            self.transport.writelines(out)  # pause_writing, at once, if over the mark

    def _flush(self) -> None:
        self._flush_scheduled = False
        self._write_out()
        if not self.writable and not self._transport_paused and not self.closed:
            self._set_writable(True)  # the transport took it without passing the mark

    def pause_writing(self) -> None:
        """The transport's buffer passed the high water mark: the client is not
        reading (as fast as it is sent to)."""
        self._transport_paused = True
        self._set_writable(False)
        if self._pause_unwritable:
            self.throttle(UNWRITABLE, True)

    def resume_writing(self) -> None:
        """The transport's buffer drained below the low water mark."""
        self._transport_paused = False
        drained = self._drained
        if drained is not None and not drained.done():
            # first, so the answer waiting for it goes out before the consumers woken
            # next can fill the output again
            drained.set_result(None)
        if not self._out_bytes:
            self._set_writable(True)  # else the flush due this turn decides
        if self._throttled & UNWRITABLE:
            self.throttle(UNWRITABLE, False)
            if self._held is not None:
                self._loop.call_soon(self._parse_held)

    async def _large_answer_turn(self) -> None:
        """With pulsarChannelPauseReceivingRequestsIfUnwritable, wait until the output
        is below the high water mark (at once when it is). Call holding
        ``_large_answers``: one waiter at a time. O(1)."""
        while self._pause_unwritable and self._transport_paused and not self.closed:
            drained = self._drained
            if drained is None or drained.done():
                drained = self._drained = self._loop.create_future()
            await drained

    def _set_writable(self, writable: bool) -> None:
        """Open or close the gate of every consumer of this connection. O(consumers)."""
        self.writable = writable
        for consumer in self.consumers.values():
            consumer.set_writable(writable)

    def throttle(self, reason: int, on: bool) -> None:
        """Turn ``reason`` (broker.protocol.throttle) on or off: reads stop when the
        first reason comes and start again when the last goes. O(1)."""
        before = self._throttled
        after = before | reason if on else before & ~reason
        self._throttled = after
        transport = self.transport
        if self.closed or transport is None or bool(before) == bool(after):
            return
        if after:
            transport.pause_reading()
        else:
            transport.resume_reading()

    def _send_accepted(self, size: int) -> None:
        """A SEND of ``size`` bytes is queued for storage. O(1)."""
        self._pending_sends += 1
        self._pending_send_bytes += size
        self.server.publish_buffer.add(size)
        if self._pending_sends == self._max_pending_sends:
            self.throttle(PENDING_SENDS, True)

    def sends_done(self, group: list[Sent]) -> None:
        """``group``'s SENDs are answered: their count and bytes are released (nothing,
        once the connection is closed: closing released them all). O(len(group))."""
        if self.closed:
            return
        size = 0
        for sent in group:
            size += len(sent[3])
        self._pending_sends -= len(group)
        self._pending_send_bytes -= size
        self.server.publish_buffer.remove(size)
        if self._throttled & PENDING_SENDS and self._pending_sends <= self._max_pending_sends // 2:
            self.throttle(PENDING_SENDS, False)

    def _schedule_keepalive(self) -> None:
        interval = self.server.config.keepAliveIntervalSeconds
        self._keepalive = asyncio.get_running_loop().call_later(interval, self._check_alive)

    def _check_alive(self) -> None:
        """Every keepAliveIntervalSeconds: PING a quiet client; close one that did not
        answer the previous PING."""
        if self.closed:
            return
        if self._heard:
            self._heard = False
            self._ping_sent = False
        elif self._ping_sent:
            if not self._throttled:
                self.abort("no answer to keep-alive PING")
                return
            # as Pulsar: while its reads are off, the PONG may be unread, not missing
        else:
            self._ping_sent = True
            self.write_command(BaseCommand(type=Type.PING))
        self._schedule_keepalive()

    # ------------------------------------------------------------------ dispatch

    def _handle(self, command: Any, payload: bytes) -> None:
        kind = command.type
        if kind == Type.SEND:
            if not self.connected:
                raise FrameError("SEND before CONNECT")
            self._send(command.send, payload)
            return
        handler = self._handlers.get(kind)
        if handler is None and kind not in REFUSED:
            # a command only a broker sends (SEND_RECEIPT, MESSAGE, ...) or a type Pulsar's
            # protocol does not have: Pulsar's ServerCnx has no handler for it (its decoder
            # throws) and closes the connection, as here
            raise FrameError(f"unknown or unsupported command type {kind}")
        if not self.connected and kind != Type.CONNECT:
            raise FrameError(f"command {COMMAND_FIELDS.get(kind, kind)} before CONNECT")
        field = COMMAND_FIELDS.get(kind)
        if field is not None and not command.HasField(field):
            raise FrameError(f"command type {kind} without its {field} field")
        if handler is None:
            self._refuse(kind, getattr(command, COMMAND_FIELDS[kind]))
            return
        handler(getattr(command, field) if field is not None else command)

    def _async(self, request_id: int, work: Coroutine[Any, Any, Any], name: str) -> bool:
        """Run a request; a broker error answers it with ERROR and Pulsar's code. False
        if the connection was closed instead (``spawn``): ``work`` never runs."""

        async def run() -> None:
            try:
                await work
            except (BrokerError, BookieError, ManagedLedgerError, OSError) as error:
                self._error(request_id, server_error(error), str(error))

        if not self.spawn(run(), name):
            work.close()
            return False
        return True

    def _error(self, request_id: int, code: int, message: str) -> None:
        command = BaseCommand(type=Type.ERROR)
        command.error.request_id = request_id
        command.error.error = code
        command.error.message = message
        self.write_command(command)

    def _success(self, request_id: int) -> None:
        command = BaseCommand(type=Type.SUCCESS)
        command.success.request_id = request_id
        self.write_command(command)

    def _ignore(self, command: Any) -> None:
        pass

    def _refuse(self, kind: int, request: Any) -> None:
        """Answer a request brokerlab does not serve with Pulsar's error for it."""
        code, message = REFUSED[kind]
        self._error(request.request_id, code, message)

    def _close_watcher(self, request: Any) -> None:
        """WATCH_TOPIC_LIST_CLOSE: no watcher was ever created (WATCH_TOPIC_LIST is
        refused); Pulsar answers success for an unknown watcher id, as here."""
        self._success(request.request_id)

    # ------------------------------------------------------------------ session

    def _connect(self, connect: Any) -> None:
        if self.connected:
            raise FrameError("CONNECT on a connection that is connected already")
        authentication = self.server.authentication
        if authentication.enabled:
            method = connect.auth_method_name if connect.HasField("auth_method_name") else None
            data = connect.auth_data if connect.HasField("auth_data") else b""
            authenticated = self._authenticate(method, data, "authentication failed")
            if authenticated is None:
                return
            self.role, self._auth_expires = authenticated
            self._auth_refreshable = (
                connect.HasField("feature_flags") and connect.feature_flags.supports_auth_refresh
            )
            self._schedule_auth_check()
        self.connected = True
        self.client_version = connect.client_version
        self._protocol_version = min(connect.protocol_version, PROTOCOL_VERSION)
        command = BaseCommand(type=Type.CONNECTED)
        connected = command.connected
        connected.server_version = SERVER_VERSION
        connected.protocol_version = self._protocol_version
        connected.max_message_size = self.server.config.maxMessageSize
        connected.feature_flags.supports_auth_refresh = False
        self.write_command(command)

    # ------------------------------------------------------------------ credentials

    def _authenticate(
        self, method: str | None, data: bytes, failure: str
    ) -> tuple[str | None, float] | None:
        """The role of credentials a client sent and when they expire; None when they
        are not valid, after answering as Pulsar's ServerCnx does, at once: an ERROR
        ``AuthenticationError`` "Failed to authenticate" that answers no request (id
        -1; the reason is only logged, as Pulsar keeps it from the client), then the
        connection closed (logged as ``failure``). The Java client fails fast on it;
        the C++ client (and the Python one on it) takes any answer to CONNECT but
        CONNECTED for a lost connection and retries until its operation timeout, against
        Pulsar too (apache/pulsar-client-cpp#227, apache/pulsar#19881)."""
        try:
            return self.server.authentication.authenticate_until(
                method, data.decode("utf-8", "replace").strip()
            )
        except AuthenticationError as error:
            self._error(NO_REQUEST_ID, ServerError.AuthenticationError, "Failed to authenticate")
            self.abort(f"{failure}: {error}")
            return None

    def _schedule_auth_check(self) -> None:
        interval = self.server.config.authenticationRefreshCheckSeconds
        self._auth_check = self._loop.call_later(interval, self._check_credentials)

    def _check_credentials(self) -> None:
        """Every authenticationRefreshCheckSeconds, as Pulsar's broker does: nothing
        while the client's token is valid; once it expired, an AUTH_CHALLENGE for a new
        one, and the connection closed if the client cannot refresh or left the previous
        challenge unanswered. Tokens without ``exp`` never expire."""
        if self.closed:
            return
        if time.time() >= self._auth_expires:
            if not self._auth_refreshable:
                self.abort("the client's token expired and it cannot refresh credentials")
                return
            if self._auth_challenged:
                self.abort("the client's token expired and the AUTH_CHALLENGE went unanswered")
                return
            command = BaseCommand(type=Type.AUTH_CHALLENGE)
            challenge = command.authChallenge
            challenge.server_version = SERVER_VERSION
            challenge.protocol_version = self._protocol_version
            challenge.challenge.auth_method_name = TOKEN_METHOD
            challenge.challenge.auth_data = REFRESH_AUTH_DATA
            self.write_command(command)
            self._auth_challenged = True
        self._schedule_auth_check()

    def _auth_response(self, response: Any) -> None:
        """New credentials, in answer to an AUTH_CHALLENGE: they must be valid and of
        the same role (Pulsar: the principal cannot change), or the connection closes
        with an authentication error."""
        if not self.server.authentication.enabled:
            return  # nothing to refresh
        data = response.response.auth_data if response.HasField("response") else b""
        method = (
            response.response.auth_method_name
            if response.HasField("response") and response.response.HasField("auth_method_name")
            else None
        )
        authenticated = self._authenticate(method, data, "authentication refresh failed")
        if authenticated is None:
            return
        role, expires = authenticated
        if role != self.role:
            self.abort(
                f"refreshed credentials are for role {role!r}, not {self.role!r}: the "
                "principal cannot change"
            )
            return
        self._auth_expires = expires
        self._auth_challenged = False
        log.info("refreshed the credentials of role %s from %s", role, self.peer)

    def _ping(self, ping: Any) -> None:
        self.write_command(BaseCommand(type=Type.PONG))

    def _pong(self, pong: Any) -> None:
        self._ping_sent = False

    def _lookup(self, lookup: Any) -> None:
        command = BaseCommand(type=Type.LOOKUP_RESPONSE)
        response = command.lookupTopicResponse
        response.request_id = lookup.request_id
        try:
            name = topic_name(lookup.topic)
        except InvalidRequestError as error:
            response.response = 2  # Failed
            response.error = ServerError.InvalidTopicName
            response.message = str(error)
        else:
            try:
                owner = self.service.ownership.owner(name)
            except ServiceNotReadyError as error:
                response.response = 2  # Failed
                response.error = ServerError.ServiceNotReady
                response.message = str(error)
            else:
                # the owner's address (this broker's own when it owns the topic)
                response.response = LOOKUP_CONNECT
                response.brokerServiceUrl = owner.service_url or self.server.service_url
                response.authoritative = True
        self.write_command(command)

    def _partitioned_metadata(self, request: Any) -> None:
        server = self.server
        if server.lookups >= server.config.maxConcurrentLookupRequest:
            # Pulsar's answer past maxConcurrentLookupRequest; the client retries
            command = BaseCommand(type=Type.PARTITIONED_METADATA_RESPONSE)
            response = command.partitionMetadataResponse
            response.request_id = request.request_id
            response.response = PARTITIONS_FAILED
            response.error = ServerError.TooManyRequests
            response.message = "Failed due to too many pending lookup requests"
            self.write_command(command)
            return

        async def answer() -> None:
            command = BaseCommand(type=Type.PARTITIONED_METADATA_RESPONSE)
            response = command.partitionMetadataResponse
            response.request_id = request.request_id
            try:
                name = topic_name(request.topic)
                partitions = await server.partitions(name, request.metadata_auto_creation_enabled)
            except (BrokerError, BookieError, OSError) as error:
                response.response = PARTITIONS_FAILED
                response.error = server_error(error)
                response.message = str(error)
            else:
                response.response = PARTITIONS_SUCCESS
                response.partitions = partitions
            finally:
                server.lookups -= 1
            self.write_command(command)

        server.lookups += 1
        if not self.spawn(answer(), "partitioned metadata"):
            server.lookups -= 1

    # ------------------------------------------------------------------ produce

    def _producer(self, request: Any) -> None:
        if request.producer_id not in self.producers and not self._room_for(
            len(self.producers) + self._producers_opening,
            self.server.config.brokerlabMaxProducersPerConnection,
            "producers",
            "brokerlabMaxProducersPerConnection",
        ):
            return
        self._producers_opening += 1
        opening = True

        def opened() -> None:
            """The producer is in ``producers``, or will not be: no longer opening."""
            nonlocal opening
            if opening:
                opening = False
                self._producers_opening -= 1

        async def create() -> None:
            try:
                await open_producer()
            finally:
                opened()

        async def open_producer() -> None:
            name = topic_name(request.topic)
            mode = ACCESS_MODES.get(request.producer_access_mode)
            if mode is None:
                raise BrokerError(f"Invalid producer access mode: {request.producer_access_mode}")
            # a hung-up client's producers still going: this one finds them gone (an
            # exclusive access or a producer name of theirs free)
            await self.service.detached()
            existing = self.producers.get(request.producer_id)
            topic = await self.service.get_topic(name, create=True)
            if existing is not None and existing.topic is topic and not existing.waiting:
                producer = existing  # a retried PRODUCER: answer it again
                epoch = access_of(topic).epoch
            else:
                producer_name = (
                    request.producer_name
                    if request.HasField("producer_name") and request.producer_name
                    else f"{self.server.config.clusterName}-0-{next(_producer_names)}"
                )
                producer = BinaryProducer(
                    self,
                    request.producer_id,
                    producer_name,
                    name,
                    access_mode=mode,
                    topic_epoch=request.topic_epoch if request.HasField("topic_epoch") else None,
                )
                stats = producer.stats
                stats.producer_id = request.producer_id
                stats.address = f"/{self.peer}"
                stats.client_version = self.client_version
                stats.metadata = {item.key: item.value for item in request.metadata}
                schema = self._schema_of(request.schema) if request.HasField("schema") else None
                # the schema before the access mode, as Pulsar: IncompatibleSchema refuses it
                await producer.use_schema(topic, schema)
                if self.closed:
                    return
                # registered before it may wait, so a CLOSE_PRODUCER finds it
                self.producers[request.producer_id] = producer
                opened()

                def queued() -> None:
                    # as Pulsar: the client learns it waits (and stops timing the request)
                    self._producer_success(request, producer, None, ready=False)

                try:
                    # access mode and topic epoch, then maxProducersPerTopic
                    epoch = await producer.attach_with_access(topic, queued)
                except BaseException:
                    if self.producers.get(request.producer_id) is producer:
                        del self.producers[request.producer_id]
                    raise
                if self.closed or self.producers.get(request.producer_id) is not producer:
                    producer.detach()  # closed while it waited
                    return
            self._producer_success(request, producer, epoch, ready=True)

        if not self._async(request.request_id, create(), "producer"):
            opened()

    def _producer_success(
        self, request: Any, producer: BinaryProducer, epoch: int | None, ready: bool
    ) -> None:
        command = BaseCommand(type=Type.PRODUCER_SUCCESS)
        success = command.producer_success
        success.request_id = request.request_id
        success.producer_name = producer.name
        success.last_sequence_id = producer.last_sequence_id()
        if producer.schema_version is not None:
            # the client stamps it on every message's metadata
            success.schema_version = version_bytes(producer.schema_version)
        if epoch is not None:
            success.topic_epoch = epoch
        if not ready:
            success.producer_ready = False
        self.write_command(command)

    def _send(self, send: Any, entry: bytes) -> None:
        """A SEND. For a producer this connection does not have ready, the connection is
        closed, as Pulsar's ServerCnx.handleSend does (apache/pulsar#12780; before, it
        dropped the SEND); unless the broker closed that producer less than
        keepAliveIntervalSeconds ago (#19446): the client had the SEND in flight, it is
        dropped, and resent once the client has the producer back. A payload over
        maxMessageSize is refused, this message only (SEND_ERROR NotAllowedError).
        O(1) before the checksum's O(len(entry))."""
        producer = self.producers.get(send.producer_id)
        if producer is None or producer.waiting:
            until = self._closed_producers.get(send.producer_id)
            if until is not None and self._loop.time() < until:
                return
            raise FrameError(f"SEND for producer {send.producer_id}, not ready on this connection")
        size = sent_payload_size(entry)
        if size is None:
            self._send_error(send, ServerError.ChecksumError, "entry checksum does not match")
            raise FrameError(f"bad checksum on a message of producer {producer.name}")
        if size > self._max_message_size:
            # Pulsar leaves this to its clients and its frame limit (maxMessageSize plus
            # 10 KiB for headers), so a hand-made SEND a little over it is stored there;
            # here every payload is held to it, as HTTP and WebSocket payloads are
            self._send_error(
                send,
                ServerError.NotAllowedError,
                f"Exceed maximum message size: a payload of {size} bytes, over maxMessageSize "
                f"{self._max_message_size}",
            )
            return
        try:
            # num_messages, where the client says it, must agree with the metadata
            claimed = send.num_messages if send.HasField("num_messages") else None
            messages = check_entry(entry, claimed)
        except CorruptEntryError as error:
            # this message only, nothing stored; the code Pulsar's broker answers a SEND
            # whose metadata it refuses with (an unencrypted message on a topic that
            # requires encryption)
            self._send_error(send, ServerError.MetadataError, str(error))
            return
        refused = producer.refusal(entry)
        if refused is not None:
            # as Pulsar: this message only, the producer goes on (a C++ client takes any
            # SEND_ERROR but a checksum error as a reason to reconnect and resend)
            self._send_error(send, ServerError.NotAllowedError, refused)
            return
        highest = send.highest_sequence_id or send.sequence_id
        self._send_accepted(len(entry))
        producer.send(send.sequence_id, highest, messages, entry, send.is_chunk)

    def _send_error(self, send: Any, code: int, message: str) -> None:
        command = BaseCommand(type=Type.SEND_ERROR)
        error = command.send_error
        error.producer_id = send.producer_id
        error.sequence_id = send.sequence_id
        error.error = code
        error.message = message
        self.write_command(command)

    def closed_by_broker(self, producer_id: int) -> None:
        """The broker closed producer ``producer_id`` (CLOSE_PRODUCER sent): for
        keepAliveIntervalSeconds, SENDs for it are dropped, as Pulsar's
        ``recentlyClosedProducers``. O(closed producers) to forget those past it."""
        now = self._loop.time()
        closed = self._closed_producers
        for stale in [key for key, until in closed.items() if until <= now]:
            del closed[stale]
        closed[producer_id] = now + self.server.config.keepAliveIntervalSeconds

    def _close_producer(self, request: Any) -> None:
        producer = self.producers.pop(request.producer_id, None)
        if producer is not None:
            producer.detach()
        self._success(request.request_id)

    # ------------------------------------------------------------------ consume

    def _subscribe(self, request: Any) -> None:
        if request.consumer_id not in self.consumers and not self._room_for(
            len(self.consumers) + self._consumers_opening,
            self.server.config.brokerlabMaxConsumersPerConnection,
            "consumers",
            "brokerlabMaxConsumersPerConnection",
        ):
            return
        self._consumers_opening += 1

        async def subscribe() -> None:
            try:
                await open_consumer()
            finally:
                self._consumers_opening -= 1

        async def open_consumer() -> None:
            name = topic_name(request.topic)
            sub_type = SUB_TYPES.get(request.subType)
            if sub_type is None:
                raise NotImplementedYetError(f"subscription type {request.subType} is unknown")
            if request.consumer_id in self.consumers:
                self._success(request.request_id)  # a retried SUBSCRIBE
                return
            start: Start = "earliest" if request.initialPosition == 1 else "latest"
            if request.HasField("start_message_id"):
                given = request.start_message_id
                start = start_of(given.ledgerId, given.entryId)
            options = ConsumerOptions(
                name=request.consumer_name or None,
                subscription_type=sub_type,
                receiver_queue_size=0,
                initial_position="Earliest" if start == "earliest" else "Latest",
                priority_level=request.priority_level,
                address=f"/{self.peer}",
                client_version=self.client_version,
                metadata={item.key: item.value for item in request.metadata},
                schema=self._schema_of(request.schema) if request.HasField("schema") else None,
            )
            consumer = await self.service.create_consumer(
                name,
                request.subscription,
                options,
                BinaryConsumer,
                start if isinstance(start, Position) else None,
            )
            assert isinstance(consumer, BinaryConsumer)
            consumer.non_durable = not request.durable
            if self.closed:
                self.service.close_consumer(consumer)
                self._release(consumer)
                return
            consumer.bind(self, request.consumer_id)
            self.consumers[request.consumer_id] = consumer
            self._success(request.request_id)
            dispatcher = consumer.subscription.dispatcher
            if sub_type in ("Exclusive", "Failover") and dispatcher is not None:
                # tell it whether it is the active consumer, now that it knows its id
                active = getattr(dispatcher, "active_consumer", lambda: None)()
                consumer.active_changed(active is consumer)

        if not self._async(request.request_id, subscribe(), "subscribe"):
            self._consumers_opening -= 1

    def _flow(self, flow: Any) -> None:
        consumer = self.consumers.get(flow.consumer_id)
        if consumer is None:
            return
        consumer.grant(flow.messagePermits)

    def _ack(self, ack: Any) -> None:
        """An ACK; one that carries a request id (a client with ack receipts) is answered
        with ACK_RESPONSE once the ack is durable, or with its error, as Pulsar's
        ServerCnx does. An ack for a consumer this connection does not have is dropped
        unanswered (Pulsar too)."""
        consumer = self.consumers.get(ack.consumer_id)
        if consumer is None:
            return
        receipt = ack.HasField("request_id")
        if not ack.message_id:
            if receipt:
                self._ack_response(ack, None, "")
            return
        cumulative = ack.ack_type == ACK_CUMULATIVE
        whole: list[Position] = []
        partial: list[tuple[Position, int]] = []
        for message_id in ack.message_id:
            position = Position(message_id.ledgerId, message_id.entryId)
            if message_id.ack_set:
                if not self.batch_index_acks:
                    continue  # Pulsar keeps no ack sets then: the client acks the entry
                partial.append((position, mask_of(message_id.ack_set)))
            else:
                whole.append(position)

        # applied now, in the order commands arrive (an ack, then a close or a
        # redelivery, must not redeliver what was acked); made durable in the background
        try:
            finish = consumer.acknowledge_sets(whole, partial, cumulative)
        except BrokerError as error:
            # a cumulative ack on Shared, say: Pulsar ignores it and answers success
            log.warning("ack from %s ignored: %s", self.peer, error)
            if receipt:
                self._ack_response(ack, None, "")
            return
        if finish is None:
            if receipt:
                self._ack_response(ack, None, "")
            return

        async def acknowledge() -> None:
            try:
                await finish
            except (BrokerError, BookieError, ManagedLedgerError, OSError) as error:
                # the ack had no effect; the messages stay unacknowledged and come again
                log.warning("ack from %s failed: %s", self.peer, error)
                if receipt:
                    self._ack_response(ack, server_error(error), str(error))
                return
            if receipt:
                self._ack_response(ack, None, "")

        if not self.closed:
            # not a request: a client may ack faster than cursor writes complete
            self._acks.spawn(acknowledge(), name="ack")

    def _ack_response(self, ack: Any, code: int | None, message: str) -> None:
        command = BaseCommand(type=Type.ACK_RESPONSE)
        response = command.ackResponse
        response.consumer_id = ack.consumer_id
        response.request_id = ack.request_id
        if code is not None:
            response.error = code
            response.message = message
        self.write_command(command)

    def _redeliver(self, request: Any) -> None:
        consumer = self.consumers.get(request.consumer_id)
        if consumer is None:
            return
        positions = [Position(m.ledgerId, m.entryId) for m in request.message_ids]
        consumer.redeliver(positions or None)

    def _consumer_of(self, request: Any) -> BinaryConsumer | None:
        """The consumer a request names; None after answering ConsumerNotFound."""
        consumer = self.consumers.get(request.consumer_id)
        if consumer is None:
            self._error(request.request_id, ServerError.ConsumerNotFound, "consumer not found")
        return consumer

    def _seek(self, request: Any) -> None:
        if not request.HasField("message_id") and not request.HasField("message_publish_time"):
            # Pulsar's answer, before it looks for the consumer
            message = "Message id and message publish time were not present"
            self._error(request.request_id, ServerError.MetadataError, message)
            return
        consumer = self._consumer_of(request)
        if consumer is None:
            return

        async def seek() -> None:
            # as Pulsar: the subscription's consumers are closed (CLOSE_CONSUMER: they
            # reconnect and read from the new position), the cursor reset, then SUCCESS;
            # the client, seeing the close before the answer, resubscribes from the seek
            # position rather than from the last message it had
            if request.HasField("message_publish_time"):
                await consumer.seek(self.service, publish_time_ms=request.message_publish_time)
            else:
                given = request.message_id
                await consumer.seek(self.service, start_of(given.ledgerId, given.entryId))
            self._success(request.request_id)

        self._async(request.request_id, seek(), "seek")

    def _last_message_id(self, request: Any) -> None:
        consumer = self._consumer_of(request)
        if consumer is None:
            return

        async def answer() -> None:
            ledger = consumer.subscription.topic.ledger
            last = ledger.last_confirmed
            command = BaseCommand(type=Type.GET_LAST_MESSAGE_ID_RESPONSE)
            response = command.getLastMessageIdResponse
            response.request_id = request.request_id
            response.last_message_id.ledgerId = last.ledger_id & 0xFFFF_FFFF_FFFF_FFFF
            response.last_message_id.entryId = last.entry_id & 0xFFFF_FFFF_FFFF_FFFF
            if last.entry_id >= 0:
                # the last message of a batched last entry, as Pulsar answers
                entries = await ledger.read_entries(last, 1, "")
                if entries:
                    metadata = metadata_of(entries[0].data)
                    if metadata.HasField("num_messages_in_batch"):
                        response.last_message_id.batch_index = metadata.num_messages_in_batch - 1
            mark = consumer.subscription.cursor.mark_delete_position
            response.consumer_mark_delete_position.ledgerId = mark.ledger_id & (2**64 - 1)
            response.consumer_mark_delete_position.entryId = mark.entry_id & (2**64 - 1)
            self.write_command(command)

        self._async(request.request_id, answer(), "last message id")

    def _unsubscribe(self, request: Any) -> None:
        consumer = self._consumer_of(request)
        if consumer is None:
            return

        async def unsubscribe() -> None:
            await consumer.unsubscribe(self.service, request.force)
            self.consumers.pop(request.consumer_id, None)
            self._success(request.request_id)

        self._async(request.request_id, unsubscribe(), "unsubscribe")

    def _close_consumer(self, request: Any) -> None:
        consumer = self.consumers.pop(request.consumer_id, None)
        if consumer is not None:
            self._release(consumer)
        self._success(request.request_id)

    def forget_consumer(self, consumer: BinaryConsumer) -> None:
        """The broker closed ``consumer``: a reader's subscription goes with it, unless a
        seek closed it (the subscription is fenced): the reader comes back to the reset
        cursor, as to Pulsar's non-durable cursor, which a reset keeps."""
        if consumer.non_durable and not consumer.subscription.fenced:
            self._drop_subscription(consumer)

    def _release(self, consumer: BinaryConsumer) -> None:
        """The client closed ``consumer`` (or its connection): unacked messages go back."""
        consumer._connection = None
        self.service.close_consumer(consumer)
        if consumer.non_durable:
            self._drop_subscription(consumer)

    def _drop_subscription(self, consumer: BinaryConsumer) -> None:
        if not consumer.subscription.consumers:
            self.server.spawn(consumer.drop_subscription(), "drop reader subscription")

    def _consumer_stats(self, request: Any) -> None:
        consumer = self.consumers.get(request.consumer_id)
        command = BaseCommand(type=Type.CONSUMER_STATS_RESPONSE)
        response = command.consumerStatsResponse
        response.request_id = request.request_id
        if consumer is None:
            response.error_code = ServerError.ConsumerNotFound
            response.error_message = "consumer not found"
        else:
            response.consumerName = consumer.name
            response.msgRateOut = consumer.msg_out.rate
            response.msgThroughputOut = consumer.bytes_out.rate
            response.availablePermits = max(consumer.permits, 0)
            response.unackedMessages = len(consumer.pending)
            response.type = consumer.subscription.type or ""
            response.msgBacklog = consumer.subscription.backlog()
        self.write_command(command)

    def _topics_of_namespace(self, request: Any) -> None:
        async def answer() -> None:
            async with self._large_answers:  # a namespace's topics: any size
                await self._large_answer_turn()
                tenant, _, namespace = request.namespace.partition("/")
                topics = await self.service.list_topics(tenant, namespace)
                command = BaseCommand(type=Type.GET_TOPICS_OF_NAMESPACE_RESPONSE)
                response = command.getTopicsOfNamespaceResponse
                response.request_id = request.request_id
                response.topics.extend(topics)
                self.write_command(command)

        self._async(request.request_id, answer(), "topics of namespace")

    # ------------------------------------------------------------------ schemas

    def _schema_of(self, schema: Any) -> SchemaData:
        """A client's Schema message as the registry takes it."""
        return SchemaData(
            schema.type,
            schema.schema_data,
            {pair.key: pair.value for pair in schema.properties},
            user=self.role or "",
        )

    def _get_schema(self, request: Any) -> None:
        """A topic's schema, the latest or the version asked for (as a consumer decoding
        a message asks for its writer's schema). Answered with an error code in the
        response, as Pulsar: TopicNotFound when there is none."""

        async def answer() -> None:
            async with self._large_answers:  # a schema: as large as its producer made it
                await self._large_answer_turn()
                await respond()

        async def respond() -> None:
            command = BaseCommand(type=Type.GET_SCHEMA_RESPONSE)
            response = command.getSchemaResponse
            response.request_id = request.request_id
            try:
                sid = schema_id(topic_name(request.topic))
                version = None
                if request.HasField("schema_version"):
                    if not request.schema_version:
                        raise InvalidSchemaError("Empty schema version")
                    version = version_of(request.schema_version)
                stored = await self.service.schemas.registry.get(sid, version)
            except (BrokerError, BookieError, OSError) as error:
                code = server_error(error)
                response.error_code = ServerError.UnknownError if code == 0 else code
                response.error_message = str(error)
            else:
                if stored is None:
                    response.error_code = ServerError.TopicNotFound
                    response.error_message = f"Topic not found or no-schema {request.topic}"
                else:
                    schema = response.schema
                    schema.name = sid
                    schema.schema_data = stored.schema.data
                    schema.type = max(stored.schema.type, 0)  # BYTES (-1) posted over HTTP: None
                    for key, value in stored.schema.properties.items():
                        schema.properties.add(key=key, value=value)
                    response.schema_version = version_bytes(stored.version)
            self.write_command(command)

        self.spawn(answer(), "get schema")

    def _get_or_create_schema(self, request: Any) -> None:
        """Register a schema on an existing topic, or find it there, as a producer's
        would be (a client producing with several schemas, or AUTO_PRODUCE): its version,
        empty for none. TopicNotFound when the topic does not exist."""

        async def answer() -> None:
            command = BaseCommand(type=Type.GET_OR_CREATE_SCHEMA_RESPONSE)
            response = command.getOrCreateSchemaResponse
            response.request_id = request.request_id
            try:
                name = topic_name(request.topic)
                try:
                    topic = await self.service.get_topic(name, create=False)
                except NotFoundError:
                    response.error_code = ServerError.TopicNotFound
                    response.error_message = f"Topic not found {request.topic}"
                    self.write_command(command)
                    return
                schema = self._schema_of(request.schema)
                version = await self.service.schemas.producer_schema(
                    topic, None if schema.type == NONE else schema
                )
            except (BrokerError, BookieError, ManagedLedgerError, OSError) as error:
                response.error_code = server_error(error)
                response.error_message = str(error)
            else:
                response.schema_version = b"" if version is None else version_bytes(version)
            self.write_command(command)

        self.spawn(answer(), "get or create schema")
