"""Backlog quotas as Pulsar's ``BacklogQuotaManager`` enforces them, and the other
policies a topic applies (retention on its managed ledger).

A quota of type ``destination_storage`` limits the bytes of the slowest subscription's
backlog (``limitSize``); one of type ``message_age`` the age of its oldest unacknowledged
message (``limitTime``, seconds). Each type resolves on its own: the topic's quota of that
type, else its namespace's, else the broker's default (``backlogQuotaDefault*``).
Exceeded, the quota's ``policy`` acts:

- ``producer_request_hold``: producers are disconnected and, while it lasts, refused
  with ProducerBlockedQuotaExceededError (clients retry, holding their sends);
- ``producer_exception``: the same, refused with ProducerBlockedQuotaExceededException
  (clients fail their sends);
- ``consumer_backlog_eviction``: the slowest subscriptions' oldest messages are
  acknowledged until the backlog is back to 90% of the limit (size), or until no message
  is older than the limit (age).
"""

from __future__ import annotations

from typing import Any

from broker.dispatch.errors import PreconditionFailedError
from broker.dispatch.policies import BACKLOG_QUOTA, RETENTION, PolicyStore
from broker.dispatch.service_config import ServiceConfig
from broker.dispatch.topic import PersistentTopic
from broker.ledger.position import Position

DESTINATION_STORAGE = "destination_storage"
MESSAGE_AGE = "message_age"
QUOTA_TYPES = (DESTINATION_STORAGE, MESSAGE_AGE)
RETENTION_POLICIES = ("producer_request_hold", "producer_exception", "consumer_backlog_eviction")
#: eviction drains a size backlog to this share of the limit, as Pulsar's
EVICTION_TARGET = 0.9


class ProducerBlockedError(PreconditionFailedError):
    """A backlog quota of the topic is exceeded: no producer may connect. ``hold``: the
    quota's policy is producer_request_hold (Pulsar's ProducerBlockedQuotaExceededError,
    which clients retry); otherwise producer_exception (…Exception: sends fail)."""

    def __init__(self, message: str, hold: bool) -> None:
        super().__init__(message)
        self.hold = hold


def quota_json(limit_size: int, limit_time: int, policy: str) -> dict[str, Any]:
    """Pulsar's BacklogQuota JSON (``limit`` is its deprecated twin of ``limitSize``)."""
    return {"limit": limit_size, "limitSize": limit_size, "limitTime": limit_time, "policy": policy}


def default_quota(config: ServiceConfig) -> dict[str, Any]:
    return quota_json(
        config.backlog_quota_limit_bytes, config.backlog_quota_limit_s, config.backlog_quota_policy
    )


def backlog_quota(
    policies: PolicyStore, config: ServiceConfig, topic: PersistentTopic, quota_type: str
) -> dict[str, Any]:
    """The quota of ``quota_type`` that applies to ``topic``: the topic's, else its
    namespace's, else the broker's default. O(1)."""
    name = topic.name
    own = policies.topic(name, BACKLOG_QUOTA) or {}
    quota = own.get(quota_type)
    if quota is None:
        namespace = policies.namespace(name.tenant, name.namespace, BACKLOG_QUOTA) or {}
        quota = namespace.get(quota_type)
    return quota if quota is not None else default_quota(config)


def backlog_bytes(topic: PersistentTopic) -> int:
    """The slowest subscription's backlog in bytes (estimated: whole ledgers pro rata, as
    Pulsar estimates it). O(subscriptions + #ledgers)."""
    slowest = topic.ledger.slowest_mark_delete()
    return 0 if slowest is None else topic.ledger.size_after(slowest)


def oldest_unacked_ms(topic: PersistentTopic) -> int | None:
    """When the slowest subscription's oldest unacknowledged message was written, by its
    ledger's creation; None with no backlog. O(subscriptions + #ledgers)."""
    ledger = topic.ledger
    slowest = ledger.slowest_mark_delete()
    if slowest is None:
        return None
    first = ledger.normalize(ledger.next_position(slowest))
    if not ledger.is_readable(first):
        return None
    for info in ledger.ledgers:
        if info.ledger_id == first.ledger_id:
            return info.created_ms
    return None


def exceeded(quota_type: str, quota: dict[str, Any], topic: PersistentTopic, now_ms: int) -> bool:
    """Whether ``topic`` is over ``quota`` (Pulsar: size >= limitSize; age > limitTime)."""
    if quota_type == DESTINATION_STORAGE:
        limit = int(quota.get("limitSize", -1))
        return limit >= 0 and backlog_bytes(topic) >= limit
    limit_s = int(quota.get("limitTime", -1))
    if limit_s < 0:
        return False
    oldest = oldest_unacked_ms(topic)
    return oldest is not None and now_ms - oldest > limit_s * 1000


def check_producer(
    policies: PolicyStore, config: ServiceConfig, topic: PersistentTopic, now_ms: int
) -> None:
    """ProducerBlockedError when a quota of ``topic`` with a producer policy is exceeded
    (checked as a producer connects, as Pulsar does). O(subscriptions + #ledgers)."""
    for quota_type in QUOTA_TYPES:
        quota = backlog_quota(policies, config, topic, quota_type)
        policy = quota.get("policy", "producer_request_hold")
        if policy == "consumer_backlog_eviction":
            continue
        if exceeded(quota_type, quota, topic, now_ms):
            raise ProducerBlockedError(
                f"Cannot create producer on topic with backlog quota exceeded: {topic.name} "
                f"is over its {quota_type} quota ({policy})",
                hold=policy == "producer_request_hold",
            )


async def enforce(
    policies: PolicyStore, config: ServiceConfig, topic: PersistentTopic, now_ms: int
) -> bool:
    """The periodic check of one topic: each exceeded quota's policy acts (producers
    disconnected, or the backlog evicted). Whether any was exceeded."""
    acted = False
    for quota_type in QUOTA_TYPES:
        quota = backlog_quota(policies, config, topic, quota_type)
        if not exceeded(quota_type, quota, topic, now_ms):
            continue
        acted = True
        if quota.get("policy") == "consumer_backlog_eviction":
            if quota_type == DESTINATION_STORAGE:
                await _evict_to_size(topic, int(EVICTION_TARGET * int(quota["limitSize"])))
            else:
                limit_s = int(quota["limitTime"])
                for subscription in list(topic.subscriptions.values()):
                    await subscription.expire_messages(now_ms, limit_s)
        else:
            topic.close_producers()  # they reconnect, and are refused while it lasts
    return acted


async def _evict_to_size(topic: PersistentTopic, target_bytes: int) -> None:
    """Acknowledge the oldest messages of every subscription whose backlog is over
    ``target_bytes``, up to where what follows is within it (whole ledgers pro rata)."""
    ledger = topic.ledger
    keep_from = _position_leaving(topic, target_bytes)
    if keep_from is None:
        return
    for subscription in list(topic.subscriptions.values()):
        if ledger.size_after(subscription.cursor.mark_delete_position) > target_bytes:
            await subscription.mark_delete_up_to(keep_from)


def _position_leaving(topic: PersistentTopic, target_bytes: int) -> Position | None:
    """The earliest position after which the ledger holds at most ``target_bytes``
    (ledger sizes pro rata per entry). O(#ledgers)."""
    ledger = topic.ledger
    kept = 0.0
    for info in reversed(ledger.ledgers):
        if info.entries == 0:
            continue
        if kept + info.size <= target_bytes:
            kept += info.size
            continue
        per_entry = info.size / info.entries
        room = int((target_bytes - kept) // per_entry) if per_entry > 0 else info.entries
        # keep the last `room` entries of this ledger: mark-delete the one before them
        return Position(info.ledger_id, info.entries - room - 1)
    return None


def apply_retention(policies: PolicyStore, config: ServiceConfig, topic: PersistentTopic) -> None:
    """Give the topic's managed ledger the retention that applies: the topic's policy,
    else its namespace's, else the broker's defaults (which leave topics without
    subscriptions untrimmed). O(1)."""
    retention = policies.effective(topic.name, RETENTION, None)
    if retention is None:
        minutes, megabytes = config.retention_time_minutes, config.retention_size_mb
    else:
        minutes = int(retention.get("retentionTimeInMinutes", 0))
        megabytes = int(retention.get("retentionSizeInMB", 0))
    ledger = topic.ledger
    ledger.retention_time_ms = -1 if minutes < 0 else minutes * 60_000
    ledger.retention_size_bytes = -1 if megabytes < 0 else megabytes * 1024 * 1024
    ledger.trim_without_cursors = retention is not None
