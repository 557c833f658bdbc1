"""The fault matrix's oracle (``fault_workload``) against what a broker does in
interleavings the matrix meets only by chance, made here step by step: the oracle must
allow what the broker rightly does, and still catch what it must not do.

Messages of orders are stored through the topic with chosen publish times (so no test
depends on the wall clock) and recorded in the oracle's ledger as produces answered 200;
resets and the checks go over HTTP, as in the matrix."""

from __future__ import annotations

from broker.dispatch.names import TopicName
from broker.dispatch.service import BrokerService
from broker.dispatch.topic import PersistentTopic
from broker.ledger.entry import encode_message
from tests.harness import Client
from tests.integration.fault_workload import (
    ORDERS,
    Ledger,
    Outcome,
    Pos,
    _verify_rewind,
    id_of,
    read_subscription,
)

T = 1_700_000_000_000  # a publish time (epoch ms)


async def _orders(client: Client, service: BrokerService, ledger: Ledger) -> PersistentTopic:
    for name in ("audit", "rewind"):
        assert (await ledger.create_subscription(client, ORDERS, name))[1] is Outcome.OK
    return await service.get_topic(TopicName.of(*ORDERS.split("/")), create=True)


async def _store(ledger: Ledger, topic: PersistentTopic, payload: str, publish_time: int) -> Pos:
    """A produce of orders answered 200, whose publish time was taken at ``publish_time``."""
    first = await topic.publish([encode_message(payload.encode(), publish_time)])
    position = (first.ledger_id, first.entry_id)
    ledger.produced[ORDERS][payload].append((Outcome.OK, position))
    return position


async def _check_rewind(client: Client, ledger: Ledger) -> list[str]:
    audit = await read_subscription(client, ORDERS, "audit")
    assert audit.problem is None, audit.problem
    return await _verify_rewind(client, ledger, sorted(audit.positions), audit.publish_times)


async def test_a_message_older_than_a_reset_time_stored_after_the_reset_is_where_it_starts(
    broker_service: tuple[Client, BrokerService],
) -> None:
    """A produce takes its publish time when the broker reads it, then may wait (for a
    rollover, or a topic load, whose metadata writes fail and are retried) while
    ``rewind`` is reset to a later time. The search finds every stored message older
    than the time: the reset goes to the end, and the produce is stored there, older
    than the time. ``rewind`` starts at it, as Pulsar's would (its search sees what is
    stored when it runs). The matrix's metadataPut/error cell once reported this as
    "rewind starts at 7:0; its resets (time:...) allow 7:4"."""
    client, service = broker_service
    ledger = Ledger(seed=0, tag="oracle")
    topic = await _orders(client, service, ledger)
    for i in range(3):
        await _store(ledger, topic, f"before-{i}", T)
    assert await ledger.reset(client, ORDERS, "rewind", f"time:{T + 1}") is Outcome.OK
    waited = await _store(ledger, topic, "waited", T)  # its time was taken before the reset
    await _store(ledger, topic, "after", T + 1)

    first = (await read_subscription(client, ORDERS, "rewind", limit=1)).positions
    assert first == [waited], "the reset went to the end as it was"
    assert await _check_rewind(client, ledger) == []


async def test_a_reset_by_time_that_did_not_happen_is_caught(
    broker_service: tuple[Client, BrokerService],
) -> None:
    """The other side: a reset to a time answered 204 whose cursor is found where it
    was before (a reset lost, or never applied) is reported, though messages older than
    the time were stored around it."""
    client, service = broker_service
    ledger = Ledger(seed=0, tag="oracle")
    topic = await _orders(client, service, ledger)
    before = [await _store(ledger, topic, f"before-{i}", T) for i in range(3)]
    assert await ledger.reset(client, ORDERS, "rewind", f"time:{T + 1}") is Outcome.OK
    waited = await _store(ledger, topic, "waited", T)
    after = await _store(ledger, topic, "after", T + 1)
    # the broker loses the reset: rewind is back at its first message
    await topic.subscription("rewind").reset_cursor(topic.ledger.first_position())

    assert await _check_rewind(client, ledger) == [
        f"{ORDERS} subscription rewind starts at {id_of(before[0])}; its resets "
        f"(time:{T + 1}) allow {id_of(waited)}, {id_of(after)}"
    ]
