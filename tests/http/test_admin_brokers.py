"""The broker routes admin tools call on start (pulsar-admin brokers, pulsarctl, Pulsar
Manager) answer with Pulsar's shapes: active brokers, leader, configuration, version,
readiness, a cluster's data; an unknown cluster is 404 and changes nothing."""

from __future__ import annotations

from tests.conftest import LiveBroker, LocalClusterFactory


async def test_one_broker_lists_itself_leads_and_shows_its_configuration(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker(clusterName="lab", maxProducersPerTopic=7)
    own = client.base_url.removeprefix("http://")
    assert await client.request("GET", "/admin/v2/brokers/lab") == (200, [own])
    assert await client.request("GET", "/admin/v2/brokers") == (200, [own])
    assert await client.request("GET", "/admin/v2/brokers/leaderBroker") == (
        200,
        {"serviceUrl": client.base_url, "brokerId": own},
    )
    status, body = await client.request("GET", "/admin/v2/brokers/other")
    assert (status, body["code"]) == (404, "not-found")

    status, runtime = await client.request("GET", "/admin/v2/brokers/configuration/runtime")
    assert status == 200
    assert runtime["clusterName"] == "lab"
    assert runtime["maxProducersPerTopic"] == "7"
    assert all(isinstance(value, str) for value in runtime.values())
    assert await client.request("GET", "/admin/v2/brokers/configuration") == (200, [])
    assert await client.request("GET", "/admin/v2/brokers/configuration/values") == (200, {})
    status, version = await client.request("GET", "/admin/v2/brokers/version")
    assert status == 200 and version.startswith("brokerlab-")
    assert await client.request("GET", "/admin/v2/brokers/ready") == (200, "ok")
    assert await client.request("GET", "/admin/v2/brokers/health") == (200, "ok")

    status, cluster = await client.request("GET", "/admin/v2/clusters/lab")
    assert status == 200
    assert cluster["serviceUrl"] == client.base_url
    assert cluster["brokerServiceUrl"] is None or cluster["brokerServiceUrl"].startswith(
        "pulsar://"
    )
    status, body = await client.request("GET", "/admin/v2/clusters/elsewhere")
    assert (status, body["code"]) == (404, "not-found")


async def test_a_secret_signing_key_is_not_shown(live_broker: LiveBroker) -> None:
    client = await live_broker(tokenSecretKey="data:;base64,c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0")
    status, runtime = await client.request("GET", "/admin/v2/brokers/configuration/runtime")
    assert status == 200
    assert runtime["tokenSecretKey"] == "******"


async def test_every_broker_of_a_cluster_is_listed_and_the_first_up_leads(
    local_cluster: LocalClusterFactory,
) -> None:
    cluster = await local_cluster(brokers=3)
    ids = [client.base_url.removeprefix("http://") for client in cluster.clients]
    for client in cluster.clients:
        assert await client.request("GET", "/admin/v2/brokers/standalone") == (200, ids)
    await cluster.cluster.node(0).stop()
    status, leader = await cluster.clients[1].request("GET", "/admin/v2/brokers/leaderBroker")
    assert (status, leader["brokerId"]) == (200, ids[1])
    assert await cluster.clients[2].request("GET", "/admin/v2/brokers/standalone") == (
        200,
        ids[1:],
    )
    status, body = await cluster.clients[0].request("GET", "/admin/v2/brokers/ready")
    assert (status, body["code"]) == (503, "unavailable")


async def test_pulsar_managers_pages_find_bundles_owners_and_no_failure_domains(
    local_cluster: LocalClusterFactory,
) -> None:
    cluster = await local_cluster(brokers=2)
    first, second = cluster.clients
    ids = [client.base_url.removeprefix("http://") for client in cluster.clients]
    assert (await first.request("POST", "/topics/persistent/public/default/owned", json={
        "messages": [{"payload": "bQ=="}]
    }))[0] in (200, 307)  # fmt: skip
    owned: dict[str, dict[str, object]] = {}
    for broker_id in ids:
        status, bundles = await second.request(
            "GET", f"/admin/v2/brokers/standalone/{broker_id}/ownedNamespaces"
        )
        assert status == 200
        owned |= bundles
    assert owned and all(name.startswith("public/default/0x") for name in owned)
    assert all(value["is_active"] is True for value in owned.values())
    status, body = await first.request(
        "GET", "/admin/v2/brokers/standalone/nobody:1/ownedNamespaces"
    )
    assert (status, body["code"]) == (404, "not-found")
    assert await first.request("GET", "/admin/v2/clusters/standalone/failureDomains") == (200, {})
    status, bundles = await first.request("GET", "/admin/v2/namespaces/public/default/bundles")
    assert status == 200 and bundles["numBundles"] == 4
    assert bundles["boundaries"][0] == "0x00000000" and bundles["boundaries"][-1] == "0xffffffff"
    status, body = await first.request("GET", "/admin/v2/namespaces/public/nowhere/bundles")
    assert (status, body["code"]) == (404, "not-found")
    assert await first.request("GET", "/admin/v2/non-persistent/public/default") == (200, [])
