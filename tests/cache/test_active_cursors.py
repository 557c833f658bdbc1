"""ActiveManagedCursorContainer against a brute-force model: random adds, forward and
backward moves, removals and shared positions keep order, groups and at-or-before
counts exact."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from broker.cache.active_cursors import ActiveManagedCursorContainer

NAMES = st.sampled_from([f"c{i}" for i in range(8)])
POSITIONS = st.tuples(st.integers(0, 2), st.integers(-1, 6))  # few values: shared positions


class ContainerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.container = ActiveManagedCursorContainer()
        self.model: dict[str, tuple[int, int]] = {}
        #: cursors that were tracked once and removed since
        self.removed: set[str] = set()

    @rule(name=NAMES, position=POSITIONS)
    def add(self, name: str, position: tuple[int, int]) -> None:
        if name in self.model:
            return
        self.container.add(name, position)
        self.model[name] = position
        self.removed.discard(name)

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data(), position=POSITIONS)
    def move(self, data: st.DataObject, position: tuple[int, int]) -> None:
        name = data.draw(st.sampled_from(sorted(self.model)))
        self.container.move(name, position)
        self.model[name] = position

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.model)))
        self.container.remove(name)
        del self.model[name]
        self.removed.add(name)

    @invariant()
    def matches_the_model(self) -> None:
        self.container.check_consistency()
        assert len(self.container) == len(self.model)
        positions = self.model.values()
        for name, position in self.model.items():
            expected = sum(1 for other in positions if other <= position)
            assert self.container.number_at_or_before(name) == expected, name
        assert self.container.slowest_position() == (min(positions) if positions else None)
        order = [self.model[name] for name in self.container]  # type: ignore[index]
        assert order == sorted(order)
        for name in self.removed:
            # a removed cursor's node must be gone from the map, not merely unlinked
            assert name not in self.container
            assert self.container.number_at_or_before(name) == 0, name


ContainerMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=50, deadline=None
)
test_cursor_container_matches_brute_force = ContainerMachine.TestCase


def test_tailing_cursors_share_one_group_and_counts_follow_moves() -> None:
    container = ActiveManagedCursorContainer()
    a, b, c = "abc"
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
