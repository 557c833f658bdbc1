"""A clean stop over disk storage (syncMode=batch, as shipped) closes every topic's ledger
and writes its managed-ledger record, two synced metadata writes a topic: the topics
closing together share their fsyncs (a few dozen for hundreds of topics, not two a
topic), and after a restart every ledger is found closed as the stop left it."""

from __future__ import annotations

import asyncio
import pathlib

import orjson

from broker.cache import DEFAULT_DESIGN, CacheConfig, create_stream
from broker.clock import ManualClock
from broker.dispatch.names import TopicName
from broker.dispatch.service import UNLOAD_CONCURRENCY, BrokerService, ServiceConfig
from broker.ledger.entry import encode_message
from broker.ledger.managed_ledger import metadata_key
from storage_stub.bookie import Storage, open_storage
from storage_stub.config import StorageConfig

TOPICS = 10 * UNLOAD_CONCURRENCY
CONFIG = StorageConfig(storageMode="disk", syncMode="batch")


def names() -> list[TopicName]:
    return [TopicName("public", "default", f"t{i}") for i in range(TOPICS)]


async def broker_on(storage: Storage) -> BrokerService:
    no_cache = create_stream(DEFAULT_DESIGN, CacheConfig(max_size_bytes=0), ManualClock())
    return BrokerService(ServiceConfig(), storage.bookie, storage.metadata, no_cache, ManualClock())


async def test_a_clean_stop_shares_fsyncs_between_topics_and_every_close_is_durable(
    tmp_path: pathlib.Path,
) -> None:
    storage = await open_storage(CONFIG, tmp_path)
    try:
        service = await broker_on(storage)
        entry = encode_message(b"x", 0)

        async def load(batch: list[TopicName]) -> None:
            for name in batch:
                await (await service.get_topic(name, True)).publish([entry])

        every = names()
        await asyncio.gather(*(load(every[i::16]) for i in range(16)))
        writer, counters = storage.metadata_writer, storage.counters
        assert writer is not None
        syncs, closes, puts = writer.syncs, counters.closeLedger.calls, counters.metadataPut.calls

        await service.close()

        # every topic closed its ledger and wrote its record: two synced writes each
        assert counters.closeLedger.calls - closes == TOPICS
        assert counters.metadataPut.calls - puts == TOPICS
        assert writer.records >= 2 * TOPICS
        # ... made durable together: about one fsync per round of the 64 closing topics
        # (one record each), where each write alone would take 2 x TOPICS
        assert writer.syncs - syncs <= 2 * TOPICS // (UNLOAD_CONCURRENCY // 4)
    finally:
        await storage.close()

    storage = await open_storage(CONFIG, tmp_path)  # the restart
    try:
        for name in names():
            raw = await storage.metadata.get(metadata_key(str(name)))
            assert raw is not None
            (ledger,) = orjson.loads(raw)["ledgers"]
            assert not ledger["open"]
            assert (await storage.bookie.ledger_metadata(ledger["id"])).closed
    finally:
        await storage.close()
