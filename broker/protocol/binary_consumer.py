"""A consumer of a binary-protocol connection (:class:`BinaryConsumer`): an adapter over
the session core's push consumer (:mod:`broker.session.consumer`).

MESSAGE frames are written by the dispatcher's call to :meth:`BinaryConsumer.deliver`,
the stored entry as it is. The consumer's gate is its connection's writability: the
session counts the connection's unsent output as its own, and the room left below the
connection's high water mark bounds what one dispatch round may add.

The consumer knows its connection as a :class:`ConsumerConnection`
(:class:`broker.protocol.connection.Connection` is one; that module imports this one).
"""

from __future__ import annotations

from typing import Any, Protocol

from broker.ledger.entry import Entry
from broker.pulsar_api import BaseCommand, Type
from broker.session.acks import words_of
from broker.session.consumer import PushConsumer


class ConsumerConnection(Protocol):
    """The connection a :class:`BinaryConsumer` writes to, as the consumer uses it."""

    @property
    def closed(self) -> bool: ...

    @property
    def writable(self) -> bool: ...

    @property
    def high_water(self) -> int: ...

    @property
    def batch_index_acks(self) -> bool: ...

    @property
    def consumers(self) -> dict[int, BinaryConsumer]: ...

    def unsent_bytes(self) -> int: ...

    def next_request_id(self) -> int: ...

    def write_command(self, command: Any) -> None: ...

    def write_payload(self, command: Any, entry: bytes) -> None: ...

    def write_message(
        self, consumer_id: int, ledger_id: int, entry_id: int, entry: bytes
    ) -> None: ...

    def forget_consumer(self, consumer: BinaryConsumer) -> None: ...


class BinaryConsumer(PushConsumer):
    """A consumer whose receiver queue is the client's: the session's permits are the
    ones the client grants with FLOW, and each entry handed over goes out as a MESSAGE
    frame."""

    __slots__ = ("_active", "_connection", "client_id", "non_durable")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # the connection buffers what the client has not taken: bounded in bytes
        self.max_unwritten_bytes = self.subscription.config.max_unwritten_bytes_per_consumer
        self.client_id = 0
        self._connection: ConsumerConnection | None = None
        self._active: bool | None = None
        #: a reader's subscription, deleted when it closes
        self.non_durable = False

    def bind(self, connection: ConsumerConnection, client_id: int) -> None:
        self._connection = connection
        self.client_id = client_id
        self.set_writable(connection.writable)

    def unwritten_bytes(self) -> int:
        """The connection's output its client has not taken yet (shared by the
        connection's consumers). O(1)."""
        connection = self._connection
        return 0 if connection is None else connection.unsent_bytes()

    def gate_room(self) -> int | None:
        """Bytes until the connection's output passes its high water mark (where it
        turns unwritable). O(1)."""
        connection = self._connection
        if connection is None:
            return None
        return max(connection.high_water - connection.unsent_bytes(), 0)

    def send(self, entry: Entry, redelivery_count: int) -> None:
        """Write the entry to the client as a MESSAGE frame, with what is left of a
        partly acked batch. O(len(entry)) in the kernel's copy; the Python work is the
        command (about 1 us reusing the connection's, 2.5 building one)."""
        connection = self._connection
        if connection is None or connection.closed:
            return
        position = entry.position
        remaining = None
        ack_sets = self.subscription.ack_sets
        if ack_sets and connection.batch_index_acks:
            remaining = ack_sets.get(position)
        if redelivery_count or remaining is not None:
            command = BaseCommand(type=Type.MESSAGE)
            message = command.message
            message.consumer_id = self.client_id
            message.message_id.ledgerId = position.ledger_id
            message.message_id.entryId = position.entry_id
            if redelivery_count:
                message.redelivery_count = redelivery_count
            if remaining is not None:
                message.ack_set.extend(words_of(remaining))
            connection.write_payload(command, entry.data)
            return
        # the usual MESSAGE (no redelivery count, no ack set): the connection's one
        # command, about 1.4 us less than a new one
        connection.write_message(self.client_id, position.ledger_id, position.entry_id, entry.data)

    def detached(self) -> None:
        connection = self._connection
        if connection is None or connection.consumers.pop(self.client_id, None) is None:
            return
        connection.forget_consumer(self)
        command = BaseCommand(type=Type.CLOSE_CONSUMER)
        command.close_consumer.consumer_id = self.client_id
        command.close_consumer.request_id = connection.next_request_id()
        connection.write_command(command)

    def active_changed(self, active: bool) -> None:
        if active == self._active:
            return
        self._active = active
        connection = self._connection
        if connection is None or connection.closed:
            return
        command = BaseCommand(type=Type.ACTIVE_CONSUMER_CHANGE)
        command.active_consumer_change.consumer_id = self.client_id
        command.active_consumer_change.is_active = active
        connection.write_command(command)
