"""The tiered store as a broker uses it: every new metadata image is made durable in the
metadata store before the store installs it, so an upload or compaction answered done
survives a crash and one that failed changed nothing; reads are counted in the bookie's
terms (requests, entries, bytes).

Open reads the durable image and deletes every object it does not name: objects of a
change that failed or crashed before its image was durable, and objects a compaction
removed but crashed before deleting."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from storage_stub.bookie.api import BookieError, MetadataStore
from storage_stub.config import StorageConfig
from storage_stub.tiered.format import RangeData
from storage_stub.tiered.image import MetadataImage
from storage_stub.tiered.object_store import InstrumentedObjectStore
from storage_stub.tiered.range_index import MonotonicClock
from storage_stub.tiered.store import CompactionResult, TieredStore

IMAGE_KEY = "tiered/image"

log = logging.getLogger(__name__)


class MetadataImageRecord:
    """The image's record in the metadata store: one key, rewritten whole by each change."""

    __slots__ = ("_metadata",)

    def __init__(self, metadata: MetadataStore) -> None:
        self._metadata = metadata

    async def load(self) -> MetadataImage | None:
        raw = await self._metadata.get(IMAGE_KEY)
        return None if raw is None else MetadataImage.from_json(raw)

    async def save(self, image: MetadataImage) -> None:
        """Returns once ``image`` is durable. O(image) to encode, one metadata put."""
        await self._metadata.put(IMAGE_KEY, image.to_json())


class PersistedTieredStore:
    """Costs: those of TieredStore, plus one metadata write per upload or compaction,
    and at open one listing of the object store."""

    def __init__(self, store: TieredStore) -> None:
        """``store`` persists its images itself (see ``open``)."""
        self.store = store
        self.read_requests = 0
        self.entries_read = 0
        self.entry_bytes_read = 0

    @classmethod
    async def open(
        cls,
        object_store: InstrumentedObjectStore,
        config: StorageConfig,
        metadata: MetadataStore,
        clock: MonotonicClock | None = None,
    ) -> PersistedTieredStore:
        """The store of the durable image (empty if none), its garbage deleted.
        ``clock``: what the range index's TTL reads (None: the system's)."""
        record = MetadataImageRecord(metadata)
        image = await record.load()
        store = TieredStore(
            object_store, config, image=image, clock=clock, persist_image=record.save
        )
        try:
            collected = await store.collect_garbage()
        except BookieError as error:  # the listing failed: the garbage waits for next open
            log.warning("tiered store: objects no image names are kept: %s", error)
        else:
            if collected:
                log.info("tiered store: deleted %d objects no image names", collected)
        return cls(store)

    async def upload(self, ranges: Iterable[RangeData | tuple[int, int, Sequence[bytes]]]) -> int:
        return await self.store.upload(ranges)

    async def compact_if_needed(self) -> CompactionResult | None:
        """Compact when there are more stream set objects than s3StreamSetObjectMaxNum."""
        if self.store.stats()["streamSetObjects"] <= self.store.max_stream_set_objects:
            return None
        return await self.compact()

    async def compact(
        self, max_sso_count: int | None = None, split_threshold_bytes: int | None = None
    ) -> CompactionResult:
        return await self.store.compact(max_sso_count, split_threshold_bytes)

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
