"""Request parsing: JSON bodies, typed fields, query parameters. Every failure is an
InvalidRequestError naming the field, raised before anything is changed."""

from __future__ import annotations

import re
from typing import Any

import orjson
from aiohttp import web

from broker.dispatch.errors import InvalidRequestError
from broker.ledger.position import Position

_MISSING = object()

#: ledger ids, entry ids and timestamps are Java longs in Pulsar
MAX_INT64 = 2**63 - 1
_DIGITS = re.compile(r"[0-9]{1,19}")


def decimal(text: str) -> int | None:
    """``text`` as an integer if it is ASCII decimal digits only, at most MAX_INT64;
    None otherwise (empty, signs, spaces, other scripts' digits, too large)."""
    digits = (text.lstrip("0") or "0") if text else ""
    if not _DIGITS.fullmatch(digits):
        return None
    value = int(digits)
    return value if value <= MAX_INT64 else None


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
    if value is _MISSING:
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
    if value is _MISSING:
        return default
    if not isinstance(value, str):
        raise InvalidRequestError(f"{name} must be a string")
    if not 1 <= len(value) <= max_length:
        raise InvalidRequestError(f"{name} must be 1..{max_length} characters long")
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
    value = decimal(raw)
    if value is None:
        raise InvalidRequestError(f"query parameter {name} must be a decimal integer")
    if not minimum <= value <= maximum:
        raise InvalidRequestError(f"{name} must be within {minimum}..{maximum}, got {value}")
    return value


def message_id(value: object, name: str = "messageId") -> Position:
    if not isinstance(value, str):
        raise InvalidRequestError(f"{name} must be a string 'ledgerId:entryId'")
    ledger, sep, entry = value.partition(":")
    ledger_id, entry_id = decimal(ledger), decimal(entry)
    if not sep or ledger_id is None or entry_id is None:
        shown = value if len(value) <= 64 else value[:64] + "..."
        raise InvalidRequestError(
            f"bad message id {shown!r} in {name}: expected 'ledgerId:entryId', "
            f"both decimal integers within 0..{MAX_INT64}"
        )
    return Position(ledger_id, entry_id)


def message_ids(
    body: dict[str, Any], name: str = "messageIds", limit: int = 100000
) -> list[Position]:
    values = body.get(name)
    if not isinstance(values, list) or not values:
        raise InvalidRequestError(f"{name} must be a non-empty list of 'ledgerId:entryId' strings")
    if len(values) > limit:
        raise InvalidRequestError(f"{name} has more than {limit} ids")
    return [message_id(value, name) for value in values]


#: the largest batch index accepted in a message id (Pulsar's batches are far smaller)
MAX_BATCH_INDEX = 1 << 20


def message_ids_with_index(
    body: dict[str, Any], name: str = "messageIds", limit: int = 100000
) -> tuple[list[Position], list[tuple[Position, int]]]:
    """The ids of ``body[name]``: ``L:E`` (a whole entry) or ``L:E:I`` (message I of a
    batched entry). Returns (entries, (entry, batch index) pairs)."""
    values = body.get(name)
    if not isinstance(values, list) or not values:
        raise InvalidRequestError(
            f"{name} must be a non-empty list of 'ledgerId:entryId[:batchIndex]' strings"
        )
    if len(values) > limit:
        raise InvalidRequestError(f"{name} has more than {limit} ids")
    whole: list[Position] = []
    indexed: list[tuple[Position, int]] = []
    for value in values:
        if isinstance(value, str) and value.count(":") == 2:
            head, _, index_text = value.rpartition(":")
            index = decimal(index_text)
            if index is None or index >= MAX_BATCH_INDEX:
                shown = value if len(value) <= 64 else value[:64] + "..."
                raise InvalidRequestError(
                    f"bad message id {shown!r} in {name}: the batch index must be a decimal "
                    f"integer below {MAX_BATCH_INDEX}"
                )
            indexed.append((message_id(head, name), index))
        else:
            whole.append(message_id(value, name))
    return whole, indexed
