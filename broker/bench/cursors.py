"""``brokerlab bench cursors``: the active cursor container against a sorted-list one.

At 10, 100, 1,000 and 10,000 cursors: count queries per second (cursors at or before a
cursor) and random forward seeks per second (a cursor moves 1 to 99 entries ahead),
for brokerlab's linked-list container and for a container built on
sortedcontainers.SortedList (count = bisect, seek = remove + add). The claim: a count
query costs the same at 10,000 cursors as at 10.
"""

from __future__ import annotations

import functools
import gc
import json
import random
import time
from typing import Any, Protocol

from sortedcontainers import SortedList

from broker.cache.active_cursors import ActiveManagedCursorContainer

SIZES = (10, 100, 1_000, 10_000)
COUNT_RATIO_TARGET = 1.5


#: a cursor as the containers see it: its name (the cache designs key cursors by name)
BenchCursor = str


class Container(Protocol):
    def add(self, cursor: BenchCursor, position: tuple[int, int]) -> None: ...
    def move(self, cursor: BenchCursor, position: tuple[int, int]) -> None: ...
    def number_at_or_before(self, cursor: BenchCursor) -> int: ...


class SortedListContainer:
    """The obvious alternative: O(log n) count, O(log n) seek."""

    def __init__(self) -> None:
        self._sorted: SortedList = SortedList()
        self._positions: dict[BenchCursor, tuple[int, int]] = {}
        self._ids: dict[BenchCursor, int] = {}

    def add(self, cursor: BenchCursor, position: tuple[int, int]) -> None:
        self._ids[cursor] = len(self._ids)
        self._positions[cursor] = position
        self._sorted.add((position, self._ids[cursor]))

    def move(self, cursor: BenchCursor, position: tuple[int, int]) -> None:
        ident = self._ids[cursor]
        self._sorted.remove((self._positions[cursor], ident))
        self._positions[cursor] = position
        self._sorted.add((position, ident))

    def number_at_or_before(self, cursor: BenchCursor) -> int:
        position = self._positions[cursor]
        return int(self._sorted.bisect_right((position, float("inf"))))


def _filled(
    kind: str, cursors: int, rng: random.Random
) -> tuple[Container, list[BenchCursor], list[int]]:
    container: Container = (
        ActiveManagedCursorContainer() if kind == "linked list" else SortedListContainer()
    )
    handles = [f"cursor-{index}" for index in range(cursors)]
    positions = [0] * cursors
    for index in range(cursors):
        positions[index] = rng.randrange(cursors * 50)
    # added from the lowest position up: each add then lands at the linked list's tail
    # (O(1)), where random order costs O(cursors) an add, 5 * 10^7 steps at 10,000
    for index in sorted(range(cursors), key=positions.__getitem__):
        container.add(handles[index], (1, positions[index]))
    return container, handles, positions


def _timed_rate(operations: int, action: Any) -> float:
    gc.collect()
    gc.disable()
    try:
        started = time.perf_counter()
        action()
        return operations / (time.perf_counter() - started)
    finally:
        gc.enable()


def _count_all(container: Container, picked: list[BenchCursor]) -> None:
    count = container.number_at_or_before
    for cursor in picked:
        count(cursor)


def _seek_all(
    container: Container,
    handles: list[BenchCursor],
    positions: list[int],
    picks: list[int],
    steps: list[int],
) -> None:
    move = container.move
    for index, step in zip(picks, steps, strict=True):
        positions[index] += step
        move(handles[index], (1, positions[index]))


def measure(quick: bool) -> dict[str, Any]:
    """Counts and seeks at every size in :data:`SIZES`. ``quick`` runs 2,000 of each per
    cell (the linked list's count is O(cursors): 2,000 at 10,000 cursors is already 10^7
    steps, enough for a rate), the full run 200,000."""
    operations = 2_000 if quick else 200_000
    results: dict[str, Any] = {}
    for kind in ("linked list", "sorted list"):
        rows = {}
        for cursors in SIZES:
            rng = random.Random(cursors)
            container, handles, positions = _filled(kind, cursors, rng)
            picks = [rng.randrange(cursors) for _ in range(operations)]
            picked = [handles[index] for index in picks]
            steps = [rng.randint(1, 99) for _ in range(operations)]
            counts = functools.partial(_count_all, container, picked)
            seeks = functools.partial(_seek_all, container, handles, positions, picks, steps)
            rows[cursors] = {
                "countsPerSecond": _timed_rate(operations, counts),
                "seeksPerSecond": _timed_rate(operations, seeks),
            }
        results[kind] = rows
    linked = results["linked list"]
    ratio = linked[SIZES[0]]["countsPerSecond"] / linked[SIZES[-1]]["countsPerSecond"]
    return {
        "benchmark": "cursors",
        "quick": quick,
        "operations": operations,
        "containers": {k: {str(n): row for n, row in v.items()} for k, v in results.items()},
        "countTimeRatio": ratio,
        "countTimeRatioTarget": COUNT_RATIO_TARGET,
    }


def main(quick: bool = False, as_json: bool = False) -> int:
    result = measure(quick)
    if as_json:
        print(json.dumps(result))
        return 0
    print(
        f"brokerlab bench cursors: {result['operations']:,} operations per cell; "
        "seeks move a random cursor 1-99 entries ahead"
    )
    print()
    header = f"{'container':<12} {'cursors':>8} {'counts/s':>12} {'seeks/s':>12}"
    print(header)
    print("-" * len(header))
    for kind, rows in result["containers"].items():
        for cursors, row in rows.items():
            print(
                f"{kind:<12} {int(cursors):>8,} {row['countsPerSecond']:>12,.0f} "
                f"{row['seeksPerSecond']:>12,.0f}"
            )
    print()
    ratio = result["countTimeRatio"]
    verdict = "" if ratio <= COUNT_RATIO_TARGET else " ABOVE"
    print(
        f"linked list: count time at 10,000 cursors / at 10 = {ratio:.2f} "
        f"(target <= {COUNT_RATIO_TARGET}){verdict}"
    )
    return 0
