"""Exclusive and Failover: the active consumer is the one of the highest priority, then
the lowest name, then the earliest attached, found in O(log n) as consumers attach and
detach. Finding it by a walk over every consumer made a connection of 12,000 Failover
consumers hang up in O(n^2): another client's send waited 28 s (each detach, all in one
turn of the loop, walked the others)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from broker.dispatch.consumer import Consumer
from broker.dispatch.names import TopicName
from broker.dispatch.service import BrokerService, ConsumerOptions

TOPIC = TopicName("public", "default", "single-active")
_LEVEL: Any = Consumer.priority_level  # the slot's descriptor

#: consumers of the flood: enough that a walk over all of them at each attach and detach
#: (1000 x 1000 / 2 reads at least) is far past the bound below, few enough to be cheap
FLOOD = 1000


class Counted(Consumer):
    """A consumer whose priority level counts its reads: the dispatcher's work to rank it."""

    __slots__ = ()
    reads = 0

    @property  # type: ignore[override]
    def priority_level(self) -> int:
        Counted.reads += 1
        level: int = _LEVEL.__get__(self)
        return level

    @priority_level.setter
    def priority_level(self, level: int) -> None:
        _LEVEL.__set__(self, level)


class Heard(Counted):
    """Records what it heard of its own state."""

    __slots__ = ("heard",)

    def active_changed(self, active: bool) -> None:
        self.heard = active
        super().active_changed(active)


async def attach(service: BrokerService, name: str, level: int = 0) -> Consumer:
    options = ConsumerOptions(subscription_type="Failover", name=name, priority_level=level)
    return await service.create_consumer(TOPIC, "s", options, factory=Heard)


@pytest.mark.parametrize("order", ["attached", "reversed"])
async def test_a_flood_of_failover_consumers_attaches_and_detaches_in_n_log_n(
    service: BrokerService, order: str
) -> None:
    """Names rising with attach order (each detach in attach order takes the active one
    away: the worst case of a cached minimum) or falling (each attach takes over)."""
    names = [f"c{i:05d}" for i in range(FLOOD)]
    if order == "reversed":
        names.reverse()
    Counted.reads = 0
    consumers = [await attach(service, name) for name in names]
    for consumer in consumers:
        service.close_consumer(consumer)
    assert Counted.reads < 40 * FLOOD, Counted.reads


async def test_the_active_consumer_is_the_highest_priority_then_lowest_name_then_first(
    service: BrokerService,
) -> None:
    rng = random.Random(7)
    attached: list[tuple[int, str, int, Consumer]] = []
    for index in range(60):
        level, name = rng.randrange(3), f"n{rng.randrange(10)}"
        attached.append((level, name, index, await attach(service, name, level)))
    topic = service.topics[TOPIC]
    dispatcher = topic.subscriptions["s"].dispatcher
    assert dispatcher is not None
    while attached:
        expected = min(attached)[3]
        assert dispatcher.active_consumer() is expected
        assert [c for *_, c in attached if getattr(c, "heard", False)] == [expected]
        leaving = attached.pop(rng.randrange(len(attached)))
        service.close_consumer(leaving[3])
    assert dispatcher.active_consumer() is None
