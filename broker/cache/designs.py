"""The registry of cache designs: ``name -> Design``. Every caller (configuration, the
broker, shadows, benchmarks, the load generator's CLI, the replay) takes the list of
designs from here."""

from __future__ import annotations

from broker.cache.api import EntryCache, TopicPolicy
from broker.cache.config import CacheConfig
from broker.cache.legacy import LegacyEntryCacheManager, LegacyRules
from broker.cache.pip430 import ExpectedReadCounts, Pip430EntryCacheManager
from broker.cache.segmented import SegmentedEntryCacheManager
from broker.cache.unit import Design
from broker.clock import Clock


def _pip430_policy(config: CacheConfig, clock: Clock, cache: EntryCache) -> TopicPolicy:
    if config.eviction_by_expected_read_count:
        return ExpectedReadCounts(config, clock)
    return LegacyRules(config, cache)  # cacheEvictionByExpectedReadCount=false: "as before"


def _legacy_policy(config: CacheConfig, clock: Clock, cache: EntryCache) -> TopicPolicy:
    return LegacyRules(config, cache)


DESIGNS: dict[str, Design] = {
    design.name: design
    for design in (
        Design(
            "pip430",
            "PIP-430: one broker-wide removal queue, expected read counts, TTL extension",
            Pip430EntryCacheManager,
            _pip430_policy,
        ),
        Design(
            "legacy",
            "before PIP-430: per-ledger caches and eviction, slowest-reader invalidation",
            LegacyEntryCacheManager,
            _legacy_policy,
        ),
        Design(
            "segmented",
            "PIP-174: one broker-wide ring of segments, filled by the write path only",
            SegmentedEntryCacheManager,
            _legacy_policy,
        ),
    )
}

#: the design a broker runs unless told otherwise (Pulsar's current one)
DEFAULT_DESIGN = "pip430"


def design(name: str) -> Design:
    """The registered design called ``name``; ValueError naming the choices if none."""
    found = DESIGNS.get(name)
    if found is None:
        raise ValueError(f"unknown cache design {name!r}; one of {', '.join(DESIGNS)}")
    return found
