"""The metadata image: which objects exist, in which order, and each stream's extent.

As in AutoMQ V2, the image knows a stream set object (SSO) only by id, order and size,
never by the ranges it holds (those are in its index block); a stream object (SO) is
one stream's range and the image records it. Each stream's start and end offsets are
stream metadata (AutoMQ keeps them in the stream's range metadata).

The image is copy-on-write: an upload or compaction builds its ``successor``, makes
that durable, and only then installs it, so a reader keeps a consistent view and a
change whose persist fails leaves the installed image untouched.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from dataclasses import dataclass
from typing import Any

from storage_stub.tiered.api import TieredStorageError

_KEY_PREFIX = "obj-"
_KEY_DIGITS = 16


def object_key(object_id: int) -> str:
    """The object store key of an object (made here, never from user input)."""
    return f"{_KEY_PREFIX}{object_id:0{_KEY_DIGITS}x}"


def object_id_of(key: str) -> int | None:
    """The object id ``key`` names (``object_key``'s inverse), None for any other key."""
    if not key.startswith(_KEY_PREFIX):
        return None
    try:
        object_id = int(key[len(_KEY_PREFIX) :], 16)
    except ValueError:
        return None
    return object_id if object_id >= 0 and object_key(object_id) == key else None


@dataclass(frozen=True, slots=True)
class StreamSetObjectMeta:
    """An SSO as the image knows it: no ranges. A compacted SSO takes the order id of
    the first object it replaces, so the list stays in stream-offset order."""

    object_id: int
    order_id: int
    size: int


@dataclass(frozen=True, slots=True)
class StreamObjectMeta:
    """An SO: offsets ``start_offset..end_offset`` (end exclusive) of one stream;
    entries may be missing inside (offsets jump between ledgers)."""

    object_id: int
    stream_id: int
    start_offset: int
    end_offset: int
    size: int


def _end_offset(meta: StreamObjectMeta) -> int:
    return meta.end_offset


class StreamSetObjectList:
    """An immutable, ordered tuple of SSOs with O(1) position lookup by object id."""

    __slots__ = ("_positions", "objects")

    def __init__(self, objects: tuple[StreamSetObjectMeta, ...] = ()) -> None:
        self.objects = objects
        self._positions = {meta.object_id: index for index, meta in enumerate(objects)}

    def __len__(self) -> int:
        return len(self.objects)

    def position(self, object_id: int) -> int | None:
        """Index of ``object_id`` in the list, None if it is not there. O(1)."""
        return self._positions.get(object_id)


class MetadataImage:
    """Objects and streams of one tiered store. Mutated only by TieredStore."""

    __slots__ = ("next_object_id", "stream_objects", "stream_set_objects", "streams", "version")

    def __init__(self) -> None:
        self.stream_set_objects = StreamSetObjectList()
        #: stream id -> its SOs sorted by start offset (tuples replaced on change).
        self.stream_objects: dict[int, tuple[StreamObjectMeta, ...]] = {}
        #: stream id -> (start offset, end offset): the stream's stored extent.
        self.streams: dict[int, tuple[int, int]] = {}
        self.next_object_id = 0
        #: bumped by every change, so a reader can tell its view went stale.
        self.version = 0

    def allocate_object_id(self) -> int:
        object_id = self.next_object_id
        self.next_object_id += 1
        return object_id

    def stream_end(self, stream_id: int) -> int | None:
        extent = self.streams.get(stream_id)
        return None if extent is None else extent[1]

    def stream_object_after(self, stream_id: int, offset: int) -> StreamObjectMeta | None:
        """The first SO of the stream whose range ends after ``offset``. O(log(SOs))."""
        objects = self.stream_objects.get(stream_id)
        if not objects:
            return None
        index = bisect_right(objects, offset, key=_end_offset)
        return objects[index] if index < len(objects) else None

    def stream_object_count(self) -> int:
        return sum(len(objects) for objects in self.stream_objects.values())

    def all_object_ids(self) -> list[int]:
        ids = [meta.object_id for meta in self.stream_set_objects.objects]
        ids += [meta.object_id for objects in self.stream_objects.values() for meta in objects]
        return sorted(ids)

    # -------------------------------------------------------------- persistence

    def to_json(self) -> bytes:
        """The image as JSON (the broker may keep it in its metadata store)."""
        document: dict[str, Any] = {
            "nextObjectId": self.next_object_id,
            "streamSetObjects": [
                [meta.object_id, meta.order_id, meta.size]
                for meta in self.stream_set_objects.objects
            ],
            "streamObjects": [
                [meta.object_id, meta.stream_id, meta.start_offset, meta.end_offset, meta.size]
                for objects in self.stream_objects.values()
                for meta in objects
            ],
            "streams": [
                [stream_id, start, end] for stream_id, (start, end) in self.streams.items()
            ],
        }
        return json.dumps(document, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> MetadataImage:
        """The image ``to_json`` wrote. TieredStorageError if ``data`` is not one."""
        try:
            return cls._from_document(json.loads(data))
        except (ValueError, KeyError, TypeError, IndexError) as error:
            raise TieredStorageError(f"the metadata image is corrupt: {error!r}") from None

    @classmethod
    def _from_document(cls, document: Any) -> MetadataImage:
        image = cls()
        image.next_object_id = int(document["nextObjectId"])
        image.stream_set_objects = StreamSetObjectList(
            tuple(StreamSetObjectMeta(*map(int, row)) for row in document["streamSetObjects"])
        )
        by_stream: dict[int, list[StreamObjectMeta]] = {}
        for row in document["streamObjects"]:
            meta = StreamObjectMeta(*map(int, row))
            by_stream.setdefault(meta.stream_id, []).append(meta)
        image.stream_objects = {
            stream_id: tuple(sorted(objects, key=lambda meta: meta.start_offset))
            for stream_id, objects in by_stream.items()
        }
        image.streams = {int(row[0]): (int(row[1]), int(row[2])) for row in document["streams"]}
        return image

    def successor(self) -> MetadataImage:
        """The image a change starts from: the same objects and streams, version + 1.
        O(streams): the dicts are copied, their values (tuples) are immutable."""
        image = MetadataImage()
        image.stream_set_objects = self.stream_set_objects
        image.stream_objects = dict(self.stream_objects)
        image.streams = dict(self.streams)
        image.next_object_id = self.next_object_id
        image.version = self.version + 1
        return image

    def copy(self) -> MetadataImage:
        """An independent image of the same objects (a fresh TieredStore over them)."""
        return MetadataImage.from_json(self.to_json())
