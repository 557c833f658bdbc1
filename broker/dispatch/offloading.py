"""Offloading topics' closed ledgers to the tiered store: on request (the offload route)
and in the broker's upkeep (topics over ``managedLedgerOffloadThresholdInBytes``, and the
bookie copies whose ``managedLedgerOffloadDeletionLagMs`` has passed)."""

from __future__ import annotations

from broker.dispatch.errors import ConflictError, NotImplementedYetError
from broker.dispatch.topic import PersistentTopic
from broker.ledger.managed_ledger import LedgerInfo
from broker.ledger.offload import TieredStorage
from broker.ledger.position import Position

OffloadWork = list[tuple[PersistentTopic, list[LedgerInfo]]]


async def offload_ledgers(tiered: TieredStorage | None, work: OffloadWork) -> int:
    """Upload the given closed ledgers of many topics as one stream set object, then
    mark them offloaded; returns how many ledgers. Nothing changes on failure."""
    if tiered is None:
        raise NotImplementedYetError("no tiered storage is configured")
    work = [(topic, infos) for topic, infos in work if infos]
    ranges = []
    for topic, infos in work:
        ranges += await topic.ledger.entries_to_offload(infos)
    if not ranges:
        return 0
    await tiered.upload(ranges)
    for topic, infos in work:
        await topic.ledger.mark_offloaded(infos)
    return sum(len(infos) for _, infos in work)


async def offload_topic_now(
    tiered: TieredStorage | None, topic: PersistentTopic, up_to: Position
) -> int:
    """The offload route: every closed ledger of ``topic`` up to ``up_to``, now; the
    topic's ``offload_status`` says how it went."""
    if topic.offload_status == "RUNNING":
        raise ConflictError(f"an offload of {topic.name} is already running")
    topic.offload_status = "RUNNING"
    try:
        count = await offload_ledgers(tiered, [(topic, topic.ledger.offload_candidates(up_to))])
    except Exception as error:
        topic.offload_status, topic.offload_error = "ERROR", str(error)
        raise
    topic.offload_status, topic.offload_error = "SUCCESS", ""
    return count


def over_threshold(active: list[PersistentTopic], threshold: int) -> OffloadWork:
    """Per active topic holding more than ``threshold`` bytes not offloaded, its oldest
    closed ledgers that bring it back within it. O(active topics x #ledgers)."""
    work = []
    for topic in active:
        if topic.offload_status == "RUNNING" or topic.ledger.closed:
            continue  # the route is offloading it
        excess = topic.ledger.size_not_offloaded() - threshold
        chosen = []
        for info in topic.ledger.offload_candidates():
            if excess <= 0:
                break
            chosen.append(info)
            excess -= info.size
        if chosen:
            work.append((topic, chosen))
    return work


async def offload_round(
    tiered: TieredStorage, active: list[PersistentTopic], threshold: int, deletion_lag_ms: int
) -> None:
    """Upkeep: offload the active topics over ``threshold`` (together, one object; -1:
    none), and delete their bookie copies whose deletion lag has passed (a quiet topic
    is woken when its lag passes). O(active topics x #ledgers)."""
    work = over_threshold(active, threshold) if threshold >= 0 else []
    if work:
        previous = {topic: topic.offload_status for topic, _ in work}
        for topic in previous:
            topic.offload_status = "RUNNING"
        try:
            await offload_ledgers(tiered, work)
        finally:
            for topic, status in previous.items():
                topic.offload_status = status
    await tiered.compact_if_needed()
    for topic in active:
        if not topic.ledger.closed:
            await topic.ledger.delete_offloaded_from_bookie(deletion_lag_ms)
