"""A shadow of design Y is Y: run beside any live design X on X's cache events, it counts
what Y counts when Y runs live on the same workload, its own ledger-side rules included.

The workload of the issue that found shadows reporting the live design's numbers:
tailing readers, then, after an unload, three catch-up readers per topic, in lock step
(they share storage reads) or staggered (the later ones find what the first one read,
if the design cached it). No evictions (the cache is large and the timer is not run), so
the counts are exact, not approximate.

Lock step needs a live design that goes to storage too: a shadow learns how long its
design's storage read lasts from the live design's storage read of the same entries.
When the live design serves the range from memory (the ring keeps its segments across
the unload), there is no storage wait in the live run, the readers do not overlap, and
a shadow sees them one after another (see ``broker/cache/unit.py``).
"""

from __future__ import annotations

import itertools

import pytest

from broker.cache import DESIGNS, CacheConfig, TopicEvents, create_stream
from broker.clock import ManualClock

L1, L2 = 3, 4  # the ledger before and after the unload
BATCH = 10
PAYLOAD = b"p" * 100
READERS = ("a", "b", "c")


def _read_together(events: TopicEvents, ledger: int, first: int, last: int) -> None:
    """Every reader asks for the range before any storage read completes."""
    plans = [events.read(reader, ledger, first, last, False) for reader in READERS]
    for plan in plans:
        for own_first, own_last in plan.own:
            events.filled(ledger, own_first, [PAYLOAD] * (own_last - own_first + 1))
    for reader in READERS:
        for entry in range(first, last + 1):
            events.released(reader, ledger, entry)
        events.moved(reader, (ledger, last + 1), (ledger, last))


def _read_alone(events: TopicEvents, reader: str, ledger: int, first: int, last: int) -> None:
    plan = events.read(reader, ledger, first, last, False)
    for own_first, own_last in plan.own:
        events.filled(ledger, own_first, [PAYLOAD] * (own_last - own_first + 1))
    for entry in range(first, last + 1):
        events.released(reader, ledger, entry)
    events.moved(reader, (ledger, last + 1), (ledger, last))


def workload(live: str, shadows: list[str], lock_step: bool) -> dict[str, dict[str, int]]:
    stream = create_stream(live, CacheConfig(max_size_bytes=1 << 30), ManualClock(), shadows)
    name = "persistent://t/ns/shadowed"
    events = stream.load_topic(name)
    for reader in READERS:
        events.activated(reader, (L1, 0), (L1, -1), 0)
    for first in range(0, 50, BATCH):  # tailing: each batch read as soon as it is added
        events.added(L1, first, [PAYLOAD] * BATCH)
        _read_together(events, L1, first, first + BATCH - 1)
    events.added(L2, 0, [PAYLOAD] * 60)  # produced while nobody reads... after the unload
    events.unloaded()
    events = stream.load_topic(name)
    for reader in READERS:
        events.activated(reader, (L2, 0), (L2, -1), 60)
    for first in range(0, 60, BATCH):
        if lock_step and first < 30:  # catch-up in lock step: shared storage reads
            _read_together(events, L2, first, first + BATCH - 1)
            continue
        for reader in READERS:  # staggered: a reads, then b, then c
            _read_alone(events, reader, L2, first, first + BATCH - 1)
    stats = stream.stats()
    result = {live: {"hits": stats["hits"], "misses": stats["misses"]}}
    for shadow, counters in stats["shadows"].items():
        result[shadow] = {"hits": counters["hits"], "misses": counters["misses"]}
    return result


@pytest.mark.parametrize("lock_step", [True, False])
def test_the_designs_differ_on_this_workload(lock_step: bool) -> None:
    alone = {design: workload(design, [], lock_step)[design] for design in DESIGNS}
    assert len({(c["hits"], c["misses"]) for c in alone.values()}) == len(DESIGNS)


@pytest.mark.parametrize(("live", "shadow"), list(itertools.permutations(DESIGNS, 2)))
def test_a_shadow_counts_what_its_design_counts_live(live: str, shadow: str) -> None:
    assert workload(live, [shadow], False)[shadow] == workload(shadow, [], False)[shadow]


@pytest.mark.parametrize(
    ("live", "shadow"),
    [pair for pair in itertools.permutations(DESIGNS, 2) if pair[0] != "segmented"],
)
def test_readers_sharing_storage_reads_count_in_a_shadow_as_in_its_design(
    live: str, shadow: str
) -> None:
    assert workload(live, [shadow], True)[shadow] == workload(shadow, [], True)[shadow]


def _all_or_nothing_reread(live: str, shadows: list[str]) -> dict[str, tuple[int, int]]:
    """The live design holds entry 1 but rereads 0..1 whole (all-or-nothing), while a
    second reader asks for entry 1 alone before that storage read completes."""
    clock = ManualClock()
    stream = create_stream(live, CacheConfig(), clock, shadows)
    events = stream.load_topic("persistent://t/ns/reread")
    clock.advance_ms(3_000)  # past PIP-430's continue-caching grace
    events.added(L1, 0, [PAYLOAD])  # nobody active: cached by no design
    events.activated("c", (L1, 0), (L1, -1), 0)
    events.added(L1, 1, [PAYLOAD])  # cached by every design
    events.released("c", L1, 1)  # PIP-430 expects no more reads of it
    clock.advance_ms(3_000)
    stream.tick()  # PIP-430's TTL evicts it; the ring has no TTL
    plans = [events.read("a", L1, 0, 1, False), events.read("b", L1, 1, 1, False)]
    for plan in plans:
        for own_first, own_last in plan.own:
            events.filled(L1, own_first, [PAYLOAD] * (own_last - own_first + 1))
    stats = stream.stats()
    counts = {live: (stats["hits"], stats["misses"])}
    for name, shadow in stats["shadows"].items():
        counts[name] = (shadow["hits"], shadow["misses"])
    return counts


def test_a_shadow_joins_its_own_storage_read_of_an_entry_the_live_design_holds() -> None:
    """PIP-430 (shadow) is reading entry 1 for the first reader when the second asks: it
    waits for that read, as PIP-430 live does, though the ring (live) holds the entry."""
    assert (
        _all_or_nothing_reread("segmented", ["pip430"])["pip430"]
        == (_all_or_nothing_reread("pip430", [])["pip430"])
    )
