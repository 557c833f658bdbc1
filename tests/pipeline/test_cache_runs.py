"""The bound's and the references' runs of several sizes in one pass (what one Spark task
of ``jobs.bound_and_references`` does) count, for each size, what a run of that size
alone counts, however the rows are cut into batches: two brokers, a restart, entries
read again, at sizes from a few entries to all of them."""

from __future__ import annotations

import functools
import random
from typing import Any

import pytest

from pipeline import reference
from pipeline.belady import BoundRun, belady
from pipeline.reference import ReferenceRun, simulate

SIZES = (900, 4_000, 20_000, 1 << 20)


def accesses(seed: int = 5) -> list[dict[str, Any]]:
    """Rows as ``next_reads`` has them: (broker, seq) order, each broker's adds and reads
    with the seq of the entry's next read by the same broker, one restart of broker 1."""
    chooser = random.Random(seed)
    rows: list[dict[str, Any]] = []
    for broker in (0, 1):
        mine: list[dict[str, Any]] = []
        for seq in range(1_500):
            if broker == 1 and seq == 700:
                mine.append({"broker": 1, "seq": seq, "kind": "restart", "key": None,
                             "size": None, "next_read": None})  # fmt: skip
                continue
            key = chooser.randrange(120)
            kind = "add" if chooser.random() < 0.2 else "read"
            mine.append({"broker": broker, "seq": seq, "kind": kind, "key": key,
                         "size": 100 + key * 7, "next_read": None})  # fmt: skip
        upcoming: dict[int, int] = {}
        for row in reversed(mine):
            if row["kind"] == "restart":
                continue
            row["next_read"] = upcoming.get(row["key"])
            if row["kind"] == "read":
                upcoming[row["key"]] = row["seq"]
        rows += mine
    return rows


def fed(run: Any, rows: list[dict[str, Any]], cut: int) -> list[dict[str, Any]]:
    for start in range(0, len(rows), cut):
        run.feed(rows[start : start + cut])
    return [result.as_row() for result in run.results()]


@pytest.mark.parametrize("cut", [1, 333, 10_000])
def test_the_bound_of_several_sizes_in_one_pass_is_each_size_s_alone(cut: int) -> None:
    rows = accesses()
    alone = [belady(rows, size).as_row() for size in SIZES]
    assert fed(BoundRun(SIZES), rows, cut) == alone
    # the sizes differ: the comparison is of different counts
    assert len({row["hits"] for row in alone}) == len(SIZES)


@pytest.mark.skipif(not reference.available(), reason="libcachesim: the reference extra")
@pytest.mark.parametrize("policy", reference.POLICIES)
def test_a_policy_of_several_sizes_in_one_pass_is_each_size_s_alone(policy: str) -> None:
    rows = accesses()
    alone = [simulate(rows, policy, size).as_row() for size in SIZES]
    assert fed(ReferenceRun(policy, SIZES), rows, 333) == alone
    assert alone[0]["hits"] < alone[-1]["hits"]


def fresh_accesses(seed: int = 9) -> list[dict[str, Any]]:
    """Rows as a broker's ``next_reads`` has them: every add a new entry (as in a
    broker's trace), reads of entries added before (some before broker 1's restart,
    so no longer cached), some of size 0 and some larger than the smallest size."""
    chooser = random.Random(seed)
    rows: list[dict[str, Any]] = []
    for broker in (0, 1):
        added: list[int] = []
        for seq in range(2_000):
            if broker == 1 and seq == 900:
                rows.append({"broker": 1, "seq": seq, "kind": "restart", "key": None,
                             "size": None})  # fmt: skip
                continue
            if not added or chooser.random() < 0.25:
                key = (broker << 40) + len(added) * 7919 + 1
                added.append(key)
                kind = "add"
            else:
                key = added[max(0, len(added) - 1 - int(chooser.expovariate(1 / 40)))]
                kind = "read"
            size = 0 if key % 97 == 0 else 1_000 if key % 89 == 0 else 100 + key % 300
            rows.append({"broker": broker, "seq": seq, "kind": kind, "key": key, "size": size})
    return rows


def batched(rows: list[dict[str, Any]], cut: int) -> list[Any]:
    import pyarrow as pa

    schema = pa.schema(
        [("broker", pa.int16()), ("seq", pa.int64()), ("kind", pa.string()),
         ("key", pa.int64()), ("size", pa.int32())]
    )  # fmt: skip
    return [
        pa.RecordBatch.from_pylist(rows[start : start + cut], schema=schema)
        for start in range(0, len(rows), cut)
    ]


@functools.cache
def requests_counted(make: Any, sizes: tuple[int, ...]) -> list[dict[str, Any]]:
    """Every policy at ``sizes`` over ``make()``'s rows, request by request: computed once
    for the cuts of the same rows (seconds each)."""
    expected: list[dict[str, Any]] = []
    for policy in reference.POLICIES:
        expected += fed(ReferenceRun(policy, sizes), make(), 10_000)
    return expected


@pytest.mark.skipif(not reference.available(), reason="libcachesim: the reference extra")
@pytest.mark.parametrize(("make", "cut"), [(fresh_accesses, 777), (fresh_accesses, 5_000),
                                           (accesses, 333)])  # fmt: skip
def test_the_references_through_libcachesim_s_trace_reader_count_what_requests_count(
    make: Any, cut: int
) -> None:
    # fresh_accesses: every add new to its cache, the segments replayed by libcachesim's
    # own reader; accesses: entries added again, counted request by request instead
    from pipeline.reference import BatchReferences

    rows = make()
    sizes = (700, 4_000, 20_000, 1 << 20)
    runs = BatchReferences(reference.POLICIES, sizes)
    for batch in batched(rows, cut):
        runs.feed_batch(batch)
    found = [result.as_row() for result in runs.results()]
    expected = requests_counted(make, sizes)
    assert found == expected
    assert expected[0]["hits"] < expected[3]["hits"] and expected[0]["misses"] > 0
