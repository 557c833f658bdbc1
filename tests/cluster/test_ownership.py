"""The ownership table on its own: Pulsar's bundles (CRC32 of the full topic name, equal
ranges, the last closed at 0xffffffff), assignment to the live broker owning the fewest
bundles, an unloaded bundle moving on, and the errors."""

from __future__ import annotations

import itertools
import zlib

import pytest

from broker.dispatch import ownership as ownership_module
from broker.dispatch.errors import InvalidRequestError, UnavailableError
from broker.dispatch.names import TopicName
from broker.dispatch.ownership import (
    Ownership,
    ServiceNotReadyError,
    bundle_boundaries,
    bundle_range,
)
from tests.harness import pulsar_bundle

#: Pulsar's bundle names of a namespace of 4 bundles (``pulsar-admin namespaces bundles``)
PULSAR_FOUR = [
    "0x00000000_0x40000000",
    "0x40000000_0x80000000",
    "0x80000000_0xc0000000",
    "0xc0000000_0xffffffff",
]


def live(brokers: int, bundles: int = 4, dead: tuple[int, ...] = ()) -> Ownership:
    table = Ownership(brokers, bundles)
    for broker in table.brokers:
        broker.alive = broker.index not in dead
    return table


def topic(name: str) -> TopicName:
    return TopicName.parse(f"persistent://public/default/{name}")


def test_four_bundles_are_named_as_pulsar_names_them() -> None:
    assert Ownership(1, 4).bundle_names == PULSAR_FOUR
    assert bundle_boundaries(4) == [0, 0x40000000, 0x80000000, 0xC0000000, 0xFFFFFFFF]
    assert bundle_range(0x40000000, 0x80000000) == "0x40000000_0x80000000"


@pytest.mark.parametrize("count", [1, 2, 3, 4, 5, 16])
def test_boundaries_are_pulsars_for_any_count(count: int) -> None:
    # NamespacesBase.getBundles(n): segSize = 2**32 / n (integer), boundaries i * segSize,
    # and the last one 2**32 - 1
    seg = 2**32 // count
    expected = [index * seg for index in range(count)] + [2**32 - 1]
    assert bundle_boundaries(count) == expected
    names = Ownership(1, count).bundle_names
    assert names == [f"0x{lo:08x}_0x{hi:08x}" for lo, hi in itertools.pairwise(expected)]


def test_a_topics_bundle_holds_the_crc32_of_its_full_name() -> None:
    table = Ownership(1, 4)
    seen = set()
    for index in range(400):
        name = topic(f"t-{index}")
        value = zlib.crc32(str(name).encode())
        namespace, bundle = table.bundle_of(name)
        lower, upper = (int(part, 16) for part in bundle.split("_"))
        assert namespace == "public/default"
        assert lower <= value < upper or (upper == 0xFFFFFFFF and value == upper)
        assert bundle == pulsar_bundle(str(name))
        seen.add(bundle)
    assert seen == set(PULSAR_FOUR)  # 400 names fall in every bundle


def test_a_partition_is_placed_by_its_own_name() -> None:
    table = Ownership(1, 16)
    for index in range(64):
        name = f"persistent://public/default/p-partition-{index}"
        assert table.bundle_of(TopicName.parse(name))[1] == pulsar_bundle(name, 16)


def test_the_namespace_is_part_of_the_key() -> None:
    table = Ownership(1, 4)
    name = TopicName.parse("persistent://other/ns/x")
    assert table.bundle_of(name) == ("other/ns", pulsar_bundle(str(name)))


@pytest.mark.parametrize(
    ("value", "bundle"),
    [
        (0, PULSAR_FOUR[0]),
        (0x3FFFFFFF, PULSAR_FOUR[0]),
        (0x40000000, PULSAR_FOUR[1]),  # a lower bound is in its bundle, not the one before
        (0xBFFFFFFF, PULSAR_FOUR[2]),
        (0xC0000000, PULSAR_FOUR[3]),
        (0xFFFFFFFE, PULSAR_FOUR[3]),
        (0xFFFFFFFF, PULSAR_FOUR[3]),  # the last bundle is closed at the top
    ],
)
def test_bundle_edges(monkeypatch: pytest.MonkeyPatch, value: int, bundle: str) -> None:
    monkeypatch.setattr(ownership_module, "topic_hash", lambda _name: value)
    assert Ownership(1, 4).bundle_of(topic("any")) == ("public/default", bundle)


def test_the_top_hash_is_in_the_last_bundle_for_uneven_counts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ownership_module, "topic_hash", lambda _name: 0xFFFFFFFF)
    for count in (3, 5, 7):
        names = Ownership(1, count).bundle_names
        assert Ownership(1, count).bundle_of(topic("any"))[1] == names[-1]


def topics_in_distinct_bundles(table: Ownership, count: int) -> list[TopicName]:
    found: dict[tuple[str, str], TopicName] = {}
    index = 0
    while len(found) < count:
        name = topic(f"spread-{index}")
        found.setdefault(table.bundle_of(name), name)
        index += 1
    return list(found.values())


def test_assignment_balances_two_brokers() -> None:
    table = live(2, bundles=8)
    names = topics_in_distinct_bundles(table, 8)
    owners = [table.owner(name).index for name in names]
    # the fewest bundles first, the lowest index on a tie: they alternate
    assert owners == [0, 1, 0, 1, 0, 1, 0, 1]
    assert len(table.bundles_of(0)) == len(table.bundles_of(1)) == 4
    # asked again: the same owners, nothing reassigned
    assert [table.owner(name).index for name in names] == owners
    # two topics of one bundle have one owner
    same = next(
        topic(f"same-{i}")
        for i in range(1000)
        if table.bundle_of(topic(f"same-{i}")) == table.bundle_of(names[3])
    )
    assert table.owner(same).index == owners[3]


def test_assignment_skips_dead_brokers() -> None:
    table = live(3, bundles=8, dead=(0,))
    names = topics_in_distinct_bundles(table, 8)
    owners = [table.owner(name).index for name in names]
    assert 0 not in owners
    assert owners.count(1) == owners.count(2) == 4
    # a broker that dies keeps its bundles (until its session expires: release_all)
    table.brokers[1].alive = False
    assert [table.owner(name).index for name in names] == owners
    table.release_all(1)
    assert {table.owner(name).index for name in names} == {2}
    # a broker that comes back gets no owned bundle back, only new ones (it owns the
    # fewest)
    table.brokers[0].alive = True
    assert {table.owner(name).index for name in names} == {2}
    assert table.owner(TopicName.parse("persistent://other/ns/x")).index == 0


def test_an_unloaded_bundle_moves_to_the_other_live_broker() -> None:
    table = live(2)
    first, second = topics_in_distinct_bundles(table, 2)
    assert table.owner(first).index == 0
    assert table.owner(second).index == 1
    key = table.bundle_of(first)
    table.release(key, unloaded=True)
    assert key not in table.owners
    # broker 0 now owns nothing and broker 1 one bundle: the fewest-bundles rule alone
    # would give it back to broker 0; the unload passes broker 0 over
    assert table.owner(first).index == 1
    assert len(table.bundles_of(1)) == 2 and table.bundles_of(0) == []
    # a second unload moves it back (broker 1 passed over now)
    table.release(key, unloaded=True)
    assert table.owner(first).index == 0


def test_an_unload_does_not_pass_over_the_only_live_broker() -> None:
    table = live(2, dead=(1,))
    name = topics_in_distinct_bundles(table, 1)[0]
    assert table.owner(name).index == 0
    table.release(table.bundle_of(name), unloaded=True)
    assert table.owner(name).index == 0


def test_a_plain_release_does_not_pass_the_broker_over() -> None:
    table = live(2)
    first, second = topics_in_distinct_bundles(table, 2)
    assert [table.owner(first).index, table.owner(second).index] == [0, 1]
    table.release(table.bundle_of(first))  # a graceful stop's hand-over, say
    assert table.owner(first).index == 0  # fewest bundles, lowest index


def test_no_live_broker_is_service_not_ready() -> None:
    table = live(2, dead=(0, 1))
    with pytest.raises(ServiceNotReadyError) as caught:
        table.owner(topic("x"))
    # the front ends answer it as they answer every UnavailableError (503, retry)
    assert isinstance(caught.value, UnavailableError)
    assert table.owners == {}


def test_an_unknown_bundle_name_is_an_invalid_request() -> None:
    table = Ownership(2, 4)
    assert table.check_bundle(PULSAR_FOUR[2]) == PULSAR_FOUR[2]
    for bad in ("0x00000000_0x80000000", "0x00000000_0x40000001", "garbage", ""):
        with pytest.raises(InvalidRequestError):
            table.check_bundle(bad)
    # another bundle count names other bundles
    with pytest.raises(InvalidRequestError):
        Ownership(2, 2).check_bundle(PULSAR_FOUR[0])
