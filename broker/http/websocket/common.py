"""What the WebSocket API's sessions share: Pulsar's WebSocketError codes and the close
frame that carries one (close code 4000 + the code: Pulsar's own codes 1-8 are not valid
WebSocket close codes), the app's open sessions (closed when it shuts down), the
receiver-queue parameter of consumers and readers, and the helpers that read a session's
request (upgrade, topic, query strings, choices brokerlab does not support) and write
its JSON text frames.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from broker.dispatch.errors import BrokerError, InvalidRequestError
from broker.dispatch.names import TopicName
from broker.http.app_state import SETTINGS
from broker.http.contract import ChoiceQuery, IntQuery
from broker.ledger.managed_ledger import ManagedLedgerError
from storage_stub.bookie.api import BookieError

#: Pulsar's WebSocketError codes
FAILED_TO_DESERIALIZE_FROM_JSON = 3
PAYLOAD_ENCODING_ERROR = 7
UNKNOWN_ERROR = 8
_DESCRIPTIONS = {
    FAILED_TO_DESERIALIZE_FROM_JSON: "Failed to de-serialize from JSON",
    PAYLOAD_ENCODING_ERROR: "Invalid payload encoding",
    UNKNOWN_ERROR: "Unknown error",
}
#: close code of a session closed for a WebSocketError: this plus Pulsar's code
CLOSE_CODE_BASE = 4000

#: Pulsar's WebSocket service caps receiverQueueSize at this (consumers and readers)
MAX_RECEIVER_QUEUE_SIZE = 1000
MAX_INT32 = 2**31 - 1

#: what a write to storage (a send, an ack, an unsubscribe) may fail with
STORAGE_ERRORS = (BrokerError, BookieError, ManagedLedgerError, OSError)


class OpenSockets:
    """The app's open WebSocket sessions, closed when it shuts down."""

    __slots__ = ("sockets",)

    def __init__(self) -> None:
        self.sockets: set[web.WebSocketResponse] = set()


SOCKETS = web.AppKey("websockets", OpenSockets)

TOPIC_PATH = "/persistent/{tenant}/{namespace}/{topic}"


# Pulsar's query parameters, read by the same declarations as the HTTP routes' (one
# spelling of booleans, choices and integers for both front ends)
RECEIVER_QUEUE_SIZE = IntQuery(
    "receiverQueueSize", "Receiver queue (capped).", MAX_RECEIVER_QUEUE_SIZE, 0, MAX_INT32
)


def receiver_queue_size(request: web.Request) -> int:
    return min(RECEIVER_QUEUE_SIZE.read(request), MAX_RECEIVER_QUEUE_SIZE)


def read_supported(query: ChoiceQuery, request: web.Request, supported: tuple[str, ...]) -> str:
    """The choice, refused by name when brokerlab does not support it (rather than
    ignored)."""
    value = query.read(request)
    if value not in supported:
        raise InvalidRequestError(f"{query.name}={value} is not supported by brokerlab")
    return value


def query_str(request: web.Request, name: str) -> str | None:
    raw = request.query.get(name)
    if raw is None:
        return None
    if not 1 <= len(raw) <= 256:
        raise InvalidRequestError(f"query parameter {name} must be 1..256 characters long")
    return raw


def refuse_unsupported(request: web.Request, *names: str) -> None:
    for name in names:
        if name in request.query:
            raise InvalidRequestError(f"query parameter {name} is not supported by brokerlab")


def check_upgrade(request: web.Request) -> None:
    """A plain HTTP request to a WebSocket route changes nothing: 400."""
    if not web.WebSocketResponse().can_prepare(request).ok:
        raise InvalidRequestError("this route speaks Pulsar's WebSocket API: send an upgrade")


def topic_of(request: web.Request) -> TopicName:
    info = request.match_info
    return TopicName.of(info["tenant"], info["namespace"], info["topic"])


def new_socket(request: web.Request) -> web.WebSocketResponse:
    broker = request.app[SETTINGS].broker
    # a message of maxMessageSize in base64, with room for its JSON fields
    return web.WebSocketResponse(
        max_msg_size=broker.maxMessageSize * 4 // 3 + (1 << 20),
        heartbeat=broker.keepAliveIntervalSeconds,
    )


async def send_json(ws: web.WebSocketResponse, data: dict[str, Any]) -> bool:
    """Write one JSON text frame; False if the session is closing."""
    try:
        await ws.send_str(orjson.dumps(data).decode())
    except ConnectionError:
        return False
    return True


async def close_for(ws: web.WebSocketResponse, error: int, reason: str) -> None:
    """Close the session for a WebSocketError, as Pulsar does, with the reason."""
    message = f"{_DESCRIPTIONS[error]}: {reason}"
    # a close frame's reason is at most 123 bytes (cut on a character boundary)
    reason_bytes = message.encode()[:120].decode(errors="ignore").encode()
    await ws.close(code=CLOSE_CODE_BASE + error, message=reason_bytes)
