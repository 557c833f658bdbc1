"""ActiveManagedCursorContainer against a brute-force model: random adds, forward and
backward moves, removals and shared positions keep order, groups and at-or-before
counts exact."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from broker.ledger.active_cursor_container import ActiveManagedCursorContainer, CursorCounter


class Cursor:
    """A stand-in cursor: the container only needs the counter slot."""

    __slots__ = ("active_counter", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self.active_counter: CursorCounter | None = None

    def __repr__(self) -> str:
        return self.name


CURSORS = {name: Cursor(name) for name in [f"c{i}" for i in range(8)] + ["a", "b", "c"]}

NAMES = st.sampled_from([f"c{i}" for i in range(8)])
POSITIONS = st.tuples(st.integers(0, 2), st.integers(-1, 6))  # few values: shared positions


class ContainerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.container = ActiveManagedCursorContainer()
        self.model: dict[str, tuple[int, int]] = {}
        self.cursors = {name: Cursor(name) for name in CURSORS}

    @rule(name=NAMES, position=POSITIONS)
    def add(self, name: str, position: tuple[int, int]) -> None:
        if name in self.model:
            return
        self.container.add(self.cursors[name], position)
        self.model[name] = position

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data(), position=POSITIONS)
    def move(self, data: st.DataObject, position: tuple[int, int]) -> None:
        name = data.draw(st.sampled_from(sorted(self.model)))
        self.container.move(self.cursors[name], position)
        self.model[name] = position

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.model)))
        self.container.remove(self.cursors[name])
        del self.model[name]

    @invariant()
    def matches_the_model(self) -> None:
        self.container.check_consistency()
        assert len(self.container) == len(self.model)
        positions = self.model.values()
        for name, position in self.model.items():
            expected = sum(1 for other in positions if other <= position)
            assert self.container.number_at_or_before(self.cursors[name]) == expected, name
        assert self.container.slowest_position() == (min(positions) if positions else None)
        order = [self.model[cursor.name] for cursor in self.container]  # type: ignore[attr-defined]
        assert order == sorted(order)

    @rule()
    def untracked_cursor_counts_zero(self) -> None:
        assert self.container.number_at_or_before(Cursor("never-added")) == 0


ContainerMachine.TestCase.settings = settings(
    max_examples=300, stateful_step_count=50, deadline=None
)
test_cursor_container_matches_brute_force = ContainerMachine.TestCase


def test_tailing_cursors_share_one_group_and_counts_follow_moves() -> None:
    container = ActiveManagedCursorContainer()
    a, b, c = (Cursor(name) for name in "abc")
    for cursor in (a, b, c):
        container.add(cursor, (1, 10))
    assert [container.number_at_or_before(x) for x in (a, b, c)] == [3, 3, 3]
    container.move(a, (1, 12))
    assert container.number_at_or_before(a) == 3
    assert container.number_at_or_before(b) == 2
    container.move(c, (1, 5))
    assert container.slowest_position() == (1, 5)
    assert [container.number_at_or_before(x) for x in (c, b, a)] == [1, 2, 3]
    container.remove(c)
    assert [container.number_at_or_before(x) for x in (b, a)] == [1, 2]
    assert container.number_at_or_before(c) == 0
    container.check_consistency()
