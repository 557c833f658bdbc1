"""Publish throttling on the binary protocol: when the broker stops reading a connection.

Pulsar bounds what producers can make it hold before their SENDs are answered in two
ways, both by turning a connection's reads off (Netty's auto-read; here the transport's
``pause_reading``), so the client's further SENDs wait in its socket and, once that is
full, in the client:

- **per connection**, ``maxPendingPublishRequestsPerConnection`` (1000): the SEND that
  brings the connection's unanswered SENDs to it stops reading; reads start again when
  answers bring them down to half;
- **per IO thread**, ``maxMessagePublishBufferSizeInMB``: the bytes of unanswered SENDs
  of every connection the thread serves; past it every one of those connections stops
  reading, and all read again at half. brokerlab serves every connection on one event
  loop, so the budget is the whole broker's.

A third reason is the connection's own output (PIP-434's
``pulsarChannelPauseReceivingRequestsIfUnwritable``): while what the client has not read
is over the high water mark, its further requests are not read either (:data:`UNWRITABLE`).

A fourth is brokerlab's own: a connection whose frames had their share of a turn of
the event loop is not read again until the next turn (:data:`BUSY`), so that one
connection's flood of cheap commands cannot hold the loop.

A connection is paused while any reason holds (:data:`PENDING_SENDS`,
:data:`PUBLISH_BUFFER`, :data:`UNWRITABLE`, :data:`BUSY`), as Pulsar's
``ServerCnxThrottleTracker`` counts its reasons.
"""

from __future__ import annotations

from typing import Protocol

#: the connection's own unanswered SENDs reached maxPendingPublishRequestsPerConnection
PENDING_SENDS = 1
#: the broker's unanswered SEND bytes passed maxMessagePublishBufferSizeInMB
PUBLISH_BUFFER = 2
#: the connection's unsent output passed pulsarChannelWriteBufferHighWaterMark (with
#: pulsarChannelPauseReceivingRequestsIfUnwritable)
UNWRITABLE = 4
#: the connection had its share of frames for this turn of the event loop
BUSY = 8


class Throttled(Protocol):
    """A connection whose reads a throttle turns off and on."""

    def throttle(self, reason: int, on: bool) -> None: ...


class PublishBuffer:
    """The bytes of SENDs received and not answered yet, all connections together.

    ``add`` when a SEND is accepted, ``remove`` when it is answered (receipt or error) or
    its connection goes; crossing the limit upward throttles every member, coming down
    to half the limit releases them. A connection that joins while the limit is
    exceeded is not throttled until the next crossing, as in Pulsar. O(1) per call but
    at a crossing, O(connections) there."""

    __slots__ = ("exceeded", "limit", "members", "pending", "resume_at")

    def __init__(self, limit_bytes: int) -> None:
        #: 0: no limit
        self.limit = limit_bytes
        self.resume_at = limit_bytes // 2
        self.pending = 0
        self.exceeded = False
        self.members: set[Throttled] = set()

    def join(self, connection: Throttled) -> None:
        self.members.add(connection)

    def leave(self, connection: Throttled) -> None:
        self.members.discard(connection)

    def add(self, size: int) -> None:
        self.pending += size
        if self.limit and not self.exceeded and self.pending > self.limit:
            self.exceeded = True
            for member in self.members:
                member.throttle(PUBLISH_BUFFER, True)

    def remove(self, size: int) -> None:
        self.pending -= size
        if self.exceeded and self.pending <= self.resume_at:
            self.exceeded = False
            for member in self.members:
                member.throttle(PUBLISH_BUFFER, False)
