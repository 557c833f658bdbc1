"""Token authentication and authorization on the HTTP and WebSocket API, against a real
broker on a real port: who may produce, consume, administer and touch whose consumer."""

from __future__ import annotations

import base64
import hmac
import json
from typing import Any

import aiohttp
import pytest

from broker.auth.tokens import create_key_pair, create_secret_key, create_token, private_key
from broker.config import load_broker_config
from storage_stub.confparse import ConfigError
from tests.conftest import Client, LiveBroker, b64
from tests.harness import new_topic

TOKEN_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"
SECRET = create_secret_key()


def data_url(key: bytes) -> str:
    return "data:;base64," + base64.b64encode(key).decode()


def token_for(role: str, key: bytes = SECRET, expires_in_s: int | None = None) -> str:
    return create_token(key, "HS256", role, expires_in_s)


def auth_settings(**extra: Any) -> dict[str, Any]:
    return {
        "authenticationEnabled": True,
        "authenticationProviders": TOKEN_PROVIDER,
        "authorizationEnabled": True,
        "superUserRoles": "admin",
        "tokenSecretKey": data_url(SECRET),
        **extra,
    }


def hs256_by_hand(key: bytes, claims: dict[str, Any]) -> str:
    """A token HMAC-signed with any bytes (PyJWT refuses to sign with a public key)."""

    def part(data: bytes) -> bytes:
        return base64.urlsafe_b64encode(data).rstrip(b"=")

    head = part(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = part(json.dumps(claims).encode())
    signature = part(hmac.digest(key, head + b"." + body, "sha256"))
    return (head + b"." + body + b"." + signature).decode()


async def call(
    client: Client, method: str, path: str, token: str | None = None, json: Any = None
) -> tuple[int, Any, Any]:
    """One request, with the token as a Bearer token: (status, parsed body, headers)."""
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    async with client.session.request(
        method, client.base_url + path, json=json, headers=headers
    ) as response:
        body = await response.json() if response.content_type == "application/json" else None
        return response.status, body, response.headers


def produce_body(*payloads: str) -> dict[str, Any]:
    return {"messages": [{"payload": b64(payload)} for payload in payloads]}


ADMIN_CHANGES = [
    ("POST", "/admin/v2/namespaces/public/default/unload", None),
    ("PUT", "/admin/v2/namespaces/public/default/unload", None),
    ("PUT", "/admin/v2/brokerlab/faults", {"operation": "addEntries", "errorRate": 1.0}),
    ("DELETE", "/admin/v2/brokerlab/faults", None),
    ("POST", "/admin/v2/brokerlab/brokers/0/restart", None),
    ("PUT", "/admin/v2/tenants/someone", {}),
    ("PUT", "/admin/v2/persistent/public/default/partitioned-x/partitions", 2),
]


async def test_without_a_token_admin_and_client_routes_answer_401_and_public_pages_load(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker(**auth_settings())
    topic = new_topic("auth")
    refused = [
        *ADMIN_CHANGES,
        ("POST", f"/topics/persistent/{topic}", produce_body("x")),
        ("POST", f"/consumers/persistent/{topic}/s", {}),
        ("GET", f"/admin/v2/persistent/{topic}/stats", None),
        ("DELETE", f"/admin/v2/persistent/{topic}?force=true", None),
        ("GET", "/dashboard/data", None),
    ]
    for method, path, body in refused:
        status, answer, headers = await call(client, method, path, json=body)
        assert status == 401, (method, path, status, answer)
        assert answer["code"] == "unauthorized", answer
        assert headers["WWW-Authenticate"].startswith("Bearer")
    for path in ("/dashboard", "/openapi.json", "/metrics"):
        status, _, _ = await call(client, "GET", path)
        assert status == 200, path
    # nothing was done by the refused requests
    faults = await call(client, "GET", "/admin/v2/brokerlab/faults", token_for("admin"))
    assert faults[0] == 200 and not any(setting["errorRate"] for setting in faults[1].values()), (
        faults
    )


async def test_a_role_that_is_not_a_super_user_may_produce_and_consume_but_not_administer(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker(**auth_settings())
    alice, admin = token_for("alice"), token_for("admin")
    topic = new_topic("auth")
    status, body, _ = await call(
        client, "POST", f"/topics/persistent/{topic}", alice, produce_body("a")
    )
    assert status == 200, body
    # what Pulsar grants with the consume permission: subscriptions and their cursors
    subscription = f"/admin/v2/persistent/{topic}/subscription/audit"
    assert (await call(client, "PUT", subscription + "?messageId=earliest", alice))[0] == 204
    status, body, _ = await call(
        client, "POST", subscription + "/resetcursor", alice, {"messageId": "0:0"}
    )
    assert status in (204, 404), body  # the cursor route is open to alice
    assert (await call(client, "GET", f"/admin/v2/persistent/{topic}/stats", alice))[0] == 200
    assert (await call(client, "DELETE", subscription, alice))[0] == 204
    for method, path, body in [
        *ADMIN_CHANGES,
        ("DELETE", f"/admin/v2/persistent/{topic}?force=true", None),
        ("PUT", f"/admin/v2/persistent/{topic}/unload", None),
    ]:
        status, answer, _ = await call(client, method, path, alice, body)
        assert status == 403, (method, path, status, answer)
        assert answer["code"] == "forbidden" and "super-user" in answer["reason"], answer
    # the super-user may
    fault = {"operation": "addEntries", "errorRate": 0.5}
    assert (await call(client, "PUT", "/admin/v2/brokerlab/faults", admin, fault))[0] == 204
    assert (await call(client, "DELETE", "/admin/v2/brokerlab/faults", admin))[0] == 204
    unload = "/admin/v2/namespaces/public/default/unload"
    assert (await call(client, "POST", unload, admin))[0] == 204
    delete = f"/admin/v2/persistent/{topic}?force=true"
    assert (await call(client, "DELETE", delete, admin))[0] == 204


async def test_a_consumer_belongs_to_the_role_that_made_it(live_broker: LiveBroker) -> None:
    client = await live_broker(**auth_settings())
    alice, bob, admin = token_for("alice"), token_for("bob"), token_for("admin")
    topic = new_topic("auth")
    options = {"subscriptionInitialPosition": "Earliest"}
    status, body, _ = await call(client, "POST", f"/consumers/persistent/{topic}/s", alice, options)
    assert status == 200, body
    consumer = f"/consumers/{body['consumerId']}"
    await call(client, "POST", f"/topics/persistent/{topic}", alice, produce_body("one"))
    for token in (bob, admin):
        for method, path, payload in [
            ("GET", consumer + "/messages?timeoutMs=0", None),
            ("POST", consumer + "/ack", {"messageIds": ["0:0"]}),
            ("POST", consumer + "/nack", {"messageIds": ["0:0"]}),
            ("POST", consumer + "/redeliverUnacknowledged", None),
            ("DELETE", consumer, None),
        ]:
            status, answer, _ = await call(client, method, path, token, payload)
            assert status == 403, (method, path, status, answer)
            assert answer["code"] == "forbidden", answer
    status, answer, _ = await call(client, "GET", consumer + "/messages?timeoutMs=2000", alice)
    assert status == 200 and len(answer["messages"]) == 1, answer
    message_id = answer["messages"][0]["messageId"]
    status, _, _ = await call(
        client, "POST", consumer + "/ack", alice, {"messageIds": [message_id]}
    )
    assert status == 204
    assert (await call(client, "DELETE", consumer, alice))[0] == 204


@pytest.mark.parametrize(
    ("what", "authorization"),
    [
        ("expired", f"Bearer {token_for('alice', expires_in_s=-60)}"),
        ("signed with another key", f"Bearer {token_for('alice', create_secret_key())}"),
        ("not a token", "Bearer not.a.token"),
        ("blank", "Bearer "),
        ("not a Bearer token", f"Basic {base64.b64encode(b'alice:pw').decode()}"),
    ],
    # named by what is wrong, not by the token: the tokens are made at collection time
    # (their exp, a fresh key), and xdist's workers must collect the same ids
    ids=["expired", "another-key", "not-a-token", "blank", "basic"],
)
async def test_an_expired_or_badly_signed_token_answers_401(
    live_broker: LiveBroker, what: str, authorization: str
) -> None:
    client = await live_broker(**auth_settings())
    async with client.session.post(
        f"{client.base_url}/topics/persistent/{new_topic('auth')}",
        json=produce_body("x"),
        headers={"Authorization": authorization},
    ) as response:
        body = await response.json()
    assert response.status == 401, (what, body)
    assert body["code"] == "unauthorized", body


async def test_tokens_of_an_rs256_key_pair_are_accepted_and_others_are_not(
    live_broker: LiveBroker,
) -> None:
    private, public = create_key_pair("RS256")
    settings = auth_settings(tokenSecretKey="none", tokenPublicKey=data_url(public))
    client = await live_broker(**settings)
    signed = create_token(private_key(private, "RS256"), "RS256", "admin")
    unload = "/admin/v2/namespaces/public/default/unload"
    assert (await call(client, "POST", unload, signed))[0] == 204
    # HS256 with the public key as its secret: the classic algorithm confusion
    confused = hs256_by_hand(public, {"sub": "admin"})
    assert (await call(client, "POST", unload, confused))[0] == 401
    other, _ = create_key_pair("RS256")
    forged = create_token(private_key(other, "RS256"), "RS256", "admin")
    assert (await call(client, "POST", unload, forged))[0] == 401


async def test_authentication_without_authorization_lets_every_role_administer(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker(**auth_settings(authorizationEnabled=False))
    unload = "/admin/v2/namespaces/public/default/unload"
    assert (await call(client, "POST", unload))[0] == 401
    assert (await call(client, "POST", unload, token_for("alice")))[0] == 204


async def test_the_anonymous_role_serves_clients_without_a_token(live_broker: LiveBroker) -> None:
    client = await live_broker(**auth_settings(anonymousUserRole="guest"))
    topic = new_topic("auth")
    assert (await call(client, "POST", f"/topics/persistent/{topic}", None, produce_body("g")))[
        0
    ] == 200
    status, body, _ = await call(client, "POST", "/admin/v2/namespaces/public/default/unload")
    assert status == 403 and "'guest'" in body["reason"], body
    # a token that is given must still be valid
    assert (await call(client, "POST", f"/topics/persistent/{topic}", "bad", produce_body()))[
        0
    ] == 401


async def test_metrics_need_a_token_with_authenticate_metrics_endpoint(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker(**auth_settings(authenticateMetricsEndpoint=True))
    assert (await call(client, "GET", "/metrics"))[0] == 401
    assert (await call(client, "GET", "/metrics", token_for("prometheus")))[0] == 200


async def test_the_websocket_api_takes_the_token_as_header_or_query(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker(**auth_settings())
    path = f"/ws/v2/producer/persistent/{new_topic('auth')}"
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await client.session.ws_connect(client.base_url + path)
    assert refused.value.status == 401
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await client.session.ws_connect(client.base_url + path + "?token=forged")
    assert refused.value.status == 401
    alice = token_for("alice")
    for url, headers in [
        (f"{client.base_url}{path}?token={alice}", {}),
        (client.base_url + path, {"Authorization": f"Bearer {alice}"}),
    ]:
        async with client.session.ws_connect(url, headers=headers) as socket:
            await socket.send_json({"payload": b64("hello")})
            answer = await socket.receive_json(timeout=10)
            assert answer["result"] == "ok", answer


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"authenticationEnabled": True}, "authenticationProviders"),
        ({"authenticationEnabled": True, "authenticationProviders": TOKEN_PROVIDER}, "token"),
        ({"authorizationEnabled": True}, "authenticationEnabled"),
        ({"authenticationProviders": "com.example.Kerberos"}, "only"),
        (
            {
                "authenticationEnabled": True,
                "authenticationProviders": TOKEN_PROVIDER,
                "tokenSecretKey": "file:///nonexistent/secret.key",
            },
            "tokenSecretKey",
        ),
        (
            {
                "authenticationEnabled": True,
                "authenticationProviders": TOKEN_PROVIDER,
                "tokenSecretKey": data_url(b"short"),
            },
            "too short",
        ),
    ],
)
def test_security_settings_that_do_not_fit_stop_start_up(
    settings: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_broker_config(None, settings)
    assert named in str(caught.value)
