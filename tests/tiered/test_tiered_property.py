"""Property: any sequence of uploads, compactions and reads agrees with a dict model,
whatever the range index and filter bounds, on the store that did the writing and on a
fresh store over the same objects, with the index on or off."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.clock import ManualClock
from storage_stub.tiered import InMemoryObjectStore, TieredStore
from tests.tiered.conftest import Model, fresh_store, ledger_offset, memory_config

STREAMS = 5
#: one range of an upload: stream, jump to a new ledger first, entries
ranges = st.lists(
    st.tuples(st.integers(0, STREAMS - 1), st.booleans(), st.integers(0, 4)), max_size=6
)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("upload"), ranges),
        st.tuples(st.just("compact"), st.integers(1, 5), st.sampled_from([30, 200, 10_000])),
        st.tuples(
            st.just("read"),
            st.integers(0, STREAMS - 1),
            st.floats(0, 1),
            st.integers(0, 30),
        ),
        st.tuples(st.just("tick"), st.integers(0, 120_000)),
    ),
    max_size=40,
)
bounds = st.fixed_dictionaries(
    {
        "s3StreamSetObjectRangeIndexMaxStreams": st.integers(1, 6),
        "s3StreamSetObjectRangeIndexTtlMs": st.sampled_from([1_000, 60_000, 600_000]),
        "s3StreamIdBloomFilterMaxBytes": st.sampled_from([0, 40, 200, 20 << 20]),
    }
)


def _expected(model: Model, stream: int, start: int, end: int) -> list[tuple[int, bytes]]:
    stored = model.get(stream, {})
    return [(o, stored[o]) for o in sorted(stored) if start <= o < end]


def _window(model: Model, stream: int, where: float, length: int) -> tuple[int, int]:
    offsets = sorted(model.get(stream, {})) or [0]
    start = offsets[min(len(offsets) - 1, int(where * len(offsets)))]
    return start, start + length


async def _run(program: list[tuple[Any, ...]], config_bounds: dict[str, int]) -> None:
    clock = ManualClock()
    inner = InMemoryObjectStore()
    store = TieredStore(inner, memory_config(**config_bounds), clock=clock)
    model: Model = {}
    ledger = dict.fromkeys(range(STREAMS), 1)
    entry = dict.fromkeys(range(STREAMS), 0)
    for operation in program:
        kind = operation[0]
        if kind == "upload":
            batch: dict[int, tuple[int, list[bytes]]] = {}
            for stream, jump, count in operation[1]:
                if stream in batch or count == 0:
                    continue  # one range per stream and upload keeps the model simple
                if jump:
                    ledger[stream] += 1
                    entry[stream] = 0
                start = ledger_offset(ledger[stream], entry[stream])
                payloads = [b"%d:%d" % (stream, start + i) for i in range(count)]
                batch[stream] = (start, payloads)
                entry[stream] += count
                for i, payload in enumerate(payloads):
                    model.setdefault(stream, {})[start + i] = payload
            if batch:
                await store.upload([(s, start, p) for s, (start, p) in batch.items()])
        elif kind == "compact":
            await store.compact(max_sso_count=operation[1], split_threshold_bytes=operation[2])
            assert store.stats()["streamSetObjects"] <= operation[1]
        elif kind == "tick":
            clock.advance_ms(operation[1])
        else:
            _, stream, where, length = operation
            start, end = _window(model, stream, where, length)
            assert await store.read(stream, start, end) == _expected(model, stream, start, end)
    for enabled in (True, False):
        config = memory_config(s3StreamSetObjectRangeIndexEnabled=enabled, **config_bounds)
        fresh = fresh_store(inner, store.image, config)
        for stream in range(STREAMS):
            assert await fresh.read(stream, 0, 1 << 40) == _expected(model, stream, 0, 1 << 40)
            start, end = _window(model, stream, 0.5, 3)
            assert await fresh.read(stream, start, end) == _expected(model, stream, start, end)
    assert sorted(await inner.keys()) == sorted(
        f"obj-{i:016x}" for i in store.image.all_object_ids()
    )


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=operations, config_bounds=bounds)
def test_uploads_compactions_and_reads_agree_with_a_dict_model(
    program: list[tuple[Any, ...]], config_bounds: dict[str, int]
) -> None:
    asyncio.run(_run(program, config_bounds))
