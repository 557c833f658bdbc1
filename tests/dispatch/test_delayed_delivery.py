"""Delayed delivery in the dispatch layer, on virtual time: messages with a deliver-at
time wait on Shared and Key_Shared until due (never early when strict, at most a tick
early otherwise), go at once on Exclusive and Failover and when already due, survive a
consumer leaving and another coming, and are read again through the managed ledger's
replay read path when due.

Everything runs on the virtual loop with the broker's clock on it: the times asserted
are the virtual wall clock's at the instant the dispatcher handed each message over.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from broker.cache import DEFAULT_DESIGN, CacheConfig, create_stream
from broker.dispatch.consumer import Consumer
from broker.dispatch.delayed import (
    DelayedDeliveryConfig,
    DelayedDeliveryTracker,
    delay_error,
    precision_bits,
)
from broker.dispatch.dispatcher import DispatchConfig
from broker.dispatch.names import TopicName
from broker.dispatch.service import BrokerService, ServiceConfig
from broker.dispatch.service_config import ConsumerOptions
from broker.ledger.entry import Entry, deliver_at_of, encode_message
from broker.ledger.position import Position
from simulation import loop as sim
from simulation.loop import VirtualClock, VirtualEventLoop
from storage_stub.bookie.memory import InMemoryBookie, InMemoryMetadataStore

TOPIC = TopicName.of("public", "default", "delayed")


def running_loop() -> VirtualEventLoop:
    loop = asyncio.get_running_loop()
    assert isinstance(loop, VirtualEventLoop)
    return loop


class Recording(Consumer):
    """A dispatch consumer that notes when (virtual wall ms) each payload reached it."""

    arrivals: dict[bytes, int]
    clock: VirtualClock

    def deliver(self, entry: Entry, redelivery_count: int, now_ns: int) -> None:
        super().deliver(entry, redelivery_count, now_ns)
        if not hasattr(self, "arrivals"):  # a delivery while it is being attached
            self.arrivals = {}
        self.arrivals[entry.decoded_messages()[0].payload] = self.clock.wall_ms()


DEFAULTS = DelayedDeliveryConfig()


def run(
    test: Callable[[BrokerService, VirtualClock], Awaitable[None]],
    delayed: DelayedDeliveryConfig = DEFAULTS,
) -> None:
    async def main() -> None:
        clock = VirtualClock(running_loop())
        Recording.clock = clock
        stream = create_stream(DEFAULT_DESIGN, CacheConfig(), clock)
        config = ServiceConfig(dispatch=DispatchConfig(delayed=delayed))
        service = BrokerService(config, InMemoryBookie(), InMemoryMetadataStore(), stream, clock)
        try:
            await test(service, clock)
        finally:
            await service.close()

    sim.run(main(), limit_s=3 * 86_400)


async def consumer(
    service: BrokerService, clock: VirtualClock, sub_type: str, name: str = "sub"
) -> Recording:
    made = await service.create_consumer(
        TOPIC,
        name,
        ConsumerOptions(
            subscription_type=sub_type, receiver_queue_size=100, initial_position="Earliest"
        ),
        Recording,
    )
    assert isinstance(made, Recording)
    if not hasattr(made, "arrivals"):
        made.arrivals = {}
    return made


async def publish(service: BrokerService, payload: bytes, deliver_at: int | None) -> Position:
    topic = await service.get_topic(TOPIC, create=True)
    now = service.clock.wall_ms()
    return await topic.publish([encode_message(payload, now, deliver_at=deliver_at)])


async def settle(seconds: float) -> None:
    """Let virtual time pass (the dispatcher's timers fire on the way)."""
    await asyncio.sleep(seconds)


STRICT = DelayedDeliveryConfig(strict=True)


@pytest.mark.parametrize("sub_type", ["Shared", "Key_Shared"])
def test_strict_never_early_and_at_most_a_tick_late(sub_type: str) -> None:
    async def test(service: BrokerService, clock: VirtualClock) -> None:
        reader = await consumer(service, clock, sub_type)
        start = clock.wall_ms()
        await publish(service, b"now", None)
        await publish(service, b"in-5s", start + 5000)
        await publish(service, b"in-2.3s", start + 2300)
        await settle(0.1)
        assert set(reader.arrivals) == {b"now"}
        subscription = reader.subscription
        assert subscription.delayed_messages() == 2  # type: ignore[attr-defined]
        await settle(10)
        arrived = reader.arrivals
        assert set(arrived) == {b"now", b"in-5s", b"in-2.3s"}
        for payload, due in ((b"in-5s", start + 5000), (b"in-2.3s", start + 2300)):
            assert due <= arrived[payload] <= due + 1000 + 2, (payload, arrived[payload] - due)
        assert subscription.delayed_messages() == 0  # type: ignore[attr-defined]

    run(test, STRICT)


def test_not_strict_at_most_one_tick_early() -> None:
    async def test(service: BrokerService, clock: VirtualClock) -> None:
        reader = await consumer(service, clock, "Shared")
        start = clock.wall_ms()
        dues = {f"m{i}".encode(): start + 1500 + 700 * i for i in range(6)}
        for payload, due in dues.items():
            await publish(service, payload, due)
        await settle(0.1)
        assert reader.arrivals == {}
        await settle(10)
        assert set(reader.arrivals) == set(dues)
        for payload, due in dues.items():
            assert due - 1000 <= reader.arrivals[payload] <= due + 1000 + 2

    run(test)


@pytest.mark.parametrize("sub_type", ["Exclusive", "Failover"])
def test_exclusive_and_failover_deliver_at_once(sub_type: str) -> None:
    async def test(service: BrokerService, clock: VirtualClock) -> None:
        reader = await consumer(service, clock, sub_type)
        start = clock.wall_ms()
        await publish(service, b"later", start + 60_000)
        await settle(0.01)
        assert reader.arrivals == {b"later": start}

    run(test)


def test_deliver_at_in_the_past_or_within_the_cutoff_goes_at_once() -> None:
    async def test(service: BrokerService, clock: VirtualClock) -> None:
        reader = await consumer(service, clock, "Shared")
        start = clock.wall_ms()
        await publish(service, b"past", start - 60_000)
        await publish(service, b"now", start)
        await settle(0.01)
        assert reader.arrivals == {b"past": start, b"now": start}

    run(test, STRICT)


def test_a_deliver_at_at_the_end_of_int64_is_held() -> None:
    async def test(service: BrokerService, clock: VirtualClock) -> None:
        reader = await consumer(service, clock, "Shared")
        await publish(service, b"never", 2**63 - 1)
        await publish(service, b"now", None)
        await settle(2 * 86_400)  # the timer fires daily and finds nothing due
        assert set(reader.arrivals) == {b"now"}
        assert reader.subscription.delayed_messages() == 1  # type: ignore[attr-defined]

    run(test, STRICT)


def test_disabled_delivers_at_once() -> None:
    async def test(service: BrokerService, clock: VirtualClock) -> None:
        reader = await consumer(service, clock, "Shared")
        start = clock.wall_ms()
        await publish(service, b"later", start + 60_000)
        await settle(0.01)
        assert reader.arrivals == {b"later": start}

    run(test, DelayedDeliveryConfig(enabled=False))


def test_held_messages_survive_a_consumer_leaving_and_are_read_again() -> None:
    """The delayed message is held while no consumer is there; the one that comes
    back gets it when due, read through the ledger's replay read path."""

    async def test(service: BrokerService, clock: VirtualClock) -> None:
        first = await consumer(service, clock, "Shared")
        start = clock.wall_ms()
        position = await publish(service, b"delayed", start + 3000)
        await settle(0.1)
        topic = await service.get_topic(TOPIC, create=False)
        replays: list[list[Position]] = []
        read_positions = topic.ledger.read_positions

        async def recorded(positions: Any, reader: str) -> list[Entry]:
            positions = list(positions)
            replays.append(positions)
            return await read_positions(positions, reader)

        topic.ledger.read_positions = recorded  # type: ignore[method-assign]
        service.close_consumer(first)
        await settle(1)
        second = await consumer(service, clock, "Shared")
        await settle(1)
        assert second.arrivals == {} and first.arrivals == {}
        await settle(5)
        assert set(second.arrivals) == {b"delayed"}
        assert start + 3000 <= second.arrivals[b"delayed"]
        assert replays == [[position]]

    run(test, STRICT)


def test_a_subscription_turned_exclusive_gets_what_shared_held_at_once() -> None:
    async def test(service: BrokerService, clock: VirtualClock) -> None:
        shared = await consumer(service, clock, "Shared")
        start = clock.wall_ms()
        await publish(service, b"delayed", start + 60_000)
        await settle(0.1)
        assert shared.arrivals == {}
        service.close_consumer(shared)
        exclusive = await consumer(service, clock, "Exclusive")
        await settle(0.1)
        assert set(exclusive.arrivals) == {b"delayed"}
        assert exclusive.arrivals[b"delayed"] < start + 1000

    run(test, STRICT)


def test_cursor_reset_tracks_again() -> None:
    async def test(service: BrokerService, clock: VirtualClock) -> None:
        reader = await consumer(service, clock, "Shared")
        start = clock.wall_ms()
        first = await publish(service, b"delayed", start + 3000)
        await settle(0.1)
        subscription = reader.subscription
        await subscription.reset_cursor(first)  # type: ignore[attr-defined]
        await settle(0.1)
        assert subscription.delayed_messages() == 1  # type: ignore[attr-defined]
        assert reader.arrivals == {}
        await settle(5)
        assert set(reader.arrivals) == {b"delayed"}

    run(test, STRICT)


@pytest.mark.parametrize(("bucket", "read_all"), [(False, False), (True, True)])
def test_fixed_delays_pause_reading_only_with_the_in_memory_tracker(
    bucket: bool, read_all: bool
) -> None:
    async def test(service: BrokerService, clock: VirtualClock) -> None:
        reader = await consumer(service, clock, "Shared")
        start = clock.wall_ms()
        for index in range(10):  # one read each (a read takes what is there)
            await publish(service, f"m{index}".encode(), start + 10_000 + index)
            await settle(0.01)
        subscription = reader.subscription
        held = subscription.delayed_messages()  # type: ignore[attr-defined]
        assert held == (10 if read_all else 3)
        await settle(20)
        assert len(reader.arrivals) == 10

    run(test, dataclasses.replace(STRICT, bucket=bucket, fixed_delay_lookahead=3))


# ---------------------------------------------------------------------- units


def test_precision_bits_as_pulsar() -> None:
    assert precision_bits(1000) == 9  # 512 ms buckets
    assert precision_bits(1) == 0
    assert precision_bits(1024) == 10


def test_tracker_rounds_down_unless_strict() -> None:
    def due_bucket(config: DelayedDeliveryConfig) -> int:
        async def main() -> int:
            clock = VirtualClock(running_loop(), epoch_wall_ms=0)
            tracker = DelayedDeliveryTracker(config, clock, lambda: None)
            assert tracker.add(Position(1, 1), 10_300)
            assert tracker.add(Position(1, 1), 10_300)  # held once
            assert len(tracker) == 1
            bucket: int = tracker._held[Position(1, 1)]
            tracker.close()
            return bucket

        result: int = sim.run(main())
        return result

    assert due_bucket(DelayedDeliveryConfig()) == 10_240  # 20 x 512, down
    assert due_bucket(DelayedDeliveryConfig(strict=True)) == 10_752  # 21 x 512, up
    assert due_bucket(DelayedDeliveryConfig(bucket=True)) == 10_300  # exact


def test_max_delay_refused_from_publish_time() -> None:
    config = DelayedDeliveryConfig(max_delay_ms=60_000)
    ok = encode_message(b"x", 1_000_000, deliver_at=1_060_000)
    too_far = encode_message(b"x", 1_000_000, deliver_at=1_060_001)
    assert delay_error(ok, config) is None
    refused = "Exceeds max allowed delivery delay of 60000 milliseconds"
    assert delay_error(too_far, config) == refused
    assert delay_error(too_far, DelayedDeliveryConfig()) is None  # 0: no limit
    assert delay_error(too_far, dataclasses.replace(config, enabled=False)) is None
    assert delay_error(encode_message(b"x", 1_000_000), config) is None


def test_deliver_at_of_reads_only_the_field() -> None:
    assert deliver_at_of(encode_message(b"x", 5, deliver_at=123)) == 123
    assert deliver_at_of(encode_message(b"x", 5)) is None
    # the field's tag bytes in a producer name or payload are not the field
    assert deliver_at_of(encode_message(b"\x98\x01", 5, producer_name="\x18\x01")) is None
    assert deliver_at_of(b"not an entry") is None
