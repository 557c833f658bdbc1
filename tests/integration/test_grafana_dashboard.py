"""conf/grafana/brokerlab.json parses, and every metric its PromQL names exists in
GET /metrics of a broker under a little load (with a shadow, so role="shadow" exists)."""

from __future__ import annotations

import json
import pathlib
import re

from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import LiveBroker

DASHBOARD = pathlib.Path(__file__).resolve().parents[2] / "conf" / "grafana" / "brokerlab.json"
METRIC = re.compile(r"\b((?:brokerlab|pulsar)_[a-z0-9_]+)\b")


def test_the_dashboard_parses_and_every_panel_has_a_query() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["panels"]
    for panel in dashboard["panels"]:
        assert panel["title"] and panel["description"]
        assert panel["targets"] and all(t["expr"] for t in panel["targets"])


async def test_every_metric_the_dashboard_queries_is_exposed(live_broker: LiveBroker) -> None:
    client = await live_broker(brokerlabShadowCacheImplementations="legacy,segmented")
    consumer = await client.subscribe("public/default/g", "s")
    await client.produce("public/default/g", ["a", "b"])
    await client.receive_until(consumer, 2)
    status, text = await client.request("GET", "/metrics")
    assert status == 200
    exposed = {
        sample.name for family in text_string_to_metric_families(text) for sample in family.samples
    }
    dashboard = json.loads(DASHBOARD.read_text())
    queried = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in METRIC.findall(target["expr"])
    }
    assert queried, "the dashboard names metrics"
    assert queried - exposed == set()
