from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from broker.cache import DEFAULT_DESIGN, CacheConfig, CacheEventStream, create_stream
from broker.clock import ManualClock
from broker.ledger.managed_ledger import ManagedLedger, ManagedLedgerConfig
from storage_stub.bookie.memory import InMemoryBookie, InMemoryMetadataStore

OpenLedger = Callable[..., Coroutine[Any, Any, ManagedLedger]]


class Stores:
    def __init__(self) -> None:
        self.bookie = InMemoryBookie()
        self.metadata = InMemoryMetadataStore()
        self.clock = ManualClock()
        #: no cache unless a test picks a design: most tests are about the ledger
        self.cache = create_stream(DEFAULT_DESIGN, CacheConfig(max_size_bytes=0), self.clock)

    def use_design(self, name: str, config: CacheConfig | None = None) -> CacheEventStream:
        """Ledgers opened from now on run the cache design ``name`` (live, no shadows)."""
        self.cache = create_stream(name, config or CacheConfig(), self.clock)
        return self.cache


@pytest.fixture
def stores() -> Stores:
    return Stores()


@pytest.fixture
def open_ledger(stores: Stores) -> OpenLedger:
    """Open (or reopen) a managed ledger over the same in-memory stores."""

    async def _open(
        name: str = "persistent://t/ns/topic", max_entries: int = 50000
    ) -> ManagedLedger:
        ledger = ManagedLedger(
            name,
            stores.bookie,
            stores.metadata,
            stores.cache.load_topic(name),
            ManagedLedgerConfig(max_entries_per_ledger=max_entries, min_rollover_ms=0),
            stores.clock,
        )
        await ledger.open()
        return ledger

    return _open
