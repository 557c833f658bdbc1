"""Finding the stream set objects (SSOs) that hold a stream's offsets (AutoMQ PR 2710).

SSOs are ordered so that, within every stream, offsets grow with the order: the first
SSO (in order) holding a block of the stream that ends after offset ``o`` holds the
stream's next stored entries at or after ``o``. The search walks the ordered list:

- index on (``s3StreamSetObjectRangeIndexEnabled=true``): start where the range index
  points (floor of ``o``); load index blocks lazily in batches (5 objects, one more
  every 5 rounds: ``round // 5 + 5``), never loading an object whose bloom filter
  excludes the stream; each round also preloads a few objects further on, from the end
  for reads to the stream's end offset (``preLoadEndOffset``) or spread over the rest
  of the list otherwise (``preLoadMiddle``); before each round, consult the range
  index again and jump ahead when it points past what is loaded (fast skip). Every
  loaded index block fills the range index with all its streams and gets a filter.
  One departure from AutoMQ: its ``preLoadMiddle`` spreads a round's preloads over
  the rest of the list (from the loaded bound to the end); here they spread over the
  bracket the answer must lie in, up to the first object the range index knows to
  hold the stream past the offset (the end of the list when it knows none, which
  makes the first round the same as AutoMQ's). The search then closes in on the
  answer like a 5-way bisection instead of walking on from the first preload below it.
- index off: the old behaviour; the first search of a read loads the index block of
  every SSO, then walks them.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from storage_stub.tiered.api import ObjectStore
from storage_stub.tiered.bloom import StreamIdBloomFilters
from storage_stub.tiered.format import (
    TAIL_READ_BYTES,
    DataBlockIndex,
    ObjectIndex,
    index_location,
)
from storage_stub.tiered.image import StreamSetObjectList, object_key
from storage_stub.tiered.range_index import StreamSetObjectRangeIndex

T = TypeVar("T")

#: Objects per loading round at first; one more every ``ROUNDS_PER_STEP`` rounds.
BATCH_START = 5
ROUNDS_PER_STEP = 5
#: Objects preloaded from the end per round, and rounds that do it (AutoMQ: 5 and 5).
END_PRELOAD_OBJECTS = 5
END_PRELOAD_ROUNDS = 5
#: Rounds that preload spread-out objects ahead of a middle read (AutoMQ: rounds 1..4),
#: and how many objects each preloads.
MIDDLE_PRELOAD_ROUNDS = 5
MIDDLE_PRELOAD_OBJECTS = 4


async def run_all(calls: Sequence[Awaitable[T]]) -> list[T]:
    """Await ``calls`` concurrently in a task group; the first failure is raised as is
    (the others are cancelled)."""
    if len(calls) == 1:
        return [await calls[0]]
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(_awaited(call)) for call in calls]
    except ExceptionGroup as failures:
        raise failures.exceptions[0] from None
    return [task.result() for task in tasks]


async def _awaited(call: Awaitable[T]) -> T:
    return await call


class ReadContext:
    """What one read learned: its view of the SSO list, the index blocks it loaded, how
    far the list is loaded, and its loading rounds."""

    __slots__ = (
        "all_loaded",
        "end_preload_round",
        "loaded",
        "loaded_bound",
        "middle_preload_round",
        "read_to_end",
        "rounds",
        "search_floor",
        "ssos",
        "stream_id",
    )

    def __init__(self, stream_id: int, ssos: StreamSetObjectList, read_to_end: bool) -> None:
        self.stream_id = stream_id
        self.ssos = ssos
        self.read_to_end = read_to_end
        self.loaded: dict[int, ObjectIndex] = {}
        #: positions before it were all loaded, skipped by a filter, or jumped over.
        self.loaded_bound = 0
        #: the position of the last SSO found: nothing before it matters any more.
        self.search_floor = 0
        self.rounds = 0
        self.end_preload_round = 1
        self.middle_preload_round = 1
        self.all_loaded = False


class LocatorCounters:
    __slots__ = (
        "bloomSkips",
        "fastSkips",
        "indexLoads",
        "loadBatches",
        "rangeIndexHits",
        "rangeIndexMisses",
        "rangeIndexStale",
    )

    def __init__(self) -> None:
        self.indexLoads = 0
        self.bloomSkips = 0
        self.loadBatches = 0
        self.fastSkips = 0
        self.rangeIndexHits = 0
        self.rangeIndexMisses = 0
        self.rangeIndexStale = 0

    def snapshot(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}


class StreamSetObjectLocator:
    """Loads index blocks and searches the ordered SSO list for a stream's offsets."""

    __slots__ = (
        "_is_live",
        "_loads_by_object",
        "_store",
        "blooms",
        "counters",
        "enabled",
        "range_index",
    )

    def __init__(
        self,
        store: ObjectStore,
        *,
        enabled: bool,
        range_index: StreamSetObjectRangeIndex,
        blooms: StreamIdBloomFilters,
        is_live: Callable[[int], bool],
    ) -> None:
        self._store = store
        self.enabled = enabled
        self.range_index = range_index
        self.blooms = blooms
        self._is_live = is_live
        self.counters = LocatorCounters()
        self._loads_by_object: Counter[int] = Counter()

    def index_loads_of(self, object_id: int) -> int:
        """Index blocks of ``object_id`` loaded so far."""
        return self._loads_by_object[object_id]

    def forget_object(self, object_id: int) -> None:
        """The object left the image: drop its filter and per-object count (its range
        index entries are dropped by the caller, which knows its ranges)."""
        self.blooms.remove(object_id)
        self._loads_by_object.pop(object_id, None)

    async def load_index(self, object_id: int, size: int, *, learn: bool) -> ObjectIndex:
        """Read an object's index block: one ranged get of its tail (two when the index
        is larger than TAIL_READ_BYTES). ``learn``: fill the range index and filters."""
        key = object_key(object_id)
        tail_start = max(0, size - TAIL_READ_BYTES)
        tail = await self._store.get_range(key, tail_start, size)
        position, length = index_location(key, tail, size)
        if position >= tail_start:
            index_bytes = tail[position - tail_start : position - tail_start + length]
        else:
            index_bytes = await self._store.get_range(key, position, position + length)
        index = ObjectIndex.parse(object_id, key, index_bytes)
        self.counters.indexLoads += 1
        self._loads_by_object[object_id] += 1
        if learn and self.enabled:
            self.blooms.add(object_id, index.stream_ids())
            self.range_index.update(object_id, index.ranges())
        return index

    async def find(
        self, ctx: ReadContext, offset: int, bound: int
    ) -> tuple[ObjectIndex, list[DataBlockIndex]] | None:
        """The first SSO of ``ctx``'s view holding blocks of the stream that end after
        ``offset`` and start before ``bound``, with those blocks; None if none does."""
        if not self.enabled:
            await self._load_everything(ctx)
        objects = ctx.ssos.objects
        position = max(ctx.search_floor, self._floor_position(ctx, offset))
        while position < len(objects):
            if self.enabled and position >= ctx.loaded_bound:
                jump = self._floor_position(ctx, offset)
                if jump > position:
                    self.counters.fastSkips += 1
                    position = jump
                stop, ceiling_position = self._stop(ctx, offset, bound)
                if position >= stop:
                    return None
                await self._load_round(ctx, position, stop, ceiling_position)
            meta = objects[position]
            index = ctx.loaded.get(meta.object_id)
            if index is None:  # its filter excludes the stream
                position += 1
                continue
            blocks = [
                block
                for block in index.blocks_of(ctx.stream_id)
                if block.end_offset > offset and block.start_offset < bound
            ]
            if blocks:
                ctx.search_floor = position
                return index, blocks
            position += 1
        return None

    def _floor_position(self, ctx: ReadContext, offset: int) -> int:
        """Where the range index says the search may start (0 when it knows nothing)."""
        if not self.enabled:
            return 0
        found = self._indexed(ctx, offset, after=False)
        if found is None:
            self.counters.rangeIndexMisses += 1
            return 0
        self.counters.rangeIndexHits += 1
        return found[0]

    def _stop(self, ctx: ReadContext, offset: int, bound: int) -> tuple[int, int]:
        """``(stop, ceiling position)``. The ceiling is the object of the indexed range of
        the stream with the smallest start after ``offset``: the answer lies at or before
        it (the end of the list when none is known). If that range starts at or after
        ``bound``, the search stops there: positions from ``stop`` on hold nothing the
        search wants (the ceiling object itself only if it also holds a range at or
        before ``offset``, which makes it the floor too)."""
        size = len(ctx.ssos)
        ceiling = self._indexed(ctx, offset, after=True)
        if ceiling is None:
            return size, size
        ceiling_position, ceiling_start = ceiling
        if ceiling_start < bound:
            return size, ceiling_position
        floor = self._indexed(ctx, offset, after=False)
        holds_floor = floor is not None and floor[0] == ceiling_position
        return ceiling_position + 1 if holds_floor else ceiling_position, ceiling_position

    def _indexed(self, ctx: ReadContext, offset: int, *, after: bool) -> tuple[int, int] | None:
        """``(position in ctx's view, range start)`` of the indexed range of the stream
        with the greatest start at or before ``offset`` (``after``: the smallest start
        after it). Entries naming an object no longer in the image are dropped."""
        search = self.range_index.search_after if after else self.range_index.search
        while True:
            found = search(ctx.stream_id, offset)
            if found is None:
                return None
            start_offset, object_id = found
            position = ctx.ssos.position(object_id)
            if position is not None:
                return position, start_offset
            if self._is_live(object_id):  # uploaded after this read took its view
                return None
            self.counters.rangeIndexStale += 1
            self.range_index.invalidate(ctx.stream_id, start_offset, object_id)

    async def _load_round(
        self, ctx: ReadContext, start: int, stop: int, ceiling_position: int
    ) -> None:
        """One loading round: up to ``rounds // 5 + 5`` objects from ``start`` (before
        ``stop``; not yet loaded, not excluded by a filter), plus this round's preloads,
        concurrently. Middle preloads spread over ``start..ceiling_position``, the
        bracket the answer lies in."""
        objects = ctx.ssos.objects
        batch = ctx.rounds // ROUNDS_PER_STEP + BATCH_START
        wanted: list[int] = []
        position = start
        limit = min(stop, len(objects))
        while position < limit and len(wanted) < batch:
            if self._should_load(ctx, position, wanted):
                wanted.append(position)
            position += 1
        ctx.loaded_bound = position
        for candidate in self._preload_positions(ctx, position, ceiling_position, batch):
            if self._should_load(ctx, candidate, wanted):
                wanted.append(candidate)
        ctx.rounds += 1
        if wanted:
            self.counters.loadBatches += 1
            await self._load_positions(ctx, wanted)

    def _should_load(self, ctx: ReadContext, position: int, wanted: list[int]) -> bool:
        object_id = ctx.ssos.objects[position].object_id
        if object_id in ctx.loaded or position in wanted:
            return False
        if not self.blooms.might_contain(object_id, ctx.stream_id):
            self.counters.bloomSkips += 1
            return False
        return True

    def _preload_positions(
        self, ctx: ReadContext, loaded_bound: int, ceiling_position: int, batch: int
    ) -> list[int]:
        size = len(ctx.ssos)
        if ctx.read_to_end:
            # A read at the stream's end: its last entries are in the newest objects.
            if ctx.end_preload_round > END_PRELOAD_ROUNDS:
                return []
            high = size - END_PRELOAD_OBJECTS * (ctx.end_preload_round - 1)
            low = max(loaded_bound, size - END_PRELOAD_OBJECTS * ctx.end_preload_round)
            ctx.end_preload_round += 1
            return list(range(low, high))
        # Spread over the bracket the answer lies in, cutting it in equal parts.
        span = ceiling_position - loaded_bound
        if ctx.middle_preload_round >= MIDDLE_PRELOAD_ROUNDS or span <= batch:
            return []
        ctx.middle_preload_round += 1
        step = span // (MIDDLE_PRELOAD_OBJECTS + 1)
        return [loaded_bound + step * i for i in range(1, MIDDLE_PRELOAD_OBJECTS + 1)]

    async def _load_positions(self, ctx: ReadContext, positions: list[int]) -> None:
        metas = [ctx.ssos.objects[position] for position in positions]
        indexes = await run_all(
            [self.load_index(meta.object_id, meta.size, learn=True) for meta in metas]
        )
        for index in indexes:
            ctx.loaded[index.object_id] = index

    async def _load_everything(self, ctx: ReadContext) -> None:
        if ctx.all_loaded:
            return
        positions = list(range(len(ctx.ssos)))
        if positions:
            self.counters.loadBatches += 1
            await self._load_positions(ctx, positions)
        ctx.all_loaded = True
        ctx.loaded_bound = len(ctx.ssos)
