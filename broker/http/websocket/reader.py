"""A reader session of the WebSocket API (``/ws/v2/reader/persistent/...``): a consumer
of its own subscription (``reader-...``, deleted when the session ends) that
acknowledges what it sends, as Pulsar's reader does; the client's acks only free room
in its window. It starts after the message id it is given (``messageId``), as Pulsar's
reader. Served as a consumer's session is
(:func:`broker.http.websocket.consumer.serve_consumer`).
"""

from __future__ import annotations

import secrets

from aiohttp import web

from broker.dispatch.errors import InvalidRequestError
from broker.dispatch.service import ConsumerOptions
from broker.http.app_state import client_address, topic_service
from broker.http.websocket.common import (
    TOPIC_PATH,
    check_upgrade,
    query_str,
    receiver_queue_size,
    topic_of,
)
from broker.http.websocket.consumer import WebSocketConsumer, serve_consumer
from broker.http.websocket.formats import decode_message_id
from broker.ledger.position import Position
from broker.session.message_ids import start_of

routes = web.RouteTableDef()


def _reader_start(request: web.Request) -> tuple[str, Position | None, tuple[Position, int] | None]:
    """The reader's start: (initial position, first position or None, a batch's
    messages to skip). Pulsar's reader starts after the message id it is given."""
    raw = request.query.get("messageId", "").strip()
    if raw in ("", "latest"):
        return "Latest", None, None
    if raw == "earliest":
        return "Earliest", None, None
    try:
        given = decode_message_id(raw)
    except ValueError as error:
        raise InvalidRequestError(
            f"query parameter messageId must be earliest, latest or a base64 message id: {error}"
        ) from None
    start = start_of(given.ledgerId, given.entryId)
    if start == "earliest":
        return "Earliest", None, None
    if start == "latest":
        return "Latest", None, None
    ledger_id, entry_id = start
    if given.HasField("batch_index") and given.batch_index >= 0:
        position = Position(ledger_id, max(entry_id, 0))
        return "Latest", position, (position, given.batch_index)
    return "Latest", Position(ledger_id, max(entry_id + 1, 0)), None


@routes.get("/ws/v2/reader" + TOPIC_PATH)
async def reader_session(request: web.Request) -> web.StreamResponse:
    check_upgrade(request)
    name = topic_of(request)
    initial, start, skip = _reader_start(request)
    options = ConsumerOptions(
        name=query_str(request, "readerName"),
        subscription_type="Exclusive",
        receiver_queue_size=receiver_queue_size(request),
        initial_position=initial,
        address=client_address(request),
    )
    # as Pulsar names a reader's subscription
    subscription = f"reader-{secrets.token_hex(5)}"
    consumer = await topic_service(request, name).create_consumer(
        name, subscription, options, WebSocketConsumer, start
    )
    assert isinstance(consumer, WebSocketConsumer)
    return await serve_consumer(request, consumer, pull_mode=False, reader=True, skip=skip)
