"""A producer of a binary-protocol connection (:class:`BinaryProducer`): an adapter over
the session core's producer (:mod:`broker.session.producer`).

The hot path stays plain: SEND frames are queued on their producer and written to the
ledger as one group per write (one write in flight per producer, so receipts leave in
order and a failure fails everything after it, which the client then resends in
order: nothing lost, nothing stored twice).

A write outlives its connection: if the client goes while it is on its way to disk, it
is stored without a receipt, and a client that resends it stores it again (at least
once, as Pulsar without deduplication); on a topic that deduplicates, the resend is
recognised by its producer name and sequence id and acknowledged with message id -1:-1
instead (the session core decides, :mod:`broker.session.producer`).

The producer knows its connection as a :class:`ProducerConnection`
(:class:`broker.protocol.connection.Connection` is one; that module imports this one).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from broker.dispatch.deduplication import NOT_DUP, UNKNOWN
from broker.dispatch.errors import BrokerError
from broker.dispatch.names import TopicName
from broker.dispatch.service import BrokerService
from broker.ledger.managed_ledger import ManagedLedgerError
from broker.protocol.errors import server_error
from broker.protocol.frames import SIZES
from broker.pulsar_api import BaseCommand, ServerError, Type
from broker.session.producer import SHARED, ProducerSession, Sent
from storage_stub.bookie.api import BookieError

if TYPE_CHECKING:
    from broker.protocol.server import ProtocolServer

#: -1 in a uint64 field (a duplicate's receipt names ledger and entry -1, as Pulsar's)
MINUS_ONE_U64 = (1 << 64) - 1


class ProducerConnection(Protocol):
    """The connection a :class:`BinaryProducer` answers on, as the producer uses it."""

    @property
    def service(self) -> BrokerService: ...

    @property
    def server(self) -> ProtocolServer: ...

    @property
    def closed(self) -> bool: ...

    @property
    def producers(self) -> dict[int, BinaryProducer]: ...

    def next_request_id(self) -> int: ...

    def write_command(self, command: Any) -> None: ...

    def write_frames(self, frames: list[bytes], size: int) -> None: ...

    def sends_done(self, group: list[Sent]) -> None: ...

    def closed_by_broker(self, producer_id: int) -> None: ...


class BinaryProducer(ProducerSession):
    """A producer session of one connection. Sends queue in ``_queue``; one write
    carries everything queued when it starts. The client gives every message its
    sequence id. Receipts leave in the order of the sends, a duplicate's (message id
    -1:-1) included: Pulsar answers a duplicate at once, possibly before the receipts of
    sends still on their way, which a client takes for theirs; here it waits for them."""

    __slots__ = ("_connection", "_failed", "_queue", "_writing", "producer_id")

    def __init__(
        self,
        connection: ProducerConnection,
        producer_id: int,
        name: str,
        topic_name: TopicName,
        access_mode: str = SHARED,
        topic_epoch: int | None = None,
    ) -> None:
        super().__init__(
            connection.service, topic_name, name, access_mode=access_mode, topic_epoch=topic_epoch
        )
        self._connection = connection
        self.producer_id = producer_id
        #: sends waiting for a write
        self._queue: list[Sent] = []
        self._writing = False
        self._failed = False

    def send(
        self, sequence_id: int, highest: int, messages: int, entry: bytes, is_chunk: bool
    ) -> None:
        """Queue one SEND. O(1)."""
        self._queue.append((sequence_id, highest, messages, entry, is_chunk))
        if not self._writing:
            self._writing = True
            # owned by the server, not the connection: a write the bookie has begun must
            # end in the ledger's count even if the client leaves meanwhile (cancelled,
            # the ledger never counted it and every later entry of the topic stayed unread)
            self._connection.server.spawn(self._write(), f"produce {self.name}")

    async def _write(self) -> None:
        """Write queued sends, group by group, until the queue is empty."""
        connection = self._connection
        try:
            while self._queue and not connection.closed:
                group, self._queue = self._queue, []
                try:
                    await self._write_group(group)
                finally:
                    # answered (or the connection went): no longer held for the client
                    connection.sends_done(group)
        finally:
            self._writing = False

    async def _write_group(self, group: list[Sent]) -> None:
        """Store one group of sends and answer each of them."""
        if self._failed:
            self._fail(group, ServerError.PersistenceError, "an earlier send failed")
            return
        try:
            first, verdicts = await self.publish_sequenced(group)
        except (BookieError, ManagedLedgerError, BrokerError, OSError) as error:
            # nothing of this group is stored; the ones queued behind it must not be
            # either: the client resends all of them, in order
            self._failed = True
            self._fail(group, server_error(error), f"{type(error).__name__}: {error}")
            return
        ledger_id, entry_id = first
        if verdicts is not None:
            self._answer_deduplicated(group, verdicts, ledger_id, entry_id)
            return
        # one command for the group's receipts, its fields set and serialized for each
        # in turn (building a command per receipt cost about 1.6 us more each), framed
        # here (command_frame's two lines) and queued together: one call per receipt
        # less, and the output's water marks checked once per group, not per receipt
        command = BaseCommand(type=Type.SEND_RECEIPT)
        receipt = command.send_receipt
        receipt.producer_id = self.producer_id
        message_id = receipt.message_id
        message_id.ledgerId = ledger_id
        serialize = command.SerializeToString
        pack = SIZES.pack
        frames: list[bytes] = []
        size = 0
        for offset, (sequence_id, highest, _, _, _) in enumerate(group):
            receipt.sequence_id = sequence_id
            receipt.highest_sequence_id = highest
            message_id.entryId = entry_id + offset
            body = serialize()
            frame = pack(len(body) + 4, len(body)) + body
            frames.append(frame)
            size += len(frame)
        self._connection.write_frames(frames, size)

    def _answer_deduplicated(
        self, group: list[Sent], verdicts: list[int], ledger_id: int, entry_id: int
    ) -> None:
        """Receipts of a group on a topic that deduplicates: a stored send's position,
        a duplicate's -1:-1 (Pulsar's), and for a send whose first copy is still on its
        way, SEND_ERROR PersistenceError (Pulsar's answer to MessageDupUnknownException:
        the client reconnects and resends it, by then a plain duplicate)."""
        write = self._connection.write_command
        offset = 0
        for (sequence_id, highest, _, _, _), verdict in zip(group, verdicts, strict=True):
            if verdict == UNKNOWN:
                self._send_error(
                    sequence_id,
                    ServerError.PersistenceError,
                    "cannot determine whether the message is a duplicate at this time",
                )
                continue
            command = BaseCommand(type=Type.SEND_RECEIPT)
            receipt = command.send_receipt
            receipt.producer_id = self.producer_id
            receipt.sequence_id = sequence_id
            receipt.highest_sequence_id = highest
            if verdict == NOT_DUP:
                receipt.message_id.ledgerId = ledger_id
                receipt.message_id.entryId = entry_id + offset
                offset += 1
            else:  # a duplicate: -1:-1 as uint64, as Pulsar's receipt carries it
                receipt.message_id.ledgerId = MINUS_ONE_U64
                receipt.message_id.entryId = MINUS_ONE_U64
            write(command)

    def _fail(self, group: list[Sent], code: int, message: str) -> None:
        for sent in group:
            self._send_error(sent[0], code, message)

    def _send_error(self, sequence_id: int, code: int, message: str) -> None:
        command = BaseCommand(type=Type.SEND_ERROR)
        error = command.send_error
        error.producer_id = self.producer_id
        error.sequence_id = sequence_id
        error.error = code
        error.message = message
        self._connection.write_command(command)

    def close_from_broker(self) -> None:
        """The topic unloads, or an ExclusiveWithFencing producer fences this one out:
        the client reconnects through lookup (writes queued still go to the topic they
        were for). A wait for exclusive access ends."""
        self.end_wait()
        connection = self._connection
        if connection.producers.pop(self.producer_id, None) is None:
            return
        connection.closed_by_broker(self.producer_id)
        command = BaseCommand(type=Type.CLOSE_PRODUCER)
        command.close_producer.producer_id = self.producer_id
        command.close_producer.request_id = connection.next_request_id()
        connection.write_command(command)
