"""Token authentication on Pulsar's binary protocol, driven by the official client's
``AuthenticationToken``: the right token connects and produces, a wrong one or none is
refused in CONNECT with an authentication error."""

from __future__ import annotations

import base64
import socket
from typing import Any

import pulsar
import pytest

from broker.auth.tokens import create_secret_key, create_token
from broker.protocol.frames import command_frame, parse_command
from broker.pulsar_api import BaseCommand, ServerError, Type
from tests.harness import ServedBroker, eventually
from tests.protocol.raw import ping

pytestmark = pytest.mark.slow

TOKEN_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"
SECRET = create_secret_key()


@pytest.fixture(scope="module")
def broker_conf() -> dict[str, Any]:
    return {
        "authenticationEnabled": True,
        "authenticationProviders": TOKEN_PROVIDER,
        "authorizationEnabled": True,
        "superUserRoles": "admin",
        "tokenSecretKey": "data:;base64," + base64.b64encode(SECRET).decode(),
    }


def test_a_client_with_a_valid_token_produces_and_consumes(broker: ServedBroker) -> None:
    token = create_token(SECRET, "HS256", "alice", 3600)
    client = pulsar.Client(
        broker.service_url,
        authentication=pulsar.AuthenticationToken(token),
        operation_timeout_seconds=20,
    )
    try:
        topic = "persistent://public/default/auth-binary"
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic)
        producer.send(b"signed in")
        message = consumer.receive(20_000)
        assert message.data() == b"signed in"
        consumer.acknowledge(message)
    finally:
        client.close()


def connect_with(broker: ServedBroker, auth_data: bytes | None) -> tuple[Any, bool]:
    """CONNECT on a raw socket, as a client with this token (None: no credentials): the
    broker's answer, and whether the broker then closed the connection."""
    host, port = broker.service_url.removeprefix("pulsar://").rsplit(":", 1)
    command = BaseCommand(type=Type.CONNECT)
    command.connect.client_version = "raw-test"
    command.connect.protocol_version = 19
    if auth_data is not None:
        command.connect.auth_method_name = "token"
        command.connect.auth_data = auth_data
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        connection.sendall(command_frame(command))
        stream = connection.makefile("rb")
        size = int.from_bytes(stream.read(4), "big")
        answer, _ = parse_command(memoryview(stream.read(size)))
        # a PING tells at once: an open connection answers PONG, a closed one nothing
        try:
            connection.sendall(command_frame(ping()))
            head = stream.read(4)
        except ConnectionError:
            head = b""
        closed = len(head) < 4
        if not closed:
            pong, _ = parse_command(memoryview(stream.read(int.from_bytes(head, "big"))))
            assert pong.type == Type.PONG, pong
    return answer, closed


@pytest.mark.parametrize(
    "token",
    [
        pytest.param(create_token(create_secret_key(), "HS256", "alice"), id="another key"),
        pytest.param(create_token(SECRET, "HS256", "alice", -60), id="expired"),
        pytest.param("not-a-token", id="garbage"),
        pytest.param(None, id="no token"),
    ],
)
def test_connect_without_a_valid_token_is_answered_with_authentication_error_and_closed(
    broker: ServedBroker, token: str | None
) -> None:
    answer, closed = connect_with(broker, None if token is None else token.encode())
    # exactly Pulsar's answer: an ERROR for no request (-1), the reason kept back
    assert answer.type == Type.ERROR, answer
    assert answer.error.request_id == (1 << 64) - 1, answer
    assert answer.error.error == ServerError.AuthenticationError, answer
    assert answer.error.message == "Failed to authenticate", answer
    assert closed, "the broker closes the connection after the ERROR"


def test_connect_with_a_valid_token_is_connected(broker: ServedBroker) -> None:
    answer, closed = connect_with(broker, create_token(SECRET, "HS256", "alice").encode())
    assert answer.type == Type.CONNECTED, answer
    assert not closed


def test_the_official_client_without_a_valid_token_gets_nothing_done(
    broker: ServedBroker,
) -> None:
    # The C++ client takes any answer to CONNECT but CONNECTED as a lost connection and
    # retries until its operation timeout, against Pulsar as here: the ERROR the broker
    # sends at once (above) reaches the Java client as AuthenticationException, this one
    # as a timeout (apache/pulsar-client-cpp#227, apache/pulsar#19881).
    forged = pulsar.AuthenticationToken(create_token(create_secret_key(), "HS256", "admin"))
    mark = broker.mark()
    # the client gives up after its operation timeout whatever it was answered: the
    # shortest it takes, so the test does not wait on it
    client = pulsar.Client(broker.service_url, authentication=forged, operation_timeout_seconds=1)
    try:
        with pytest.raises(pulsar.PulsarException):
            client.create_producer("persistent://public/default/auth-refused")
    finally:
        client.close()
    eventually(
        lambda: "authentication failed" in broker.log(since=mark),
        "the broker to log that it refused the token",
    )
    admin = create_token(SECRET, "HS256", "admin")
    stats = broker.ok(
        "GET", "/admin/v2/persistent/public/default", headers={"Authorization": f"Bearer {admin}"}
    )
    assert "persistent://public/default/auth-refused" not in stats
