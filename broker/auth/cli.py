"""``brokerlab token``: keys and tokens for ``authenticationEnabled``, with the
subcommands, options and file formats of Pulsar's ``pulsar tokens``."""

from __future__ import annotations

import argparse
import base64
import json
import pathlib
import sys
from typing import Any

from broker.auth.errors import AuthenticationError


def add_command(commands: Any) -> None:
    """Add ``token`` and its subcommands to the ``brokerlab`` parser's subcommands."""
    token = commands.add_parser(
        "token",
        help="make keys and tokens for token authentication (as pulsar tokens)",
        description=__doc__,
    )
    tokens = token.add_subparsers(dest="token_command", required=True)

    secret = tokens.add_parser(
        "create-secret-key", help="a new secret key (tokenSecretKey) for HS256 tokens"
    )
    secret.add_argument(
        "-a", "--signature-algorithm", default="HS256", help="HS256 (default), HS384, HS512"
    )
    secret.add_argument("-o", "--output", help="write the key to this file, not stdout")
    secret.add_argument("-b", "--base64", action="store_true", help="encode the key in base64")

    pair = tokens.add_parser(
        "create-key-pair", help="a new private key (signs) and public key (tokenPublicKey)"
    )
    pair.add_argument(
        "-a",
        "--signature-algorithm",
        default="RS256",
        help="RS256 (default), RS384, RS512, PS256, PS384, PS512, ES256, ES384, ES512",
    )
    pair.add_argument("--output-private-key", required=True, help="file for the private key")
    pair.add_argument("--output-public-key", required=True, help="file for the public key")

    create = tokens.add_parser("create", help="a new token for a role")
    create.add_argument(
        "-a",
        "--signature-algorithm",
        default="RS256",
        help="with --private-key: the key pair's algorithm (default RS256)",
    )
    create.add_argument("-s", "--subject", required=True, help="the role the token carries")
    create.add_argument(
        "-e",
        "--expiry-time",
        help="expires after this long: 30s, 10m, 1h, 3d, 2w, 1y (default never)",
    )
    create.add_argument("-sk", "--secret-key", help="signing secret key: data:, file:, a path")
    create.add_argument("-pk", "--private-key", help="signing private key: data:, file:, a path")
    create.add_argument(
        "-hs", "--headers", action="append", default=[], metavar="KEY=VALUE", help="extra header"
    )

    for name, what in (("show", "a token's header and claims"), ("validate", "check a token")):
        command = tokens.add_parser(name, help=what)
        command.add_argument("token", nargs="?", help="the token")
        command.add_argument("-i", "--stdin", action="store_true", help="read it from stdin")
        command.add_argument("-f", "--token-file", help="read it from a file")
        if name == "validate":
            command.add_argument("-a", "--signature-algorithm", default="RS256")
            command.add_argument("-sk", "--secret-key", help="the secret key")
            command.add_argument("-pk", "--public-key", help="the public key")


def run(args: argparse.Namespace) -> int:
    """Run a ``brokerlab token`` subcommand; 1 (with the reason on stderr) on failure."""
    from broker.auth import tokens

    try:
        if args.token_command == "create-secret-key":
            key = tokens.create_secret_key(args.signature_algorithm)
            _write(args.output, base64.b64encode(key) if args.base64 else key)
        elif args.token_command == "create-key-pair":
            private, public = tokens.create_key_pair(args.signature_algorithm)
            pathlib.Path(args.output_public_key).write_bytes(public)
            pathlib.Path(args.output_private_key).write_bytes(private)
        elif args.token_command == "create":
            print(_create(args))
        elif args.token_command == "show":
            header, claims = tokens.show(_token(args))
            print(json.dumps(header))
            print(json.dumps(claims))
        else:
            print(_validate(args))
    except (ValueError, OSError, AuthenticationError) as error:
        print(f"brokerlab token {args.token_command}: {error}", file=sys.stderr)
        return 1
    return 0


def _write(output: str | None, data: bytes) -> None:
    if output is None:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    else:
        pathlib.Path(output).write_bytes(data)


def _one_key(secret: str | None, other: str | None, other_option: str) -> None:
    if (secret is None) == (other is None):
        raise ValueError(f"give one of --secret-key and {other_option}")


def _create(args: argparse.Namespace) -> str:
    from broker.auth import tokens

    _one_key(args.secret_key, args.private_key, "--private-key")
    if args.secret_key is not None:
        secret = tokens.read_key(args.secret_key)
        key: Any = secret
        algorithm = tokens.secret_key_algorithm(secret)
    else:
        algorithm = args.signature_algorithm
        key = tokens.private_key(tokens.read_key(args.private_key), algorithm)
    headers: dict[str, str] = {}
    for pair in args.headers:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ValueError(f"--headers {pair!r}: expected KEY=VALUE")
        headers[name] = value
    expiry = None if args.expiry_time is None else tokens.parse_relative_time(args.expiry_time)
    return tokens.create_token(key, algorithm, args.subject, expiry, headers)


def _validate(args: argparse.Namespace) -> str:
    """The token's claims when it is valid for the key."""
    from broker.auth import tokens

    _one_key(args.secret_key, args.public_key, "--public-key")
    if args.secret_key is not None:
        provider = tokens.AuthenticationProviderToken(secret_key=tokens.read_key(args.secret_key))
    else:
        provider = tokens.AuthenticationProviderToken(
            public_key_data=tokens.read_key(args.public_key),
            public_algorithm=args.signature_algorithm,
        )
    token = _token(args)
    provider.authenticate(token)
    return json.dumps(tokens.show(token)[1])


def _token(args: argparse.Namespace) -> str:
    if args.token is not None:
        return str(args.token).strip()
    if args.stdin:
        return sys.stdin.read().strip()
    if args.token_file is not None:
        return pathlib.Path(args.token_file).read_text(encoding="utf-8").strip()
    raise ValueError("give the token, --stdin or --token-file")
