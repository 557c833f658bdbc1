"""The broker's authentication and authorization, built from ``broker.conf`` with Pulsar's
keys: ``authenticationEnabled``, ``authenticationProviders``, ``anonymousUserRole``, the
``token*`` keys, ``authorizationEnabled`` and ``superUserRoles``.

What a role may do (brokerlab has no per-namespace grants; Pulsar's
``pulsar-admin namespaces grant-permission`` has no equivalent here):

- authentication off (the default): everyone may do everything, as in Pulsar;
- authentication on, authorization off: any authenticated role may do everything, as in
  Pulsar;
- both on: any authenticated role may produce and consume (what a Pulsar role granted
  ``produce,consume`` on every namespace may do: create and delete subscriptions, reset
  cursors, read stats); what Pulsar keeps for super-users and tenant admins (topic and
  namespace administration, unloads, partitioned-topic changes, tenants) and brokerlab's
  own admin routes (the fault injector, broker restarts) need one of ``superUserRoles``.

A consumer made over HTTP belongs to the role that made it, whatever the settings.
"""

from __future__ import annotations

import ipaddress
import math
from typing import TYPE_CHECKING, Protocol

from broker.auth.errors import AuthenticationError, AuthorizationError

if TYPE_CHECKING:
    from broker.auth.tokens import AuthenticationProviderToken

#: The one provider of ``authenticationProviders`` brokerlab has.
TOKEN_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"
#: Its method name (the binary protocol's ``auth_method_name``).
TOKEN_METHOD = "token"

__all__ = [
    "TOKEN_METHOD",
    "TOKEN_PROVIDER",
    "AuthenticationError",
    "AuthenticationService",
    "AuthorizationError",
    "AuthorizationService",
    "SecuritySettings",
    "is_loopback_address",
    "names",
]


class SecuritySettings(Protocol):
    """The ``broker.conf`` keys security is built from, read-only. ``BrokerConfig`` is
    one; declared here because the config validates itself with :func:`check_config`, so
    this module must not import the config back."""

    @property
    def authenticationEnabled(self) -> bool: ...
    @property
    def authenticationProviders(self) -> str: ...
    @property
    def authorizationEnabled(self) -> bool: ...
    @property
    def superUserRoles(self) -> str: ...
    @property
    def anonymousUserRole(self) -> str: ...
    @property
    def tokenSecretKey(self) -> str: ...
    @property
    def tokenPublicKey(self) -> str: ...
    @property
    def tokenPublicAlg(self) -> str: ...
    @property
    def tokenAuthClaim(self) -> str: ...
    @property
    def tokenAudienceClaim(self) -> str: ...
    @property
    def tokenAudience(self) -> str: ...
    @property
    def tokenAllowedClockSkewSeconds(self) -> int: ...


#: Host names that always mean this machine (RFC 6761: browsers never ask DNS for them)
LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "ip6-localhost", "ip6-loopback"})


def names(value: str) -> list[str]:
    """A comma-separated setting as its names; ``none`` (the default) is no name."""
    if value.strip().lower() == "none":
        return []
    return [name.strip() for name in value.split(",") if name.strip()]


def is_loopback_address(host: str) -> bool:
    """Whether a bind address or a Host name means this machine only."""
    name = host.strip().strip("[]").lower()
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def setting(value: str) -> str | None:
    """A single-valued string setting, None when ``none``."""
    text = value.strip()
    return None if not text or text.lower() == "none" else text


def token_provider(config: SecuritySettings) -> AuthenticationProviderToken:
    """The token provider of ``config`` (its key read now). BadKeyError if the key
    cannot be read or is not a key."""
    from broker.auth.tokens import AuthenticationProviderToken, read_key  # jwt: when used

    secret = setting(config.tokenSecretKey)
    public = setting(config.tokenPublicKey)
    return AuthenticationProviderToken(
        secret_key=None if secret is None else read_key(secret),
        public_key_data=None if public is None or secret is not None else read_key(public),
        public_algorithm=config.tokenPublicAlg,
        role_claim=setting(config.tokenAuthClaim) or "sub",
        audience_claim=setting(config.tokenAudienceClaim),
        audience=setting(config.tokenAudience),
        clock_skew_s=config.tokenAllowedClockSkewSeconds,
    )


class AuthenticationService:
    """Who a client is: the role of its token, the anonymous role, or (authentication
    off) nobody in particular (None)."""

    __slots__ = ("anonymous_role", "enabled", "token")

    def __init__(self, config: SecuritySettings) -> None:
        self.enabled = config.authenticationEnabled
        self.anonymous_role = setting(config.anonymousUserRole)
        self.token = token_provider(config) if self.enabled else None

    def authenticate(self, method: str | None, credentials: str | None) -> str | None:
        """The role of a client that gave ``credentials`` by ``method`` (None: the
        client named none; the HTTP front end's Bearer token is ``token``'s).
        AuthenticationError when they are missing or not valid."""
        return self.authenticate_until(method, credentials)[0]

    def authenticate_until(
        self, method: str | None, credentials: str | None
    ) -> tuple[str | None, float]:
        """``authenticate``'s role and when the credentials expire (epoch seconds;
        infinity for none, an anonymous client and a token without ``exp``)."""
        if not self.enabled:
            return None, math.inf
        if not credentials:
            if self.anonymous_role is not None:
                return self.anonymous_role, math.inf
            raise AuthenticationError(
                "authentication is enabled and the request has no token "
                "(send Authorization: Bearer <token>)"
            )
        if method is not None and method != TOKEN_METHOD:
            raise AuthenticationError(
                f"authentication method {method!r} is not enabled; this broker takes tokens"
            )
        assert self.token is not None
        return self.token.authenticate_until(credentials)


class AuthorizationService:
    """What a role may do: with ``authorizationEnabled``, administration needs one of
    ``superUserRoles``; everything else is open to any authenticated role."""

    __slots__ = ("enabled", "super_users")

    def __init__(self, config: SecuritySettings) -> None:
        self.enabled = config.authorizationEnabled
        self.super_users = frozenset(names(config.superUserRoles))

    def is_super_user(self, role: str | None) -> bool:
        return not self.enabled or role in self.super_users

    def check_super_user(self, role: str | None, what: str) -> None:
        """AuthorizationError unless ``role`` may administer (``what`` says what)."""
        if not self.is_super_user(role):
            raise AuthorizationError(
                f"{what} needs a super-user role (superUserRoles); role {role!r} is not one"
            )


def check_config(config: SecuritySettings) -> None:
    """ValueError naming the keys when the security settings do not fit together or the
    token key cannot be used: checked when broker.conf is loaded, so start-up stops."""
    providers = names(config.authenticationProviders)
    unknown = [name for name in providers if name != TOKEN_PROVIDER]
    if unknown:
        raise ValueError(
            f"authenticationProviders: only {TOKEN_PROVIDER} is supported, not "
            + ", ".join(unknown)
        )
    if config.authorizationEnabled and not config.authenticationEnabled:
        raise ValueError("authorizationEnabled=true needs authenticationEnabled=true")
    if not config.authenticationEnabled:
        return
    if not providers:
        raise ValueError(
            f"authenticationEnabled=true needs authenticationProviders={TOKEN_PROVIDER}"
        )
    secret = setting(config.tokenSecretKey)
    public = setting(config.tokenPublicKey)
    if (secret is None) == (public is None):
        raise ValueError(
            "token authentication needs exactly one of tokenSecretKey (HS256) and "
            "tokenPublicKey (key pairs)"
        )
    if setting(config.tokenAudienceClaim) is not None and setting(config.tokenAudience) is None:
        raise ValueError("tokenAudienceClaim is set but tokenAudience (this broker) is not")
    try:
        token_provider(config)
    except ValueError as error:
        key = "tokenSecretKey" if secret is not None else "tokenPublicKey"
        raise ValueError(f"{key}: {error}") from None
