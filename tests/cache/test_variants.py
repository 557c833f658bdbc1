"""The registry of variants: a design plus broker.conf settings, the configurations of
Pulsar's public PIP-430 comparison. Every variant loads through broker.conf's own model
(its keys are real keys, its values parse) into the CacheConfig it means."""

from __future__ import annotations

import dataclasses

import pytest

from broker.cache.api import CursorCheck
from broker.cache.config import CacheConfig
from broker.cache.designs import DESIGNS, VARIANTS, Variant, _variants, variant
from broker.clock import ManualClock
from broker.config import BrokerConfig, cache_config, load_broker_config

DEFAULTS = CacheConfig()

#: what each variant must turn into: its design and its CacheConfig
EXPECTED: dict[str, tuple[str, CacheConfig]] = {
    "pip430": ("pip430", DEFAULTS),
    "legacy": ("legacy", DEFAULTS),
    "segmented": ("segmented", DEFAULTS),
    "pip430-extendttl": (
        "pip430",
        dataclasses.replace(DEFAULTS, extend_ttl_of_recently_accessed=True),
    ),
    "pip430-expected-off": (
        "pip430",
        dataclasses.replace(DEFAULTS, eviction_by_expected_read_count=False),
    ),
    "pip430-markdelete": (
        "pip430",
        dataclasses.replace(
            DEFAULTS,
            eviction_by_expected_read_count=False,
            cache_eviction_by_mark_deleted_position=True,
        ),
    ),
    "pip430-pr12258": (
        "pip430",
        dataclasses.replace(
            DEFAULTS,
            eviction_by_expected_read_count=False,
            min_backlog_cursors_for_caching=1,
            min_backlog_entries_for_caching=1,
            max_backlog_between_cursors_for_caching=2**31 - 1,
            cursor_backlogged_threshold=2**63 - 1,
        ),
    ),
    "legacy-markdelete": (
        "legacy",
        dataclasses.replace(DEFAULTS, cache_eviction_by_mark_deleted_position=True),
    ),
    "legacy-backlog": (
        "legacy",
        dataclasses.replace(
            DEFAULTS,
            min_backlog_cursors_for_caching=1,
            min_backlog_entries_for_caching=1,
            max_backlog_between_cursors_for_caching=2**31 - 1,  # Integer.MAX_VALUE
            cursor_backlogged_threshold=2**63 - 1,  # Long.MAX_VALUE
        ),
    ),
}


def loaded(name: str) -> BrokerConfig:
    """broker.conf's defaults with the variant's overrides, validated as a file is."""
    return load_broker_config(None, variant(name).overrides())


def test_every_variant_has_an_expectation_and_every_design_is_a_plain_variant() -> None:
    assert set(VARIANTS) == set(EXPECTED)
    for name, found in DESIGNS.items():
        plain = VARIANTS[name]
        assert (plain.design, dict(plain.settings), plain.summary) == (name, {}, found.summary)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_variant_loads_through_broker_conf_into_the_cache_config_it_means(name: str) -> None:
    design, expected = EXPECTED[name]
    config = loaded(name)  # an unknown key or a bad value raises ConfigError
    assert variant(name).design == design
    assert config.managedLedgerCacheImplementation == design
    assert cache_config(config) == expected


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_setting_of_a_variant_changes_its_key_from_the_default(name: str) -> None:
    """A setting equal to the default would make a variant its design under another name."""
    config, defaults = loaded(name), BrokerConfig()
    for key in variant(name).settings:
        assert getattr(config, key) != getattr(defaults, key), key


def test_the_public_comparisons_settings_by_their_pulsar_names() -> None:
    assert dict(variant("pip430-extendttl").settings) == {
        "managedLedgerCacheEvictionExtendTTLOfRecentlyAccessed": "true"
    }
    assert dict(variant("legacy-markdelete").settings) == {
        "cacheEvictionByMarkDeletedPosition": "true"
    }
    assert dict(variant("legacy-backlog").settings) == {
        "managedLedgerMinimumBacklogCursorsForCaching": "1",
        "managedLedgerMinimumBacklogEntriesForCaching": "1",
        "managedLedgerMaxBacklogBetweenCursorsForCaching": "2147483647",
        "managedLedgerCursorBackloggedThreshold": "9223372036854775807",
    }


def test_overrides_are_the_settings_and_the_design() -> None:
    assert variant("legacy-markdelete").overrides() == {
        "cacheEvictionByMarkDeletedPosition": "true",
        "managedLedgerCacheImplementation": "legacy",
    }
    assert variant("segmented").overrides() == {"managedLedgerCacheImplementation": "segmented"}


def test_an_unknown_name_is_refused_naming_every_choice() -> None:
    with pytest.raises(ValueError, match="unknown cache variant 'lru'") as caught:
        variant("lru")
    for name in EXPECTED:
        assert name in str(caught.value)


def test_the_registry_cannot_be_changed_through_a_variant() -> None:
    settings = variant("legacy-backlog").settings
    with pytest.raises(TypeError):
        settings["managedLedgerMinimumBacklogCursorsForCaching"] = "2"  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        variant("legacy").design = "pip430"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (Variant("lru", "lru", "no such design"), "unknown design 'lru'"),
        (Variant("legacy", "legacy", "a design's own name"), "registered twice"),
        (
            Variant("x", "legacy", "", {"managedLedgerCacheImplementation": "pip430"}),
            "the design is its own field",
        ),
    ],
)
def test_a_bad_registration_is_refused(bad: Variant, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _variants(bad)


def test_the_public_baselines_run_on_pip430_with_expected_reads_off() -> None:
    """The public comparison ran its three baselines on PIP-430's own code with
    cacheEvictionByExpectedReadCount=false (its disablePIP430): the pip430-* variants are
    the pip430 design with that setting; legacy-* are the design before PIP-430."""
    for name in ("pip430-expected-off", "pip430-markdelete", "pip430-pr12258"):
        assert variant(name).design == "pip430"
        assert variant(name).settings["cacheEvictionByExpectedReadCount"] == "false"
    for name in ("legacy-markdelete", "legacy-backlog"):
        assert variant(name).design == "legacy"
    same = ("cacheEvictionByMarkDeletedPosition",)
    assert {k: variant("pip430-markdelete").settings[k] for k in same} == dict(
        variant("legacy-markdelete").settings
    )
    pr12258 = dict(variant("pip430-pr12258").settings)
    del pr12258["cacheEvictionByExpectedReadCount"]
    assert pr12258 == dict(variant("legacy-backlog").settings)


@pytest.mark.parametrize("backlog_variant", ["legacy-backlog", "pip430-pr12258"])
def test_backlog_caching_caches_storage_reads_of_backlogged_cursors_and_defaults_do_not(
    backlog_variant: str,
) -> None:
    """The variant reaches the design's rules: PR #12258's check picks two cursors far
    behind (beyond the default 1000-entry limits) for caching under its variants only."""
    cursors = [CursorCheck("a", True, 50_000), CursorCheck("b", True, 52_000)]
    chosen = {}
    plain = variant(backlog_variant).design
    if plain == "pip430":
        plain = "pip430-expected-off"
    for name in (plain, backlog_variant):
        found = variant(name)
        instance = DESIGNS[found.design].create(cache_config(loaded(name)), ManualClock())
        unit = instance.load("persistent://public/default/t")
        unit.policy.checked(cursors)
        chosen[name] = [unit.policy.storage_read_reads(cursor.name) for cursor in cursors]
    assert chosen == {plain: [0, 0], backlog_variant: [1, 1]}
