"""Namespace and topic policies over Pulsar's admin routes, against ``brokerlab serve``:
the Policies object, retention, message TTL and backlog quotas read back as Pulsar shapes
them, refused with Pulsar's statuses without storing anything, kept across a restart,
and a backlog quota refusing the official client's producers with Pulsar's errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pulsar
import pytest

from tests.conftest import ServedBrokerFactory
from tests.harness import ServedBroker, new_topic, persistent

pytestmark = pytest.mark.slow

RETAIN = {"retentionTimeInMinutes": 60, "retentionSizeInMB": 1024}
QUOTA = {"limitSize": 1024, "limitTime": -1, "policy": "producer_exception"}


def error(broker: ServedBroker, method: str, path: str, body: Any = None) -> tuple[int, str]:
    answer = broker.request(method, path, body)
    assert answer.status >= 400 and answer.body["reason"], answer
    return answer.status, answer.body["code"]


def unset(broker: ServedBroker, path: str) -> bool:
    answer = broker.request("GET", path)
    return answer.status == 204 and answer.body is None


def test_a_namespaces_policies_read_back_as_pulsar_shapes_them(broker: ServedBroker) -> None:
    namespace = broker.new_namespace("policies")
    base = f"/admin/v2/namespaces/{namespace}"
    policies = broker.ok("GET", base)
    assert policies["replication_clusters"] == ["standalone"]
    assert policies["bundles"]["numBundles"] == 4
    assert policies["bundles"]["boundaries"][0] == "0x00000000"
    assert policies["backlog_quota_map"] == {}
    assert policies["schema_compatibility_strategy"] == "UNDEFINED"
    assert "retention_policies" not in policies and "message_ttl_in_seconds" not in policies
    assert unset(broker, base + "/retention") and unset(broker, base + "/messageTTL")

    assert broker.request("POST", base + "/retention", RETAIN).status == 204
    assert broker.request("POST", base + "/messageTTL", 120).status == 204
    quota_path = base + "/backlogQuota?backlogQuotaType=destination_storage"
    assert broker.request("POST", quota_path, QUOTA).status == 204
    assert broker.ok("GET", base + "/retention") == RETAIN
    assert broker.ok("GET", base + "/messageTTL") == 120
    stored_quota = {"limit": 1024, **QUOTA}
    assert broker.ok("GET", base + "/backlogQuotaMap") == {"destination_storage": stored_quota}
    policies = broker.ok("GET", base)
    assert policies["retention_policies"] == RETAIN
    assert policies["message_ttl_in_seconds"] == 120
    assert policies["backlog_quota_map"] == {"destination_storage": stored_quota}

    for path in (base + "/retention", base + "/messageTTL", quota_path):
        assert broker.request("DELETE", path).status == 204
    assert unset(broker, base + "/retention") and unset(broker, base + "/messageTTL")
    assert broker.ok("GET", base + "/backlogQuotaMap") == {}


def test_bad_policies_are_refused_with_pulsars_statuses_and_nothing_is_stored(
    broker: ServedBroker,
) -> None:
    namespace = broker.new_namespace("policies")
    base = f"/admin/v2/namespaces/{namespace}"
    one_zero = {"retentionTimeInMinutes": 0, "retentionSizeInMB": 10}
    assert error(broker, "POST", base + "/retention", one_zero) == (412, "precondition-failed")
    below = {"retentionTimeInMinutes": -2, "retentionSizeInMB": 10}
    assert error(broker, "POST", base + "/retention", below) == (412, "precondition-failed")
    assert error(broker, "POST", base + "/retention", {"retentionSizeInMB": "10"}) == (
        400,
        "invalid-request",
    )
    assert error(broker, "POST", base + "/messageTTL", -1) == (412, "precondition-failed")
    assert error(broker, "POST", base + "/messageTTL", "60") == (400, "invalid-request")
    bad_policy = {"limitSize": 10, "policy": "drop_everything"}
    assert error(broker, "POST", base + "/backlogQuota", bad_policy) == (400, "invalid-request")
    assert error(broker, "POST", base + "/backlogQuota?backlogQuotaType=nope", QUOTA) == (
        400,
        "invalid-request",
    )
    assert unset(broker, base + "/retention") and unset(broker, base + "/messageTTL")
    assert broker.ok("GET", base + "/backlogQuotaMap") == {}

    # a backlog quota the retention would not keep, either way round
    small = {"retentionTimeInMinutes": -1, "retentionSizeInMB": 1}
    assert broker.request("POST", base + "/retention", small).status == 204
    big_quota = {"limitSize": 2 * 1024 * 1024, "policy": "producer_request_hold"}
    assert error(broker, "POST", base + "/backlogQuota", big_quota) == (412, "precondition-failed")
    assert broker.ok("GET", base + "/backlogQuotaMap") == {}
    within = {"limitSize": 1000, "limitTime": 7200, "policy": "producer_request_hold"}
    assert broker.request("POST", base + "/backlogQuota", within).status == 204
    hour = {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1}  # shorter than 7200 s
    assert error(broker, "POST", base + "/retention", hour) == (412, "precondition-failed")
    assert broker.ok("GET", base + "/retention") == small

    for path in ("", "/retention", "/messageTTL", "/backlogQuotaMap"):
        assert error(broker, "GET", f"/admin/v2/namespaces/public/none{path}") == (
            404,
            "not-found",
        )
    assert error(broker, "POST", "/admin/v2/namespaces/public/none/messageTTL", 5) == (
        404,
        "not-found",
    )


def test_a_topics_own_policies_win_over_its_namespaces(broker: ServedBroker) -> None:
    namespace = broker.new_namespace("policies")
    topic = new_topic("own", namespace)
    base = f"/admin/v2/persistent/{topic}"
    assert error(broker, "POST", base + "/messageTTL?messageTTL=5") == (404, "not-found")
    broker.ok("PUT", base)
    broker.ok("POST", f"/admin/v2/namespaces/{namespace}/messageTTL", 300)
    assert unset(broker, base + "/messageTTL")
    assert broker.ok("GET", base + "/messageTTL?applied=true") == 300
    assert broker.request("POST", base + "/messageTTL?messageTTL=5").status == 204
    assert broker.ok("GET", base + "/messageTTL") == 5
    assert broker.ok("GET", base + "/messageTTL?applied=true") == 5
    assert error(broker, "POST", base + "/messageTTL?messageTTL=-1") == (412, "precondition-failed")

    assert broker.ok("GET", base + "/retention?applied=true") == {
        "retentionTimeInMinutes": 0,
        "retentionSizeInMB": 0,
    }
    broker.ok("POST", base + "/retention", RETAIN)
    assert broker.ok("GET", base + "/retention") == RETAIN
    applied = broker.ok("GET", base + "/backlogQuotaMap?applied=true")
    assert applied["destination_storage"]["limitSize"] == -1  # the broker's default
    broker.ok("POST", base + "/backlogQuota?backlogQuotaType=message_age", {
        "limitTime": 600,
        "policy": "consumer_backlog_eviction",
    })  # fmt: skip
    assert set(broker.ok("GET", base + "/backlogQuotaMap")) == {"message_age"}
    assert broker.request("DELETE", base + "/backlogQuota?backlogQuotaType=message_age").status
    assert broker.ok("GET", base + "/backlogQuotaMap") == {}

    # a deleted topic takes its policies with it
    assert broker.request("DELETE", base).status == 204
    broker.ok("PUT", base)
    assert unset(broker, base + "/messageTTL") and unset(broker, base + "/retention")


def test_policies_survive_a_restart(served_broker: ServedBrokerFactory) -> None:
    broker = served_broker()
    namespace = broker.new_namespace("policies")
    topic = new_topic("kept", namespace)
    broker.ok("PUT", f"/admin/v2/persistent/{topic}")
    broker.ok("POST", f"/admin/v2/namespaces/{namespace}/retention", RETAIN)
    broker.ok("POST", f"/admin/v2/persistent/{topic}/messageTTL?messageTTL=42")
    broker.stop()
    broker.start()
    assert broker.ok("GET", f"/admin/v2/namespaces/{namespace}")["retention_policies"] == RETAIN
    assert broker.ok("GET", f"/admin/v2/persistent/{topic}/messageTTL") == 42


@pytest.mark.parametrize(
    ("policy", "refusal"),
    [
        ("producer_exception", "ProducerBlockedQuotaExceededException"),
        ("producer_request_hold", "ProducerBlockedQuotaExceededError"),
    ],
)
def test_a_producer_is_refused_with_pulsars_error_while_the_backlog_is_over_quota(
    broker: ServedBroker, pulsar_client: Callable[..., Any], policy: str, refusal: str
) -> None:
    client = pulsar_client(broker.service_url, operation_timeout_seconds=5)
    namespace = broker.new_namespace("policies")
    topic = new_topic("quota", namespace)
    quota = {"limitSize": 1024, "limitTime": -1, "policy": policy}
    broker.ok("POST", f"/admin/v2/namespaces/{namespace}/backlogQuota", quota)
    broker.ok("PUT", f"/admin/v2/persistent/{topic}/subscription/s?messageId=earliest")
    producer = client.create_producer(persistent(topic), batching_enabled=False)
    for _ in range(20):
        producer.send(b"x" * 200)
    producer.close()
    with pytest.raises(getattr(pulsar, refusal)):
        client.create_producer(persistent(topic))
    # once the subscription caught up, producers are welcome again
    broker.ok("POST", f"/admin/v2/persistent/{topic}/subscription/s/skip_all")
    client.create_producer(persistent(topic)).close()
