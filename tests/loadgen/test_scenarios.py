"""Scenario files: every preset loads; a malformed one is refused naming file and field."""

from __future__ import annotations

import pathlib

import pytest

from loadgen.scenario import ScenarioError, load_scenario, preset_names

PRESETS = [
    "tailing-fanout",
    "catchup",
    "keyshared-slow-consumer",
    "many-topics",
    "rolling-restart",
    "failover-lac-storm",
    "tiered-cold-read",
    "demo",
    "throughput",
    "pr24623-rolling-restart",
    "delayed-delivery",
]


def test_every_preset_of_the_issue_exists() -> None:
    assert preset_names() == sorted(PRESETS)


@pytest.mark.parametrize("name", PRESETS)
def test_each_preset_loads_with_its_own_name(name: str) -> None:
    scenario = load_scenario(name)
    assert scenario.name == name
    assert scenario.topics >= 1 and scenario.testDurationSeconds > 0
    assert all(event.at <= scenario.testDurationSeconds for event in scenario.events)


def test_the_public_comparison_preset_carries_the_tests_own_parameters() -> None:
    """PR #24623's BrokerEntryCacheRollingRestartTest, read from its source."""
    public = load_scenario("pr24623-rolling-restart")
    assert (public.brokers, public.topics, public.partitionsPerTopic) == (2, 1, 10)
    assert (public.producerRate, public.messageSize) == (50_000, 8)  # Schema.INT64
    assert (public.maxMessagesInFlight, public.inFlightPauseMs) == (500_000, 100)
    assert (public.subscriptionsPerTopic, public.subscriptionType) == (10, "Shared")
    assert public.consumers.receiverQueueSize == 200 and public.consumers.rateLimit == 0
    assert (public.consumers.reconnectDelayMs, public.consumers.reconnectJitterMs) == (20, 20)
    assert public.virtual.ackGroupingMs == 5
    assert public.broker["managedLedgerCacheSizeMB"] == 250
    assert public.broker["brokerlabCacheEntryLengthBytes"] == 8192
    assert public.testDurationSeconds == 30
    assert [(e.at, e.type, e.broker, e.downtimeMs) for e in public.events] == [
        (7.5, "restart", 0, 0),
        (15, "restart", 1, 0),
        (22.5, "restart", 0, 0),
    ]


def test_a_few_facts_of_the_presets() -> None:
    assert load_scenario("many-topics").topics == 10_000
    slow = load_scenario("keyshared-slow-consumer")
    assert slow.subscriptionType == "Key_Shared" and slow.consumers.slowConsumers == 1
    rolling = load_scenario("rolling-restart")
    # the public test's shape: two brokers, each restarted in turn, three times
    assert rolling.brokers == 2 and rolling.partitionsPerTopic == 10
    assert [(e.type, e.broker) for e in rolling.events] == [
        ("restart", 0),
        ("restart", 1),
        ("restart", 0),
    ]


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("topics = 0\n", "topics"),
        ("topics = 1\nproducerRate = 'fast'\n", "producerRate"),
        ("topics = 1\nsubscriptionType = 'Fanout'\n", "subscriptionType"),
        ("topics = 1\nmessageSizes = 10\n", "messageSizes"),
        ("topics = 1\n[consumers]\nackMode = 'maybe'\n", "consumers.ackMode"),
        ("topics = 1\n[[events]]\nat = 5\ntype = 'explode'\n", "events.0.type"),
    ],
)
def test_a_malformed_scenario_names_the_file_and_the_field(
    tmp_path: pathlib.Path, text: str, field: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as error:
        load_scenario(str(path))
    assert f"{path}: {field}:" in str(error.value)


def test_events_after_the_run_or_on_missing_subscriptions_are_refused(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "late.toml"
    path.write_text("topics = 1\ntestDurationSeconds = 10\n[[events]]\nat = 11\ntype = 'unload'\n")
    with pytest.raises(ScenarioError, match="after testDurationSeconds"):
        load_scenario(str(path))
    path.write_text("topics = 1\n[[events]]\nat = 1\ntype = 'pause'\nsubscription = 3\n")
    with pytest.raises(ScenarioError, match="not a subscription"):
        load_scenario(str(path))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "topics = 1\nconsumerPerSubscription = 2\n",
            "an Exclusive subscription takes one consumer",
        ),
        (
            "topics = 1\nsubscriptionType = 'Shared'\n[consumers]\nackMode = 'cumulative'\n",
            "cumulative is refused on Shared",
        ),
    ],
)
def test_combinations_pulsar_refuses_are_refused_up_front(
    tmp_path: pathlib.Path, text: str, message: str
) -> None:
    path = tmp_path / "combo.toml"
    path.write_text(text)
    with pytest.raises(ScenarioError, match=message):
        load_scenario(str(path))


def test_scaling_keeps_the_shape_of_the_run() -> None:
    scenario = load_scenario("catchup")
    short = scenario.scaled(6)
    assert short.testDurationSeconds == 6
    assert short.consumerBacklogSizeMB == pytest.approx(scenario.consumerBacklogSizeMB / 10)
    assert [e.at for e in short.events] == [e.at / 10 for e in scenario.events]
    assert short.producerRate == scenario.producerRate


def test_broken_toml_and_unknown_names_are_clear(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("topics = = 1\n")
    with pytest.raises(ScenarioError, match="not valid TOML"):
        load_scenario(str(path))
    with pytest.raises(ScenarioError, match="the presets are"):
        load_scenario("no-such-preset")


def test_loadgen_is_a_black_box_client_that_never_imports_the_broker() -> None:
    package = pathlib.Path(__file__).resolve().parents[2] / "loadgen"
    for source in package.rglob("*.py"):
        text = source.read_text()
        assert "import broker" not in text and "from broker" not in text, source


def test_delayed_messages_need_a_delay() -> None:
    from pydantic import ValidationError

    from loadgen.scenario import Scenario

    with pytest.raises(ValidationError, match="delayedRatio needs deliverAfterMs"):
        Scenario(name="d", topics=1, delayedRatio=0.5)
    preset = load_scenario("delayed-delivery")
    assert (preset.delayedRatio, preset.deliverAfterMs) == (0.33, 10_000)
    assert preset.scaled(6).deliverAfterMs == 1000  # the delay keeps its share of the run
