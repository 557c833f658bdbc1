"""Who may call the HTTP API, and from where: one middleware in front of every route.

In order, for each request:

1. **Host** (DNS rebinding): bound to a loopback address, the broker answers only Host
   names that are loopback (``localhost``, ``*.localhost``, ``127.0.0.0/8``, ``[::1]``),
   its ``advertisedAddress`` and ``httpAllowedHosts``; 403 otherwise.
2. **CORS preflight**: answered only for ``httpCorsAllowedOrigins``.
3. **Origin**: a request that changes state (any method but GET, HEAD, OPTIONS) or opens
   a WebSocket, sent by a page of another origin, is refused (403) unless that origin is
   allowed. Browsers always send Origin on such requests.
4. **Content type**: a request that changes state and carries a body must say what the
   body is in a type a browser cannot send without asking first (``application/json``);
   ``text/plain``, form types or no type at all are refused (415), so even a browser that
   leaves Origin out cannot produce from a web page.
5. **Authentication** (``authenticationEnabled``): ``Authorization: Bearer <token>``
   (WebSocket routes also take ``?token=``), else ``anonymousUserRole``, else 401.
6. **Authorization** (``authorizationEnabled``): a state change under ``/admin/`` needs a
   super-user unless the route is one a producing and consuming client uses
   (:func:`client_route`); 403 otherwise. Consumers by id: :func:`check_consumer_owner`.

With authentication off the middleware costs a few dict lookups per request.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from aiohttp import web

from broker.auth.errors import AuthenticationError, AuthorizationError
from broker.auth.service import (
    TOKEN_METHOD,
    AuthenticationService,
    AuthorizationService,
    is_loopback_address,
    names,
)
from broker.config import BrokerConfig
from broker.http.errors import error_response, unauthorized

log = logging.getLogger(__name__)

#: methods that never change state (a WebSocket upgrade is a GET and is checked apart)
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: the body types a web page may send to any site without a CORS preflight
SIMPLE_CONTENT_TYPES = frozenset(
    {"text/plain", "application/x-www-form-urlencoded", "multipart/form-data"}
)
#: routes answered without a token (no broker data in them); /metrics unless
#: authenticateMetricsEndpoint
PUBLIC_PATHS = frozenset({"/dashboard", "/openapi.json"})
#: Host values remembered as allowed (each check after the first is one set lookup)
MAX_REMEMBERED_HOSTS = 256
CORS_MAX_AGE_S = 600

#: the authenticated role of a request (absent: authentication is off)
ROLE = web.RequestKey("role", str)
_CLIENT_ROUTE = "_brokerlab_client_route"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
H = TypeVar("H", bound=Callable[..., Any])


def client_route(handler: H) -> H:
    """Mark an ``/admin/`` route that changes state as one a role that may produce and
    consume may use (what Pulsar grants with the consume permission: subscriptions and
    their cursors); other admin changes need a super-user."""
    setattr(handler, _CLIENT_ROUTE, True)
    return handler


def host_name(host: str) -> str:
    """A Host header's name: lowercase, without the port and without IPv6 brackets."""
    value = host.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    name, _, port = value.rpartition(":")
    return name if name and port.isdigit() else value


def _origin_key(origin: str) -> str:
    """An origin as compared: lowercase, no trailing slash, no default port."""
    value = origin.strip().rstrip("/").lower()
    for scheme, port in (("http://", ":80"), ("https://", ":443")):
        if value.startswith(scheme) and value.endswith(port):
            return value[: -len(port)]
    return value


class HttpSecurity:
    """The security settings of one HTTP front end, prepared for the middleware."""

    __slots__ = (
        "_hosts_seen",
        "any_host",
        "authentication",
        "authorization",
        "check_host",
        "cors",
        "cors_any",
        "cors_origins",
        "host_names",
        "public_paths",
    )

    def __init__(self, config: BrokerConfig) -> None:
        self.authentication = AuthenticationService(config)
        self.authorization = AuthorizationService(config)
        allowed = [name.lower() for name in names(config.httpAllowedHosts)]
        self.any_host = "*" in allowed
        self.check_host = not self.any_host and (
            is_loopback_address(config.bindAddress) or bool(allowed)
        )
        self.host_names = frozenset(
            {*(host_name(name) for name in allowed), host_name(config.advertisedAddress)}
        )
        self._hosts_seen: set[str] = set()
        origins = names(config.httpCorsAllowedOrigins)
        self.cors = bool(origins)
        self.cors_any = "*" in origins
        self.cors_origins = frozenset(_origin_key(origin) for origin in origins if origin != "*")
        self.public_paths = (
            PUBLIC_PATHS if config.authenticateMetricsEndpoint else PUBLIC_PATHS | {"/metrics"}
        )

    def host_allowed(self, host: str) -> bool:
        """Whether a Host header names this broker. O(1) for a Host seen before."""
        if host in self._hosts_seen:
            return True
        name = host_name(host)
        allowed = name in self.host_names or is_loopback_address(name)
        if allowed and len(self._hosts_seen) < MAX_REMEMBERED_HOSTS:
            self._hosts_seen.add(host)
        return allowed

    def cors_allowed(self, origin: str) -> bool:
        """Whether pages of ``origin`` may call the API (httpCorsAllowedOrigins)."""
        return self.cors_any or _origin_key(origin) in self.cors_origins

    def origin_allowed(self, origin: str, host: str | None) -> bool:
        """Whether a request with this Origin may change state: the broker's own pages
        (the Origin is the Host the request was sent to) or an allowed origin."""
        if self.cors and self.cors_allowed(origin):
            return True
        key = _origin_key(origin)
        scheme, sep, rest = key.partition("://")
        return (
            bool(sep)
            and scheme in ("http", "https")
            and host is not None
            and (rest == _origin_key(f"{scheme}://{host}").partition("://")[2])
        )

    def authenticate(self, request: web.Request) -> str | None:
        """The request's role. AuthenticationError when it has none it may use."""
        header = request.headers.get("Authorization")
        token: str | None
        if header is not None:
            scheme, _, token = header.strip().partition(" ")
            if scheme.lower() != "bearer":
                raise AuthenticationError("the Authorization header is not 'Bearer <token>'")
            token = token.strip()
        elif request.path.startswith("/ws/"):
            # a browser's WebSocket cannot set headers: Pulsar's WebSocket API takes ?token=
            token = request.query.get("token")
        else:
            token = None
        return self.authentication.authenticate(TOKEN_METHOD, token)


SECURITY = web.AppKey("security", HttpSecurity)


def setup(app: web.Application, config: BrokerConfig) -> None:
    app[SECURITY] = HttpSecurity(config)


def check_consumer_owner(request: web.Request, consumer: object) -> None:
    """AuthorizationError unless the consumer was made by the request's role (when
    authentication is on; a consumer made without a role, over another front end, is
    nobody's to touch over HTTP)."""
    role = request.get(ROLE)
    if role is not None and getattr(consumer, "role", None) != role:
        raise AuthorizationError(f"the consumer belongs to another role than {role!r}")


def _forbidden(reason: str) -> web.Response:
    return error_response(403, reason)


@web.middleware
async def security_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    security = request.app[SECURITY]
    headers = request.headers
    host = headers.get("Host")
    if security.check_host and host is not None and not security.host_allowed(host):
        return _forbidden(
            f"Host {host!r} is not a name of this broker: bound to loopback, it answers "
            "loopback names, advertisedAddress and httpAllowedHosts only (DNS rebinding)"
        )
    method = request.method
    origin = headers.get("Origin")
    if origin is not None:
        if method == "OPTIONS" and "Access-Control-Request-Method" in headers:
            return _preflight(security, origin)
        changes = method not in SAFE_METHODS or headers.get("Upgrade", "").lower() == "websocket"
        if changes and not security.origin_allowed(origin, host):
            return _forbidden(
                f"cross-origin request from {origin} refused: a web page of another site "
                "may not change this broker's state (httpCorsAllowedOrigins allows origins)"
            )
    if method not in SAFE_METHODS and request.body_exists:
        content_type = headers.get("Content-Type")
        media_type = "" if content_type is None else content_type.partition(";")[0].strip()
        if not media_type or media_type.lower() in SIMPLE_CONTENT_TYPES:
            return error_response(
                415,
                f"a request body of type {media_type or '(none)'!r} is refused: send "
                "Content-Type: application/json (web pages can send this type to any site)",
            )
    if security.authentication.enabled:
        failure = _authenticate_and_authorize(security, request, method)
        if failure is not None:
            return failure
    response = await handler(request)
    if origin is not None and security.cors and not response.prepared:
        if security.cors_allowed(origin):
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Access-Control-Expose-Headers"] = "Location, Retry-After"
        response.headers["Vary"] = "Origin"
    return response


def _authenticate_and_authorize(
    security: HttpSecurity, request: web.Request, method: str
) -> web.Response | None:
    """The request's role stored under ROLE, or the refusal (401, 403)."""
    path = request.path
    if method in ("GET", "HEAD") and path in security.public_paths:
        return None
    try:
        role = security.authenticate(request)
    except AuthenticationError as error:
        return unauthorized(str(error))
    if role is not None:
        request[ROLE] = role
    if (
        security.authorization.enabled
        and method not in SAFE_METHODS
        and path.startswith("/admin/")
        and not getattr(request.match_info.handler, _CLIENT_ROUTE, False)
    ):
        try:
            security.authorization.check_super_user(role, f"{method} {path}")
        except AuthorizationError as error:
            return _forbidden(str(error))
    return None


def _preflight(security: HttpSecurity, origin: str) -> web.Response:
    """A browser asks whether a page of ``origin`` may send a request: yes for
    httpCorsAllowedOrigins, else 403 (and the browser does not send it)."""
    if not (security.cors and security.cors_allowed(origin)):
        return _forbidden(f"cross-origin requests from {origin} are not allowed (CORS is off)")
    return web.Response(
        status=204,
        headers={
            "Access-Control-Allow-Origin": origin,
            "Access-Control-Allow-Methods": "GET, HEAD, POST, PUT, DELETE",
            "Access-Control-Allow-Headers": "Authorization, Content-Type",
            "Access-Control-Max-Age": str(CORS_MAX_AGE_S),
            "Vary": "Origin",
        },
    )
