"""A full disk, end to end through a ``brokerlab serve`` process on a small real file
system (issue #14): produce answers 503 with a reason that says read-only while reads
keep working; once space is freed the same process accepts produces again by itself;
a stop on the full disk is clean; a start on a full disk comes up read-only and serves
reads; after a restart everything acknowledged is there."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import Iterator

import pytest

from tests.conftest import BrokerProcessFactory, Client, b64, unb64
from tests.harness import eventually_async
from tests.smallfs import SmallFileSystem, small_file_system

pytestmark = pytest.mark.slow

TOPIC = "public/default/disk"
#: checks every 100 ms; read-only from 90% used, writable again under 85%
DISK_ARGS = (
    "--storage-set",
    "syncMode=always",
    "--storage-set",
    "diskCheckInterval=100",
    "--storage-set",
    "diskUsageThreshold=0.9",
    "--storage-set",
    "diskUsageWarnThreshold=0.8",
    "--storage-set",
    "diskUsageLwmThreshold=0.85",
)
#: how long the broker gets to do what it should by itself (it checks every 100 ms)
DEADLINE_S = 20.0


@pytest.fixture
def small_fs(tmp_path: pathlib.Path) -> Iterator[SmallFileSystem]:
    with small_file_system(tmp_path, "64M") as fs:
        yield fs


async def _produce(client: Client, payload: str) -> tuple[int, dict[str, object]]:
    status, body = await client.request(
        "POST", f"/topics/persistent/{TOPIC}", json={"messages": [{"payload": b64(payload)}]}
    )
    return status, body


async def _until_produce(client: Client, want: int, acknowledged: list[str]) -> dict[str, object]:
    """Produce until the answer has status ``want`` (polling, with a deadline); what
    was answered 200 meanwhile joins ``acknowledged``."""
    last: list[tuple[int, dict[str, object]]] = []

    async def answered() -> bool:
        payload = f"poll-{len(acknowledged)}-{asyncio.get_running_loop().time()}"
        last[:] = [await _produce(client, payload)]
        if last[0][0] == 200:
            acknowledged.append(payload)
        return last[0][0] == want

    await eventually_async(
        answered, lambda: f"a produce answered {want} (last: {last})", DEADLINE_S
    )
    return last[0][1]


async def _read_all(client: Client, subscription: str, count: int) -> list[str]:
    consumer = await client.subscribe(TOPIC, subscription)
    got = await client.receive_until(consumer, count)
    status, _ = await client.request("DELETE", f"/consumers/{consumer}")
    assert status == 204
    return [unb64(m["payload"]).decode() for m in got]


async def test_a_full_disk_makes_produce_503_read_only_reads_go_on_and_space_brings_it_back(
    small_fs: SmallFileSystem, broker_process: BrokerProcessFactory
) -> None:
    # (small_fs first: it is torn down last, after the broker is killed)
    broker = broker_process(*DISK_ARGS, data_dir=small_fs.path / "data")
    client = await broker.start()
    for subscription in ("reader", "after-restart"):
        status, _ = await client.request(
            "PUT", f"/admin/v2/persistent/{TOPIC}/subscription/{subscription}", messageId="earliest"
        )
        assert status == 204
    acknowledged: list[str] = []
    for i in range(20):
        status, body = await _produce(client, f"before-{i}")
        assert status == 200, body
        acknowledged.append(f"before-{i}")

    filler = small_fs.fill_to(0.95)
    refused = await _until_produce(client, 503, acknowledged)
    assert refused["code"] == "unavailable"
    assert "read-only" in str(refused["reason"])
    status, body = await client.request("GET", "/admin/v2/broker-stats/storage")
    assert status == 200 and body["bookie"]["readOnly"] == 1
    assert body["bookie"]["diskUsage"] >= 0.9
    status, metrics = await client.request("GET", "/metrics")
    assert '\nbrokerlab_bookie_read_only{broker="0"} 1.0\n' in metrics
    assert await _read_all(client, "reader", len(acknowledged)) == acknowledged

    filler.unlink()
    await _until_produce(client, 200, acknowledged)  # the same process, by itself
    status, body = await client.request("GET", "/admin/v2/broker-stats/storage")
    assert body["bookie"]["readOnly"] == 0

    assert await broker.stop() == 0, "".join(broker.output)
    client = await broker.start()
    assert await _read_all(client, "after-restart", len(acknowledged)) == acknowledged
    assert await broker.stop() == 0


async def test_a_stop_and_a_start_on_a_full_disk_are_clean_and_serve_reads(
    small_fs: SmallFileSystem, broker_process: BrokerProcessFactory
) -> None:
    # (small_fs first: it is torn down last, after the broker is killed)
    broker = broker_process(*DISK_ARGS, data_dir=small_fs.path / "data")
    client = await broker.start()
    status, _ = await client.request(
        "PUT", f"/admin/v2/persistent/{TOPIC}/subscription/s", messageId="earliest"
    )
    assert status == 204
    acknowledged = [f"m-{i}" for i in range(10)]
    for payload in acknowledged:
        status, body = await _produce(client, payload)
        assert status == 200, body

    filler = small_fs.fill_up()  # to the last block: even RocksDB cannot write
    await _until_produce(client, 503, acknowledged)
    output = "".join(broker.output)
    assert await broker.stop() == 0, output
    assert "Traceback" not in "".join(broker.output)

    # the clean stop gave back the entry log's unused preallocation: fill that too
    refill = small_fs.fill_up("refill")
    client = await broker.start()  # on the full disk
    status, body = await _produce(client, "refused-at-start")
    assert status == 503 and "read-only" in body["reason"], body
    assert await _read_all(client, "s", len(acknowledged)) == acknowledged
    filler.unlink()
    refill.unlink()
    await _until_produce(client, 200, acknowledged)
    assert await _read_all(client, "s", len(acknowledged)) == acknowledged
    assert await broker.stop() == 0
    assert "Traceback" not in "".join(broker.output)
