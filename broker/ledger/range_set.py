"""Individually deleted (acknowledged out of order) positions of a cursor.

Stored as closed ranges of entry ids within one ledger, merged when adjacent within the
ledger. Ranges never span ledgers: the cursor crosses ledger boundaries when it moves
its mark-delete position, which is the only place that needs to.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from sortedcontainers import SortedDict

from broker.ledger.position import Position


class PositionRangeSet:
    """A set of positions kept as merged ranges; ``len()`` is the number of positions.

    Costs (r = number of ranges): add and contains O(log r); range_starting_at O(1);
    remove_up_to O(k log r) for k ranges removed; len O(1).
    """

    __slots__ = ("_count", "_ranges")

    def __init__(self) -> None:
        # (ledger_id, first entry id) -> last entry id, inclusive
        self._ranges: SortedDict = SortedDict()
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def _floor(self, position: Position) -> tuple[int, int] | None:
        index = self._ranges.bisect_right(position)
        if index == 0:
            return None
        key: tuple[int, int] = self._ranges.keys()[index - 1]
        return key

    def contains(self, position: Position) -> bool:
        floor = self._floor(position)
        return floor is not None and floor[0] == position[0] and self._ranges[floor] >= position[1]

    def add(self, position: Position) -> bool:
        """Add one position; False if it was already present."""
        ledger_id, entry_id = position
        ranges = self._ranges
        floor = self._floor(position)
        start = entry_id
        if floor is not None and floor[0] == ledger_id:
            floor_end = ranges[floor]
            if floor_end >= entry_id:
                return False
            if floor_end == entry_id - 1:
                start = floor[1]
        end = entry_id
        following = (ledger_id, entry_id + 1)
        if following in ranges:
            end = ranges.pop(following)
        ranges[(ledger_id, start)] = end
        self._count += 1
        return True

    def range_starting_at(self, position: Position) -> int | None:
        """Last entry id of the range that starts exactly at ``position``, else None."""
        end: int | None = self._ranges.get(position)
        return end

    def remove_up_to(self, position: Position) -> None:
        """Forget every position <= ``position``."""
        ranges = self._ranges
        while ranges:
            key = ranges.keys()[0]
            if key > position:
                return
            end = ranges[key]
            if key[0] < position[0] or end <= position[1]:
                del ranges[key]
                self._count -= end - key[1] + 1
                continue
            # the range straddles position: keep its tail
            del ranges[key]
            self._count -= position[1] - key[1] + 1
            ranges[(key[0], position[1] + 1)] = end
            return

    def count_from(self, position: Position) -> int:
        """How many positions are at or after ``position``. O(log r + ranges after it)."""
        ranges = self._ranges
        index = ranges.bisect_right(position)
        total = 0
        if index:
            (ledger_id, _), last = ranges.peekitem(index - 1)
            if ledger_id == position[0] and last >= position[1]:
                total += last - position[1] + 1
        for key in ranges.islice(index):
            total += ranges[key] - key[1] + 1
        return total

    def ranges_of(self, ledger_id: int) -> Iterator[tuple[int, int]]:
        """(first, last) of every range in ledger ``ledger_id``, in order. O(log r) to
        start, O(1) a range."""
        ranges = self._ranges
        for key in ranges.irange((ledger_id, -1), (ledger_id + 1, -1), inclusive=(True, False)):
            yield key[1], ranges[key]

    def ranges(self) -> Iterator[tuple[int, int, int]]:
        """(ledger id, first, last) for every range, in order."""
        for (ledger_id, first), last in self._ranges.items():
            yield ledger_id, first, last

    @classmethod
    def from_ranges(cls, ranges: Iterable[Iterable[int]]) -> PositionRangeSet:
        result = cls()
        for ledger_id, first, last in ranges:
            if last < first:
                raise ValueError(f"empty range {ledger_id}:{first}..{last}")
            result._ranges[(ledger_id, first)] = last
            result._count += last - first + 1
        return result

    def __str__(self) -> str:
        """Pulsar's rendering: open-closed ranges, ``[(3:4..3:7], (3:9..3:9]]``."""
        parts = [f"({lid}:{first - 1}..{lid}:{last}]" for lid, first, last in self.ranges()]
        return "[" + ", ".join(parts) + "]"
