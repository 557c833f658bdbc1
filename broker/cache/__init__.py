"""Broker entry cache strategies: pure, synchronous, clock injected.

Imports nothing from asyncio, aiohttp or storage: the ledger layer asks the cache first and
fills misses from storage. The same classes serve the live broker, shadows, tests and replays.
"""

import dataclasses
from collections.abc import Sequence
from typing import Any

from broker.cache.api import EntryCache, EntryCacheManager, MissingRange
from broker.cache.config import CacheConfig
from broker.cache.disabled import DisabledEntryCacheManager
from broker.cache.entry import CachedEntry
from broker.cache.legacy import LegacyEntryCacheManager
from broker.cache.pip430 import Pip430EntryCacheManager
from broker.cache.segmented import SegmentedEntryCacheManager
from broker.cache.shadow import ShadowedEntryCacheManager
from broker.clock import Clock

IMPLEMENTATIONS = ("pip430", "legacy", "segmented")


def create_entry_cache_manager(
    implementation: str,
    config: CacheConfig,
    clock: Clock,
    segments: int = 0,
    shadows: Sequence[str] = (),
) -> EntryCacheManager:
    """The manager of one design (``managedLedgerCacheImplementation``), with size-only
    shadows of the designs named in ``shadows``. A zero size gives the disabled cache
    whatever the design, as in Pulsar."""
    live = _single(implementation, config, clock, segments)
    if not shadows:
        return live
    size_only = dataclasses.replace(config, copy_entries=False)
    return ShadowedEntryCacheManager(
        live, {name: _single(name, size_only, clock, segments) for name in shadows}
    )


def _single(implementation: str, config: CacheConfig, clock: Clock, segments: int) -> Any:
    if config.max_size_bytes <= 0:
        return DisabledEntryCacheManager()
    if implementation == "pip430":
        return Pip430EntryCacheManager(config, clock)
    if implementation == "legacy":
        return LegacyEntryCacheManager(config, clock)
    if implementation == "segmented":
        return SegmentedEntryCacheManager(config, clock, segments)
    raise ValueError(f"unknown cache implementation {implementation!r}; one of {IMPLEMENTATIONS}")


__all__ = [
    "IMPLEMENTATIONS",
    "CacheConfig",
    "CachedEntry",
    "DisabledEntryCacheManager",
    "EntryCache",
    "EntryCacheManager",
    "LegacyEntryCacheManager",
    "MissingRange",
    "Pip430EntryCacheManager",
    "SegmentedEntryCacheManager",
    "ShadowedEntryCacheManager",
    "create_entry_cache_manager",
]
