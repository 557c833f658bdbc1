"""TieredStore: the S3 side of a broker (AutoMQ's design, seed 004).

``upload`` writes one stream set object (SSO) holding ranges of many streams;
``read`` returns a stream's stored entries in an offset range, locating the objects
through the range index, bloom filters and batched loading of ``locator.py``;
``compact`` merges the oldest SSOs and moves streams with large ranges into stream
objects (SOs). A stream's offsets only grow (uploads of a stream never go back), and
may jump (the broker uses ``ledger_id << 32 | entry_id``).

Costs (object store calls, the unit that matters on S3):
- ``upload``: one put, and one metadata write when persisted. CPU O(entries + bytes).
  A range the store already holds (a retried upload) costs a read instead.
- ``read``: per object holding the answer, one index-block get (two if the index is
  larger than 64 KiB) and one ranged get per run of adjacent data blocks; plus the
  index blocks the search loads (see locator.py and ``stats()["indexLoads"]``).
- ``compact``: one get per merged SSO, one put per new object, one delete per old one.

Writers (upload, compact) are serialised by a lock; reads run alongside them on a
snapshot of the image and start again if a compaction deletes an object they chose.

Durability, in this order: a writer puts its new objects, builds the successor of the
image, makes it durable (``persist_image``, when given), installs it, and only then
deletes the objects it no longer names. A crash at any step leaves a durable image whose
every object exists; a failed step leaves the installed image, range index and filters
as they were. Objects no durable image names are garbage: ``collect_garbage`` (at open)
deletes them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from storage_stub.bookie.api import BookieError
from storage_stub.config import StorageConfig
from storage_stub.tiered.api import NoSuchObjectError, ObjectStore
from storage_stub.tiered.bloom import StreamIdBloomFilters
from storage_stub.tiered.format import (
    DataBlockIndex,
    ObjectIndex,
    RangeData,
    decode_block,
    encode_object,
    index_location,
)
from storage_stub.tiered.image import (
    MetadataImage,
    StreamObjectMeta,
    StreamSetObjectList,
    StreamSetObjectMeta,
    object_id_of,
    object_key,
)
from storage_stub.tiered.instruments import ObjectStoreCounters
from storage_stub.tiered.locator import ReadContext, StreamSetObjectLocator
from storage_stub.tiered.object_store import InstrumentedObjectStore
from storage_stub.tiered.range_index import MonotonicClock, StreamSetObjectRangeIndex

#: Largest stream id and offset the format holds (unsigned 64-bit).
MAX_U64 = (1 << 64) - 1
#: A read starts again at most this many times when compactions keep deleting its objects.
READ_ATTEMPTS = 5

#: Makes an image durable before the store installs it (raises if it could not).
ImagePersister = Callable[[MetadataImage], Awaitable[None]]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CompactionResult:
    merged_objects: int
    stream_set_object_id: int | None
    stream_object_ids: tuple[int, ...]
    bytes_read: int
    bytes_written: int


class TieredStore:
    """Stream set objects and stream objects on an object store, and the metadata
    image that orders them. See the module docstring for costs."""

    __slots__ = (
        "_config",
        "_counters",
        "_image",
        "_next_object_id",
        "_orphans",
        "_persist_image",
        "_store",
        "_write_lock",
        "compactions",
        "locator",
        "read_retries",
        "reads",
    )

    def __init__(
        self,
        object_store: ObjectStore,
        config: StorageConfig | None = None,
        *,
        image: MetadataImage | None = None,
        clock: MonotonicClock | None = None,
        persist_image: ImagePersister | None = None,
    ) -> None:
        """``object_store``: an InstrumentedObjectStore (its counters feed ``stats()``)
        or a plain store, which gets wrapped with no latency and no faults. ``image``:
        the objects already stored (say, ``MetadataImage.from_json``); empty if None.
        ``persist_image``: called with every new image before it is installed (None:
        images live in memory only)."""
        config = config if config is not None else StorageConfig()
        if not isinstance(object_store, InstrumentedObjectStore):
            object_store = InstrumentedObjectStore(object_store)
        self._store: InstrumentedObjectStore = object_store
        self._counters: ObjectStoreCounters = object_store.counters
        self._config = config
        self._image = image if image is not None else MetadataImage()
        self._persist_image = persist_image
        #: ids are never handed out twice, not even those of images never installed, so
        #: deleting an orphan can never hit a live object.
        self._next_object_id = self._image.next_object_id
        self._write_lock = asyncio.Lock()
        #: objects no durable or installed image names, to delete (kept on failure)
        self._orphans: set[int] = set()
        self.locator = StreamSetObjectLocator(
            object_store,
            enabled=config.s3StreamSetObjectRangeIndexEnabled,
            range_index=StreamSetObjectRangeIndex(
                config.s3StreamSetObjectRangeIndexMaxStreams,
                config.s3StreamSetObjectRangeIndexTtlMs,
                clock,
            ),
            blooms=StreamIdBloomFilters(
                config.s3StreamIdBloomFilterMaxBytes,
                config.s3StreamIdBloomFilterFalsePositiveRate,
            ),
            is_live=self._is_live_stream_set_object,
        )
        self.reads = 0
        self.read_retries = 0
        self.compactions = 0

    @property
    def image(self) -> MetadataImage:
        """The metadata image (persist it with ``to_json``; do not mutate it)."""
        return self._image

    @property
    def object_store(self) -> InstrumentedObjectStore:
        return self._store

    @property
    def max_stream_set_objects(self) -> int:
        """s3StreamSetObjectMaxNum: compaction keeps at most this many SSOs."""
        return self._config.s3StreamSetObjectMaxNum

    def stream_extent(self, stream_id: int) -> tuple[int, int] | None:
        """``(first stored offset, end offset)`` of the stream, None if it has none."""
        return self._image.streams.get(stream_id)

    # ------------------------------------------------------------------ upload

    async def upload(self, ranges: Iterable[RangeData | tuple[int, int, Sequence[bytes]]]) -> int:
        """Write one SSO holding ``ranges`` (stream id, start offset, entries), and
        return its object id. Empty ranges are ignored; ValueError if nothing is left,
        if two ranges of a stream overlap, or if a range starts before its stream's end
        offset, unless the store holds it already: the same entries at the same offsets
        (a retry of an upload that was done, its caller told otherwise). Such ranges are
        left out; if that is all of them, nothing is written and the id returned is of
        an object holding them. The object is put, the new image made durable, then
        installed; on failure (a BookieError) nothing changes and the object, if
        written, is deleted."""
        async with self._write_lock:
            data_ranges, holder = await self._not_stored(_data_ranges(ranges))
            if not data_ranges:
                assert holder is not None
                return holder
            self._check_order(data_ranges)
            object_id = self._allocate_object_id()
            data = encode_object(data_ranges)
            await self._store.put(object_key(object_id), data)
            image = self._next_image()
            image.stream_set_objects = StreamSetObjectList(
                (
                    *image.stream_set_objects.objects,
                    StreamSetObjectMeta(object_id, object_id, len(data)),
                )
            )
            for data_range in data_ranges:
                extent = image.streams.get(data_range.stream_id)
                first = data_range.start_offset if extent is None else extent[0]
                image.streams[data_range.stream_id] = (first, data_range.end_offset)
            await self._install(image, written=[object_id])
            return object_id

    async def _not_stored(self, data_ranges: list[RangeData]) -> tuple[list[RangeData], int | None]:
        """``data_ranges`` but those the store holds already, and the id of an object
        holding the last of those (None if none). One read per range that ends at or
        before its stream's end offset; none for a range past it (the usual upload)."""
        fresh: list[RangeData] = []
        holder: int | None = None
        for data_range in data_ranges:
            stream_id = data_range.stream_id
            start, end = data_range.start_offset, data_range.end_offset
            stream_end = self._image.stream_end(stream_id)
            if stream_end is None or end > stream_end:
                fresh.append(data_range)
                continue
            holders: list[int] = []
            stored = await self._read_once(stream_id, start, end, holders)
            if stored != list(zip(range(start, end), data_range.entries, strict=True)):
                fresh.append(data_range)  # different entries: the order check refuses it
                continue
            holder = holders[-1]
        return fresh, holder

    def _check_order(self, data_ranges: list[RangeData]) -> None:
        previous: RangeData | None = None
        for data_range in data_ranges:
            stream_id = data_range.stream_id
            if previous is not None and previous.stream_id == stream_id:
                low = previous.end_offset
            else:
                low = self._image.stream_end(stream_id) or 0
            if data_range.start_offset < low:
                raise ValueError(
                    f"upload: stream {stream_id}: range starting at {data_range.start_offset}"
                    f" goes back before offset {low}"
                )
            previous = data_range

    # -------------------------------------------------------------------- read

    async def read(
        self, stream_id: int, start_offset: int, end_offset: int
    ) -> list[tuple[int, bytes]]:
        """Every stored entry of the stream with ``start_offset <= offset < end_offset``,
        as ``(offset, entry)`` in offset order. A read whose end is at or past the
        stream's end offset counts as a tail read (the locator preloads from the end)."""
        self.reads += 1
        for attempt in range(READ_ATTEMPTS):
            version = self._image.version
            try:
                return await self._read_once(stream_id, start_offset, end_offset)
            except NoSuchObjectError:
                # A compaction deleted an object this read's view still listed.
                if self._image.version == version or attempt == READ_ATTEMPTS - 1:
                    raise
                self.read_retries += 1
        raise AssertionError("unreachable")

    async def _read_once(
        self, stream_id: int, start_offset: int, end_offset: int, holders: list[int] | None = None
    ) -> list[tuple[int, bytes]]:
        """One try of ``read``; the ids of the objects it read from go to ``holders``."""
        image = self._image
        extent = image.streams.get(stream_id)
        if extent is None:
            return []
        first, stream_end = extent
        offset = max(start_offset, first)
        end = min(end_offset, stream_end)
        ctx = ReadContext(stream_id, image.stream_set_objects, read_to_end=end_offset >= stream_end)
        result: list[tuple[int, bytes]] = []
        while offset < end:
            stream_object = image.stream_object_after(stream_id, offset)
            if stream_object is not None and stream_object.start_offset >= end:
                stream_object = None
            found = None
            if stream_object is None or stream_object.start_offset > offset:
                bound = end if stream_object is None else stream_object.start_offset
                found = await self.locator.find(ctx, offset, bound)
            if found is not None:
                index, blocks = found
            elif stream_object is not None:
                index = await self.locator.load_index(
                    stream_object.object_id, stream_object.size, learn=False
                )
                blocks = [
                    block
                    for block in index.blocks_of(stream_id)
                    if block.end_offset > offset and block.start_offset < end
                ]
                if not blocks:  # a gap up to the end of the stream object
                    offset = stream_object.end_offset
                    continue
            else:
                break
            result.extend(await self._fetch(index, blocks, offset, end))
            if holders is not None:
                holders.append(index.object_id)
            offset = blocks[-1].end_offset
        return result

    async def _fetch(
        self, index: ObjectIndex, blocks: list[DataBlockIndex], offset: int, end: int
    ) -> list[tuple[int, bytes]]:
        """The entries of ``blocks`` within ``offset..end``: one ranged get per run of
        adjacent blocks."""
        key = object_key(index.object_id)
        runs: list[list[DataBlockIndex]] = []
        for block in blocks:
            if runs and runs[-1][-1].position + runs[-1][-1].length == block.position:
                runs[-1].append(block)
            else:
                runs.append([block])
        result: list[tuple[int, bytes]] = []
        for run in runs:
            low = run[0].position
            data = await self._store.get_range(key, low, run[-1].position + run[-1].length)
            for block in run:
                start = block.position - low
                entries = decode_block(key, block, data[start : start + block.length])
                first = max(offset, block.start_offset)
                last = min(end, block.end_offset)
                base = block.start_offset
                result.extend((o, entries[o - base]) for o in range(first, last))
        return result

    # -------------------------------------------------------------- compaction

    async def compact(
        self, max_sso_count: int | None = None, split_threshold_bytes: int | None = None
    ) -> CompactionResult:
        """Merge the oldest SSOs into one so that at most ``max_sso_count`` remain
        (default ``s3StreamSetObjectMaxNum``); a stream holding at least
        ``split_threshold_bytes`` of the merged data (default
        ``s3StreamSetObjectCompactionStreamSplitSize``) goes to a stream object of its
        own instead. The new objects are put, the new image made durable and installed,
        the removed objects' filters and range index entries dropped, and only then are
        they deleted (a failed delete is retried by the next compaction). On failure
        (a BookieError) nothing changes and the new objects are deleted."""
        config = self._config
        max_count = config.s3StreamSetObjectMaxNum if max_sso_count is None else max_sso_count
        threshold = (
            config.s3StreamSetObjectCompactionStreamSplitSize
            if split_threshold_bytes is None
            else split_threshold_bytes
        )
        if max_count < 1 or threshold < 1:
            raise ValueError("compact: max_sso_count and split_threshold_bytes must be >= 1")
        async with self._write_lock:
            await self._delete_orphans()
            image = self._image
            objects = image.stream_set_objects.objects
            if len(objects) <= max_count:
                return CompactionResult(0, None, (), 0, 0)
            victims = objects[: len(objects) - max_count + 1]
            bytes_before = self._counters.bytesRead
            per_stream, victim_indexes = await self._read_victims(victims)
            stream_bytes: dict[int, int] = {}
            for index in victim_indexes:
                for block in index.blocks:
                    stream_bytes[block.stream_id] = (
                        stream_bytes.get(block.stream_id, 0) + block.length
                    )
            bytes_read = self._counters.bytesRead - bytes_before
            merged: list[RangeData] = []
            split: list[list[RangeData]] = []
            for stream_id in sorted(per_stream):
                stream_ranges = per_stream[stream_id]
                if stream_bytes[stream_id] >= threshold:
                    split.append(stream_ranges)
                else:
                    merged.extend(stream_ranges)
            written: list[int] = []
            bytes_written = 0
            try:
                new_stream_objects: list[StreamObjectMeta] = []
                for stream_ranges in split:
                    object_id = self._allocate_object_id()
                    data = encode_object(stream_ranges)
                    await self._store.put(object_key(object_id), data)
                    written.append(object_id)
                    bytes_written += len(data)
                    new_stream_objects.append(
                        StreamObjectMeta(
                            object_id,
                            stream_ranges[0].stream_id,
                            stream_ranges[0].start_offset,
                            stream_ranges[-1].end_offset,
                            len(data),
                        )
                    )
                merged_meta: StreamSetObjectMeta | None = None
                if merged:
                    object_id = self._allocate_object_id()
                    data = encode_object(merged)
                    await self._store.put(object_key(object_id), data)
                    written.append(object_id)
                    bytes_written += len(data)
                    merged_meta = StreamSetObjectMeta(object_id, victims[0].order_id, len(data))
            except BookieError:
                await self._discard(written)
                raise
            except BaseException:
                self._orphans.update(written)  # no image names them yet
                raise
            new_image = self._compacted_image(victims, merged_meta, new_stream_objects)
            await self._install(new_image, written)
            self._forget_objects(victim_indexes)
            self._orphans.update(meta.object_id for meta in victims)
            self.compactions += 1
            await self._delete_orphans()
            return CompactionResult(
                len(victims),
                None if merged_meta is None else merged_meta.object_id,
                tuple(meta.object_id for meta in new_stream_objects),
                bytes_read,
                bytes_written,
            )

    async def _read_victims(
        self, victims: Sequence[StreamSetObjectMeta]
    ) -> tuple[dict[int, list[RangeData]], list[ObjectIndex]]:
        """Every range of the victims, per stream in offset order (adjacent ranges joined),
        and their indexes. One whole-object get per victim."""
        per_stream: dict[int, list[RangeData]] = {}
        indexes: list[ObjectIndex] = []
        for meta in victims:
            key = object_key(meta.object_id)
            data = await self._store.get(key)
            index = _index_of(meta.object_id, key, data)
            indexes.append(index)
            for block in index.blocks:
                entries = decode_block(
                    key, block, data[block.position : block.position + block.length]
                )
                stream_ranges = per_stream.setdefault(block.stream_id, [])
                last = stream_ranges[-1] if stream_ranges else None
                if last is not None and last.end_offset == block.start_offset:
                    assert isinstance(last.entries, list)
                    last.entries.extend(entries)
                else:
                    stream_ranges.append(RangeData(block.stream_id, block.start_offset, entries))
        return per_stream, indexes

    def _compacted_image(
        self,
        victims: Sequence[StreamSetObjectMeta],
        merged: StreamSetObjectMeta | None,
        stream_objects: list[StreamObjectMeta],
    ) -> MetadataImage:
        image = self._next_image()
        remaining = image.stream_set_objects.objects[len(victims) :]
        image.stream_set_objects = StreamSetObjectList(
            remaining if merged is None else (merged, *remaining)
        )
        for meta in stream_objects:
            existing = image.stream_objects.get(meta.stream_id, ())
            image.stream_objects[meta.stream_id] = tuple(
                sorted((*existing, meta), key=lambda so: so.start_offset)
            )
        return image

    def _forget_objects(self, indexes: list[ObjectIndex]) -> None:
        """Drop the range index entries and filters of objects that left the image."""
        locator = self.locator
        for index in indexes:
            locator.range_index.remove_object(index.object_id, index.ranges())
            locator.forget_object(index.object_id)

    # ------------------------------------------------------------ durability

    def _allocate_object_id(self) -> int:
        object_id = max(self._next_object_id, self._image.next_object_id)
        self._next_object_id = object_id + 1
        return object_id

    def _next_image(self) -> MetadataImage:
        """The installed image's successor, naming every id handed out so far."""
        image = self._image.successor()
        image.next_object_id = max(image.next_object_id, self._next_object_id)
        return image

    async def _install(self, image: MetadataImage, written: Sequence[int]) -> None:
        """Make ``image`` durable, then the store's image. If the persist fails with a
        BookieError (the metadata store wrote nothing), ``written``, the objects only
        ``image`` names, are deleted; if it is interrupted (cancelled), they are left
        for ``collect_garbage``, since the write may have landed."""
        if self._persist_image is not None:
            try:
                await self._persist_image(image)
            except BookieError:
                await self._discard(written)
                raise
        self._image = image

    async def _discard(self, written: Sequence[int]) -> None:
        """Objects written for a change that failed: delete them, best effort."""
        self._orphans.update(written)
        await self._delete_orphans()

    async def _delete_orphans(self) -> None:
        """Delete objects no image names; those that fail wait for the next try."""
        for object_id in sorted(self._orphans):
            try:
                await self._store.delete(object_key(object_id))
            except BookieError as error:
                log.warning("tiered store: unused object %d left for later: %s", object_id, error)
                continue
            self._orphans.discard(object_id)

    async def collect_garbage(self) -> int:
        """Delete every object of the object store the image does not name (written by
        a change that failed or crashed before its image was durable, or removed by one
        that crashed before deleting it); returns how many. Those that fail to delete
        wait for the next compaction. Call it only with an image that is durable (at
        open): a change in flight elsewhere would lose its objects. One listing, and
        one delete per garbage object."""
        async with self._write_lock:
            named = set(self._image.all_object_ids())
            garbage = {
                object_id
                for object_id in map(object_id_of, await self._store.keys())
                if object_id is not None and object_id not in named
            }
            if not garbage:
                return 0
            # an id whose delete fails must never be handed out again
            self._next_object_id = max(self._next_object_id, max(garbage) + 1)
            self._orphans.update(garbage)
            await self._delete_orphans()
            return len(garbage)

    def _is_live_stream_set_object(self, object_id: int) -> bool:
        return self._image.stream_set_objects.position(object_id) is not None

    # ------------------------------------------------------------------- stats

    def stats(self) -> dict[str, Any]:
        """Counters of the object store, the locator and the image (flat dict)."""
        image = self._image
        locator = self.locator
        stream_objects = image.stream_object_count()
        return {
            "objectGets": self._counters.objectGets,
            "objectGetErrors": self._counters.objectGetErrors,
            "bytesRead": self._counters.bytesRead,
            "objectPuts": self._counters.objectPuts,
            "objectPutErrors": self._counters.objectPutErrors,
            "bytesWritten": self._counters.bytesWritten,
            "objectDeletes": self._counters.objectDeletes,
            **locator.counters.snapshot(),
            "rangeIndexStreams": len(locator.range_index),
            "rangeIndexEvicted": locator.range_index.evicted,
            "rangeIndexExpired": locator.range_index.expired,
            "bloomFilters": len(locator.blooms),
            "bloomFilterBytes": locator.blooms.bytes,
            "bloomFiltersEvicted": locator.blooms.evicted,
            "objects": len(image.stream_set_objects) + stream_objects,
            "streamSetObjects": len(image.stream_set_objects),
            "streamObjects": stream_objects,
            "streams": len(image.streams),
            "reads": self.reads,
            "readRetries": self.read_retries,
            "compactions": self.compactions,
            "orphanObjects": len(self._orphans),
        }


def _data_ranges(ranges: Iterable[RangeData | tuple[int, int, Sequence[bytes]]]) -> list[RangeData]:
    """The non-empty ranges, sorted by stream and offset. ValueError if none is left or
    an id or offset is out of bounds."""
    data_ranges = sorted(
        (RangeData(int(s), int(o), list(e)) for s, o, e in ranges if len(e) > 0),
        key=lambda r: (r.stream_id, r.start_offset),
    )
    if not data_ranges:
        raise ValueError("upload: no entries")
    for data_range in data_ranges:
        stream_id = data_range.stream_id
        if not (0 <= stream_id <= MAX_U64 and data_range.start_offset >= 0):
            raise ValueError(f"upload: stream {stream_id}: ids and offsets must be >= 0")
        if data_range.end_offset > MAX_U64:
            raise ValueError(f"upload: stream {stream_id}: offsets exceed 64 bits")
    return data_ranges


def _index_of(object_id: int, key: str, data: bytes) -> ObjectIndex:
    position, length = index_location(key, data, len(data))
    return ObjectIndex.parse(object_id, key, data[position : position + length])
