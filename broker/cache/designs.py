"""The registry of cache designs: ``name -> Design``. Every caller (configuration, the
broker, shadows, benchmarks, the load generator's CLI, the replay) takes the list of
designs from here.

And the registry of variants, ``name -> Variant``: a design plus broker.conf settings,
the configurations ``brokerlab compare`` runs side by side. Every design is a variant of
itself with no settings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

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


@dataclass(frozen=True, slots=True)
class Variant:
    """A registered design with broker.conf settings of its own: one configuration to
    compare (``brokerlab compare --implementations``). ``settings`` are broker.conf keys,
    Pulsar's names, to values as a conf file writes them; every other key keeps its
    default (or what the user sets)."""

    name: str
    #: a name in DESIGNS, the run's managedLedgerCacheImplementation
    design: str
    #: one line
    summary: str
    settings: Mapping[str, str] = field(default_factory=dict, hash=False)

    def overrides(self) -> dict[str, str]:
        """The broker.conf overrides that run this variant: its design and settings."""
        return {**self.settings, "managedLedgerCacheImplementation": self.design}


def _variants(*variants: Variant) -> dict[str, Variant]:
    """The registry: every design plain (a variant of itself, no settings), then the
    given variants; each checked: a unique name, a registered design, no design key among
    its settings. (That the keys are broker.conf's and the values parse is checked by
    tests/cache/test_variants.py: broker.config imports this module.)"""
    registry: dict[str, Variant] = {}
    plain = [Variant(name, name, found.summary) for name, found in DESIGNS.items()]
    for given in (*plain, *variants):
        if given.name in registry:
            raise ValueError(f"variant {given.name!r} registered twice")
        if given.design not in DESIGNS:
            raise ValueError(f"variant {given.name!r}: unknown design {given.design!r}")
        if "managedLedgerCacheImplementation" in given.settings:
            raise ValueError(f"variant {given.name!r}: the design is its own field")
        # read-only, so the registry cannot be changed through a variant
        registry[given.name] = Variant(
            given.name, given.design, given.summary, MappingProxyType(dict(given.settings))
        )
    return registry


#: The settings of PR #12258's backlog caching (the public comparison's
#: ``configurePR12258Caching``): every cursor with entries to read caches what it reads,
#: and no cursor ever counts as backlogged.
PR12258_SETTINGS = {
    "managedLedgerMinimumBacklogCursorsForCaching": "1",
    "managedLedgerMinimumBacklogEntriesForCaching": "1",
    "managedLedgerMaxBacklogBetweenCursorsForCaching": "2147483647",  # Integer.MAX_VALUE
    "managedLedgerCursorBackloggedThreshold": "9223372036854775807",  # Long.MAX_VALUE
}

#: Expected reads and the TTL extension both off: the public comparison's
#: ``disablePIP430``, which each of its three baselines starts from. (The extension is
#: off by default here, as in Pulsar 5.0, so only expected reads are set.)
_EXPECTED_OFF = {"cacheEvictionByExpectedReadCount": "false"}

#: Two families of variants.
#:
#: ``pip430-*``: the four configurations of Pulsar's public PIP-430 comparison (PR
#: #24623's ``BrokerEntryCacheRollingRestartTest``), as that test ran them: all on the
#: PR's own code (Pulsar 4.1: the broker-wide removal queue, partial range reads), the
#: three baselines with ``cacheEvictionByExpectedReadCount=false`` plus their settings.
#: This is the question "which settings, on today's Pulsar".
#:
#: ``legacy-*``: the same baselines on the design before PIP-430 (Pulsar 4.0: per-ledger
#: caches, all-or-nothing range reads). This is the question "4.0 against 4.1"; it is
#: not what the public table compared.
VARIANTS: dict[str, Variant] = _variants(
    Variant(
        "pip430-extendttl",
        "pip430",
        "PIP-430 as the public comparison ran it: recently read entries get another TTL",
        # expected reads are on by default
        {"managedLedgerCacheEvictionExtendTTLOfRecentlyAccessed": "true"},
    ),
    Variant(
        "pip430-expected-off",
        "pip430",
        "Pulsar 4.1 with expected reads off: the earlier default's rules on PIP-430's structure",
        _EXPECTED_OFF,
    ),
    Variant(
        "pip430-markdelete",
        "pip430",
        "Pulsar 4.1, expected reads off, invalidating up to the slowest mark-delete (PR #14985)",
        {**_EXPECTED_OFF, "cacheEvictionByMarkDeletedPosition": "true"},
    ),
    Variant(
        "pip430-pr12258",
        "pip430",
        "Pulsar 4.1, expected reads off, caching reads of backlogged cursors (PR #12258)",
        {**_EXPECTED_OFF, **PR12258_SETTINGS},
    ),
    Variant(
        "legacy-markdelete",
        "legacy",
        "before PIP-430 (4.0), invalidating up to the slowest mark-delete position (PR #14985)",
        {"cacheEvictionByMarkDeletedPosition": "true"},
    ),
    Variant(
        "legacy-backlog",
        "legacy",
        "before PIP-430 (4.0), caching reads of backlogged cursors close together (PR #12258)",
        PR12258_SETTINGS,
    ),
)


def variant(name: str) -> Variant:
    """The registered variant called ``name`` (a design's name is its plain variant);
    ValueError naming the choices if none."""
    found = VARIANTS.get(name)
    if found is None:
        raise ValueError(f"unknown cache variant {name!r}; one of {', '.join(VARIANTS)}")
    return found
