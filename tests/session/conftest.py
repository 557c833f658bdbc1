"""A broker service in memory for the session tests (no sockets, manual clock)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from broker.dispatch.service import BrokerService, ServiceConfig
from tests.harness import in_memory_service


@pytest.fixture
async def service() -> AsyncIterator[BrokerService]:
    async with in_memory_service(ServiceConfig(max_producers_per_topic=1)) as broker:
        yield broker
