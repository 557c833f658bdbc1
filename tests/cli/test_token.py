"""``brokerlab token``, as ``pulsar tokens``: its keys and tokens are what a broker with
token authentication accepts.

The commands run through ``broker.cli.main`` in this process, their stdout and stderr
captured at the file descriptors (a key goes out as raw bytes): a dozen interpreter
starts would cost more than the rest of the file. ``tests/cli/test_cli.py`` runs
``python -m broker.cli`` itself."""

from __future__ import annotations

import base64
import dataclasses
import pathlib
from collections.abc import Callable

import aiohttp
import pytest
from cryptography.hazmat.primitives import serialization

from broker.cli import main
from tests.conftest import LiveBroker

TOKEN_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"


@dataclasses.dataclass
class Done:
    returncode: int
    stdout: bytes
    stderr: bytes


Brokerlab = Callable[..., Done]


@pytest.fixture
def brokerlab(capfdbinary: pytest.CaptureFixture[bytes]) -> Brokerlab:
    """``brokerlab token *args``: its exit code, stdout and stderr."""

    def run(*args: str) -> Done:
        capfdbinary.readouterr()
        try:
            code = main(["token", *args])
        except SystemExit as stop:  # argparse refusing the arguments
            code = stop.code if isinstance(stop.code, int) else 1
        out, err = capfdbinary.readouterr()
        return Done(code, out, err)

    return run


@pytest.fixture
def ok(brokerlab: Brokerlab) -> Callable[..., bytes]:
    """``brokerlab token *args``'s stdout, once it exited 0."""

    def run(*args: str) -> bytes:
        done = brokerlab(*args)
        assert done.returncode == 0, done.stderr.decode()
        return done.stdout

    return run


async def unload_as(client_url: str, token: str) -> int:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{client_url}/admin/v2/namespaces/public/default/unload",
            headers={"Authorization": f"Bearer {token}"},
        ) as response,
    ):
        return response.status


async def test_a_token_made_with_a_secret_key_file_is_accepted(
    live_broker: LiveBroker, tmp_path: pathlib.Path, ok: Callable[..., bytes]
) -> None:
    key = tmp_path / "secret.key"
    ok("create-secret-key", "--output", str(key))
    assert len(key.read_bytes()) == 32  # HS256's key, raw bytes as pulsar tokens writes it
    token = ok("create", "--secret-key", f"file://{key}", "--subject", "admin").decode().strip()
    client = await live_broker(
        authenticationEnabled=True,
        authenticationProviders=TOKEN_PROVIDER,
        authorizationEnabled=True,
        superUserRoles="admin",
        tokenSecretKey=f"file://{key}",
    )
    assert await unload_as(client.base_url, token) == 204
    other = ok("create", "-sk", f"file://{key}", "-s", "alice").decode().strip()
    assert await unload_as(client.base_url, other) == 403


async def test_a_token_made_with_a_key_pair_is_accepted(
    live_broker: LiveBroker, tmp_path: pathlib.Path, ok: Callable[..., bytes]
) -> None:
    private, public = tmp_path / "private.key", tmp_path / "public.key"
    ok("create-key-pair", "--output-private-key", str(private), "--output-public-key", str(public))
    # DER files, as pulsar tokens writes them
    serialization.load_der_private_key(private.read_bytes(), password=None)
    serialization.load_der_public_key(public.read_bytes())
    token = ok("create", "-pk", str(private), "-s", "admin", "-e", "1h").decode().strip()
    client = await live_broker(
        authenticationEnabled=True,
        authenticationProviders=TOKEN_PROVIDER,
        tokenPublicKey="data:;base64," + base64.b64encode(public.read_bytes()).decode(),
    )
    assert await unload_as(client.base_url, token) == 204
    assert b'"sub": "admin"' in ok("validate", "-pk", str(public), token)
    assert b'"exp": ' in ok("show", token)


def test_a_base64_secret_key_and_an_expired_token_that_validate_refuses(
    ok: Callable[..., bytes], brokerlab: Brokerlab
) -> None:
    encoded = ok("create-secret-key", "--base64").strip()
    assert len(base64.b64decode(encoded, validate=True)) == 32
    key = "data:;base64," + encoded.decode()
    expired = ok("create", "-sk", key, "-s", "alice", "-e", "0s").decode().strip()
    done = brokerlab("validate", "-sk", key, expired)
    assert done.returncode == 1 and b"expired" in done.stderr
    done = brokerlab("create", "-s", "alice")
    assert done.returncode == 1 and b"--secret-key" in done.stderr
    done = brokerlab("create", "-sk", key, "-s", "alice", "-e", "3 months")
    assert done.returncode == 1 and b"relative time" in done.stderr
