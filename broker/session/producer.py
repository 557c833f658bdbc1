"""The producer session every front end with a connected producer shares (the binary
protocol, the WebSocket API; HTTP produce has no session): its membership among the
topic's producers (counted against maxProducersPerTopic, forgotten when the topic
unloads), the sequence ids it gives messages that arrive without one, message
deduplication (:mod:`broker.dispatch.deduplication`: a send whose sequence id its
producer name has sent before is not stored again) and the write of a group of sends.
The wire format, the answers and the client's resend rules stay with the front end."""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.dispatch.deduplication import NOT_DUP, MessageDeduplication
from broker.dispatch.names import TopicName
from broker.ledger.entry import EntryFormatError, metadata_of
from broker.ledger.position import Position

if TYPE_CHECKING:
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


class ProducerSession:
    """A client's producer on topic ``topic_name``. ``topic`` is the loaded topic it is
    counted in (None before :meth:`attach` and after the topic unloaded). O(1) state."""

    __slots__ = ("name", "next_sequence_id", "service", "topic", "topic_name")

    def __init__(
        self, service: BrokerService, topic_name: TopicName, name: str, first_sequence_id: int = 0
    ) -> None:
        self.service = service
        self.topic_name = topic_name
        self.name = name
        self.next_sequence_id = first_sequence_id
        self.topic: PersistentTopic | None = None

    def attach(self, topic: PersistentTopic) -> None:
        """Count this producer among ``topic``'s: ProducerLimitError over
        maxProducersPerTopic (nothing changed). O(1)."""
        self.service.add_producer(topic, self)
        self.topic = topic
        topic.deduplication.producer_added(self.name)

    def detach(self) -> None:
        """The session ends: its topic counts it no more (writes already queued still
        go to that topic, as they would have). O(1)."""
        topic = self.topic
        if topic is not None and self in topic.producers:
            del topic.producers[self]
            topic.deduplication.producer_removed(self.name)

    def last_sequence_id(self) -> int:
        """The highest sequence id the topic has had from a producer of this name, -1
        if none or deduplication is off (PRODUCER_SUCCESS's ``last_sequence_id``, where
        a client continues its sequence ids from). O(1)."""
        topic = self.topic
        return -1 if topic is None else topic.deduplication.last_sequence_id(self.name)

    def close_from_broker(self) -> None:
        """The topic unloads or is deleted (it forgets its producers): the front end
        tells its client, or :meth:`current_topic` counts the producer again."""
        self.topic = None

    async def current_topic(self) -> PersistentTopic:
        """The topic to write to: the one this producer is counted in, or the topic
        loaded anew after an unload, where it is counted again as a client that
        reconnects is (ProducerLimitError if it has no room)."""
        topic = await self.service.get_topic(self.topic_name, create=True)
        if topic is not self.topic:
            self.detach()
            self.topic = None
            self.attach(topic)
        return topic

    def sequence_ids(self, count: int) -> int:
        """Take ``count`` sequence ids for messages that came without one; the first.
        O(1)."""
        first = self.next_sequence_id
        self.next_sequence_id += count
        return first

    async def publish(self, entries: list[bytes], messages: int) -> Position:
        """Store ``entries`` (``messages`` messages) in the topic this producer is
        counted in, durably; the first entry's position. The topic's own errors (a
        storage fault: nothing stored)."""
        topic = self.topic
        if topic is None:
            topic = await self.current_topic()
        return await topic.publish(entries, messages)

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
            first = await topic.publish([sent[3] for sent in sends], sum(s[2] for s in sends))
            return first, None
        return await self._publish_deduplicated(topic, deduplication, sends)

    async def _publish_deduplicated(
        self, topic: PersistentTopic, deduplication: MessageDeduplication, sends: list[Sent]
    ) -> tuple[Position, list[int]]:
        name = self.name
        verdicts: list[int] = []
        entries: list[bytes] = []
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
                messages += count
        if not entries:
            return DUPLICATE_POSITION, verdicts
        try:
            first = await topic.publish(entries, messages, (name, stored))
        except Exception:
            deduplication.failed(name)
            raise
        return first, verdicts
