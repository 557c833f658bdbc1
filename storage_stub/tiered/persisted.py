"""The tiered store as a broker uses it: the metadata image is made durable in the
metadata store before an upload or compaction returns (so a restart finds every object),
and reads are counted in the bookie's terms (requests, entries, bytes)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from storage_stub.bookie.api import MetadataStore
from storage_stub.config import StorageConfig
from storage_stub.tiered.format import RangeData
from storage_stub.tiered.image import MetadataImage
from storage_stub.tiered.object_store import InstrumentedObjectStore
from storage_stub.tiered.store import CompactionResult, TieredStore

IMAGE_KEY = "tiered/image"


class PersistedTieredStore:
    """Costs: those of TieredStore, plus one metadata write per upload or compaction."""

    def __init__(self, store: TieredStore, metadata: MetadataStore) -> None:
        self.store = store
        self._metadata = metadata
        self.read_requests = 0
        self.entries_read = 0
        self.entry_bytes_read = 0

    @classmethod
    async def open(
        cls, object_store: InstrumentedObjectStore, config: StorageConfig, metadata: MetadataStore
    ) -> PersistedTieredStore:
        raw = await metadata.get(IMAGE_KEY)
        image = MetadataImage.from_json(raw) if raw is not None else None
        return cls(TieredStore(object_store, config, image=image), metadata)

    async def _persist(self) -> None:
        await self._metadata.put(IMAGE_KEY, self.store.image.to_json())

    async def upload(self, ranges: Iterable[RangeData | tuple[int, int, Sequence[bytes]]]) -> int:
        object_id = await self.store.upload(ranges)
        await self._persist()
        return object_id

    async def compact_if_needed(self) -> CompactionResult | None:
        """Compact when there are more stream set objects than s3StreamSetObjectMaxNum."""
        if self.store.stats()["streamSetObjects"] <= self.store.max_stream_set_objects:
            return None
        return await self.compact()

    async def compact(
        self, max_sso_count: int | None = None, split_threshold_bytes: int | None = None
    ) -> CompactionResult:
        result = await self.store.compact(max_sso_count, split_threshold_bytes)
        await self._persist()
        return result

    async def read(
        self, stream_id: int, start_offset: int, end_offset: int
    ) -> list[tuple[int, bytes]]:
        pairs = await self.store.read(stream_id, start_offset, end_offset)
        self.read_requests += 1
        self.entries_read += len(pairs)
        self.entry_bytes_read += sum(len(data) for _, data in pairs)
        return pairs

    def stats(self) -> dict[str, Any]:
        stats = dict(self.store.stats())
        stats.update(
            readRequests=self.read_requests,
            entriesRead=self.entries_read,
            entryBytesRead=self.entry_bytes_read,
        )
        return stats
