"""Thousands of idle topics leave a real broker idle at rest: its upkeep visits the topics
in use, not every loaded one (issue #18 part 5). The CPU time at rest is measured and
printed, never asserted; the upkeep's own counter of topics visited is.

2,000 topics show a round that visits every loaded topic as plainly as 50,000 do (the
issue's figure): ``BROKERLAB_SCALE_TOPICS=50000`` runs it (and the /metrics scrape of
``tests/http/test_metrics_scale.py``) at that size."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import AsyncIterator, Callable

import pytest

from broker.dispatch.names import TopicName
from broker.dispatch.service import BrokerService
from broker.ledger.entry import encode_message
from tests.harness import Client, eventually_async, in_process_node

TOPICS = int(os.environ.get("BROKERLAB_SCALE_TOPICS", "2000"))
#: the upkeep's period (0.5 s in a broker) and the stats period after which an untouched
#: topic goes quiet (statsUpdateFrequencyInSecs, whole seconds in broker.conf), both
#: shortened on the test's broker so that its rounds do not wait seconds of wall clock
UPKEEP_INTERVAL_S = 0.05
STATS_PERIOD_S = 0.25
#: 4 rounds is 0.2 s at rest
ROUNDS_AT_REST = 4
DEADLINE_S = 120.0


async def until(condition: Callable[[], bool], what: str) -> None:
    """The harness poller at a look every 50 ms: a broker at rest is measured meanwhile."""
    await eventually_async(condition, what, DEADLINE_S, every_s=0.05)


async def rounds(service: BrokerService, count: int) -> None:
    """Wait for ``count`` more upkeep rounds."""
    target = service.upkeep_rounds + count
    await until(lambda: service.upkeep_rounds >= target, f"{count} upkeep rounds")


async def create_topics(service: BrokerService, count: int, prefix: str) -> None:
    """``count`` topics of one message each, made through the service (HTTP would take
    minutes on two cores), 50 loads at a time."""
    entry = encode_message(b"x", 0)

    async def make(first: int, last: int) -> None:
        for i in range(first, last):
            topic = await service.get_topic(TopicName("public", "default", f"{prefix}{i}"), True)
            await topic.publish([entry])

    step = max(1, count // 50)
    await asyncio.gather(*(make(i, min(i + step, count)) for i in range(0, count, step)))


@pytest.fixture
async def idle_broker() -> AsyncIterator[tuple[Client, BrokerService]]:
    """A real broker on a real port holding TOPICS topics nobody uses (kept loaded:
    neither deleted nor unloaded), all of them quiet."""
    async with in_process_node(
        statsUpdateFrequencyInSecs=1,
        brokerDeleteInactiveTopicsEnabled=False,
        brokerlabUnloadInactiveTopicsEnabled=False,
    ) as (client, node):
        service = node.service
        assert service is not None
        # read by the upkeep loop at each round (its first round is still 0.5 s away)
        service.config = dataclasses.replace(
            service.config,
            maintenance_interval_s=UPKEEP_INTERVAL_S,
            stats_update_frequency_s=STATS_PERIOD_S,
        )
        await create_topics(service, TOPICS, "idle-")
        await until(lambda: service.active_topics == 0, "every topic to go quiet")
        yield client, service


async def test_thousands_of_idle_topics_cost_the_upkeep_nothing_at_rest(
    idle_broker: tuple[Client, BrokerService],
) -> None:
    client, service = idle_broker
    assert len(service.topics) == TOPICS

    visited = service.upkeep_topics_visited
    cpu, wall = time.process_time(), time.perf_counter()
    await rounds(service, ROUNDS_AT_REST)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    print(f"\n{TOPICS} idle topics: {cpu:.2f} s CPU over {wall:.1f} s at rest")
    assert service.upkeep_topics_visited == visited, "a round at rest visits no topic"

    # ten topics in use: each round visits those ten, not all of them
    busy = [f"idle-{i}" for i in range(0, TOPICS, TOPICS // 10)]
    visited = service.upkeep_topics_visited
    start = service.upkeep_rounds
    for _ in range(3):
        for name in busy:
            await client.produce(f"public/default/{name}", ["again"])
        await rounds(service, 1)
    await until(lambda: service.active_topics == 0, "the ten topics to go quiet again")
    elapsed_rounds = service.upkeep_rounds - start
    grew = service.upkeep_topics_visited - visited
    assert 0 < grew <= len(busy) * (elapsed_rounds + 1)
    assert grew < TOPICS // 10
