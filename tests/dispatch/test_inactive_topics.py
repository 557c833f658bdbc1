"""Inactive topics, on a driven clock: the upkeep visits only topics with something to
do, and the inactive-topic check deletes (per ``brokerDeleteInactiveTopicsMode``) or
unloads topics nobody used for long enough, without losing a message a subscription
still has to read."""

from __future__ import annotations

import asyncio

import pytest

from broker.cache import DEFAULT_DESIGN, CacheConfig, CacheEventStream, create_stream
from broker.clock import ManualClock
from broker.dispatch.names import TopicName
from broker.dispatch.service import BrokerService, ServiceConfig
from broker.dispatch.stats import PublisherStats
from broker.dispatch.topic import PersistentTopic
from broker.ledger.entry import encode_message
from broker.ledger.managed_ledger import ManagedLedgerConfig, ManagedLedgerError, metadata_key
from storage_stub.bookie.memory import InMemoryBookie, InMemoryMetadataStore
from tests.dispatch.test_service_unload import GatedCloseBookie

STATS_PERIOD_S = 1
MAX_INACTIVE_S = 60


def _no_cache() -> CacheEventStream:
    return create_stream(DEFAULT_DESIGN, CacheConfig(max_size_bytes=0), ManualClock())


def _service(clock: ManualClock, **config: object) -> BrokerService:
    settings: dict[str, object] = {
        "stats_update_frequency_s": STATS_PERIOD_S,
        "inactive_topics_frequency_s": MAX_INACTIVE_S,
        **config,
    }
    return BrokerService(
        ServiceConfig(**settings),  # type: ignore[arg-type]
        InMemoryBookie(),
        InMemoryMetadataStore(),
        _no_cache(),
        clock,
    )


def _name(local: str) -> TopicName:
    return TopicName("t", "ns", local)


async def _publish(service: BrokerService, local: str, payload: bytes = b"m") -> PersistentTopic:
    topic = await service.get_topic(_name(local), create=True)
    await topic.publish([encode_message(payload, 0)])
    return topic


async def _stats_rounds(service: BrokerService, clock: ManualClock, rounds: int) -> None:
    """Upkeep rounds a stats period apart: two put an untouched topic to sleep."""
    for _ in range(rounds):
        clock.advance_ms(STATS_PERIOD_S * 1000)
        await service.upkeep()


async def _inactive_for(service: BrokerService, clock: ManualClock, seconds: float) -> None:
    clock.advance_ms(seconds * 1000)
    await service.check_inactive_topics()


async def _exists(service: BrokerService, local: str) -> bool:
    return await service.metadata.get(metadata_key(str(_name(local)))) is not None


# --------------------------------------------------------------------------- upkeep


async def test_the_upkeep_visits_the_topics_in_use_not_every_loaded_topic() -> None:
    clock = ManualClock()
    service = _service(clock, delete_inactive_topics=False, unload_inactive_topics=False)
    for i in range(1000):
        await _publish(service, f"idle-{i}")
    await _stats_rounds(service, clock, 2)
    assert service.active_topics == 0, "a stats period untouched puts a topic to sleep"

    before = service.upkeep_topics_visited
    await _stats_rounds(service, clock, 10)
    assert service.upkeep_topics_visited == before, "no round looks at a sleeping topic"

    busy = await _publish(service, "idle-7")  # produce wakes one of them
    before = service.upkeep_topics_visited
    for _ in range(5):
        clock.advance_ms(STATS_PERIOD_S * 1000)
        await busy.publish([encode_message(b"more", 0)])
        await service.upkeep()
    assert service.upkeep_topics_visited - before == 5, "one topic in use: one visit a round"
    assert len(service.topics) == 1000


async def test_a_sleeping_topic_reports_zero_rates_and_wakes_on_a_consumer() -> None:
    clock = ManualClock()
    service = _service(clock, delete_inactive_topics=False, unload_inactive_topics=False)
    topic = await _publish(service, "rates")
    await _stats_rounds(service, clock, 2)
    assert service.active_topics == 0
    assert topic.stats()["msgRateIn"] == 0.0

    subscription = await topic.create_subscription("s", "earliest")
    assert service.active_topics == 1, "a new subscription wakes the topic"
    await _stats_rounds(service, clock, 2)
    assert service.active_topics == 0
    await subscription.cursor.reset(topic.ledger.last_confirmed)  # an admin moves the cursor
    assert service.active_topics == 1


async def test_time_wakes_a_sleeping_topic_to_roll_its_ledger_over_at_the_maximum_age() -> None:
    clock = ManualClock()
    service = _service(
        clock,
        delete_inactive_topics=False,
        unload_inactive_topics=False,
        ledger=ManagedLedgerConfig(max_rollover_ms=3_600_000),
    )
    topic = await _publish(service, "old-ledger")
    await topic.create_subscription("s", "latest")  # consumed everything: trimmable
    for i in range(50):
        await _publish(service, f"other-{i}")
    await _stats_rounds(service, clock, 2)
    first_ledger = topic.ledger.current_ledger
    assert first_ledger is not None and service.active_topics == 0

    clock.advance_ms(3_600_000)
    before = service.upkeep_topics_visited
    await service.upkeep()
    assert topic.ledger.current_ledger is not first_ledger, "rolled over at the maximum age"
    assert first_ledger.ledger_id not in [info.ledger_id for info in topic.ledger.ledgers]
    # the other 50 were created in the same millisecond: they roll over too, nothing else
    assert service.upkeep_topics_visited - before == 51


# --------------------------------------------------------------------------- deletion


async def test_delete_when_no_subscriptions_deletes_only_topics_without_subscriptions() -> None:
    clock = ManualClock()
    service = _service(clock, unload_inactive_topics=False)
    await _publish(service, "unsubscribed")
    subscribed = await _publish(service, "subscribed")
    await subscribed.create_subscription("s", "earliest")
    await _stats_rounds(service, clock, 2)

    await _inactive_for(service, clock, MAX_INACTIVE_S - 1)
    assert await _exists(service, "unsubscribed"), "not inactive for long enough yet"

    await _inactive_for(service, clock, 1)
    assert not await _exists(service, "unsubscribed")
    assert _name("unsubscribed") not in service.topics
    assert await _exists(service, "subscribed") and _name("subscribed") in service.topics
    assert service.inactive_topics_deleted == 1


async def test_delete_when_subscriptions_caught_up_keeps_a_backlog_and_deletes_the_rest() -> None:
    clock = ManualClock()
    service = _service(
        clock,
        inactive_topics_mode="delete_when_subscriptions_caught_up",
        unload_inactive_topics=False,
    )
    caught_up = await _publish(service, "caught-up")
    await caught_up.create_subscription("s", "latest")
    behind = await _publish(service, "behind")
    await behind.create_subscription("s", "earliest")
    await _stats_rounds(service, clock, 2)

    await _inactive_for(service, clock, MAX_INACTIVE_S)

    assert not await _exists(service, "caught-up")
    assert await _exists(service, "behind"), "a subscription with a backlog keeps its topic"
    entries = await behind.subscription("s").cursor.read_entries(10)
    assert len(entries) == 1


async def test_a_topic_with_a_producer_or_recent_messages_is_not_inactive() -> None:
    clock = ManualClock()
    service = _service(clock)
    with_producer = await _publish(service, "producer")

    class Producer:
        stats = PublisherStats("fake", 0)

        def close_from_broker(self) -> None:
            raise AssertionError("an inactive-topic check closed a connected producer")

    with_producer.producers[Producer()] = None
    recent = await _publish(service, "recent")
    await _stats_rounds(service, clock, 2)
    clock.advance_ms((MAX_INACTIVE_S - 1) * 1000)
    await recent.publish([encode_message(b"again", 0)])  # active again before the check
    await _inactive_for(service, clock, 1)

    assert await _exists(service, "producer") and await _exists(service, "recent")
    assert service.inactive_topics_deleted == service.inactive_topics_unloaded == 0


# --------------------------------------------------------------------------- unload


async def test_an_inactive_topic_that_must_stay_is_unloaded_and_loads_again_intact() -> None:
    clock = ManualClock()
    service = _service(clock)  # Pulsar's defaults: delete_when_no_subscriptions, and unload
    topic = await _publish(service, "kept", b"first")
    await topic.create_subscription("s", "earliest")
    await topic.publish([encode_message(b"second", 0)])
    await _stats_rounds(service, clock, 2)

    await _inactive_for(service, clock, MAX_INACTIVE_S)

    assert _name("kept") not in service.topics, "unloaded: its memory is freed"
    assert service.inactive_topics_unloaded == 1 and service.inactive_topics_deleted == 0
    reloaded = await service.get_topic(_name("kept"), create=False)
    entries = await reloaded.subscription("s").cursor.read_entries(10)
    assert [entry.data for entry in entries] == [
        encode_message(b"first", 0),
        encode_message(b"second", 0),
    ]


async def test_a_produce_racing_an_inactive_deletion_is_stored_in_the_new_topic() -> None:
    clock = ManualClock()
    bookie = GatedCloseBookie()
    service = BrokerService(
        ServiceConfig(stats_update_frequency_s=STATS_PERIOD_S, unload_inactive_topics=False),
        bookie,
        InMemoryMetadataStore(),
        _no_cache(),
        clock,
    )
    old = await _publish(service, "racing", b"old")
    await _stats_rounds(service, clock, 2)
    clock.advance_ms(60_000)

    check = asyncio.create_task(service.check_inactive_topics())
    await bookie.closing.wait()  # the deletion has fenced the ledger and is closing it
    produce = asyncio.create_task(_publish(service, "racing", b"new"))
    with pytest.raises(ManagedLedgerError):
        await old.publish([encode_message(b"late", 0)])  # a producer holding the old topic
    bookie.gate.set()
    assert await check == (1, 0)
    topic = await produce  # it waited for the deletion, then created the topic anew

    subscription = await topic.create_subscription("s", "earliest")
    entries = await subscription.cursor.read_entries(10)
    assert [entry.data for entry in entries] == [encode_message(b"new", 0)]
