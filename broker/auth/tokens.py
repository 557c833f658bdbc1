"""Pulsar's token authentication: JSON Web Tokens signed with a secret key (HS256) or a
private key (RS256, ES256, ...), validated with the secret or the public key; the role is
a claim (``sub`` by default).

Keys are given as Pulsar gives them (``tokenSecretKey``, ``tokenPublicKey``,
``--secret-key``): ``data:;base64,<base64>``, ``file:///path``, a path, or base64 text.
Key files hold what ``pulsar tokens`` writes: the secret key's raw bytes, a public key
as DER SubjectPublicKeyInfo, a private key as DER PKCS#8 (PEM is accepted too). So keys
and tokens made by ``pulsar tokens`` work here, and those made by ``brokerlab token``
work on Pulsar.
"""

from __future__ import annotations

import base64
import binascii
import math
import pathlib
import secrets
import time
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from broker.auth.errors import AuthenticationError

#: Secret-key algorithms and their key sizes in bytes; a key signs with the strongest
#: its length allows, as Pulsar's (jjwt's) ``signWith`` picks it.
SECRET_KEY_BYTES: dict[str, int] = {"HS256": 32, "HS384": 48, "HS512": 64}
#: Key-pair algorithms (``tokenPublicAlg``, ``--signature-algorithm``).
RSA_KEY_BITS: dict[str, int] = {
    "RS256": 2048,
    "RS384": 3072,
    "RS512": 4096,
    "PS256": 2048,
    "PS384": 3072,
    "PS512": 4096,
}
EC_CURVES: dict[str, Callable[[], ec.EllipticCurve]] = {
    "ES256": ec.SECP256R1,
    "ES384": ec.SECP384R1,
    "ES512": ec.SECP521R1,
}
KEY_PAIR_ALGORITHMS: tuple[str, ...] = (*RSA_KEY_BITS, *EC_CURVES)
#: Pulsar's default for key pairs (``tokenPublicAlg`` blank, ``pulsar tokens`` commands).
DEFAULT_KEY_PAIR_ALGORITHM = "RS256"

_TIME_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


class BadKeyError(ValueError):
    """A key that cannot be read or is not a key of the expected kind."""


# ---------------------------------------------------------------------- keys


def read_key(location: str) -> bytes:
    """The bytes of a key given as Pulsar reads ``tokenSecretKey``: a ``data:`` URL
    (``data:;base64,...``), a ``file:`` URL, an existing path, or base64 text."""
    text = location.strip()
    if text.startswith("data:"):
        header, comma, data = text[5:].partition(",")
        if not comma:
            raise BadKeyError("a data: URL is data:[;base64],<data>")
        if header.endswith(";base64"):
            return _b64(data)
        return urllib.parse.unquote_to_bytes(data)
    if text.startswith("file:"):
        path = pathlib.Path(urllib.parse.unquote(urllib.parse.urlparse(text).path))
        return _read_file(path)
    path = pathlib.Path(text)
    if path.is_file():
        return _read_file(path)
    try:
        return _b64(text)
    except BadKeyError:
        raise BadKeyError(f"key file {text} does not exist (and the text is not base64)") from None


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise BadKeyError("not valid base64") from None


def _read_file(path: pathlib.Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise BadKeyError(f"cannot read key file {path}: {error.strerror or error}") from None


def secret_key_algorithm(key: bytes) -> str:
    """The HMAC algorithm a secret key signs with: the strongest its length allows."""
    for algorithm in ("HS512", "HS384", "HS256"):
        if len(key) >= SECRET_KEY_BYTES[algorithm]:
            return algorithm
    raise BadKeyError(
        f"a secret key of {len(key) * 8} bits is too short; HS256 needs at least 256 bits"
    )


def public_key(data: bytes, algorithm: str) -> Any:
    """A public key (DER SubjectPublicKeyInfo or PEM) of the kind ``algorithm`` needs."""
    try:
        if data.lstrip().startswith(b"-----BEGIN"):
            key: Any = serialization.load_pem_public_key(data)
        else:
            key = serialization.load_der_public_key(data)
    except ValueError as error:
        raise BadKeyError(f"not a public key (DER or PEM): {error}") from None
    _check_kind(key, algorithm, "public")
    return key


def private_key(data: bytes, algorithm: str) -> Any:
    """A private key (DER PKCS#8 or PEM) of the kind ``algorithm`` needs."""
    try:
        if data.lstrip().startswith(b"-----BEGIN"):
            key: Any = serialization.load_pem_private_key(data, password=None)
        else:
            key = serialization.load_der_private_key(data, password=None)
    except (ValueError, TypeError) as error:
        raise BadKeyError(f"not a private key (DER PKCS#8 or PEM): {error}") from None
    _check_kind(key, algorithm, "private")
    return key


def _check_kind(key: Any, algorithm: str, which: str) -> None:
    if algorithm in RSA_KEY_BITS:
        wanted: tuple[type, ...] = (rsa.RSAPublicKey, rsa.RSAPrivateKey)
    elif algorithm in EC_CURVES:
        wanted = (ec.EllipticCurvePublicKey, ec.EllipticCurvePrivateKey)
    else:
        raise BadKeyError(f"{algorithm} is not one of {', '.join(KEY_PAIR_ALGORITHMS)}")
    if not isinstance(key, wanted):
        raise BadKeyError(f"the {which} key is not a key for {algorithm}")


def create_secret_key(algorithm: str = "HS256") -> bytes:
    """A new random secret key for ``algorithm`` (HS256, HS384, HS512)."""
    if algorithm not in SECRET_KEY_BYTES:
        raise BadKeyError(f"{algorithm} is not one of {', '.join(SECRET_KEY_BYTES)}")
    return secrets.token_bytes(SECRET_KEY_BYTES[algorithm])


def create_key_pair(algorithm: str = DEFAULT_KEY_PAIR_ALGORITHM) -> tuple[bytes, bytes]:
    """A new key pair for ``algorithm``: (private key as DER PKCS#8, public key as DER
    SubjectPublicKeyInfo), the files ``pulsar tokens create-key-pair`` writes."""
    key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
    if algorithm in RSA_KEY_BITS:
        key = rsa.generate_private_key(public_exponent=65537, key_size=RSA_KEY_BITS[algorithm])
    elif algorithm in EC_CURVES:
        key = ec.generate_private_key(EC_CURVES[algorithm]())
    else:
        raise BadKeyError(f"{algorithm} is not one of {', '.join(KEY_PAIR_ALGORITHMS)}")
    private = key.private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private, public


# ---------------------------------------------------------------------- tokens


def parse_relative_time(text: str) -> int:
    """Seconds in a relative time as Pulsar writes them: ``30`` (seconds), ``10m``,
    ``1h``, ``3d``, ``2w``, ``1y`` (365 days)."""
    value = text.strip()
    unit = value[-1:].lower() if value[-1:].isalpha() else "s"
    digits = value[:-1] if value[-1:].isalpha() else value
    if unit not in _TIME_UNITS or not digits.isdigit():
        raise ValueError(f"{text!r} is not a relative time such as 30s, 10m, 1h, 3d, 2w, 1y")
    return int(digits) * _TIME_UNITS[unit]


def create_token(
    key: Any,
    algorithm: str,
    subject: str,
    expires_in_s: int | None = None,
    headers: Mapping[str, Any] | None = None,
    now: float | None = None,
) -> str:
    """A token for role ``subject`` signed with ``key`` (a secret key's bytes, or a
    private key object) by ``algorithm``; ``expires_in_s`` from now, or never."""
    claims: dict[str, Any] = {"sub": subject}
    if expires_in_s is not None:
        claims["exp"] = int((time.time() if now is None else now) + expires_in_s)
    return jwt.encode(claims, key, algorithm=algorithm, headers=dict(headers or {}))


def expiry_of(claims: Mapping[str, Any]) -> float:
    """When a token with these claims expires, in epoch seconds, read as PyJWT reads
    ``exp``: ``int(exp)``, so a number or a string of an integer (``"1700000000"``) is an
    expiry and a float is cut to its whole seconds; infinity without an ``exp``.
    AuthenticationError for any other ``exp`` (PyJWT's DecodeError)."""
    if "exp" not in claims:
        return math.inf
    try:
        seconds = int(claims["exp"])
    except (ValueError, TypeError, OverflowError):
        raise AuthenticationError(
            "invalid token: Expiration Time claim (exp) must be an integer."
        ) from None
    try:
        return float(seconds)
    except OverflowError:  # later than any float: as good as never
        return math.inf


class AuthenticationProviderToken:
    """Validates tokens and answers their role. A token seen before is answered from a
    small cache (one dict lookup and a time check), so a client that sends its token with
    every request pays the signature check once. O(1) per cached token.

    Expiry is checked here, not by PyJWT, with PyJWT's rule (:func:`expiry_of`; expired
    once ``exp <= now - clockSkew``) against ``clock`` (``time.time``; a test's own), so
    the first check and the cached ones agree whatever type ``exp`` has."""

    #: the binary protocol's ``auth_method_name`` of this provider
    name = "token"
    #: tokens remembered; the cache is emptied when it is full
    CACHE_SIZE = 4096

    __slots__ = (
        "_algorithms",
        "_audience",
        "_audience_claim",
        "_cache",
        "_clock",
        "_key",
        "_role_claim",
        "_skew_s",
    )

    def __init__(
        self,
        *,
        secret_key: bytes | None = None,
        public_key_data: bytes | None = None,
        public_algorithm: str = DEFAULT_KEY_PAIR_ALGORITHM,
        role_claim: str = "sub",
        audience_claim: str | None = None,
        audience: str | None = None,
        clock_skew_s: int = 0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if (secret_key is None) == (public_key_data is None):
            raise BadKeyError("token authentication needs a secret key or a public key, not both")
        if secret_key is not None:
            secret_key_algorithm(secret_key)  # long enough for HS256 at least
            self._key: Any = secret_key
            self._algorithms = [
                name for name, size in SECRET_KEY_BYTES.items() if len(secret_key) >= size
            ]
        else:
            assert public_key_data is not None
            self._key = public_key(public_key_data, public_algorithm)
            self._algorithms = [public_algorithm]
        if audience_claim is not None and audience is None:
            raise BadKeyError(f"token audience claim {audience_claim!r} set without an audience")
        self._role_claim = role_claim
        self._audience_claim = audience_claim
        self._audience = audience
        self._skew_s = clock_skew_s
        self._clock = clock
        self._cache: dict[str, tuple[str, float]] = {}

    def authenticate(self, token: str) -> str:
        """The role of a valid token. AuthenticationError when the token is blank,
        malformed, badly signed, expired, for another audience or without a role."""
        return self.authenticate_until(token)[0]

    def authenticate_until(self, token: str) -> tuple[str, float]:
        """The role of a valid token and when it expires (its ``exp``, epoch seconds;
        infinity without one). AuthenticationError as ``authenticate``."""
        now = self._clock()
        cached = self._cache.get(token)
        if cached is not None:
            if now < cached[1] + self._skew_s:
                return cached
            del self._cache[token]
        if not token.strip():
            raise AuthenticationError("blank token")
        try:
            claims = jwt.decode(
                token,
                self._key,
                algorithms=self._algorithms,
                leeway=self._skew_s,
                options={
                    "verify_aud": False,
                    "verify_exp": False,  # checked below, against self._clock
                    "verify_iat": False,
                    "verify_nbf": True,
                },
            )
        except jwt.InvalidTokenError as error:
            raise AuthenticationError(f"invalid token: {error}") from None
        valid_until = expiry_of(claims)
        if not now < valid_until + self._skew_s:
            raise AuthenticationError("the token has expired")
        self._check_audience(claims)
        role = self._role(claims)
        if len(self._cache) >= self.CACHE_SIZE:
            self._cache.clear()
        self._cache[token] = (role, valid_until)
        return role, valid_until

    def _check_audience(self, claims: Mapping[str, Any]) -> None:
        if self._audience_claim is None:
            return
        value = claims.get(self._audience_claim)
        audiences = value if isinstance(value, list) else [value]
        if self._audience not in audiences:
            raise AuthenticationError(
                f"the token's audiences ({self._audience_claim}: {value!r}) do not include "
                f"this broker ({self._audience})"
            )

    def _role(self, claims: Mapping[str, Any]) -> str:
        value = claims.get(self._role_claim)
        if isinstance(value, list) and value:
            value = value[0]
        if not isinstance(value, str) or not value:
            raise AuthenticationError(f"the token has no role in its {self._role_claim!r} claim")
        return value


def show(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A token's header and claims, unverified (``brokerlab token show``)."""
    try:
        return jwt.get_unverified_header(token), jwt.decode(
            token, options={"verify_signature": False}
        )
    except jwt.InvalidTokenError as error:
        raise AuthenticationError(f"not a token: {error}") from None
