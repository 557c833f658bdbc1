"""The HTTP listener's protections: the idle timeout (``httpServerIdleTimeout``), the
slowest a request body may come (``brokerlabHttpMinRequestDataRate``) and the connection
limits (``maxHttpServerConnections``, ``brokerlabHttpMaxConnectionsPerIp``).

aiohttp arms its keep-alive timer when a connection opens and after each response, and
bytes of a request head still incomplete do not push it back: one timer closes idle
keep-alive connections and slowloris clients (a head sent a byte at a time) alike.

That timer sleeps while a request is handled, so a request body gets the same timeout
apart, as Jetty's idle timeout covers Pulsar's body reads: :class:`BodyWatch` cuts the
connection of a request whose body has received nothing for ``httpServerIdleTimeout``.
Silence alone would let a body trickled a byte now and then hold its connection for
ever, so the same watch also cuts, with a 408, a body that received fewer than
``brokerlabHttpMinRequestDataRate`` bytes a second over the last
``httpServerIdleTimeout`` (Jetty's ``minRequestDataRate``, which Pulsar leaves off).

The limits are checked once per connection, at accept, by :class:`AdmissionProtocol`,
the protocol the listening socket creates: it counts the connection and hands every
event to aiohttp's own protocol. A connection over a limit gets a 429 response and
is closed without reading its request, so a refusal costs no parsing and no handler;
most HTTP clients read a response sent before their request is complete.

A request aiohttp's parser refuses (an HTTP/1.1 request without ``Host``, a malformed
head) is answered by :class:`BrokerRequestHandler` as every other error,
``{"reason", "code"}``, and logged in one line at debug level: a client's mistake costs
the log nothing (aiohttp's own handler logged a traceback of about 720 bytes for an
18-byte request and answered plain text).
"""

from __future__ import annotations

import asyncio
import logging
import math
import resource
from http import HTTPStatus

import orjson
from aiohttp import StreamReader, web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.typedefs import Handler, Middleware
from aiohttp.web_protocol import RequestHandler

from broker.config import BrokerConfig
from broker.http.errors import code_of, error_response
from broker.limits import ConnectionLimiter, peer_ip

__all__ = [
    "AdmissionProtocol",
    "BodyIdleTimeoutError",
    "BrokerRequestHandler",
    "LimitedTCPSite",
    "http_runner",
]

log = logging.getLogger(__name__)

#: a body's progress is looked at this many times per httpServerIdleTimeout, so it is
#: cut after between 1 and 1.25 timeouts of silence (or of too slow a trickle)
BODY_CHECKS_PER_TIMEOUT = 4


def http_runner(app: web.Application, config: BrokerConfig) -> web.AppRunner:
    """The app's runner with httpServerIdleTimeout as aiohttp's keep-alive timeout, as
    the longest silence of a request body and as the window its rate is measured over
    (brokerlabHttpMinRequestDataRate). ``app`` must not be running yet: this adds the
    body's watch to its middlewares."""
    timeout_s = config.httpServerIdleTimeout / 1000
    app.middlewares.append(body_watch(timeout_s, config.brokerlabHttpMinRequestDataRate))
    return web.AppRunner(app, access_log=None, handle_signals=False, keepalive_timeout=timeout_s)


class BodyIdleTimeoutError(web.RequestPayloadError):
    """What a handler's read of a request body raises once :class:`BodyWatch` cut it
    (a payload error: answered quietly, to a connection already closing)."""


class BodyWatch:
    """Watches the body of one request in hand, every ``timeout_s /
    BODY_CHECKS_PER_TIMEOUT``. Once a full ``timeout_s`` has passed, a body that received
    nothing over the last ``timeout_s`` is cut silently (Jetty's idle timeout), and one
    that received fewer than ``min_rate`` bytes a second over it is answered 408 (Jetty's
    minRequestDataRate): a pending or later read of it raises
    :class:`BodyIdleTimeoutError` and the connection is closed. One timer per request
    whose body is incomplete; O(1) per look (the totals of the last looks in a ring)."""

    __slots__ = (
        "_body",
        "_handle",
        "_looks",
        "_min_bytes",
        "_min_rate",
        "_period_s",
        "_totals",
        "_transport",
        "_writer",
    )

    def __init__(
        self,
        body: StreamReader,
        transport: asyncio.BaseTransport,
        writer: AbstractStreamWriter,
        timeout_s: float,
        min_rate: int,
    ) -> None:
        self._body = body
        self._transport = transport
        self._writer = writer
        self._period_s = timeout_s / BODY_CHECKS_PER_TIMEOUT
        self._min_rate = min_rate
        #: bytes a body must receive over a window of timeout_s (1: any byte will do)
        self._min_bytes = max(1, math.ceil(min_rate * timeout_s))
        #: the body's bytes received at each of the last looks; the slot of the next
        #: look holds those of BODY_CHECKS_PER_TIMEOUT looks ago (the start, at first)
        self._totals = [body.total_bytes] * BODY_CHECKS_PER_TIMEOUT
        self._looks = 0
        self._handle: asyncio.TimerHandle | None = None
        self._schedule()

    def _schedule(self) -> None:
        loop = asyncio.get_running_loop()
        self._handle = loop.call_later(self._period_s, self._look)

    def _look(self) -> None:
        self._handle = None
        body = self._body
        if body.is_eof():
            return
        slot = self._looks % BODY_CHECKS_PER_TIMEOUT
        received = body.total_bytes - self._totals[slot]
        self._totals[slot] = body.total_bytes
        self._looks += 1
        if self._looks >= BODY_CHECKS_PER_TIMEOUT and received < self._min_bytes:
            window_ms = round(self._period_s * BODY_CHECKS_PER_TIMEOUT * 1000)
            if received == 0:
                reason = f"the request body sent nothing for {window_ms} ms (httpServerIdleTimeout)"
            else:
                reason = (
                    f"the request body sent {received} bytes in {window_ms} ms, slower than "
                    f"{self._min_rate} bytes a second (brokerlabHttpMinRequestDataRate)"
                )
                if self._writer.output_size == 0:  # no answer begun: this is the answer
                    self._transport.write(closing_answer(408, reason))  # type: ignore[attr-defined]
            body.set_exception(BodyIdleTimeoutError(reason))
            self._transport.close()  # after what was written
            return
        self._schedule()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


def body_watch(timeout_s: float, min_rate: int) -> Middleware:
    """A middleware that keeps a :class:`BodyWatch` on each request whose body has not
    all arrived when its handler starts (most bodies come with their head: they cost
    one check)."""

    @web.middleware
    async def watch_body(request: web.Request, handler: Handler) -> web.StreamResponse:
        body = request.content
        if body.is_eof():
            return await handler(request)
        transport = request.transport
        if transport is None:  # the client has gone already
            return await handler(request)
        watch = BodyWatch(body, transport, request.writer, timeout_s, min_rate)
        try:
            return await handler(request)
        finally:
            watch.stop()

    return watch_body


def closing_answer(status: int, reason: str) -> bytes:
    """A complete error response, ``{"reason", "code"}``, that closes the connection:
    written straight to a transport about to close, when no handler will answer."""
    body = orjson.dumps({"reason": reason, "code": code_of(status)})
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        + ("Retry-After: 1\r\n" if status == 429 else "")
        + "Connection: close\r\n\r\n"
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
            transport.write(closing_answer(429, f"too many connections: {refused}"))  # type: ignore[attr-defined]
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


class BrokerRequestHandler(RequestHandler):
    """aiohttp's protocol of one connection, whose error answers are the broker's:
    ``{"reason", "code"}``. A request its parser refused (status 400) is the client's
    mistake: logged in one line at debug level, no traceback. A handler's exception that
    escaped the error middleware (status 500) is still logged with its traceback."""

    __slots__ = ()

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status == 500:
            self.log_exception("Error handling request from %s", request.remote, exc_info=exc)
            reason = "internal error; see the broker log"
        else:
            reason = f"bad HTTP request: {message or exc or status}"
            log.debug("refused a request from %s: %s", request.remote, reason)
        if request.writer.output_size > 0:
            # part of an answer went out already: the connection cannot carry another
            raise ConnectionError("a response was sent already; cannot send the error")
        response = error_response(status, reason)
        response.force_close()
        return response


class LimitedTCPSite(web.TCPSite):
    """aiohttp's TCPSite whose connections go through :class:`AdmissionProtocol`."""

    def __init__(
        self, runner: web.AppRunner, host: str, port: int, limiter: ConnectionLimiter
    ) -> None:
        super().__init__(runner, host, port)
        self.limiter = limiter

    @classmethod
    def for_config(
        cls, runner: web.AppRunner, config: BrokerConfig, port: int | None = None
    ) -> LimitedTCPSite:
        """The site of ``config``'s address, limits and port (or ``port``: 0, any free
        one)."""
        limit = config.maxHttpServerConnections
        files, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if limit and files != resource.RLIM_INFINITY and files <= limit:
            # accept() then fails for want of a descriptor before the limit answers 429
            log.warning(
                "maxHttpServerConnections is %d but this process may open only %d files "
                "(ulimit -n): connections beyond that are refused by the kernel, unanswered",
                limit,
                files,
            )
        limiter = ConnectionLimiter(limit, config.brokerlabHttpMaxConnectionsPerIp)
        port = config.webServicePort if port is None else port
        return cls(runner, config.bindAddress, port, limiter)

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        server = self._runner.server
        assert server is not None
        limiter = self.limiter
        loop = asyncio.get_running_loop()
        # what server() makes, with the broker's error answers: the runner's keyword
        # arguments (keep-alive timeout, access log) are the server's
        handler_options = server._kwargs

        def admission() -> AdmissionProtocol:
            return AdmissionProtocol(
                BrokerRequestHandler(server, loop=loop, **handler_options), limiter
            )

        listening = await loop.create_server(admission, self._host, self._port)
        self._server = listening
        self._bound_port = listening.sockets[0].getsockname()[1]

    @property
    def open_connections(self) -> int:
        return self.limiter.total
