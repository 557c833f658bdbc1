"""The producer session every front end with a connected producer shares (the binary
protocol, the WebSocket API; HTTP produce has no session): its membership among the
topic's producers (counted against maxProducersPerTopic, forgotten when the topic
unloads), its access mode, the sequence ids it gives messages that arrive without one,
message deduplication (:mod:`broker.dispatch.deduplication`: a send whose sequence id
its producer name has sent before is not stored again) and the write of a group of
sends. The wire format, the answers and the client's resend rules stay with the front
end.

Access modes, as Pulsar's ``AbstractTopic`` (``incrementTopicEpochIfNeeded``,
``handleProducerRemoved``): Shared producers share the topic; Exclusive takes it only if
no other producer is there (else ProducerFenced); ExclusiveWithFencing takes it, closing
the producers there and failing the waiting ones; WaitForExclusive queues until the
topic is free. While an exclusive producer holds the topic or waits for it, a Shared one
gets ProducerBusy. Each exclusive grant moves the topic epoch on (or sets it to the
epoch a reconnecting producer carries); a producer whose epoch is behind the topic's is
fenced. brokerlab keeps the epoch with the loaded topic, not in the ledger's properties
as Pulsar does: after an unload or a restart the topic starts without one.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from broker.dispatch.deduplication import NOT_DUP, MessageDeduplication
from broker.dispatch.delayed import delay_error
from broker.dispatch.errors import ProducerBusyError, ProducerFencedError
from broker.dispatch.names import TopicName
from broker.dispatch.stats import PublisherStats
from broker.ledger.entry import EntryFormatError, metadata_of
from broker.ledger.position import Position

if TYPE_CHECKING:
    from broker.dispatch.schema_registry import SchemaData
    from broker.dispatch.service import BrokerService
    from broker.dispatch.topic import PersistentTopic

#: a send waiting for its write: sequence id, highest sequence id (a batch's last; the
#: sequence id when it carries one message), messages, the entry, and whether it is a
#: chunk of a larger message (the SEND's ``is_chunk``)
Sent = tuple[int, int, int, bytes, bool]

#: the message id a duplicate is acknowledged with (Pulsar's -1:-1)
DUPLICATE_POSITION = Position(-1, -1)


def _is_partial_chunk(entry: bytes) -> bool:
    """Whether a chunk is not its message's last (only the last is deduplicated, as in
    Pulsar: every chunk carries the message's sequence id). O(metadata size)."""
    try:
        metadata = metadata_of(entry)
    except EntryFormatError:
        return False
    return bool(metadata.chunk_id != metadata.num_chunks_from_msg - 1)


log = logging.getLogger(__name__)

SHARED = "Shared"
EXCLUSIVE = "Exclusive"
WAIT_FOR_EXCLUSIVE = "WaitForExclusive"
EXCLUSIVE_WITH_FENCING = "ExclusiveWithFencing"
ACCESS_MODES = (SHARED, EXCLUSIVE, WAIT_FOR_EXCLUSIVE, EXCLUSIVE_WITH_FENCING)


class TopicAccess:
    """A loaded topic's exclusive-producer state: the producer holding it and the topic
    epoch (None: no exclusive producer ever took it). The producers waiting for it are
    the topic's ``waiting_producers``, in order. O(1) per operation but fencing
    (O(producers + waiting))."""

    __slots__ = ("epoch", "holder")

    def __init__(self) -> None:
        self.epoch: int | None = None
        self.holder: ProducerSession | None = None

    def grant(self, producer: ProducerSession) -> int:
        """``producer`` holds the topic from now: the topic epoch it brings, else the
        next one."""
        self.holder = producer
        wanted = producer.topic_epoch
        if wanted is None:
            wanted = 0 if self.epoch is None else self.epoch + 1
        self.epoch = wanted
        return wanted

    def check_epoch(self, producer: ProducerSession) -> None:
        """ProducerFencedError for a producer that reconnects with an epoch the topic
        has moved past (another exclusive producer was there in between)."""
        wanted = producer.topic_epoch
        current = -1 if self.epoch is None else self.epoch
        if wanted is not None and wanted < current:
            raise ProducerFencedError(
                f"Topic epoch has already moved. Current epoch: {current}, Producer epoch: {wanted}"
            )

    def released(self, topic: PersistentTopic) -> None:
        """The holder left: the first waiting producer gets the topic. O(1)."""
        self.holder = None
        waiting = topic.waiting_producers
        while waiting:
            waiter = next(iter(waiting))
            del waiting[waiter]
            if isinstance(waiter, ProducerSession) and waiter.waiting:
                assert waiter._granted is not None
                waiter._granted.set_result(self.grant(waiter))
                return


#: each loaded topic's access state, gone with the topic object (an unload forgets it)
_ACCESS: weakref.WeakKeyDictionary[PersistentTopic, TopicAccess] = weakref.WeakKeyDictionary()


def access_of(topic: PersistentTopic) -> TopicAccess:
    """The topic's access state (created empty the first time). O(1)."""
    access = _ACCESS.get(topic)
    if access is None:
        access = _ACCESS[topic] = TopicAccess()
    return access


class ProducerSession:
    """A client's producer on topic ``topic_name``. ``topic`` is the loaded topic it is
    counted in, or waits for (None before :meth:`attach_with_access` and after the topic
    unloaded); ``access_mode`` one of ACCESS_MODES, ``topic_epoch`` the epoch a
    reconnecting exclusive producer carries (None: none yet). O(1) state."""

    __slots__ = (
        "_granted",
        "access_mode",
        "name",
        "next_sequence_id",
        "schema_version",
        "service",
        "stats",
        "topic",
        "topic_epoch",
        "topic_name",
    )

    def __init__(
        self,
        service: BrokerService,
        topic_name: TopicName,
        name: str,
        first_sequence_id: int = 0,
        access_mode: str = SHARED,
        topic_epoch: int | None = None,
    ) -> None:
        self.service = service
        self.topic_name = topic_name
        self.name = name
        self.next_sequence_id = first_sequence_id
        self.topic: PersistentTopic | None = None
        #: its part of the topic's stats (``publishers``); the front end fills in who
        self.stats = PublisherStats(name, service.clock.wall_ms())
        self.access_mode = access_mode
        self.topic_epoch = topic_epoch
        #: while it waits for exclusive access: the topic epoch it will get
        self._granted: asyncio.Future[int] | None = None
        #: the version of the schema it produces with on its topic (None: no schema)
        self.schema_version: int | None = None

    @property
    def waiting(self) -> bool:
        """Queued for exclusive access (WaitForExclusive), not holding the topic yet."""
        return self._granted is not None and not self._granted.done()

    async def use_schema(self, topic: PersistentTopic, schema: SchemaData | None) -> None:
        """Produce with ``schema`` (None: bytes) on ``topic``: it is added to the topic's
        schemas or found there, and its version kept for the client to stamp on every
        message. IncompatibleSchemaError, InvalidSchemaError: refused, nothing stored."""
        self.schema_version = await self.service.schemas.producer_schema(topic, schema)

    def attach(self, topic: PersistentTopic) -> None:
        """Count this producer among ``topic``'s: ProducerLimitError over
        maxProducersPerTopic (nothing changed). O(1). The access mode is not looked at:
        :meth:`attach_with_access` does that."""
        self.service.add_producer(topic, self)
        self.topic = topic
        topic.deduplication.producer_added(self.name)

    async def attach_with_access(
        self, topic: PersistentTopic, queued: Callable[[], None] | None = None
    ) -> int | None:
        """Join ``topic`` under this producer's access mode, as Pulsar decides it; the
        topic epoch to tell the client (None: the topic has none). A WaitForExclusive
        producer that finds the topic taken calls ``queued`` (the front end tells its
        client it waits) and returns once it holds the topic. ProducerBusyError,
        ProducerFencedError (also for a waiting producer fenced out, closed by its client
        or by the broker meanwhile) or ProducerLimitError otherwise, with nothing
        changed. O(1), but ExclusiveWithFencing O(producers + waiting)."""
        access = access_of(topic)
        mode = self.access_mode
        taken = access.holder is not None or bool(topic.waiting_producers)
        holder = access.holder.name if access.holder is not None else ""
        epoch: int | None
        if mode == SHARED:
            if taken:
                raise ProducerBusyError(f"Topic has an existing exclusive producer: {holder}")
            epoch = access.epoch
        elif mode == EXCLUSIVE:
            if taken:
                raise ProducerFencedError(f"Topic has an existing exclusive producer: {holder}")
            if topic.producers:
                raise ProducerFencedError("Topic has existing shared producers")
            access.check_epoch(self)
            epoch = access.grant(self)
        elif mode == EXCLUSIVE_WITH_FENCING:
            if taken or topic.producers:
                self._fence_out(topic, access)
            access.check_epoch(self)
            epoch = access.grant(self)
        elif mode == WAIT_FOR_EXCLUSIVE:
            if taken or topic.producers:
                epoch = await self._wait(topic, queued)
            else:
                access.check_epoch(self)
                epoch = access.grant(self)
        else:
            raise ProducerFencedError(f"Invalid producer access mode: {mode}")
        try:
            self.attach(topic)
        except BaseException:
            if access.holder is self:
                access.released(topic)
            raise
        return epoch

    async def _wait(self, topic: PersistentTopic, queued: Callable[[], None] | None) -> int:
        """Queue for ``topic``'s exclusive access; the epoch once it is granted."""
        granted: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._granted = granted
        self.topic = topic
        topic.waiting_producers[self] = None
        log.info("producer %s waits for exclusive access to %s", self.name, topic.name)
        if queued is not None:
            queued()
        try:
            return await granted
        except asyncio.CancelledError:
            topic.waiting_producers.pop(self, None)
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the front end's own work is being cancelled
            raise ProducerFencedError(
                f"producer {self.name} was closed while it waited for exclusive access"
            ) from None
        finally:
            self._granted = None

    @staticmethod
    def _fence_out(topic: PersistentTopic, access: TopicAccess) -> None:
        """ExclusiveWithFencing arrives: the waiting producers fail (ProducerFenced) and
        the connected ones are closed (their clients are told, as by an unload)."""
        waiting = list(topic.waiting_producers)
        topic.waiting_producers.clear()
        for waiter in waiting:
            granted = waiter._granted if isinstance(waiter, ProducerSession) else None
            if granted is not None and not granted.done():
                granted.set_exception(ProducerFencedError("Fenced out"))
        access.holder = None
        for producer in list(topic.producers):
            topic.producers.pop(producer, None)
            producer.close_from_broker()

    def detach(self) -> None:
        """The session ends: its topic counts it no more (writes already queued still
        go to that topic, as they would have); the exclusive access it held passes to
        the next waiting producer; a wait of its own ends. O(1)."""
        topic = self.topic
        self.end_wait()
        if topic is not None:
            if self in topic.producers:
                del topic.producers[self]
                topic.deduplication.producer_removed(self.name)
            topic.waiting_producers.pop(self, None)
            access = _ACCESS.get(topic)
            if access is not None and access.holder is self:
                access.released(topic)

    def last_sequence_id(self) -> int:
        """The highest sequence id the topic has had from a producer of this name, -1
        if none or deduplication is off (PRODUCER_SUCCESS's ``last_sequence_id``, where
        a client continues its sequence ids from). O(1)."""
        topic = self.topic
        return -1 if topic is None else topic.deduplication.last_sequence_id(self.name)

    def close_from_broker(self) -> None:
        """The topic unloads or is deleted (it forgets its producers): the front end
        tells its client, or :meth:`current_topic` counts the producer again. A wait
        for exclusive access ends (the client asks again)."""
        self.end_wait()
        self.topic = None

    def end_wait(self) -> None:
        """Stop waiting for exclusive access, if waiting (:meth:`attach_with_access`
        raises ProducerFencedError). O(1)."""
        granted = self._granted
        if granted is not None and not granted.done():
            granted.cancel()

    async def current_topic(self) -> PersistentTopic:
        """The topic to write to: the one this producer is counted in, or the topic
        loaded anew after an unload, where it joins again as a client that reconnects
        does (ProducerLimitError if it has no room, ProducerBusyError if an exclusive
        producer took the topic meanwhile)."""
        topic = await self.service.get_topic(self.topic_name, create=True)
        if topic is not self.topic:
            self.detach()
            self.topic = None
            await self.attach_with_access(topic)
        return topic

    def sequence_ids(self, count: int) -> int:
        """Take ``count`` sequence ids for messages that came without one; the first.
        O(1)."""
        first = self.next_sequence_id
        self.next_sequence_id += count
        return first

    def refusal(self, entry: bytes) -> str | None:
        """Why ``entry`` must not be stored (None: it may be): a deliver-at time beyond
        ``delayedDeliveryMaxDelayInMillis`` after its publish time, as Pulsar refuses it
        per message (NotAllowedError). O(metadata size)."""
        return delay_error(entry, self.service.config.dispatch.delayed)

    async def publish(self, entries: list[bytes], messages: int) -> Position:
        """Store ``entries`` (``messages`` messages) in the topic this producer is
        counted in, durably; the first entry's position. The topic's own errors (a
        storage fault: nothing stored)."""
        topic = self.topic
        if topic is None:
            topic = await self.current_topic()
        return await topic.publish(entries, messages, publisher=self.stats)

    async def publish_sequenced(self, sends: list[Sent]) -> tuple[Position, list[int] | None]:
        """Store the sends of a group in order, durably: the first stored entry's
        position and, when the topic deduplicates, each send's verdict (NOT_DUP: stored,
        consecutively from that position; DUP: a duplicate, not stored, acknowledged as
        DUPLICATE_POSITION; UNKNOWN: not stored, its first copy is still on its way,
        the client must resend it later). None: every send stored. The topic's own
        errors (a storage fault: nothing stored; the producer's resends count as new).
        O(sends) plus the write."""
        topic = self.topic
        if topic is None:
            topic = await self.current_topic()
        deduplication = topic.deduplication
        if not deduplication.enabled:
            counts = [sent[2] for sent in sends]
            first = await topic.publish(
                [sent[3] for sent in sends], sum(counts), publisher=self.stats, counts=counts
            )
            return first, None
        return await self._publish_deduplicated(topic, deduplication, sends)

    async def _publish_deduplicated(
        self, topic: PersistentTopic, deduplication: MessageDeduplication, sends: list[Sent]
    ) -> tuple[Position, list[int]]:
        name = self.name
        verdicts: list[int] = []
        entries: list[bytes] = []
        counts: list[int] = []
        #: the highest sequence id of each stored send that counts (not a partial chunk)
        stored: list[int] = []
        messages = 0
        for sequence_id, highest, count, entry, is_chunk in sends:
            if is_chunk and _is_partial_chunk(entry):
                verdict = NOT_DUP
            else:
                verdict = deduplication.check(name, sequence_id, highest)
                if verdict == NOT_DUP:
                    stored.append(highest if highest > sequence_id else sequence_id)
            verdicts.append(verdict)
            if verdict == NOT_DUP:
                entries.append(entry)
                counts.append(count)
                messages += count
        if not entries:
            return DUPLICATE_POSITION, verdicts
        try:
            first = await topic.publish(entries, messages, (name, stored), self.stats, counts)
        except Exception:
            deduplication.failed(name)
            raise
        return first, verdicts
