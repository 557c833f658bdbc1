"""Delayed delivery: Pulsar's ``DelayedDeliveryTracker`` for Shared and Key_Shared.

A message whose metadata carries ``deliver_at_time`` (a producer's ``deliver_at`` or
``deliver_after``) is held back when the dispatcher reads it: its position goes into the
subscription's tracker, the entry read for it is let go, and nothing is sent. When it is
due, the tracker hands the position back and the dispatcher reads it again from the
ledger, through its replay queue (the managed ledger's read path, cache then storage), as
Pulsar's dispatcher adds the tracker's due positions to its redelivery messages. So a
delayed message is read at least twice, and the second read, seconds or hours later, is
one the cache designs and the trace see.

The rules, as Pulsar's (checked against apache/pulsar master, 2026:
``AbstractDelayedDeliveryTracker``, ``InMemoryDelayedDeliveryTracker``,
``BucketDelayedDeliveryTracker``, ``AbstractPersistentDispatcherMultipleConsumers``):

- Only Shared and Key_Shared track; Exclusive and Failover deliver at once, as if there
  were no deliver-at time (their dispatcher never asks).
- The cutoff is now (``isDelayedDeliveryDeliverAtTimeStrict=true``) or now plus the tick
  time (false, the default: a message may go up to one tick early). A message due at or
  before the cutoff, a deliver-at in the past included, is delivered at once.
- The in-memory tracker keeps deliver-at times at the precision of the largest power of
  two not above the tick time (512 ms for 1 s): rounded down when not strict (a bucket is
  due once its start is within the cutoff less the bucket's width), up when strict (never
  early). The bucket tracker keeps them exact.
- One timer per tracker, on the broker's clock (asyncio's loop: virtual time in
  ``simulation``): set for the earliest time held, never sooner than one tick after it
  last fired; when it fires the dispatcher reads what is due.
- The in-memory tracker's fixed-delay detection: while every message tracked came in
  deliver-at order (within a tick) and no undelayed message was read since the tracker
  emptied, and it holds at least ``delayedDeliveryFixedDelayDetectionLookahead``
  messages none of which is due, the dispatcher stops reading new entries (they would
  all be tracked behind the ones held). The bucket tracker has no such pause.
- The tracker lives with the dispatcher: consumers leaving and coming back (a reconnect)
  keep it. A cursor reset clears it (what is re-read is tracked again). It is not
  durable in either variant here (see ``docs/broker.md``): after a restart or an unload
  the subscription reads from its mark-delete position again and tracks what is still
  delayed, which is what Pulsar's in-memory tracker does; Pulsar's bucket tracker would
  also recover its sealed buckets from snapshot ledgers, which brokerlab does not write.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from sortedcontainers import SortedDict

from broker.clock import Clock
from broker.ledger.entry import deliver_at_of, metadata_of
from broker.ledger.position import Position

#: delayedDeliveryTrackerFactoryClassName values Pulsar ships
IN_MEMORY_FACTORY = "org.apache.pulsar.broker.delayed.InMemoryDelayedDeliveryTrackerFactory"
BUCKET_FACTORY = "org.apache.pulsar.broker.delayed.BucketDelayedDeliveryTrackerFactory"
TRACKER_FACTORIES = (IN_MEMORY_FACTORY, BUCKET_FACTORY)
#: the longest a tracker's timer is set for (it is set again when it fires)
MAX_TIMER_MS = 86_400_000


@dataclass(frozen=True, slots=True)
class DelayedDeliveryConfig:
    """broker.conf's delayed-delivery keys (see ``broker.config``)."""

    #: delayedDeliveryEnabled
    enabled: bool = True
    #: delayedDeliveryTickTimeMillis
    tick_ms: int = 1000
    #: isDelayedDeliveryDeliverAtTimeStrict
    strict: bool = False
    #: delayedDeliveryTrackerFactoryClassName is the bucket factory
    bucket: bool = False
    #: delayedDeliveryFixedDelayDetectionLookahead (in-memory tracker only; 0: never)
    fixed_delay_lookahead: int = 50_000
    #: delayedDeliveryMaxDelayInMillis (0: no limit)
    max_delay_ms: int = 0


def precision_bits(tick_ms: int) -> int:
    """Low bits of a deliver-at time the in-memory tracker drops: those of the largest
    power of two not above the tick time (9 for 1000 ms: 512 ms buckets)."""
    return max(tick_ms.bit_length() - 1, 0)


def delay_error(data: bytes, config: DelayedDeliveryConfig) -> str | None:
    """Why an entry must be refused at produce (None: it may be stored): with a max
    delay set and delayed delivery on, a deliver-at time further than the max delay
    after the message's publish time, as Pulsar's ``isExceedMaximumDeliveryDelay``
    (answered NotAllowedError). O(metadata size); no parse for an entry without a
    deliver-at time."""
    if not config.enabled or config.max_delay_ms <= 0:
        return None
    deliver_at = deliver_at_of(data)
    if deliver_at is None:
        return None
    return delay_refusal(deliver_at, int(metadata_of(data).publish_time), config)


def delay_refusal(deliver_at: int, publish_time: int, config: DelayedDeliveryConfig) -> str | None:
    """:func:`delay_error` of a message not yet encoded. O(1)."""
    if config.enabled and 0 < config.max_delay_ms < deliver_at - publish_time:
        return f"Exceeds max allowed delivery delay of {config.max_delay_ms} milliseconds"
    return None


class DelayedDeliveryTracker:
    """The delayed messages of one dispatcher, by due time, and the timer that wakes it.
    ``add`` O(log buckets); ``pop_due`` O(k log k) for k positions; the count O(1).
    Positions are kept once (``add`` of a position held already is a no-op that holds
    it), so a re-read cannot make a message due twice."""

    __slots__ = (
        "_bits",
        "_buckets",
        "_clock",
        "_config",
        "_fixed_delay",
        "_held",
        "_highest",
        "_last_tick_ms",
        "_on_due",
        "_timer",
        "_timer_target",
    )

    def __init__(
        self, config: DelayedDeliveryConfig, clock: Clock, on_due: Callable[[], None]
    ) -> None:
        self._config = config
        self._clock = clock
        self._on_due = on_due
        #: 0 for the bucket tracker (exact times)
        self._bits = 0 if config.bucket else precision_bits(config.tick_ms)
        #: due time (rounded) -> positions due then, in the order they came
        self._buckets: SortedDict = SortedDict()
        #: position -> its bucket's due time
        self._held: dict[Position, int] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_target = -1
        self._last_tick_ms = 0
        self._highest = 0
        self._fixed_delay = True

    def __len__(self) -> int:
        return len(self._held)

    # ------------------------------------------------------------------ times

    def _cutoff(self) -> int:
        now = self._clock.wall_ms()
        return now if self._config.strict else now + self._config.tick_ms

    def _bucket_cutoff(self) -> int:
        """The latest bucket time that is due: a bucket rounded down is due once all of
        it is within the cutoff's early allowance. O(1)."""
        if self._config.strict or not self._bits:
            return self._cutoff()
        return self._cutoff() - (1 << self._bits) + 1

    def _bucket_of(self, deliver_at: int) -> int:
        bits = self._bits
        if not bits:
            return deliver_at
        if self._config.strict:
            deliver_at += (1 << bits) - 1  # up: never early
        return deliver_at & -(1 << bits)

    # ------------------------------------------------------------------ tracking

    def add(self, position: Position, deliver_at: int) -> bool:
        """Hold ``position`` until ``deliver_at`` (epoch ms); False when it is due
        already (at or before the cutoff: deliver it now). O(log buckets)."""
        if deliver_at <= self._cutoff():
            self._fixed_delay = False
            return False
        if position in self._held:
            return True
        bucket = self._bucket_of(deliver_at)
        positions = self._buckets.get(bucket)
        if positions is None:
            self._buckets[bucket] = [position]
        else:
            positions.append(position)
        self._held[position] = bucket
        self._update_timer()
        if deliver_at < self._highest - self._config.tick_ms:
            self._fixed_delay = False
        self._highest = max(self._highest, deliver_at)
        return True

    def not_delayed(self) -> None:
        """An entry without a deliver-at time was read: delays are not all fixed (Pulsar
        asks its tracker with deliver-at -1). O(1)."""
        self._fixed_delay = False

    def has_due(self) -> bool:
        """Whether a held message is due; when none is, the timer is set for the next.
        O(1)."""
        buckets = self._buckets
        if buckets and buckets.peekitem(0)[0] <= self._bucket_cutoff():
            return True
        self._update_timer()
        return False

    def pop_due(self, max_positions: int) -> list[Position]:
        """Up to ``max_positions`` due positions, earliest buckets first and each
        bucket's in position order; they are no longer held. O(k log k)."""
        out: list[Position] = []
        buckets = self._buckets
        held = self._held
        cutoff = self._bucket_cutoff()
        while buckets and len(out) < max_positions:
            bucket, positions = buckets.peekitem(0)
            if bucket > cutoff:
                break
            positions.sort()
            take = max_positions - len(out)
            chosen = positions[:take]
            out += chosen
            for position in chosen:
                del held[position]
            if take >= len(positions):
                del buckets[bucket]
            else:
                del positions[:take]
        if not held:
            self._highest = 0
            self._fixed_delay = True
        self._update_timer()
        return out

    def should_pause(self) -> bool:
        """Whether the dispatcher stops reading new entries (the in-memory tracker's
        fixed-delay detection, see the module's doc). O(1)."""
        lookahead = self._config.fixed_delay_lookahead
        return (
            not self._config.bucket
            and lookahead > 0
            and self._fixed_delay
            and len(self._held) >= lookahead
            and not self.has_due()
        )

    def positions(self) -> list[Position]:
        """Every held position (a dispatcher replaced hands them to its successor)."""
        return list(self._held)

    def clear(self) -> None:
        self._buckets.clear()
        self._held.clear()
        self._highest = 0
        self._fixed_delay = True
        self._update_timer()

    def close(self) -> None:
        self._cancel()

    # ------------------------------------------------------------------ the timer

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_target = -1

    def _update_timer(self) -> None:
        """Pulsar's ``updateTimer``: none while nothing is held; kept if set for the
        earliest bucket already; none if that is past (the dispatcher takes it on its
        next read); else set for the earliest bucket, but no sooner than one tick after
        the last firing."""
        if not self._buckets:
            self._cancel()
            return
        target = self._buckets.peekitem(0)[0]
        if target == self._timer_target:
            return
        self._cancel()
        now = self._clock.wall_ms()
        delay_ms = target - now
        if delay_ms < 0:
            return
        delay_ms = max(delay_ms, self._last_tick_ms + self._config.tick_ms - now)
        # a deliver-at years ahead (int64's end) is checked again daily rather than
        # handed to the loop's timer as is
        delay_ms = min(delay_ms, MAX_TIMER_MS)
        self._timer_target = target
        # one ms more: asyncio may fire a timer up to its clock's resolution early, and
        # a firing a hair before the target would find nothing due and wait a tick
        self._timer = asyncio.get_running_loop().call_later((delay_ms + 1) / 1000, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._timer_target = -1
        self._last_tick_ms = self._clock.wall_ms()
        self._on_due()
