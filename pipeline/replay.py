"""Replay an access trace (docs/trace-format.md) through one cache design at one size,
with the real ``broker.cache`` classes on a virtual clock.

The clock follows the trace's ``ts_ns``; the broker's eviction timer is reproduced by a
``do_cache_eviction`` round at every ``eviction_interval_ms`` of trace time, and an
insert that crosses the trigger gets its size pass right away, as the broker's evictor
schedules it. A read counts its expected read at once (the broker counts it when the
entry is handed to a consumer, which follows the read; the same simplification as the
shadow caches), so ``release`` rows are not needed.

Two modes:

- *faithful* (the design and settings the broker ran, ``live=True``): what to cache
  and with how many expected reads comes from the trace (``expected_reads`` of adds and
  misses), and the legacy design's slowest-reader invalidations are the recorded ones.
  Replaying a live trace this way reproduces the live hit count closely.
- *what-if* (any other design): the ledger-level decisions are the design's own, from
  what the trace says about readers: adds are cached while a cursor is active, PIP-430
  expects one read per active cursor, reads from storage are cached for an active
  reader, and the legacy design's invalidation up to the slowest active reader is
  derived from each cursor's reads.

Cost: O(events + eviction rounds) per replay; memory: the cache's entries (sizes only).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from broker.cache import create_entry_cache_manager
from broker.cache.api import EntryCacheManager
from broker.cache.config import CacheConfig
from broker.cache.entry import CachedEntry
from broker.clock import ManualClock
from pipeline.outcome import CacheOutcome

DESIGNS = ("pip430", "legacy", "segmented")


@dataclasses.dataclass(frozen=True)
class ReplaySpec:
    """One replay: a design, a size, the other cache settings, and the mode."""

    design: str
    size_bytes: int
    settings: CacheConfig = dataclasses.field(default_factory=CacheConfig)
    segments: int = 0
    live: bool = False

    def cache_config(self) -> CacheConfig:
        return dataclasses.replace(self.settings, max_size_bytes=self.size_bytes)


@dataclasses.dataclass(kw_only=True)
class ReplayResult(CacheOutcome):
    design: str
    size_bytes: int
    live: bool
    events: int
    evicted: dict[str, int]

    def as_row(self) -> dict[str, Any]:
        row = super().as_row()
        for reason, count in row.pop("evicted").items():
            row[f"evicted_{reason}"] = count
        return row


class _Readers:
    """What-if legacy: each topic's active cursors and their read positions, to derive
    the invalidation up to the slowest active reader."""

    __slots__ = ("active", "positions", "slowest")

    def __init__(self) -> None:
        self.active: set[str] = set()
        self.positions: dict[str, tuple[int, int]] = {}
        self.slowest: tuple[int, int] | None = None


def replay(rows: Iterable[dict[str, Any]], spec: ReplaySpec) -> ReplayResult:
    """Replay trace rows (dicts with the trace's columns, in ``seq`` order)."""
    clock = ManualClock()
    config = spec.cache_config()
    manager = create_entry_cache_manager(spec.design, config, clock, spec.segments)
    interval_ns = config.eviction_interval_ms * 1_000_000
    next_round_ns = interval_ns
    faithful = spec.live
    legacy = spec.design == "legacy"
    readers: dict[str, _Readers] = {}
    group: list[dict[str, Any]] = []
    events = 0
    for row in rows:
        events += 1
        ts = row["ts_ns"]
        while next_round_ns <= ts:
            clock.advance_to_ns(next_round_ns)
            manager.do_cache_eviction()
            next_round_ns += interval_ns
        clock.advance_to_ns(ts)
        kind = row["kind"]
        topic = row["topic"]
        if kind == "read":
            if group and not _continues(group[-1], row):
                _read_range(manager, group, faithful, readers)
                group.clear()
            group.append(row)
            last = row["last_entry"]
            if last is None or row["entry"] >= last:
                _read_range(manager, group, faithful, readers)
                if legacy and not faithful and not row["replay"]:
                    position = (row["ledger"], row["entry"] + 1)
                    _moved(readers, manager, topic, row["subscription"], position)
                group.clear()
            continue
        if group:  # a range cut short (events dropped): replay what there is
            _read_range(manager, group, faithful, readers)
            group.clear()
        if kind == "add":
            if faithful:
                expected = row["expected_reads"]
            else:
                active = row["active_cursors"] or 0
                expected = _added_reads(spec.design, active)
            if expected is not None:
                manager.get_entry_cache(topic).insert(
                    row["ledger"], row["entry"], None, expected, row["size"]
                )
                _size_pass(manager)
        elif kind == "replay_add":
            manager.get_entry_cache(topic).add_expected_read(row["ledger"], row["entry"])
        elif kind == "invalidate":
            _invalidate(manager, row, faithful, legacy)
        elif kind in ("activate", "deactivate"):
            state = readers.setdefault(topic, _Readers())
            if kind == "activate":
                state.active.add(row["subscription"])
            else:
                state.active.discard(row["subscription"])
            if legacy and not faithful:
                _slowest_changed(state, manager, topic)
    if group:
        _read_range(manager, group, faithful, readers)
    stats = manager.stats()
    return ReplayResult(
        design=spec.design,
        size_bytes=spec.size_bytes,
        live=spec.live,
        hits=stats["hits"],
        misses=stats["misses"],
        hit_bytes=stats["hitBytes"],
        miss_bytes=stats["missBytes"],
        events=events,
        evicted=dict(stats["evicted"]),
    )


def _continues(previous: dict[str, Any], row: dict[str, Any]) -> bool:
    """Whether ``row`` is the next entry of the same range read as ``previous``."""
    return (
        row["entry"] == previous["entry"] + 1
        and row["ledger"] == previous["ledger"]
        and row["topic"] == previous["topic"]
        and row["subscription"] == previous["subscription"]
        and row["last_entry"] == previous["last_entry"]
    )


def _read_range(
    manager: EntryCacheManager,
    rows: list[dict[str, Any]],
    faithful: bool,
    readers: dict[str, _Readers],
) -> None:
    """One range read, as the ledger does it: the cache is asked for the whole range
    (the legacy design answers all or nothing), then each missing entry is read from
    storage and offered to the cache. Every entry read counts its expected read."""
    first = rows[0]
    topic, subscription = first["topic"], first["subscription"]
    cache = manager.get_entry_cache(topic)
    by_entry = {row["entry"]: row for row in rows}
    ledger = first["ledger"]
    hits: list[CachedEntry] = []
    missing = cache.get_range(ledger, first["entry"], rows[-1]["entry"], hits)
    for hit in hits:
        hit.mark_read()
    inserted = False
    for miss_first, miss_last in missing:
        for entry_id in range(miss_first, miss_last + 1):
            row = by_entry.get(entry_id)
            if row is None:
                continue  # its row was dropped from the trace
            size = row["size"]
            cache.record_storage_read(1, size)
            expected = row["expected_reads"]
            if not faithful or expected is None or expected < 0:
                expected = _read_reads(readers.get(topic), subscription)
            cached = cache.insert_from_read(ledger, entry_id, None, expected, size)
            if cached is not None:
                cached.mark_read()
                inserted = True
    if inserted:
        _size_pass(manager)


def _size_pass(manager: EntryCacheManager) -> None:
    if manager.needs_eviction():
        manager.do_cache_eviction()


def _added_reads(design: str, active: int) -> int | None:
    """What-if: expected reads for an added entry (None: not cached). Every design caches
    adds while a cursor is active; PIP-430 expects a read per active cursor."""
    if active <= 0:
        return None
    return active if design == "pip430" else 0


def _read_reads(state: _Readers | None, subscription: str | None) -> int:
    """What-if: a miss is cached (one expected read) when its reader is active."""
    if state is None or subscription is None:
        return 0
    return 1 if subscription in state.active else 0


def _invalidate(
    manager: EntryCacheManager, row: dict[str, Any], faithful: bool, legacy: bool
) -> None:
    topic, ledger, last = row["topic"], row["ledger"], row["last_entry"]
    if last is not None:
        # the legacy design's slowest-reader rule: only a faithful legacy replay
        # applies the recorded ones (a what-if legacy replay derives its own)
        if not (faithful and legacy):
            return
        cache = manager.get_entry_cache(topic)
        if ledger < 0:
            cache.clear()
        else:
            cache.invalidate_entries(ledger, last + 1)
        return
    if ledger < 0:
        manager.remove_entry_cache(topic)
    else:
        manager.get_entry_cache(topic).invalidate_all_entries(ledger)


def _moved(
    readers: dict[str, _Readers],
    manager: EntryCacheManager,
    topic: str,
    subscription: str | None,
    position: tuple[int, int],
) -> None:
    if subscription is None:
        return
    state = readers.setdefault(topic, _Readers())
    state.positions[subscription] = position
    if subscription in state.active:
        _slowest_changed(state, manager, topic)


def _slowest_changed(state: _Readers, manager: EntryCacheManager, topic: str) -> None:
    """What-if legacy: drop what is before the slowest active reader, everything when no
    reader is active (Pulsar's legacy rule). O(active readers) per move."""
    if not state.active:
        if state.slowest is not None:
            state.slowest = None
            manager.get_entry_cache(topic).clear()
        return
    known = [state.positions[name] for name in state.active if name in state.positions]
    if len(known) < len(state.active):
        return  # a reader that has not read yet: its position is unknown
    slowest = min(known)
    if slowest != state.slowest:
        state.slowest = slowest
        manager.get_entry_cache(topic).invalidate_entries(*slowest)
