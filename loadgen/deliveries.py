"""Which published messages reached which subscription, message by message: what lets a
drain tell a message the broker lost from one it delivered twice.

The run's plain counters (``Run.first_deliveries_ever``: deliveries whose redelivery
count is 0) cannot: a broker that restarts before the acknowledgements reached its
store delivers those messages again as first deliveries of the new broker, and one
such repeat hides a message that never came. Here each message has an identity, its
producer's slot (one per producer of the run) and the sequence number that producer gave
it, carried with the message (the ``loadgen-id`` property ``slot:sequence`` for the
HTTP and pulsar drivers; the producer name and sequence id of the entry's metadata for
the simulation's clients). Per producer one bitset says which of its messages were
acknowledged on publish, and one per subscription which were delivered there (at
least once, whatever their redelivery count). A message delivered twice sets its bit
once, so the counts are of distinct messages.

Memory: ``1 + subscriptions`` bits per message a producer sent (125 kB per million
messages and subscription), grown as the sequence grows. Each call is O(1) but
``published``, which is O(subscriptions).
"""

from __future__ import annotations

#: the message property that carries a message's identity (``slot:sequence``)
ID_PROPERTY = "loadgen-id"


def _room(bits: bytearray, byte: int) -> None:
    """Grow ``bits`` to hold byte ``byte``, at least doubling (amortised O(1))."""
    if byte >= len(bits):
        bits.extend(bytes(max(byte + 1 - len(bits), len(bits))))


class Deliveries:
    """The messages of every producer of a run, and where they have been delivered.

    ``published_count`` is how many distinct messages were acknowledged on publish;
    ``distinct`` how many (message, subscription) pairs of those were delivered, each
    pair once however often it came; ``missing()`` the pairs still owed."""

    __slots__ = (
        "_delivered",
        "_issued",
        "_published",
        "_slots",
        "_subscriptions",
        "distinct",
        "published_count",
    )

    def __init__(self, subscriptions: int) -> None:
        self._slots: dict[str, int] = {}
        #: per slot: sequence numbers given so far (the next one)
        self._issued: list[int] = []
        #: per slot: which messages were acknowledged on publish
        self._published: list[bytearray] = []
        #: per slot, per subscription index: which messages were delivered there
        self._delivered: list[list[bytearray]] = []
        #: subscriptions per topic: each message is owed once to each
        self._subscriptions = subscriptions
        self.published_count = 0
        self.distinct = 0

    def producer(self, name: str) -> int:
        """The slot of the producer ``name`` (a new one for a new name). O(1)."""
        slot = self._slots.get(name)
        if slot is None:
            slot = self._slots[name] = len(self._issued)
            self._issued.append(0)
            self._published.append(bytearray())
            self._delivered.append([bytearray() for _ in range(self._subscriptions)])
        return slot

    def slot_of(self, name: str) -> int | None:
        """The slot of a producer registered as ``name``, None for any other. O(1)."""
        return self._slots.get(name)

    def issue(self, slot: int, count: int = 1) -> int:
        """The next ``count`` sequence numbers of ``slot``'s producer (0, 1, ...): the
        first of them. O(1)."""
        sequence = self._issued[slot]
        self._issued[slot] = sequence + count
        return sequence

    def published(self, slot: int, sequence: int) -> None:
        """The broker acknowledged the message's publish (again: counted once); pairs
        delivered before the acknowledgement count now. O(subscriptions)."""
        byte, mask = sequence >> 3, 1 << (sequence & 7)
        bits = self._published[slot]
        _room(bits, byte)
        if bits[byte] & mask:
            return
        bits[byte] |= mask
        self.published_count += 1
        for delivered in self._delivered[slot]:
            if byte < len(delivered) and delivered[byte] & mask:
                self.distinct += 1

    def delivered(self, slot: int, sequence: int, subscription: int) -> bool:
        """The message reached subscription ``subscription`` (its index); whether this
        is its first arrival there. An identity this run never issued is ignored (False).
        O(1)."""
        if not 0 <= slot < len(self._issued) or not 0 <= sequence < self._issued[slot]:
            return False
        byte, mask = sequence >> 3, 1 << (sequence & 7)
        bits = self._delivered[slot][subscription]
        _room(bits, byte)
        if bits[byte] & mask:
            return False
        bits[byte] |= mask
        published = self._published[slot]
        if byte < len(published) and published[byte] & mask:
            self.distinct += 1
        return True

    def delivered_id(self, identity: str | None, subscription: int) -> bool:
        """``delivered`` for an identity as the ``loadgen-id`` property carries it
        (``slot:sequence``); anything else is ignored (False). O(1)."""
        if not identity:
            return False
        slot, _, sequence = identity.partition(":")
        try:
            return self.delivered(int(slot), int(sequence), subscription)
        except ValueError:
            return False

    def missing(self) -> int:
        """(message, subscription) pairs acknowledged on publish and never delivered.
        O(1)."""
        return self.published_count * self._subscriptions - self.distinct


def identity(slot: int, sequence: int) -> str:
    """The ``loadgen-id`` property's value for a message."""
    return f"{slot}:{sequence}"
