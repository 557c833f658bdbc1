"""The producer session every front end with a connected producer shares (the binary
protocol, the WebSocket API; HTTP produce has no session): its membership among the
topic's producers (counted against maxProducersPerTopic, forgotten when the topic
unloads), the sequence ids it gives messages that arrive without one, and the write
of a group of entries. The wire format, the answers and the client's resend rules stay
with the front end."""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.dispatch.delayed import delay_error
from broker.dispatch.names import TopicName
from broker.ledger.position import Position

if TYPE_CHECKING:
    from broker.dispatch.service import BrokerService
    from broker.dispatch.topic import PersistentTopic


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

    def detach(self) -> None:
        """The session ends: its topic counts it no more (writes already queued still
        go to that topic, as they would have). O(1)."""
        if self.topic is not None:
            self.topic.producers.pop(self, None)

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
        return await topic.publish(entries, messages)
