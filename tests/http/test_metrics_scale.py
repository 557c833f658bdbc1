"""/metrics with many topics stays small: topic-labelled series for at most
``brokerlabMetricsMaxTopics`` topics (the largest backlogs), the rest summed under
``topic="_other"`` (issue #18 part 5). Scrape times are printed, never asserted."""

from __future__ import annotations

import time
from collections import defaultdict

from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import Client, LiveBroker
from tests.dispatch.test_idle_topics import TOPICS, create_topics
from tests.harness import in_process_node

TOPIC_FAMILIES = ("pulsar_msg_backlog", "pulsar_rate_in", "pulsar_rate_out", "pulsar_storage_size")


async def scrape(client: Client) -> tuple[str, dict[str, dict[str, float]]]:
    """The text, and per family: topic label -> value (topic-labelled families only)."""
    status, text = await client.request("GET", "/metrics")
    assert status == 200
    by_topic: dict[str, dict[str, float]] = defaultdict(dict)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if "topic" in sample.labels:
                by_topic[sample.name][sample.labels["topic"]] = sample.value
    return text, by_topic


def value(text: str, name: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    raise AssertionError(f"{name} not in /metrics")


async def test_topics_beyond_the_cap_are_summed_under_other(live_broker: LiveBroker) -> None:
    client = await live_broker(brokerlabMetricsMaxTopics=3)
    for backlog in range(1, 7):
        topic = f"public/default/backlog-{backlog}"
        await client.request("PUT", f"/admin/v2/persistent/{topic}/subscription/s")
        await client.produce(topic, [f"m{i}" for i in range(backlog)])

    text, by_topic = await scrape(client)

    backlogs = by_topic["pulsar_msg_backlog"]
    assert backlogs == {
        "persistent://public/default/backlog-6": 6,
        "persistent://public/default/backlog-5": 5,
        "persistent://public/default/backlog-4": 4,
        "_other": 1 + 2 + 3,
    }
    assert value(text, "brokerlab_metrics_topics_aggregated") == 3
    assert sum(backlogs.values()) == value(text, "brokerlab_backlog_messages")
    for family in TOPIC_FAMILIES:
        assert len(by_topic[family]) == 4, family


async def test_thousands_of_topics_give_a_bounded_scrape() -> None:
    """TOPICS (2,000; 50,000 with BROKERLAB_SCALE_TOPICS=50000) topics, the topic-labelled
    series capped at a tenth of them (the shipped cap, 1000, at 50,000 topics)."""
    cap = min(1000, TOPICS // 10)
    async with in_process_node(brokerlabMetricsMaxTopics=cap) as (client, node):
        service = node.service
        assert service is not None
        await create_topics(service, TOPICS, "t")

        started = time.perf_counter()
        text, by_topic = await scrape(client)
        print(f"\n/metrics of {TOPICS} topics: {len(text) / 1e6:.2f} MB in "
              f"{time.perf_counter() - started:.2f} s")  # fmt: skip

        assert node.config.brokerlabMetricsMaxTopics == cap
        for family in TOPIC_FAMILIES:
            assert len(by_topic[family]) == cap + 1, family
        assert value(text, "brokerlab_metrics_topics_aggregated") == TOPICS - cap
        storage = by_topic["pulsar_storage_size"]
        assert sum(storage.values()) == sum(t.ledger.total_size() for t in service.topics.values())
        series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
        assert series < 10 * cap, f"{series} series"


async def test_topic_series_carry_pulsars_namespace_label_and_other_is_per_namespace(
    live_broker: LiveBroker,
) -> None:
    """As Pulsar labels them (cluster, namespace, topic: cluster from prometheus.yml), so
    ``sum by (namespace)`` works, and stays whole with topics beyond the cap."""
    client = await live_broker(brokerlabMetricsMaxTopics=2)
    status, _ = await client.request("PUT", "/admin/v2/namespaces/public/second")
    assert status == 204
    backlogs = {"default/a": 5, "default/b": 1, "second/c": 4, "second/d": 2, "second/e": 3}
    for name, backlog in backlogs.items():
        topic = f"public/{name}"
        await client.request("PUT", f"/admin/v2/persistent/{topic}/subscription/s")
        await client.produce(topic, [f"m{i}" for i in range(backlog)])

    status, text = await client.request("GET", "/metrics")
    assert status == 200
    found = {
        (sample.labels["namespace"], sample.labels["topic"]): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "pulsar_msg_backlog"
    }
    assert found == {
        ("public/default", "persistent://public/default/a"): 5,
        ("public/second", "persistent://public/second/c"): 4,
        ("public/default", "_other"): 1,
        ("public/second", "_other"): 2 + 3,
    }
    replay = [
        sample.labels
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "brokerlab_replay_queue_messages_by_subscription"
    ]
    assert {"namespace": "public/second", "topic": "persistent://public/second/c",
            "subscription": "s", "broker": "0"} in replay  # fmt: skip
