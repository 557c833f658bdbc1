"""A broker service in memory for the session tests (no sockets, manual clock)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest

from broker.cache import DEFAULT_DESIGN, CacheConfig, create_stream
from broker.clock import ManualClock
from broker.dispatch.service import BrokerService, ServiceConfig
from storage_stub.bookie.memory import InMemoryBookie, InMemoryMetadataStore


@contextlib.asynccontextmanager
async def in_memory_service(config: ServiceConfig) -> AsyncIterator[BrokerService]:
    stream = create_stream(DEFAULT_DESIGN, CacheConfig(), ManualClock())
    broker = BrokerService(config, InMemoryBookie(), InMemoryMetadataStore(), stream, ManualClock())
    try:
        yield broker
    finally:
        await broker.close()


@pytest.fixture
async def service() -> AsyncIterator[BrokerService]:
    async with in_memory_service(ServiceConfig(max_producers_per_topic=1)) as broker:
        yield broker
