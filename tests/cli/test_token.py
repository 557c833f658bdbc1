"""``brokerlab token``, as ``pulsar tokens``: its keys and tokens are what a broker with
token authentication accepts."""

from __future__ import annotations

import base64
import pathlib
import subprocess
import sys

import aiohttp
from cryptography.hazmat.primitives import serialization

from tests.conftest import LiveBroker

TOKEN_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"
ROOT = pathlib.Path(__file__).resolve().parents[2]


def brokerlab(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "broker.cli", "token", *args],
        capture_output=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )


def ok(*args: str) -> bytes:
    done = brokerlab(*args)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout


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
    live_broker: LiveBroker, tmp_path: pathlib.Path
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
    live_broker: LiveBroker, tmp_path: pathlib.Path
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
    tmp_path: pathlib.Path,
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
