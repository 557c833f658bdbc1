"""Acknowledged messages are never lost and never come back: across a graceful restart,
and across SIGKILL when storage syncs before every ack (syncMode=always)."""

from __future__ import annotations

import pytest

from tests.conftest import BrokerProcessFactory, Client, unb64

TOPIC = "public/default/payments"


async def _produce_and_partly_ack(client: Client) -> tuple[list[str], set[str]]:
    """Produce 120 messages, two subscriptions: 'ledger' acks a mix out of order and
    cumulatively; 'audit' acks nothing. Returns (all ids, acked ids on 'ledger')."""
    status, _ = await client.request(
        "PUT", f"/admin/v2/persistent/{TOPIC}/subscription/audit", messageId="earliest"
    )
    assert status == 204
    consumer = await client.subscribe(TOPIC, "ledger", subscriptionInitialPosition="Earliest")
    ids: list[str] = []
    for batch in range(6):
        ids += await client.produce(TOPIC, [f"pay-{batch}-{i}" for i in range(20)])
    got = await client.receive_until(consumer, len(ids))
    assert [m["messageId"] for m in got] == ids
    await client.ack(consumer, [ids[9]], "Cumulative")
    acked = set(ids[:10])
    scattered = [ids[i] for i in (11, 12, 30, 31, 32, 77, 119)]
    await client.ack(consumer, scattered)
    acked.update(scattered)
    return ids, acked


async def _check_recovered(client: Client, ids: list[str], acked: set[str]) -> None:
    unacked = [i for i in ids if i not in acked]
    stats = await client.stats(TOPIC)
    assert stats["subscriptions"]["ledger"]["msgBacklog"] == len(unacked)
    assert stats["subscriptions"]["audit"]["msgBacklog"] == len(ids)
    consumer = await client.subscribe(TOPIC, "ledger")
    got = await client.receive_until(consumer, len(unacked))
    assert [m["messageId"] for m in got] == unacked, "every unacked one, in order, no acked one"
    assert unb64(got[0]["payload"]) == b"pay-0-10"
    audit = await client.subscribe(TOPIC, "audit")
    everything = await client.receive_until(audit, len(ids))
    assert [m["messageId"] for m in everything] == ids
    internal = await client.internal_stats(TOPIC)
    assert internal["cursors"]["ledger"]["markDeletePosition"] == ids[9]
    assert internal["cursors"]["ledger"]["individuallyDeletedMessages"].startswith(
        f"[({ids[10]}..{ids[12]}]"
    )
    assert internal["numberOfEntries"] == len(ids)


@pytest.mark.slow
async def test_graceful_restart_loses_nothing_and_redelivers_no_acked_message(
    broker_process: BrokerProcessFactory,
) -> None:
    broker = broker_process()
    client = await broker.start()
    ids, acked = await _produce_and_partly_ack(client)
    last_before = await client.request("GET", f"/admin/v2/persistent/{TOPIC}/lastMessageId")
    assert await broker.stop() == 0, "".join(broker.output)

    client = await broker.start()
    status, last = await client.request("GET", f"/admin/v2/persistent/{TOPIC}/lastMessageId")
    assert (status, last) == last_before
    assert f"{last['ledgerId']}:{last['entryId']}" == ids[-1]
    await _check_recovered(client, ids, acked)
    status, topics = await client.request("GET", "/admin/v2/persistent/public/default")
    assert topics == [f"persistent://{TOPIC}"]


@pytest.mark.slow
async def test_sigkill_with_sync_always_keeps_every_acknowledged_write(
    broker_process: BrokerProcessFactory,
) -> None:
    broker = broker_process("--storage-set", "syncMode=always")
    client = await broker.start()
    ids, acked = await _produce_and_partly_ack(client)
    await broker.kill()

    client = await broker.start()
    status, last = await client.request("GET", f"/admin/v2/persistent/{TOPIC}/lastMessageId")
    assert status == 200 and f"{last['ledgerId']}:{last['entryId']}" == ids[-1]
    await _check_recovered(client, ids, acked)
    # the recovered ledger was closed by the new owner; writes go to a new one
    more = await client.produce(TOPIC, ["after-crash"])
    assert more[0].split(":")[0] != ids[-1].split(":")[0]
    internal = await client.internal_stats(TOPIC)
    assert [ledger["entries"] for ledger in internal["ledgers"]] == [len(ids), 1]


@pytest.mark.slow
async def test_ledgers_roll_over_and_consumed_ones_are_trimmed_across_restarts(
    broker_process: BrokerProcessFactory,
) -> None:
    broker = broker_process(
        "--set",
        "managedLedgerMaxEntriesPerLedger=25",
        "--set",
        "managedLedgerMinLedgerRolloverTimeMinutes=0",
    )
    client = await broker.start()
    consumer = await client.subscribe(TOPIC, "s", subscriptionInitialPosition="Earliest")
    ids: list[str] = []
    for _ in range(4):
        ids += await client.produce(TOPIC, [f"r{i}" for i in range(30)])
    ledgers = {i.split(":")[0] for i in ids}
    assert len(ledgers) >= 4, ids
    got = await client.receive_until(consumer, len(ids))
    assert [m["messageId"] for m in got] == ids
    await client.ack(consumer, [ids[59]], "Cumulative")
    assert await broker.stop() == 0

    client = await broker.start()
    internal = await client.internal_stats(TOPIC)
    kept = {str(ledger["ledgerId"]) for ledger in internal["ledgers"]}
    first_kept = ids[60].split(":")[0]
    assert all(int(ledger) >= int(first_kept) for ledger in kept), (kept, ids[60])
    consumer = await client.subscribe(TOPIC, "s")
    rest = await client.receive_until(consumer, len(ids) - 60)
    assert [m["messageId"] for m in rest] == ids[60:]
