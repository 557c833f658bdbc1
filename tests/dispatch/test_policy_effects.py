"""What retention, message TTL and backlog quota policies do to a topic, on a manual
clock: consumed ledgers kept for the retention and trimmed after it, messages expired by
the TTL check, producers refused or disconnected and backlogs evicted by the quota check."""

from __future__ import annotations

import pytest

from broker.cache import DEFAULT_DESIGN, CacheConfig, create_stream
from broker.clock import ManualClock
from broker.dispatch.backlog_quota import ProducerBlockedError, quota_json
from broker.dispatch.names import TopicName
from broker.dispatch.policies import BACKLOG_QUOTA, MESSAGE_TTL, RETENTION
from broker.dispatch.service import BrokerService, ServiceConfig
from broker.dispatch.topic import PersistentTopic
from broker.ledger.entry import encode_message
from broker.ledger.managed_ledger import ManagedLedgerConfig
from broker.session.producer import ProducerSession
from storage_stub.bookie.memory import InMemoryBookie, InMemoryMetadataStore

ORDERS = TopicName("shop", "eu", "orders")
MINUTE_MS = 60_000


async def make_service(clock: ManualClock, **config: object) -> BrokerService:
    service = BrokerService(
        ServiceConfig(
            ledger=ManagedLedgerConfig(max_entries_per_ledger=2, min_rollover_ms=0),
            **config,  # type: ignore[arg-type]
        ),
        InMemoryBookie(),
        InMemoryMetadataStore(),
        create_stream(DEFAULT_DESIGN, CacheConfig(max_size_bytes=0), ManualClock()),
        clock,
    )
    await service.policies.load()
    await service.policies.create_namespace("shop", "eu")
    return service


async def publish(
    service: BrokerService, topic: PersistentTopic, count: int, size: int = 8
) -> None:
    """``count`` entries of ``size`` bytes, rolling a ledger over every two."""
    clock = service.clock
    for _ in range(count):
        await topic.publish([encode_message(b"x" * size, clock.wall_ms())])
        await topic.ledger.maybe_roll_over()


def ledger_ids(topic: PersistentTopic) -> list[int]:
    return [info.ledger_id for info in topic.ledger.ledgers]


# ---------------------------------------------------------------------- retention


async def test_consumed_ledgers_stay_for_the_retention_time_and_go_after_it() -> None:
    clock = ManualClock()
    service = await make_service(clock)
    topic = await service.get_topic(ORDERS, create=True)
    subscription = await topic.create_subscription("s", "earliest")
    await publish(service, topic, 6)
    await subscription.skip_all()
    await service.policies.set_namespace("shop", "eu", RETENTION, {
        "retentionTimeInMinutes": 60,
        "retentionSizeInMB": -1,
    })  # fmt: skip
    before = ledger_ids(topic)
    assert len(before) >= 3
    clock.advance_ms(59 * MINUTE_MS)
    await service.upkeep()
    assert ledger_ids(topic) == before  # consumed, but retained
    clock.advance_ms(2 * MINUTE_MS)
    await service.upkeep()
    assert ledger_ids(topic) == before[-1:]  # only the current ledger stays
    await service.close()


async def test_without_a_retention_consumed_ledgers_go_at_once_but_unread_ones_stay() -> None:
    clock = ManualClock()
    service = await make_service(clock)
    topic = await service.get_topic(ORDERS, create=True)
    await publish(service, topic, 6)
    before = ledger_ids(topic)
    clock.advance_ms(MINUTE_MS)
    await service.upkeep()
    assert ledger_ids(topic) == before  # no subscription: kept under the broker's defaults
    # a retention set on the topic applies to it as Pulsar's: 0 and 0, deleted at once
    await service.policies.set_topic(ORDERS, RETENTION, {
        "retentionTimeInMinutes": 0,
        "retentionSizeInMB": 0,
    })  # fmt: skip
    await service.upkeep()
    assert ledger_ids(topic) == before[-1:]
    await service.close()


async def test_a_size_retention_keeps_the_newest_ledgers_within_it() -> None:
    clock = ManualClock()
    service = await make_service(clock)
    topic = await service.get_topic(ORDERS, create=True)
    subscription = await topic.create_subscription("s", "earliest")
    await publish(service, topic, 8, size=300_000)  # ledgers of about 600 KB
    await subscription.skip_all()
    await service.policies.set_topic(ORDERS, RETENTION, {
        "retentionTimeInMinutes": -1,
        "retentionSizeInMB": 1,
    })  # fmt: skip
    await service.upkeep()
    remaining = topic.ledger.total_size()
    assert 1024 * 1024 <= remaining < 1024 * 1024 + 700_000  # what stays holds at least 1 MB
    await service.close()


# ---------------------------------------------------------------------- TTL


async def test_the_ttl_check_expires_what_is_older_than_the_ttl_on_every_subscription() -> None:
    clock = ManualClock()
    service = await make_service(clock, message_ttl_s=3600)
    topic = await service.get_topic(ORDERS, create=True)
    first = await topic.create_subscription("a", "earliest")
    second = await topic.create_subscription("b", "earliest")
    await publish(service, topic, 3)
    clock.advance_ms(30_000)
    await publish(service, topic, 2)
    clock.advance_ms(40_000)  # the first three are 70 s old, the last two 40 s
    assert await service.check_message_expiry() == 0  # the broker's default: an hour
    await service.policies.set_namespace("shop", "eu", MESSAGE_TTL, 60)
    await service.check_message_expiry()
    assert (first.backlog(), second.backlog()) == (2, 2)
    await service.policies.set_topic(ORDERS, MESSAGE_TTL, 10)  # the topic's wins
    await service.check_message_expiry()
    assert (first.backlog(), second.backlog()) == (0, 0)
    await service.close()


# ---------------------------------------------------------------------- backlog quotas


async def set_quota(service: BrokerService, limit_size: int, limit_time: int, policy: str) -> None:
    quota_type = "destination_storage" if limit_size >= 0 else "message_age"
    await service.policies.set_namespace(
        "shop", "eu", BACKLOG_QUOTA, {quota_type: quota_json(limit_size, limit_time, policy)}
    )


@pytest.mark.parametrize("policy", ["producer_request_hold", "producer_exception"])
async def test_producers_are_refused_and_disconnected_while_the_backlog_is_over_quota(
    policy: str,
) -> None:
    clock = ManualClock()
    service = await make_service(clock)
    topic = await service.get_topic(ORDERS, create=True)
    subscription = await topic.create_subscription("s", "earliest")
    connected = ProducerSession(service, ORDERS, "early")
    connected.attach(topic)
    await set_quota(service, 100, -1, policy)
    await publish(service, topic, 20)
    with pytest.raises(ProducerBlockedError) as refused:
        ProducerSession(service, ORDERS, "late").attach(topic)
    assert refused.value.hold == (policy == "producer_request_hold")
    assert await service.check_backlog_quotas() == 1
    assert connected.topic is None and not topic.producers  # disconnected
    await subscription.skip_all()
    ProducerSession(service, ORDERS, "after").attach(topic)  # under the quota again
    assert await service.check_backlog_quotas() == 0
    await service.close()


async def test_eviction_acknowledges_the_oldest_messages_down_to_the_quota() -> None:
    clock = ManualClock()
    service = await make_service(clock)
    topic = await service.get_topic(ORDERS, create=True)
    slow = await topic.create_subscription("slow", "earliest")
    await set_quota(service, 2_000, -1, "consumer_backlog_eviction")
    await publish(service, topic, 40, size=200)
    assert slow.backlog() == 40
    ProducerSession(service, ORDERS, "p").attach(topic)  # eviction never refuses producers
    await service.check_backlog_quotas()
    assert 0 < slow.backlog() < 40
    assert topic.ledger.size_after(slow.cursor.mark_delete_position) <= 0.9 * 2_000
    await service.close()


async def test_age_eviction_expires_messages_older_than_the_limit() -> None:
    clock = ManualClock()
    service = await make_service(clock)
    topic = await service.get_topic(ORDERS, create=True)
    slow = await topic.create_subscription("slow", "earliest")
    await set_quota(service, -1, 60, "consumer_backlog_eviction")
    await publish(service, topic, 4)
    clock.advance_ms(90_000)
    await publish(service, topic, 2)
    await service.check_backlog_quotas()
    assert slow.backlog() == 2
    await service.close()
