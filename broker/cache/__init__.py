"""Broker entry cache designs: pure, synchronous, clock injected.

Imports nothing from asyncio, aiohttp or storage. A design is a whole unit (its cache
manager and its ledger-side policy, ``unit.py``) registered by name in ``designs.py``;
the broker drives the live design and its shadows from one stream of cache events
(``stream.py``), and a replay drives any design from the same events recorded as a trace.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from broker.cache.api import CursorCheck, EntryCache, EntryCacheManager, MissingRange
from broker.cache.config import CacheConfig
from broker.cache.designs import DEFAULT_DESIGN, DESIGNS, design
from broker.cache.entry import CachedEntry
from broker.cache.stream import CacheEventStream, TopicEvents, TraceSink
from broker.cache.unit import Design, DesignInstance, ReadPlan, TopicUnit
from broker.clock import Clock, EventClock


def create_stream(
    implementation: str,
    config: CacheConfig,
    clock: Clock,
    shadows: Sequence[str] = (),
    trace: Callable[[EventClock], TraceSink] | None = None,
) -> CacheEventStream:
    """The broker's cache: the live design (``managedLedgerCacheImplementation``), the
    designs named in ``shadows`` beside it (sizes only, same settings), and the trace
    built by ``trace`` on the events' clock. ValueError for an unknown design."""
    event_clock = EventClock(clock.monotonic_ns())
    live = design(implementation).create(config, event_clock, live=True)
    size_only = dataclasses.replace(config, copy_entries=False)
    others = [design(name).create(size_only, event_clock) for name in shadows]
    return CacheEventStream(
        live,
        others,
        clock,
        event_clock,
        trace(event_clock) if trace is not None else None,
        entry_length=config.entry_length,
    )


__all__ = [
    "DEFAULT_DESIGN",
    "DESIGNS",
    "CacheConfig",
    "CacheEventStream",
    "CachedEntry",
    "CursorCheck",
    "Design",
    "DesignInstance",
    "EntryCache",
    "EntryCacheManager",
    "MissingRange",
    "ReadPlan",
    "TopicEvents",
    "TopicUnit",
    "TraceSink",
    "create_stream",
    "design",
]
