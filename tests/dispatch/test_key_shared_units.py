"""Key_Shared's pieces: the sticky-key hash and the AUTO_SPLIT selector."""

from __future__ import annotations

import random
from typing import Any, cast

from broker.dispatch.consumer import Consumer
from broker.dispatch.key_shared import SLOTS, AutoSplitSelector, sticky_slot
from tests.harness import python_calls


def test_sticky_slot_is_murmur3_32_of_the_key_modulo_65536() -> None:
    # Murmur3 x86 32-bit, seed 0, of b"hello" is 0x248bfa47 (the published test vector)
    assert sticky_slot(b"hello") == 0x248BFA47 % SLOTS
    assert sticky_slot(None) == sticky_slot(b"NONE_KEY")


def consumers(n: int) -> list[Consumer]:
    return [cast(Consumer, object()) for _ in range(n)]


def test_auto_split_halves_the_largest_range_for_each_new_consumer() -> None:
    a, b, c = consumers(3)
    selector = AutoSplitSelector()
    selector.add(a)
    assert selector.ranges() == [(0, 65535, a)]
    selector.add(b)
    assert selector.ranges() == [(0, 32767, b), (32768, 65535, a)]
    selector.add(c)  # both halves are equal: the first one splits
    assert selector.ranges() == [(0, 16383, c), (16384, 32767, b), (32768, 65535, a)]
    assert selector.select(0) is c and selector.select(20000) is b and selector.select(65535) is a


def test_a_leaving_consumer_hands_its_range_to_a_neighbour() -> None:
    a, b, c = consumers(3)
    selector = AutoSplitSelector()
    for consumer in (a, b, c):
        selector.add(consumer)
    selector.remove(b)
    assert selector.ranges() == [(0, 16383, c), (16384, 65535, a)]
    selector.remove(a)  # the last range: the one below takes it
    assert selector.ranges() == [(0, 65535, c)]
    selector.remove(c)
    assert selector.select(123) is None


def test_every_slot_has_exactly_one_owner_as_consumers_come_and_go() -> None:
    pool: list[Any] = consumers(6)
    selector = AutoSplitSelector()
    for consumer in pool:
        selector.add(consumer)
    for consumer in pool[1::2]:
        selector.remove(consumer)
    ranges = selector.ranges()
    assert ranges[0][0] == 0 and ranges[-1][1] == SLOTS - 1
    assert all(ranges[i][1] + 1 == ranges[i + 1][0] for i in range(len(ranges) - 1))
    assert {owner for _, _, owner in ranges} == set(pool[0::2])


class ReferenceSelector:
    """docs/key_shared.md's AUTO_SPLIT rule, walked as written: a joining consumer takes
    the lower half of the first largest range; a leaving one's range goes to the next
    range's owner (the previous one's, when it was the last)."""

    def __init__(self) -> None:
        self.ranges: list[list[Any]] = []  # [first, last, owner], in slot order

    def add(self, consumer: Any) -> None:
        if not self.ranges:
            self.ranges.append([0, SLOTS - 1, consumer])
            return
        index = max(range(len(self.ranges)), key=lambda i: self.ranges[i][1] - self.ranges[i][0])
        first, last, owner = self.ranges[index]
        middle = first + (last - first) // 2
        self.ranges[index : index + 1] = [[first, middle, consumer], [middle + 1, last, owner]]

    def remove(self, consumer: Any) -> None:
        index = next(i for i, r in enumerate(self.ranges) if r[2] is consumer)
        first, last, _ = self.ranges.pop(index)
        if index < len(self.ranges):
            self.ranges[index][0] = first
        elif index > 0:
            self.ranges[index - 1][1] = last


def test_the_selector_follows_the_documented_rule_through_any_joins_and_leaves() -> None:
    rng = random.Random(11)
    selector, reference = AutoSplitSelector(), ReferenceSelector()
    present: list[Any] = []
    for _ in range(3000):
        if present and rng.random() < 0.45:
            leaving = present.pop(rng.randrange(len(present)))
            selector.remove(leaving)
            reference.remove(leaving)
        else:
            joining = object()
            present.append(joining)
            selector.add(cast(Consumer, joining))
            reference.add(joining)
        assert selector.ranges() == [tuple(r) for r in reference.ranges]


def test_a_flood_of_consumers_joins_and_leaves_without_a_walk_over_the_ranges() -> None:
    """The Python calls made to add and remove 2,000 consumers: a walk over every range
    at each join (what made 12,000 Key_Shared consumers of one connection hold the loop
    for 7 s) makes millions."""
    pool = consumers(2000)
    selector = AutoSplitSelector()

    def churn() -> None:
        for consumer in pool:
            selector.add(consumer)
        for consumer in pool:
            selector.remove(consumer)

    _, calls = python_calls(churn)
    assert calls < 20 * len(pool), calls


def test_a_consumer_past_one_per_slot_owns_none_and_can_leave() -> None:
    pool = consumers(SLOTS + 1)
    selector = AutoSplitSelector()
    for consumer in pool:
        selector.add(consumer)
    ranges = selector.ranges()
    assert len(ranges) == SLOTS and all(first == last for first, last, _ in ranges)
    assert pool[-1] not in {owner for _, _, owner in ranges}
    selector.remove(pool[-1])
    selector.remove(pool[0])
    assert len(selector.ranges()) == SLOTS - 1


def test_a_consumer_that_owned_none_joins_when_one_leaves() -> None:
    """Past one consumer per slot, a joining consumer owns none (Pulsar refuses it; its
    client retries); once a consumer leaves, the first of those joins as any join does,
    so no consumer waits for slots while another holds a range it could split, and
    keyed messages never lack an owner while a consumer is attached."""
    pool = consumers(SLOTS + 2)
    selector = AutoSplitSelector()
    for consumer in pool:
        selector.add(consumer)
    first_idle, second_idle = pool[-2], pool[-1]
    selector.remove(pool[0])
    ranges = selector.ranges()
    owners = {owner for _, _, owner in ranges}
    assert len(ranges) == SLOTS and first_idle in owners and second_idle not in owners
    assert [first for first, _, _ in ranges] == list(range(SLOTS))
    # the owners all leave but one, which was idle: it ends with every slot
    for consumer in pool[1:-1]:
        selector.remove(consumer)
    assert selector.ranges() == [(0, SLOTS - 1, second_idle)]
    assert selector.select(0) is second_idle and selector.select(SLOTS - 1) is second_idle
