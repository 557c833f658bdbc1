"""A topic reloaded while its unload is still closing the old managed ledger: the reload
waits, so the old ledger's last metadata write cannot drop the new ledger (which held
acknowledged messages)."""

from __future__ import annotations

import asyncio

import orjson

from broker.cache import DEFAULT_DESIGN, CacheConfig, CacheEventStream, create_stream
from broker.clock import ManualClock
from broker.dispatch.names import TopicName
from broker.dispatch.service import BrokerService, ServiceConfig
from broker.ledger.entry import encode_message
from broker.ledger.managed_ledger import ManagedLedger, ManagedLedgerConfig, metadata_key
from broker.ledger.position import Position
from storage_stub.bookie.memory import InMemoryBookie, InMemoryMetadataStore

TOPIC = TopicName("t", "ns", "reloaded")


def _no_cache() -> CacheEventStream:
    return create_stream(DEFAULT_DESIGN, CacheConfig(max_size_bytes=0), ManualClock())


class GatedCloseBookie(InMemoryBookie):
    """Ledger closes wait on a gate, holding an unload (or a deletion) in the middle of
    its close."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.closing = asyncio.Event()

    async def close_ledger(self, ledger_id: int) -> int:
        self.closing.set()
        await self.gate.wait()
        return await super().close_ledger(ledger_id)


async def test_a_reload_during_an_unload_waits_and_keeps_acknowledged_messages() -> None:
    bookie, metadata = GatedCloseBookie(), InMemoryMetadataStore()
    service = BrokerService(ServiceConfig(), bookie, metadata, _no_cache(), ManualClock())
    topic = await service.get_topic(TOPIC, create=True)
    await topic.create_subscription("s", "earliest")
    await topic.publish([encode_message(b"before", 0)])

    unload = asyncio.create_task(service.unload_topic(TOPIC))
    await bookie.closing.wait()  # the unload is inside the old ledger's close
    produce = asyncio.create_task(_publish(service, encode_message(b"during", 0)))
    await asyncio.sleep(0)
    assert not produce.done(), "the reload waits for the unload to finish"
    bookie.gate.set()
    await unload
    acknowledged = await produce

    record = orjson.loads(await metadata.get(metadata_key(str(TOPIC))) or b"{}")
    assert acknowledged.ledger_id in [ledger["id"] for ledger in record["ledgers"]]
    # a new owner (after a crash) reads both messages
    reopened = ManagedLedger(
        str(TOPIC),
        bookie,
        metadata,
        _no_cache().load_topic("x"),
        ManagedLedgerConfig(),
        ManualClock(),
    )
    await reopened.open()
    entries = await reopened.cursors["s"].read_entries(10)
    assert len(entries) == 2 and entries[-1].position == acknowledged


async def _publish(service: BrokerService, data: bytes) -> Position:
    topic = await service.get_topic(TOPIC, create=True)
    return await topic.publish([data])
