"""Shared harness of the tiered-store tests: a writer that uploads stream set objects and
keeps a dict model of every entry it stored, and fresh stores over the same objects.
Test modules import the helpers from ``tests.tiered.conftest``."""

from __future__ import annotations

import pathlib
from collections.abc import Iterable
from typing import Any

import pytest

from broker.clock import ManualClock
from storage_stub.config import StorageConfig
from storage_stub.tiered import (
    DiskObjectStore,
    InMemoryObjectStore,
    InstrumentedObjectStore,
    MetadataImage,
    ObjectStore,
    TieredStore,
)

Model = dict[int, dict[int, bytes]]


def ledger_offset(ledger: int, entry: int) -> int:
    """The broker's stream offsets: ``ledger_id << 32 | entry_id``."""
    return ledger << 32 | entry


class Writer:
    """Uploads SSOs of several streams, each stream's offsets growing, jumping to a new
    ledger when told; remembers every entry in ``model``."""

    def __init__(self, store: TieredStore) -> None:
        self.store = store
        self.model: Model = {}
        self._ledger: dict[int, int] = {}
        self._entry: dict[int, int] = {}

    async def sso(
        self,
        streams: Iterable[int],
        entries: int | dict[int, int] = 2,
        new_ledger: Iterable[int] = (),
    ) -> int:
        """Upload one SSO with ``entries`` entries of each of ``streams`` (or
        ``entries[stream]``); the streams in ``new_ledger`` move to a new ledger first
        (an offset gap)."""
        jumping = set(new_ledger)
        ranges = []
        for stream in streams:
            ledger = self._ledger.setdefault(stream, 1)
            if stream in jumping:
                ledger = self._ledger[stream] = ledger + 1
                self._entry[stream] = 0
            entry = self._entry.setdefault(stream, 0)
            start = ledger_offset(ledger, entry)
            count = entries if isinstance(entries, int) else entries[stream]
            payloads = [b"s%d-l%d-e%d" % (stream, ledger, entry + i) for i in range(count)]
            ranges.append((stream, start, payloads))
            for i, payload in enumerate(payloads):
                self.model.setdefault(stream, {})[start + i] = payload
            self._entry[stream] = entry + count
        return await self.store.upload(ranges)

    def record(self, stream: int, start: int, payloads: list[bytes]) -> None:
        """Note entries stored some other way (the next SSO continues after them)."""
        for i, payload in enumerate(payloads):
            self.model.setdefault(stream, {})[start + i] = payload
        self._entry[stream] = (start & 0xFFFFFFFF) + len(payloads)

    def expected(self, stream: int, start: int, end: int) -> list[tuple[int, bytes]]:
        stored = self.model.get(stream, {})
        return [(offset, stored[offset]) for offset in sorted(stored) if start <= offset < end]

    def offsets(self, stream: int) -> list[int]:
        return sorted(self.model[stream])


def fresh_store(
    inner: ObjectStore,
    image: MetadataImage,
    config: StorageConfig | None = None,
    clock: ManualClock | None = None,
) -> TieredStore:
    """A new TieredStore (empty range index, no filters) over the same objects."""
    return TieredStore(InstrumentedObjectStore(inner), config, image=image.copy(), clock=clock)


@pytest.fixture(params=["memory", "disk"])
def object_store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> ObjectStore:
    """Each object store: a dict, and one file per object under ``tmp_path``."""
    if request.param == "memory":
        return InMemoryObjectStore()
    return DiskObjectStore(tmp_path / "objects")


def memory_config(**settings: Any) -> StorageConfig:
    return StorageConfig(storageMode="memory", **settings)
