"""The dispatch tests' broker service: in memory, on a manual clock (no sockets)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from broker.dispatch.service import BrokerService
from tests.harness import in_memory_service


@pytest.fixture
async def service() -> AsyncIterator[BrokerService]:
    async with in_memory_service() as broker:
        yield broker
