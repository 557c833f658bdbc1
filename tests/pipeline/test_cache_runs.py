"""The bound's and the references' runs of several sizes in one pass (what one Spark task
of ``jobs.bound_and_references`` does) count, for each size, what a run of that size
alone counts, however the rows are cut into batches: two brokers, a restart, entries
read again, at sizes from a few entries to all of them."""

from __future__ import annotations

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
