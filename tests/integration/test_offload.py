"""Offload against the real server: closed ledgers of several topics go to the tiered
store as stream set objects; reads of them come from there (also after the bookie copy
is deleted and after a restart), exactly and in order."""

from __future__ import annotations

import pathlib

from tests.conftest import Client, LiveBroker, in_process_broker, unb64

ROLL = {"managedLedgerMaxEntriesPerLedger": 10, "managedLedgerMinLedgerRolloverTimeMinutes": 0}


async def fill(client: Client, topic: str, count: int) -> list[str]:
    ids: list[str] = []
    for start in range(0, count, 10):
        ids += await client.produce(topic, [f"{topic}-{i}" for i in range(start, start + 10)])
    return ids


async def stats(client: Client) -> dict[str, dict[str, int]]:
    _, body = await client.request("GET", "/admin/v2/broker-stats/storage")
    return dict(body)


async def test_offloaded_ledgers_are_read_from_the_tiered_store(live_broker: LiveBroker) -> None:
    client = await live_broker(**ROLL, managedLedgerOffloadDeletionLagMs=0)
    topics = [f"public/default/off-{i}" for i in range(3)]
    ids = {topic: await fill(client, topic, 60) for topic in topics}
    for topic in topics:
        last = ids[topic][-1]
        status, _ = await client.request(
            "PUT", f"/admin/v2/persistent/{topic}/offload", json={"messageId": last}
        )
        assert status == 204
        status, body = await client.request("GET", f"/admin/v2/persistent/{topic}/offload")
        assert body["status"] == "SUCCESS"
        internal = await client.internal_stats(topic)
        assert sum(ledger["offloaded"] for ledger in internal["ledgers"]) >= 5
    status, _ = await client.request("POST", "/admin/v2/namespaces/public/default/unload")
    assert status == 204
    before = await stats(client)
    for topic in topics:
        consumer = await client.subscribe(topic, "replay", subscriptionInitialPosition="Earliest")
        got = await client.receive_until(consumer, len(ids[topic]))
        assert [m["messageId"] for m in got] == ids[topic]
        assert [unb64(str(m["payload"])).decode() for m in got] == [
            f"{topic}-{i}" for i in range(60)
        ]
    after = await stats(client)
    assert after["tiered"]["entriesRead"] - before["tiered"]["entriesRead"] >= 3 * 50
    assert after["tiered"]["streamSetObjects"] == 3
    assert after["tiered"]["indexLoads"] > 0


async def test_the_threshold_offloads_in_the_background_and_a_restart_still_reads_it(
    tmp_path: pathlib.Path,
) -> None:
    data_dir = tmp_path / "data"
    topic = "public/default/auto"
    settings = {**ROLL, "managedLedgerOffloadThresholdInBytes": 0}
    async with in_process_broker(data_dir, storage={"syncMode": "none"}, **settings) as client:
        ids = await fill(client, topic, 50)
        clock = await client.subscribe("public/default/idle", "clock")
        for _ in range(100):  # poll until the upkeep round has offloaded the closed ledgers
            internal = await client.internal_stats(topic)
            if sum(ledger["offloaded"] for ledger in internal["ledgers"]) >= 4:
                break
            await client.receive(clock, 1, 100)  # a long poll paces the checks
        assert sum(ledger["offloaded"] for ledger in internal["ledgers"]) >= 4
    async with in_process_broker(data_dir, storage={"syncMode": "none"}, **settings) as client:
        consumer = await client.subscribe(topic, "late", subscriptionInitialPosition="Earliest")
        got = await client.receive_until(consumer, len(ids))
        assert [m["messageId"] for m in got] == ids
        assert (await stats(client))["tiered"]["entriesRead"] >= 40


async def test_upkeep_compaction_bounds_the_stream_set_objects_and_reads_still_work(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker(storage={"s3StreamSetObjectMaxNum": 2}, **ROLL)
    topics = [f"public/default/many-{i}" for i in range(5)]
    ids = {}
    for topic in topics:  # five offloads: five stream set objects
        ids[topic] = await fill(client, topic, 30)
        await client.request(
            "PUT", f"/admin/v2/persistent/{topic}/offload", json={"messageId": ids[topic][-1]}
        )
    clock = await client.subscribe("public/default/idle", "clock")
    for _ in range(100):  # poll until an upkeep round has compacted
        if (await stats(client))["tiered"]["streamSetObjects"] <= 2:
            break
        await client.receive(clock, 1, 100)
    assert (await stats(client))["tiered"]["streamSetObjects"] <= 2
    await client.request("POST", "/admin/v2/namespaces/public/default/unload")
    for topic in topics:
        consumer = await client.subscribe(topic, "after", subscriptionInitialPosition="Earliest")
        got = await client.receive_until(consumer, len(ids[topic]))
        assert [m["messageId"] for m in got] == ids[topic]
