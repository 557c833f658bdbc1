"""A web page a developer visits must not be able to write to the broker on their laptop:
cross-origin state changes, bodies a page can send without asking first, foreign Host
names (DNS rebinding) and CORS, against a real broker on a real port."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from tests.conftest import Client, LiveBroker, b64
from tests.harness import new_topic

EVIL = "https://evil.example"


def produce_json(payload: str = "x") -> bytes:
    return b'{"messages": [{"payload": "%s"}]}' % b64(payload).encode()


async def send(
    client: Client,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any, Any]:
    """One request with exactly these headers (aiohttp adds no Content-Type of its own)."""
    async with client.session.request(
        method,
        client.base_url + path,
        data=body,
        headers=headers or {},
        skip_auto_headers=["Content-Type"],
    ) as response:
        answer = await response.json() if response.content_type == "application/json" else None
        return response.status, answer, response.headers


async def topics(client: Client) -> list[str]:
    status, body = await client.request("GET", "/admin/v2/persistent/public/default")
    assert status == 200, body
    return list(body)


async def test_a_cross_origin_post_is_refused_and_stores_nothing(live_broker: LiveBroker) -> None:
    client = await live_broker()
    topic = new_topic("browser")
    json_type = {"Content-Type": "application/json"}
    for method, path, body in [
        ("POST", f"/topics/persistent/{topic}", produce_json()),
        ("POST", "/admin/v2/namespaces/public/default/unload", None),
        ("PUT", "/admin/v2/brokerlab/faults", b'{"operation": "addEntries", "errorRate": 1}'),
        ("DELETE", f"/admin/v2/persistent/{topic}", None),
        ("POST", f"/consumers/persistent/{topic}/s", b"{}"),
    ]:
        for origin in (EVIL, "null", "http://127.0.0.1.evil.example"):
            status, answer, _ = await send(
                client, method, path, body, {**json_type, "Origin": origin}
            )
            assert status == 403, (method, path, origin, status, answer)
            assert answer["code"] == "forbidden" and "cross-origin" in answer["reason"], answer
    assert f"persistent://{topic}" not in await topics(client)
    status, faults = await client.request("GET", "/admin/v2/brokerlab/faults")
    assert not any(setting["errorRate"] for setting in faults.values()), faults
    # the broker's own pages (the dashboard) and clients that send no Origin still may
    own = client.base_url
    status, answer, _ = await send(
        client, "POST", f"/topics/persistent/{topic}", produce_json(), {**json_type, "Origin": own}
    )
    assert status == 200, answer
    status, answer, _ = await send(
        client, "POST", f"/topics/persistent/{topic}", produce_json(), json_type
    )
    assert status == 200, answer


@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain",
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        None,
    ],
)
async def test_a_produce_a_web_page_could_send_without_a_preflight_is_refused(
    live_broker: LiveBroker, content_type: str | None
) -> None:
    client = await live_broker()
    topic = new_topic("browser")
    headers = {} if content_type is None else {"Content-Type": content_type}
    status, answer, _ = await send(
        client, "POST", f"/topics/persistent/{topic}", produce_json(), headers
    )
    assert status == 415, (content_type, status, answer)
    assert answer["code"] == "unsupported-media-type", answer
    assert "application/json" in answer["reason"], answer
    assert f"persistent://{topic}" not in await topics(client)


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("evil.example", False),
        ("evil.example:{port}", False),
        ("192.168.1.20:{port}", False),
        ("localhost:{port}", True),
        ("127.0.0.1:{port}", True),
        ("127.1.2.3:{port}", True),
        ("[::1]:{port}", True),
        ("dev.localhost:{port}", True),
    ],
)
async def test_bound_to_loopback_only_loopback_host_names_are_answered(
    live_broker: LiveBroker, host: str, allowed: bool
) -> None:
    client = await live_broker()
    port = client.base_url.rsplit(":", 1)[1]
    headers = {"Host": host.format(port=port)}
    status, answer, _ = await send(client, "GET", "/dashboard/data", None, headers)
    if allowed:
        assert status == 200, (host, answer)
    else:
        assert status == 403, (host, status, answer)
        assert answer["code"] == "forbidden" and "DNS rebinding" in answer["reason"], answer
        status, answer, _ = await send(
            client,
            "POST",
            f"/topics/persistent/{new_topic('browser')}",
            produce_json(),
            {**headers, "Content-Type": "application/json"},
        )
        assert status == 403, answer


async def test_configured_host_names_are_answered_and_any_name_off_loopback(
    live_broker: LiveBroker,
) -> None:
    named = await live_broker(httpAllowedHosts="broker.lan,Other.LAN:9000")
    for host, status in [("broker.lan:1234", 200), ("other.lan", 200), ("evil.example", 403)]:
        got, _, _ = await send(named, "GET", "/dashboard/data", None, {"Host": host})
        assert got == status, host
    # bound to every interface, clients reach it under any name (authentication is the guard)
    everywhere = await live_broker(bindAddress="0.0.0.0")
    got, _, _ = await send(everywhere, "GET", "/dashboard/data", None, {"Host": "broker.lan"})
    assert got == 200


async def test_cors_is_off_unless_origins_are_configured(live_broker: LiveBroker) -> None:
    preflight = {
        "Origin": "https://app.example",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type",
    }
    path = f"/topics/persistent/{new_topic('browser')}"
    closed = await live_broker()
    status, _, headers = await send(closed, "OPTIONS", path, None, preflight)
    assert status == 403 and "Access-Control-Allow-Origin" not in headers
    status, _, headers = await send(
        closed, "GET", "/dashboard/data", None, {"Origin": "https://app.example"}
    )
    assert status == 200 and "Access-Control-Allow-Origin" not in headers

    opened = await live_broker(httpCorsAllowedOrigins="https://app.example")
    status, _, headers = await send(opened, "OPTIONS", path, None, preflight)
    assert status == 204
    assert headers["Access-Control-Allow-Origin"] == "https://app.example"
    assert "Content-Type" in headers["Access-Control-Allow-Headers"]
    assert "POST" in headers["Access-Control-Allow-Methods"]
    json_from_app = {"Origin": "https://app.example", "Content-Type": "application/json"}
    status, answer, headers = await send(opened, "POST", path, produce_json(), json_from_app)
    assert status == 200, answer
    assert headers["Access-Control-Allow-Origin"] == "https://app.example"
    # other origins stay refused
    json_from_evil = {"Origin": EVIL, "Content-Type": "application/json"}
    status, _, headers = await send(opened, "POST", path, produce_json(), json_from_evil)
    assert status == 403 and "Access-Control-Allow-Origin" not in headers
    status, _, _ = await send(opened, "OPTIONS", path, None, {**preflight, "Origin": EVIL})
    assert status == 403


async def test_a_web_page_of_another_site_cannot_open_a_websocket(live_broker: LiveBroker) -> None:
    client = await live_broker()
    url = f"{client.base_url}/ws/v2/producer/persistent/{new_topic('browser')}"
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await client.session.ws_connect(url, origin=EVIL)
    assert refused.value.status == 403
    async with client.session.ws_connect(url, origin=client.base_url) as socket:
        await socket.send_json({"payload": b64("from the dashboard's origin")})
        assert (await socket.receive_json(timeout=10))["result"] == "ok"


async def test_the_dashboard_still_loads_and_reads_its_data(live_broker: LiveBroker) -> None:
    client = await live_broker()
    status, page = await client.request("GET", "/dashboard")
    assert status == 200 and "/dashboard/data" in page
    status, data = await client.request("GET", "/dashboard/data")
    assert status == 200 and "cache" in data
