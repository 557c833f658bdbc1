"""A binary-protocol connection outlives its client's token only by refreshing it, as in
Pulsar (``authenticationRefreshCheckSeconds``): once the token expired, the broker sends
AUTH_CHALLENGE and the client answers with a new token of the same role; a client that
cannot refresh, or answers with an expired token or another role's, is disconnected.

Driven by the official client (its ``AuthenticationToken`` with a token supplier answers
the challenge) and by raw sockets for what the client never does. Tokens expire at the
first whole second (a JWT's ``exp`` is one) at least half a second after they are made,
and the broker checks every 0.1 s, so a test waits about a second for an expiry; the
tests poll for the outcome, they never sleep."""

from __future__ import annotations

import base64
import math
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import jwt
import pulsar
import pytest

from broker.auth.tokens import create_secret_key, create_token
from broker.protocol.connection import REFRESH_AUTH_DATA
from broker.protocol.frames import command_frame, parse_command
from broker.pulsar_api import BaseCommand, ServerError, Type
from tests.conftest import ServedBrokerFactory
from tests.harness import ServedBroker, eventually

pytestmark = pytest.mark.slow

TOKEN_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"
SECRET = create_secret_key()
#: the least time the tokens these tests make are valid: enough for a raw CONNECT
RAW_LIFETIME_S = 0.5
#: ... for the official client to connect (a token of the supplier's)
CLIENT_LIFETIME_S = 1.0
#: ... for it to connect, make a producer and send a message with one fixed token
PRODUCER_LIFETIME_S = 2.0


class Broker:
    """The module's broker, and what it logged since the test began."""

    def __init__(self, served: ServedBroker) -> None:
        self.served = served
        self.service_url = served.service_url
        self.since = served.mark()

    def log(self) -> str:
        return self.served.log(since=self.since)


@pytest.fixture
def broker(shared_served_broker: ServedBrokerFactory) -> Broker:
    return Broker(
        shared_served_broker(
            authenticationEnabled=True,
            authenticationProviders=TOKEN_PROVIDER,
            tokenSecretKey="data:;base64," + base64.b64encode(SECRET).decode(),
            authenticationRefreshCheckSeconds=0.1,
        )
    )


def logged(broker: Broker, text: str) -> None:
    """Wait for the broker's output to say ``text`` (its lines are read in the
    background, so a line may come after the event the test saw)."""
    eventually(lambda: text in broker.log(), f"the broker to log {text!r}")


def short_token(role: str = "alice", lifetime_s: float = RAW_LIFETIME_S) -> str:
    """A token of ``role`` that expires at the first whole second ``lifetime_s`` from now
    (``create_token`` cuts its expiry to whole seconds, so one made to last 1 s may be
    expired at once)."""
    return jwt.encode(
        {"sub": role, "exp": math.ceil(time.time() + lifetime_s)}, SECRET, algorithm="HS256"
    )


def test_a_client_that_refreshes_its_token_keeps_its_connection(broker: Broker) -> None:
    # first in the module: no connection of an earlier test can be closed meanwhile
    issued: list[str] = []

    def supplier() -> str:
        issued.append(short_token(lifetime_s=CLIENT_LIFETIME_S))
        return issued[-1]

    client = pulsar.Client(
        broker.service_url,
        authentication=pulsar.AuthenticationToken(supplier),
        operation_timeout_seconds=20,
    )
    try:
        topic = "persistent://public/default/auth-refreshed"
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic)
        producer.send(b"before the token expired")
        eventually(
            lambda: "refreshed the credentials of role alice" in broker.log(),
            "the broker to challenge the expired token and take the new one",
        )
        producer.send(b"after it was refreshed")
        received = [consumer.receive(20_000).data() for _ in range(2)]
    finally:
        client.close()
    assert received == [b"before the token expired", b"after it was refreshed"]
    assert len(issued) >= 2  # CONNECT's token, then the challenge's
    assert "closing pulsar connection" not in broker.log()  # refreshed, not reconnected


def test_a_client_whose_token_cannot_be_refreshed_is_cut_off(broker: Broker) -> None:
    """A fixed token: the client answers the challenge with the same, expired token; the
    broker closes the connection and refuses the reconnect with it."""
    client = pulsar.Client(
        broker.service_url,
        authentication=pulsar.AuthenticationToken(short_token(lifetime_s=PRODUCER_LIFETIME_S)),
        operation_timeout_seconds=3,
    )
    try:
        # the send after the expiry fails once its timeout passed (the client keeps
        # reconnecting with its expired token, refused each time)
        producer = client.create_producer(
            "persistent://public/default/auth-expired", send_timeout_millis=1000
        )
        producer.send(b"while the token was valid")
        eventually(
            lambda: "authentication refresh failed: the token has expired" in broker.log(),
            "the broker to refuse the expired token the client answered with",
        )
        with pytest.raises(pulsar.PulsarException):
            producer.send(b"after it expired")
    finally:
        client.close()


@contextmanager
def raw_connection(broker: Broker, token: str, refreshable: bool) -> Iterator[Any]:
    """A raw socket CONNECTed with ``token``, saying whether it can refresh; yields a
    reader of the broker's next command (None once the broker closed the connection)."""
    host, port = broker.service_url.removeprefix("pulsar://").rsplit(":", 1)
    command = BaseCommand(type=Type.CONNECT)
    command.connect.client_version = "raw-test"
    command.connect.protocol_version = 19
    command.connect.auth_method_name = "token"
    command.connect.auth_data = token.encode()
    if refreshable:
        command.connect.feature_flags.supports_auth_refresh = True
    with socket.create_connection((host, int(port)), timeout=30) as connection:
        connection.sendall(command_frame(command))
        stream = connection.makefile("rb")

        def next_command() -> Any:
            head = stream.read(4)
            if len(head) < 4:
                return None
            answer, _ = parse_command(memoryview(stream.read(int.from_bytes(head, "big"))))
            return answer

        connected = next_command()
        assert connected is not None and connected.type == Type.CONNECTED, connected
        yield next_command, connection


def test_a_client_that_cannot_refresh_is_closed_when_its_token_expires(
    broker: Broker,
) -> None:
    with raw_connection(broker, short_token(), refreshable=False) as (next_command, _):
        assert next_command() is None  # closed, without a challenge it could not answer
    logged(broker, "the client's token expired and it cannot refresh credentials")


def answer_challenge(next_command: Any, connection: socket.socket, token: str) -> None:
    challenge = next_command()
    assert challenge is not None and challenge.type == Type.AUTH_CHALLENGE, challenge
    assert challenge.authChallenge.challenge.auth_method_name == "token"
    assert challenge.authChallenge.challenge.auth_data == REFRESH_AUTH_DATA
    response = BaseCommand(type=Type.AUTH_RESPONSE)
    response.authResponse.response.auth_method_name = "token"
    response.authResponse.response.auth_data = token.encode()
    connection.sendall(command_frame(response))


def test_a_refresh_may_not_change_the_role(broker: Broker) -> None:
    with raw_connection(broker, short_token("alice"), refreshable=True) as (next_command, sock):
        answer_challenge(next_command, sock, create_token(SECRET, "HS256", "mallory", 3600))
        assert next_command() is None
    logged(broker, "are for role 'mallory', not 'alice': the principal cannot change")


def test_a_refresh_with_a_bad_token_is_an_authentication_error(broker: Broker) -> None:
    forged = create_token(create_secret_key(), "HS256", "alice", 3600)
    with raw_connection(broker, short_token(), refreshable=True) as (next_command, sock):
        answer_challenge(next_command, sock, forged)
        error = next_command()
        assert error is not None and error.type == Type.ERROR, error
        assert error.error.error == ServerError.AuthenticationError
        assert next_command() is None


def test_an_unanswered_challenge_closes_the_connection_at_the_next_check(
    broker: Broker,
) -> None:
    with raw_connection(broker, short_token(), refreshable=True) as (next_command, _):
        challenge = next_command()
        assert challenge is not None and challenge.type == Type.AUTH_CHALLENGE, challenge
        assert next_command() is None
    logged(broker, "the AUTH_CHALLENGE went unanswered")


def test_a_refreshed_raw_connection_goes_on_past_the_first_token(broker: Broker) -> None:
    """Answered with a valid token of the same role, the challenge is the last word: the
    connection then serves a lookup, well after the first token expired."""
    with raw_connection(broker, short_token(), refreshable=True) as (next_command, sock):
        answer_challenge(next_command, sock, create_token(SECRET, "HS256", "alice", 3600))
        eventually(lambda: "refreshed the credentials of role alice" in broker.log(), "the refresh")
        lookup = BaseCommand(type=Type.LOOKUP)
        lookup.lookupTopic.topic = "persistent://public/default/after-refresh"
        lookup.lookupTopic.request_id = 7
        sock.sendall(command_frame(lookup))
        answer = next_command()
        assert answer is not None and answer.type == Type.LOOKUP_RESPONSE, answer
        assert answer.lookupTopicResponse.request_id == 7
