"""Pulsar's WebSocket API (``/ws/v2/producer|consumer|reader/persistent/...``) on
aiohttp's WebSocket support: a thin front end over the broker service, as the binary
protocol is.

Pulsar serves this API with a Java client inside the broker; brokerlab has no client in
between, so each session talks to the service directly and behaves as that client would
towards the WebSocket peer. Each kind of session is a module:
:mod:`~broker.http.websocket.producer`, :mod:`~broker.http.websocket.consumer` and
:mod:`~broker.http.websocket.reader`; what they share (error codes, the open sessions,
request and frame helpers) is :mod:`~broker.http.websocket.common`, and how message ids
and times are written :mod:`~broker.http.websocket.formats`.

Message ids travel as base64 of the serialized ``MessageIdData``, as Pulsar's clients
write them. Times are ISO 8601 strings (UTC), as Pulsar formats them. A command the
server cannot read closes the session with close code 4000 + Pulsar's WebSocketError
code (Pulsar's own codes 1-8 are not valid WebSocket close codes): 4003 for bad JSON.
"""

from __future__ import annotations

import asyncio

from aiohttp import WSCloseCode, web

from broker.http.websocket import consumer, producer, reader
from broker.http.websocket.common import SOCKETS, OpenSockets


def setup(app: web.Application) -> None:
    """Serve the WebSocket API on ``app``; open sessions close when it shuts down."""
    app[SOCKETS] = OpenSockets()
    app.on_shutdown.append(_close_sessions)
    for session in (consumer, reader, producer):
        app.add_routes(session.routes)


async def _close_sessions(app: web.Application) -> None:
    """Before the server stops waiting for handlers: every session ends now (its
    consumer closed, its unacked messages back to the subscription)."""
    sockets = list(app[SOCKETS].sockets)
    await asyncio.gather(
        *(ws.close(code=WSCloseCode.GOING_AWAY, message=b"broker shutting down") for ws in sockets),
        return_exceptions=True,
    )
