"""Which published messages reached which subscription, message by message: what lets a
drain tell a message the broker lost from one it delivered twice.

The run's plain counters (``Run.first_deliveries_ever``: deliveries whose redelivery
count is 0) cannot: a broker that restarts before the acknowledgements reached its
store delivers those messages again as first deliveries of the new broker, and one
such repeat hides a message that never came. Here each message has an identity: its
producer's slot (one per producer of the run) and the sequence number that producer gave
it. Per producer one bitset says which of its messages were acknowledged on publish,
and one per subscription which were delivered there (at least once, whatever their
redelivery count). A message delivered twice sets its bit once, so the counts are of
distinct messages.

How a message carries its identity, packed into one integer (``sequence x producers +
slot``, below 2^48):

- the HTTP and pulsar drivers: the first :data:`ID_BYTES` bytes of the payload, big
  endian (the rest is the producer's seeded random bytes), so the broker sees the
  payload-only messages it saw before (the HTTP produce route's fast path takes only
  those); a message shorter than that carries it in the :data:`ID_PROPERTY` property
  instead, in decimal;
- the simulation's clients: the producer name and sequence id of the entry's metadata.

Memory: ``1 + subscriptions`` bits per message a producer sent (125 kB per million
messages and subscription), grown as the sequence grows. Each call is O(1) but
``published``, which is O(subscriptions).
"""

from __future__ import annotations

#: payload bytes that carry a message's identity (a multiple of 3: base64 encodes them
#: into 8 characters of their own, the rest of the payload after them)
ID_BYTES = 6
#: the message property that carries the identity of a message too short for it
ID_PROPERTY = "loadgen-id"


def _room(bits: bytearray, byte: int) -> None:
    """Grow ``bits`` to hold byte ``byte``, at least doubling (amortised O(1))."""
    if byte >= len(bits):
        bits.extend(bytes(max(byte + 1 - len(bits), len(bits))))


class Deliveries:
    """The messages of the run's ``producers`` producers, and where they have been
    delivered.

    ``published_count`` is how many distinct messages were acknowledged on publish;
    ``distinct`` how many (message, subscription) pairs of those were delivered, each
    pair once however often it came; ``missing()`` the pairs still owed."""

    __slots__ = (
        "_delivered",
        "_issued",
        "_producers",
        "_published",
        "_slots",
        "_subscriptions",
        "distinct",
        "published_count",
    )

    def __init__(self, subscriptions: int, producers: int) -> None:
        self._slots: dict[str, int] = {}
        #: per slot: sequence numbers given so far (the next one)
        self._issued: list[int] = []
        #: per slot: which messages were acknowledged on publish
        self._published: list[bytearray] = []
        #: per slot, per subscription index: which messages were delivered there
        self._delivered: list[list[bytearray]] = []
        #: subscriptions per topic: each message is owed once to each
        self._subscriptions = subscriptions
        #: how many slots there can be (an identity packs its slot below it)
        self._producers = max(producers, 1)
        self.published_count = 0
        self.distinct = 0

    def producer(self, name: str) -> int:
        """The slot of the producer ``name`` (a new one for a new name). O(1).
        ValueError past the run's number of producers."""
        slot = self._slots.get(name)
        if slot is None:
            slot = len(self._issued)
            if slot >= self._producers:
                raise ValueError(f"producer {name}: the run has {self._producers} producers")
            self._slots[name] = slot
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

    def identity(self, slot: int, sequence: int) -> int:
        """The message's identity as one integer (what a message carries). O(1)."""
        return sequence * self._producers + slot

    @property
    def producers(self) -> int:
        """The step between the identities of one producer's consecutive messages."""
        return self._producers

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

    def delivered_identity(self, identity: int, subscription: int) -> bool:
        """``delivered`` for a message's identity (:meth:`identity`). O(1)."""
        sequence, slot = divmod(identity, self._producers)
        return self.delivered(slot, sequence, subscription)

    def delivered_property(self, value: str | None, subscription: int) -> bool:
        """``delivered`` for the identity an :data:`ID_PROPERTY` property carries;
        anything else is ignored (False). O(1)."""
        if not value:
            return False
        try:
            identity = int(value)
        except ValueError:
            return False
        return self.delivered_identity(identity, subscription)

    def missing(self) -> int:
        """(message, subscription) pairs acknowledged on publish and never delivered.
        O(1)."""
        return self.published_count * self._subscriptions - self.distinct


def carries_identity_in_payload(message_size: int) -> bool:
    """Whether messages of ``message_size`` bytes carry their identity in their payload
    (else in the :data:`ID_PROPERTY` property)."""
    return message_size >= ID_BYTES


def identity_bytes(identity: int) -> bytes:
    """The payload's first :data:`ID_BYTES` bytes for a message's identity. O(1)."""
    return identity.to_bytes(ID_BYTES, "big")


def identity_of(payload: bytes) -> int:
    """The identity in a payload's first :data:`ID_BYTES` bytes. O(1)."""
    return int.from_bytes(payload[:ID_BYTES], "big")
