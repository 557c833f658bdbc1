"""Issue #14: every change a client is told succeeded is durable before the answer; every
change answered with an error has no effect, in memory or on disk; a retry of a failed
change does it.

The matrix: every storage and metadata operation x (error, delay, error then kill -9),
under concurrent produce, consume, ack and admin traffic (``fault_workload``), checked
against the answers the broker gave: live once the faults are cleared, and after a
restart on the same data (``syncMode=always``, so a kill -9 keeps every acknowledged
write). Then two reproductions of known bugs, step by step.
"""

from __future__ import annotations

import asyncio
import os
import re
import zlib
from typing import Any

import pytest

from broker.http.models import FAULT_OPERATIONS
from tests.conftest import BrokerProcessFactory, Client, b64, unb64
from tests.integration.fault_workload import (
    BROKER_ARGS,
    Budget,
    Ledger,
    Workload,
    clear_faults,
    retry_failed,
    set_fault,
    setup,
    verify,
)

pytestmark = pytest.mark.slow

#: every operation the faults route injects into: the bookie's, the metadata store's
#: (a cursor persist is a metadataPut), the tiered object store's
OPERATIONS = FAULT_OPERATIONS

#: error: half the calls fail among successes, then faults are cleared, the state is
#: checked live, failed changes are retried, and the broker stops cleanly;
#: delay: every call is slow, and the broker is killed with requests in flight;
#: error-then-kill: every call fails (an outage), and the broker is killed in it
MODES: dict[str, dict[str, Any]] = {
    "error": {"errorRate": 0.5},
    "delay": {"delayMs": 30},
    "error-then-kill": {"errorRate": 1.0},
}

#: requests of the faulted run (producers, consumers and admin calls together), and a
#: seed for the workload's choices; a soak raises the one and varies the other:
#: BROKERLAB_FAULT_MATRIX_REQUESTS=3000 BROKERLAB_FAULT_MATRIX_SEED=7 pytest -k matrix.
#: 70 (140 until the suite had to fit in five minutes) still fails metadataPut-error when
#: a failed ack's cursor write is not taken back; the matrix then costs about 33 s of CPU
#: (brokers included) rather than 38: most of a cell is its broker starts and setup
REQUESTS = int(os.environ.get("BROKERLAB_FAULT_MATRIX_REQUESTS", "70"))
SEED = os.environ.get("BROKERLAB_FAULT_MATRIX_SEED", "0")


#: the bookie's write path once more with its group commit pipelined (syncMode=batch: a
#: group written while the one before it syncs); a kill -9 keeps what batch acknowledged
#: as it does always's (the page cache survives a process kill)
PIPELINED_OPERATIONS = ("createLedger", "addEntries", "closeLedger")
PIPELINED_ARGS = (*BROKER_ARGS, "--storage-set", "syncMode=batch")


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("operation", OPERATIONS)
async def test_fault_matrix(
    broker_process: BrokerProcessFactory, operation: str, mode: str
) -> None:
    await run_cell(broker_process, operation, mode, BROKER_ARGS, f"{operation}/{mode}")


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("operation", PIPELINED_OPERATIONS)
async def test_fault_matrix_with_pipelined_group_commit(
    broker_process: BrokerProcessFactory, operation: str, mode: str
) -> None:
    cell = f"{operation}/{mode}/batch"
    await run_cell(broker_process, operation, mode, PIPELINED_ARGS, cell)


async def run_cell(
    broker_process: BrokerProcessFactory,
    operation: str,
    mode: str,
    args: tuple[str, ...],
    cell: str,
) -> None:
    """One cell: ``operation`` faulted in ``mode`` on a broker started with ``args``."""
    ledger = Ledger(seed=zlib.crc32(f"{cell}/{SEED}".encode()), tag=cell)
    broker = broker_process(*args)
    client = await broker.start()
    await setup(client, ledger)
    workload = Workload.of(ledger)
    budget = Budget(REQUESTS)
    await set_fault(client, {"operation": operation, **MODES[mode]})
    run = asyncio.create_task(workload.run(client, budget))
    problems: list[str] = []
    if mode == "error":
        await run
        await clear_faults(client)
        await workload.close_consumers(client)
        problems += await verify(client, ledger, "live, faults cleared")
        problems += await retry_failed(client, ledger)
        assert await broker.stop() == 0, "".join(broker.output[-20:])
    else:
        spent = asyncio.create_task(budget.spent.wait())
        await asyncio.wait([run, spent], return_when=asyncio.FIRST_COMPLETED)
        budget.stop()
        await broker.kill()
        await run
        spent.cancel()
    client = await broker.start()
    problems += await verify(client, ledger, "after restart")
    if mode != "error":
        before = len(ledger.attempts)
        problems += await retry_failed(client, ledger)
        if len(ledger.attempts) > before:
            await broker.kill()
            client = await broker.start()
            problems += await verify(client, ledger, "after retries, kill -9 and restart")
    problems = ledger.violations + problems
    assert not problems, (
        f"{cell}:\n  "
        + "\n  ".join(problems)
        + f"\nanswers: {ledger.summary()}"
        + "".join(f"\nbroker: {line}" for line in broker_complaints(broker.output))
    )


def broker_complaints(output: list[str]) -> list[str]:
    """What the broker's log says went wrong, once each: the exception line of each
    traceback, and warnings that are not the injected faults."""
    found: dict[str, None] = {}
    for index, line in enumerate(output):
        if line.startswith("Traceback"):
            rest = (entry for entry in output[index + 1 :] if not entry.startswith(" "))
            found[next(rest, "?").strip()] = None
        elif " WARNING " in line and "injected fault" not in line:
            reason = re.sub(r"[0-9.]+s\b", "Ns", line.split(" WARNING ", 1)[1].strip())
            found[reason] = None
    return list(found)[:6]


# ---------------------------------------------------------------------- reproductions

TOPIC = "public/default/repro"
SMALL_LEDGERS = (
    "--set",
    "managedLedgerMaxEntriesPerLedger=20",
    "--set",
    "managedLedgerMinLedgerRolloverTimeMinutes=0",
    "--storage-set",
    "syncMode=always",
)


async def _read_all(client: Client, subscription: str) -> list[tuple[str, bytes]]:
    """(message id, payload) of every message a fresh consumer of ``subscription`` gets."""
    backlog = (await client.stats(TOPIC))["subscriptions"][subscription]["msgBacklog"]
    consumer = await client.subscribe(TOPIC, subscription)
    got = await client.receive_until(consumer, backlog)
    return [(m["messageId"], unb64(m["payload"])) for m in got]


async def test_a_rollover_with_metadata_put_failing_loses_no_acknowledged_message(
    broker_process: BrokerProcessFactory,
) -> None:
    """The ledger fills while metadataPut fails, so its rollover cannot record a new
    ledger: the produces after it must fail (503), not go to a ledger the metadata does
    not name; every one answered 200 survives kill -9."""
    broker = broker_process(*SMALL_LEDGERS)
    client = await broker.start()
    status, _ = await client.request(
        "PUT", f"/admin/v2/persistent/{TOPIC}/subscription/audit", messageId="earliest"
    )
    assert status == 204
    first = await client.produce(TOPIC, ["before-0"])
    await set_fault(client, {"operation": "metadataPut", "errorRate": 1.0})
    ok: list[tuple[str, bytes]] = []  # (message id, payload) of each produce answered 200
    failed: set[bytes] = set()  # payloads of produces answered 503
    for i in range(35):  # the ledger holds 20: a rollover is needed after 19 of these
        payload = f"during-{i}"
        status, body = await client.request(
            "POST", f"/topics/persistent/{TOPIC}", json={"messages": [{"payload": b64(payload)}]}
        )
        assert status in (200, 503), (status, body)
        if status == 200:
            ok.append((body["messagePublishResults"][0]["messageId"], payload.encode()))
        else:
            failed.add(payload.encode())
    first_ledger = first[0].split(":")[0]
    assert failed or any(m.split(":")[0] != first_ledger for m, _ in ok), (
        "the scenario needs a rollover under the fault"
    )
    await broker.kill()

    client = await broker.start()
    stored = await _read_all(client, "audit")
    ledgers = [ledger["ledgerId"] for ledger in (await client.internal_stats(TOPIC))["ledgers"]]
    missing = [(m, p) for m, p in ok if (m, p) not in stored]
    assert not missing, (
        f"{len(missing)} of {len(ok)} messages answered 200 are gone after kill -9: "
        f"{[m for m, _ in missing]}; the topic's ledgers after restart: {ledgers}"
    )
    assert not failed & {payload for _, payload in stored}, "a produce answered 503 was stored"
    assert stored[0] == (first[0], b"before-0")


async def test_b_an_ack_answered_503_has_no_effect_and_its_retry_is_durable(
    broker_process: BrokerProcessFactory,
) -> None:
    """An ack whose cursor persist fails is answered 503 and changes nothing: the message
    is still unacknowledged (redelivered on request). Retried once the store works, the
    ack is answered 204 and survives kill -9."""
    broker = broker_process(*SMALL_LEDGERS)
    client = await broker.start()
    consumer = await client.subscribe(TOPIC, "work", subscriptionInitialPosition="Earliest")
    ids = await client.produce(TOPIC, [f"m{i}" for i in range(5)])
    received = await client.receive_until(consumer, len(ids))
    assert [m["messageId"] for m in received] == ids
    target = ids[0]
    problems = []

    await set_fault(client, {"operation": "metadataPut", "errorRate": 1.0})
    status, body = await client.request(
        "POST", f"/consumers/{consumer}/ack", json={"messageIds": [target]}
    )
    assert status == 503, (status, body)
    backlog = (await client.stats(TOPIC))["subscriptions"]["work"]["msgBacklog"]
    if backlog != len(ids):
        problems.append(f"after the failed ack the backlog is {backlog}, not {len(ids)}")
    status, _ = await client.request("POST", f"/consumers/{consumer}/redeliverUnacknowledged")
    assert status == 204
    again = [m["messageId"] for m in await client.receive_until(consumer, len(ids), 10)]
    if target not in again:
        problems.append(
            f"the ack of {target} answered 503, yet redeliverUnacknowledged gave back "
            f"only {again}: the failed ack took effect"
        )
    await clear_faults(client)
    status, body = await client.request(
        "POST", f"/consumers/{consumer}/ack", json={"messageIds": [target]}
    )
    assert status == 204, (status, body)
    await broker.kill()

    client = await broker.start()
    after = [message_id for message_id, _ in await _read_all(client, "work")]
    if target in after:
        problems.append(f"the retried ack of {target} answered 204, yet after kill -9 it is back")
    if after != [i for i in ids if i != target]:
        problems.append(f"after kill -9 the subscription delivers {after}")
    assert not problems, "\n".join(problems)
