"""Request parsing: JSON bodies, typed fields, query parameters. Every failure is an
InvalidRequestError naming the field, raised before anything is changed."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from broker.dispatch.errors import InvalidRequestError
from broker.ledger.position import Position, parse_position

_MISSING = object()


async def json_object(request: web.Request, required: bool = True) -> dict[str, Any]:
    """The body as a JSON object ({} when empty and not required)."""
    raw = await request.read()
    if not raw:
        if required:
            raise InvalidRequestError("request body is empty; a JSON object is expected")
        return {}
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise InvalidRequestError(f"malformed JSON: {error}") from None
    if not isinstance(body, dict):
        raise InvalidRequestError("the body must be a JSON object")
    return body


def field_int(body: dict[str, Any], name: str, default: int, minimum: int, maximum: int) -> int:
    value = body.get(name, _MISSING)
    if value is _MISSING or value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequestError(f"{name} must be an integer")
    if not minimum <= value <= maximum:
        raise InvalidRequestError(f"{name} must be within {minimum}..{maximum}, got {value}")
    return value


def field_str(
    body: dict[str, Any], name: str, default: str | None = None, max_length: int = 256
) -> str | None:
    value = body.get(name, _MISSING)
    if value is _MISSING or value is None:
        return default
    if not isinstance(value, str):
        raise InvalidRequestError(f"{name} must be a string")
    if len(value) > max_length:
        raise InvalidRequestError(f"{name} is longer than {max_length} characters")
    return value


def field_choice(body: dict[str, Any], name: str, default: str, choices: tuple[str, ...]) -> str:
    value = field_str(body, name, default)
    if value not in choices:
        raise InvalidRequestError(f"{name} must be one of {', '.join(choices)}")
    return value


def query_int(request: web.Request, name: str, default: int, minimum: int, maximum: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    if not raw.isascii() or not raw.lstrip("-").isdigit():
        raise InvalidRequestError(f"query parameter {name} must be an integer")
    value = int(raw)
    if not minimum <= value <= maximum:
        raise InvalidRequestError(f"{name} must be within {minimum}..{maximum}, got {value}")
    return value


def message_id(value: object, name: str = "messageId") -> Position:
    if not isinstance(value, str):
        raise InvalidRequestError(f"{name} must be a string 'ledgerId:entryId'")
    try:
        return parse_position(value)
    except ValueError as error:
        raise InvalidRequestError(str(error)) from None


def message_ids(
    body: dict[str, Any], name: str = "messageIds", limit: int = 100000
) -> list[Position]:
    values = body.get(name)
    if not isinstance(values, list) or not values:
        raise InvalidRequestError(f"{name} must be a non-empty list of 'ledgerId:entryId' strings")
    if len(values) > limit:
        raise InvalidRequestError(f"{name} has more than {limit} ids")
    return [message_id(value, name) for value in values]
