"""The stub S3 tier: stream set objects, stream objects, and how reads find them.

AutoMQ's design (seed 004, AutoMQ PR 2710): closed ledgers of many topics are uploaded
into stream set objects (SSOs) and later compacted into per-stream objects (SOs); the
metadata image orders the objects but does not know the SSOs' ranges, so a read finds
them through a lazily filled range index, per-object bloom filters, partial loading in
small batches and preloading from the end for tail reads. One small module per concern:

- ``object_store``: in-memory and on-disk object stores, and the instrumented wrapper
  (``instruments``: latency model, fault injector, counters of object operations)
- ``format``: the object layout (data blocks, index block, footer)
- ``image``: the metadata image
- ``range_index``: StreamSetObjectRangeIndex; ``bloom``: StreamIdBloomFilters
- ``locator``: the search of the ordered SSO list
- ``store``: TieredStore (upload, read, compact, stats)
"""

from storage_stub.tiered.api import (
    OBJECT_OPERATIONS,
    CorruptObjectError,
    NoSuchObjectError,
    ObjectStore,
    TieredStorageError,
)
from storage_stub.tiered.bloom import StreamIdBloomFilters
from storage_stub.tiered.format import RangeData, StreamRange
from storage_stub.tiered.image import MetadataImage, StreamObjectMeta, StreamSetObjectMeta
from storage_stub.tiered.instruments import (
    ObjectFaultInjector,
    ObjectLatencyModel,
    ObjectStoreCounters,
)
from storage_stub.tiered.object_store import (
    DiskObjectStore,
    InMemoryObjectStore,
    InstrumentedObjectStore,
    open_object_store,
)
from storage_stub.tiered.range_index import StreamSetObjectRangeIndex
from storage_stub.tiered.store import CompactionResult, TieredStore

__all__ = [
    "OBJECT_OPERATIONS",
    "CompactionResult",
    "CorruptObjectError",
    "DiskObjectStore",
    "InMemoryObjectStore",
    "InstrumentedObjectStore",
    "MetadataImage",
    "NoSuchObjectError",
    "ObjectFaultInjector",
    "ObjectLatencyModel",
    "ObjectStore",
    "ObjectStoreCounters",
    "RangeData",
    "StreamIdBloomFilters",
    "StreamObjectMeta",
    "StreamRange",
    "StreamSetObjectMeta",
    "StreamSetObjectRangeIndex",
    "TieredStorageError",
    "TieredStore",
    "open_object_store",
]
