"""Per-design caching decisions in the ledger layer: legacy invalidates up to the slowest
active reader and caches backlogged reads only by its backlog rule; PIP-430 counts
expected reads instead; the ring caches the write path only."""

from __future__ import annotations

from broker.cache import CacheConfig, create_entry_cache_manager
from broker.ledger.cache_policy import CachePolicy, LegacyPolicy, Pip430Policy, SegmentedPolicy
from broker.ledger.managed_cursor import ManagedCursor
from broker.ledger.managed_ledger import ManagedLedger, ManagedLedgerConfig
from broker.ledger.position import Position
from tests.ledger.conftest import Stores


async def open_with(stores: Stores, design: str, policy: CachePolicy) -> ManagedLedger:
    manager = create_entry_cache_manager(design, CacheConfig(), stores.clock)
    ledger = ManagedLedger(
        "persistent://t/ns/policy",
        stores.bookie,
        stores.metadata,
        manager.get_entry_cache("persistent://t/ns/policy"),
        ManagedLedgerConfig(),
        stores.clock,
        cache_policy=policy,
    )
    await ledger.open()
    return ledger


def cached_ids(ledger: ManagedLedger) -> list[int]:
    return [e.entry_id for e in ledger.cache.cached_entries()]  # type: ignore[attr-defined]


async def test_legacy_invalidates_what_every_active_reader_has_passed(stores: Stores) -> None:
    ledger = await open_with(stores, "legacy", LegacyPolicy())
    fast = await ManagedCursor.create(ledger, "fast", "latest")
    slow = await ManagedCursor.create(ledger, "slow", "latest")
    ledger.activate_cursor(fast)
    ledger.activate_cursor(slow)
    await ledger.add_entries([b"e%d" % i for i in range(10)])
    assert cached_ids(ledger) == list(range(10))
    await fast.read_entries(10)
    assert cached_ids(ledger) == list(range(10)), "the slow reader still needs them"
    await slow.read_entries(4)
    assert cached_ids(ledger) == list(range(4, 10))
    ledger.deactivate_cursor(slow)
    assert cached_ids(ledger) == [], "the only active reader has read everything"


async def test_legacy_ignores_a_backlogged_reader(stores: Stores) -> None:
    ledger = await open_with(stores, "legacy", LegacyPolicy(backlogged_threshold=5))
    tail = await ManagedCursor.create(ledger, "tail", "latest")
    behind = await ManagedCursor.create(ledger, "behind", "latest")
    ledger.activate_cursor(tail)
    ledger.activate_cursor(behind)
    await ledger.add_entries([b"e%d" % i for i in range(20)])
    await tail.read_entries(20)
    assert cached_ids(ledger) == [], "20 entries behind is backlogged: it does not hold the cache"


async def test_legacy_caches_backlogged_reads_only_for_cursors_close_together(
    stores: Stores,
) -> None:
    policy = LegacyPolicy(min_backlog_cursors=2, min_backlog_entries=5, max_backlog_between=3)
    ledger = await open_with(stores, "legacy", policy)
    a = await ManagedCursor.create(ledger, "a", "earliest")
    b = await ManagedCursor.create(ledger, "b", "earliest")
    lone = await ManagedCursor.create(ledger, "lone", "earliest")
    await ledger.add_entries([b"e%d" % i for i in range(20)])
    lone.acknowledge_cumulative(Position(ledger.last_confirmed.ledger_id, 12))
    policy.refresh(ledger)
    assert policy.storage_read_reads(ledger, a) == 1
    assert policy.storage_read_reads(ledger, b) == 1
    assert policy.storage_read_reads(ledger, lone) == 0, "backlog 7, 13 away from the others"


async def test_pip430_counts_expected_reads_and_never_invalidates_on_reads(stores: Stores) -> None:
    ledger = await open_with(stores, "pip430", Pip430Policy())
    cursors = [await ManagedCursor.create(ledger, f"c{i}", "latest") for i in range(3)]
    for cursor in cursors:
        ledger.activate_cursor(cursor)
    await ledger.add_entries([b"x", b"y"])
    entries = await cursors[0].read_entries(2)
    assert [e.cached.expected_reads for e in entries if e.cached] == [3, 3]
    for cursor in cursors:
        await cursor.read_entries(2)
    assert cached_ids(ledger) == [0, 1], "eviction is the removal queue's job"


async def test_the_ring_caches_adds_while_a_cursor_is_active_and_never_storage_reads(
    stores: Stores,
) -> None:
    ledger = await open_with(stores, "segmented", SegmentedPolicy())
    await ledger.add_entries([b"unwatched"])
    assert cached_ids(ledger) == []
    cursor = await ManagedCursor.create(ledger, "c", "earliest")
    ledger.activate_cursor(cursor)
    await ledger.add_entries([b"watched"])
    assert cached_ids(ledger) == [1]
    await cursor.read_entries(2)
    assert cached_ids(ledger) == [1], "the storage read of entry 0 was not cached"
