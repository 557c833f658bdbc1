"""``brokerlab bench tiered``: how many index blocks a cold read of the S3 tier loads
to find its stream, with the range index and bloom filters vs the full scan.

500 stream set objects (SSOs) written by one node that hosts 1,000 streams; offsets are
``ledger << 32 | entry``, a new ledger every 50 objects. 900 streams are in every SSO
(busy topics); 100 are in every 10th SSO (quiet ones), so some objects can be skipped.
Every cold read runs on a fresh TieredStore over the same objects (empty range index,
no filters), at the start, the middle and the tail (last entry, up to the stream's end
offset) of a stream, first with ``s3StreamSetObjectRangeIndexEnabled=true`` then
``false`` (every read loads every SSO's index block, the old behaviour). Reported per
read: index blocks loaded, loading batches (rounds of concurrent gets), object gets.
A last set of rows reads a second stream on a warm store (another stream read first):
what the index and filters one read leaves behind save the next.

Targets: index loads with index+filters <= 0.2 of the full scan's, on average over the
cold reads; tail reads in <= 2 batches.
"""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

from storage_stub.config import StorageConfig
from storage_stub.tiered import InMemoryObjectStore, InstrumentedObjectStore, TieredStore
from storage_stub.tiered.image import MetadataImage

FULL = {"objects": 500, "streams": 1000, "reads": 12}
QUICK = {"objects": 100, "streams": 200, "reads": 4}
LEDGER_OBJECTS = 50
QUIET_EVERY = 10
ENTRY = b"x" * 32
POSITIONS = ("start", "middle", "tail")
TARGET_LOAD_RATIO = 0.2
TARGET_TAIL_BATCHES = 2


def _quiet(stream_id: int) -> bool:
    return stream_id % QUIET_EVERY == QUIET_EVERY - 1


def _holds(object_index: int, stream_id: int) -> bool:
    return not _quiet(stream_id) or object_index % QUIET_EVERY == (stream_id // QUIET_EVERY) % (
        QUIET_EVERY
    )


def _offset(object_index: int) -> int:
    ledger, entry = divmod(object_index, LEDGER_OBJECTS)
    return (ledger + 1) << 32 | entry


async def _build(objects: int, streams: int) -> tuple[InMemoryObjectStore, MetadataImage]:
    inner = InMemoryObjectStore()
    writer = TieredStore(inner)
    for k in range(objects):
        await writer.upload([(s, _offset(k), [ENTRY]) for s in range(streams) if _holds(k, s)])
    return inner, writer.image


def _reads(objects: int, stream_id: int) -> dict[str, tuple[int, int, int]]:
    """``position -> (start, end, expected offset)`` of one-entry reads of a stream."""
    held = [k for k in range(objects) if _holds(k, stream_id)]
    middle = held[len(held) // 2]
    return {
        "start": (_offset(held[0]), _offset(held[0]) + 1, _offset(held[0])),
        "middle": (_offset(middle), _offset(middle) + 1, _offset(middle)),
        # up to the stream's end offset: a tail read
        "tail": (_offset(held[-1]), _offset(held[-1]) + 1, _offset(held[-1])),
    }


async def _cold_read(
    inner: InMemoryObjectStore,
    image: MetadataImage,
    config: StorageConfig,
    stream_id: int,
    window: tuple[int, int, int],
    warm_with: tuple[int, tuple[int, int, int]] | None = None,
) -> dict[str, int]:
    store = TieredStore(InstrumentedObjectStore(inner), config, image=image)
    if warm_with is not None:
        other, (start, end, _) = warm_with
        await store.read(other, start, end)
    before = store.stats()
    start, end, expected = window
    got = await store.read(stream_id, start, end)
    if got != [(expected, ENTRY)]:
        raise AssertionError(f"stream {stream_id} {window}: read {got!r}")
    after = store.stats()
    return {
        name: after[name] - before[name]
        for name in ("indexLoads", "loadBatches", "objectGets", "bloomSkips", "fastSkips")
    }


def _mean(rows: list[dict[str, int]], name: str) -> float:
    return sum(row[name] for row in rows) / len(rows)


async def _measure(quick: bool) -> dict[str, Any]:
    shape = QUICK if quick else FULL
    objects, streams, reads = shape["objects"], shape["streams"], shape["reads"]
    inner, image = await _build(objects, streams)
    rng = random.Random(4)
    busy = rng.sample([s for s in range(streams) if not _quiet(s)], reads)
    quiet = rng.sample([s for s in range(streams) if _quiet(s)], reads)
    modes = {
        "index": StorageConfig(storageMode="memory"),
        "full": StorageConfig(storageMode="memory", s3StreamSetObjectRangeIndexEnabled=False),
    }
    rows: list[dict[str, Any]] = []
    for kind, sample in (("busy", busy), ("quiet", quiet)):
        for position in POSITIONS:
            row: dict[str, Any] = {"read": position, "streams": kind, "warm": False}
            for mode, config in modes.items():
                measured = [
                    await _cold_read(inner, image, config, s, _reads(objects, s)[position])
                    for s in sample
                ]
                row[mode] = {
                    name: _mean(measured, name)
                    for name in ("indexLoads", "loadBatches", "objectGets", "bloomSkips")
                }
                row[mode]["maxLoadBatches"] = max(m["loadBatches"] for m in measured)
            row["loadRatio"] = row["index"]["indexLoads"] / row["full"]["indexLoads"]
            rows.append(row)
    # A second stream read on a store that already served another stream's read.
    for kind, sample in (("busy", busy), ("quiet", quiet)):
        for position in POSITIONS:
            row = {"read": position, "streams": kind, "warm": True}
            config = modes["index"]
            measured = []
            for i, s in enumerate(sample):
                other = busy[(i + 1) % len(busy)]
                warm = (other, _reads(objects, other)[position])
                measured.append(
                    await _cold_read(inner, image, config, s, _reads(objects, s)[position], warm)
                )
            row["index"] = {
                name: _mean(measured, name)
                for name in ("indexLoads", "loadBatches", "objectGets", "bloomSkips")
            }
            row["index"]["maxLoadBatches"] = max(m["loadBatches"] for m in measured)
            rows.append(row)
    cold = [row for row in rows if not row["warm"]]
    load_ratio = sum(row["index"]["indexLoads"] for row in cold) / sum(
        row["full"]["indexLoads"] for row in cold
    )
    # the worst single cold tail read, not a mean
    tail_batches = max(row["index"]["maxLoadBatches"] for row in cold if row["read"] == "tail")
    return {
        "benchmark": "tiered",
        "quick": quick,
        "streamSetObjects": objects,
        "streams": streams,
        "quietStreams": sum(1 for s in range(streams) if _quiet(s)),
        "readsPerRow": reads,
        "rows": rows,
        "loadRatio": load_ratio,
        "tailBatchesMax": tail_batches,
        "targets": {"loadRatio": TARGET_LOAD_RATIO, "tailBatches": TARGET_TAIL_BATCHES},
        "pass": load_ratio <= TARGET_LOAD_RATIO and tail_batches <= TARGET_TAIL_BATCHES,
    }


def measure(quick: bool) -> dict[str, Any]:
    return asyncio.run(_measure(quick))


def _cell(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def main(quick: bool = False, as_json: bool = False) -> int:
    result = measure(quick)
    if as_json:
        print(json.dumps(result))
        return 0
    print(
        f"brokerlab bench tiered: {result['streamSetObjects']:,} SSOs x "
        f"{result['streams']:,} streams ({result['quietStreams']:,} quiet: in every "
        f"{QUIET_EVERY}th SSO); {result['readsPerRow']} one-entry reads per row, each on a "
        "fresh store" + (" (--quick: fewer objects, streams and reads)" if quick else "")
    )
    print()
    header = (
        f"{'read':<7} {'streams':<7} {'store':<5} {'loads idx':>9} {'loads full':>10} "
        f"{'ratio':>6} {'batches idx':>11} {'batches full':>12} {'gets idx':>8} "
        f"{'gets full':>9} {'bloom skips':>11}"
    )
    print(header)
    print("-" * len(header))
    for row in result["rows"]:
        index = row["index"]
        full = row.get("full") or {}
        ratio = row.get("loadRatio")
        print(
            f"{row['read']:<7} {row['streams']:<7} {'warm' if row['warm'] else 'cold':<5} "
            f"{index['indexLoads']:>9.1f} {_cell(full.get('indexLoads'), 1):>10} "
            f"{_cell(ratio, 3):>6} {index['loadBatches']:>11.1f} "
            f"{_cell(full.get('loadBatches'), 1):>12} {index['objectGets']:>8.1f} "
            f"{_cell(full.get('objectGets'), 1):>9} {index['bloomSkips']:>11.1f}"
        )
    print()
    ratio_ok = result["loadRatio"] <= TARGET_LOAD_RATIO
    tail_ok = result["tailBatchesMax"] <= TARGET_TAIL_BATCHES
    print(
        f"cold reads: index loads {result['loadRatio']:.3f} of the full scan's "
        f"(target <= {TARGET_LOAD_RATIO})"
        + ("" if ratio_ok else " ABOVE")
        + f"; every tail read in at most {result['tailBatchesMax']} batches "
        f"(target <= {TARGET_TAIL_BATCHES})" + ("" if tail_ok else " ABOVE")
    )
    print("verdict: " + ("PASS" if ratio_ok and tail_ok else "FAIL"))
    if quick:
        print(
            "--quick: the targets are set for the full run; over 100 SSOs the ~10 loads of a"
            " first round weigh 5x more."
        )
    print(
        "warm: a second stream read on the store after another stream's read (index+filters"
        " only); figures are means per read, measured in this run."
    )
    return 0
