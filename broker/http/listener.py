"""The HTTP listener's protections: the idle timeout (``httpServerIdleTimeout``) and the
connection limits (``maxHttpServerConnections``, ``brokerlabHttpMaxConnectionsPerIp``).

aiohttp arms its keep-alive timer when a connection opens and after each response, and
bytes of a request head still incomplete do not push it back: one timer closes idle
keep-alive connections and slowloris clients (a head sent a byte at a time) alike.

The limits are checked once per connection, at accept, by :class:`AdmissionProtocol`,
the protocol the listening socket creates: it counts the connection and hands every
event to aiohttp's own protocol. A connection over a limit gets a fixed 429 response and
is closed without reading its request, so a refusal costs no parsing and no handler;
most HTTP clients read a response sent before their request is complete.
"""

from __future__ import annotations

import asyncio

import orjson
from aiohttp import web

from broker.config import BrokerConfig
from broker.limits import ConnectionLimiter, peer_ip

__all__ = ["AdmissionProtocol", "LimitedTCPSite", "http_runner"]


def http_runner(app: web.Application, config: BrokerConfig) -> web.AppRunner:
    """The app's runner with httpServerIdleTimeout as aiohttp's keep-alive timeout."""
    return web.AppRunner(
        app,
        access_log=None,
        handle_signals=False,
        keepalive_timeout=config.httpServerIdleTimeout / 1000,
    )


def refusal(reason: str) -> bytes:
    """A complete ``429 too-many-requests`` response that closes the connection."""
    body = orjson.dumps({"reason": reason, "code": "too-many-requests"})
    head = (
        "HTTP/1.1 429 Too Many Requests\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Retry-After: 1\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + body


class AdmissionProtocol(asyncio.Protocol):
    """Counts a connection in ``limiter`` (or refuses it) and passes every event to
    ``inner``, aiohttp's protocol: one extra call per event, no allocation."""

    __slots__ = ("inner", "ip", "limiter")

    def __init__(self, inner: asyncio.Protocol, limiter: ConnectionLimiter) -> None:
        self.inner = inner
        self.limiter = limiter
        #: the address counted in ``limiter``; None until admitted, or refused
        self.ip: str | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        ip = peer_ip(transport.get_extra_info("peername"))
        refused = self.limiter.admit(ip)
        if refused is not None:
            transport.write(refusal(f"too many connections: {refused}"))  # type: ignore[attr-defined]
            transport.close()
            return
        self.ip = ip
        self.inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.ip is None:
            return
        self.limiter.release(self.ip)
        self.ip = None
        self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.ip is not None:
            self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        if self.ip is None:
            return None
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        if self.ip is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.ip is not None:
            self.inner.resume_writing()


class LimitedTCPSite(web.TCPSite):
    """aiohttp's TCPSite whose connections go through :class:`AdmissionProtocol`."""

    def __init__(
        self, runner: web.AppRunner, host: str, port: int, limiter: ConnectionLimiter
    ) -> None:
        super().__init__(runner, host, port)
        self.limiter = limiter

    @classmethod
    def for_config(cls, runner: web.AppRunner, config: BrokerConfig) -> LimitedTCPSite:
        limiter = ConnectionLimiter(
            config.maxHttpServerConnections, config.brokerlabHttpMaxConnectionsPerIp
        )
        return cls(runner, config.bindAddress, config.webServicePort, limiter)

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        server = self._runner.server
        assert server is not None
        limiter = self.limiter

        def admission() -> AdmissionProtocol:
            return AdmissionProtocol(server(), limiter)

        loop = asyncio.get_running_loop()
        listening = await loop.create_server(admission, self._host, self._port)
        self._server = listening
        self._bound_port = listening.sockets[0].getsockname()[1]

    @property
    def open_connections(self) -> int:
        return self.limiter.total
