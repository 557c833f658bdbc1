"""Parsing what a type cannot check: decimal integers within Java's long, message ids.
Every failure is an InvalidRequestError naming the field, raised before anything is
changed. Bodies are read by ``broker.http.contract.JsonBody``."""

from __future__ import annotations

import re

from broker.dispatch.errors import InvalidRequestError
from broker.ledger.position import Position
from broker.session.message_ids import MAX_INT64

__all__ = ["MAX_INT64", "decimal", "message_id", "message_ids_with_index"]
_DIGITS = re.compile(r"[0-9]{1,19}")


def decimal(text: str) -> int | None:
    """``text`` as an integer if it is ASCII decimal digits only, at most MAX_INT64;
    None otherwise (empty, signs, spaces, other scripts' digits, too large)."""
    digits = (text.lstrip("0") or "0") if text else ""
    if not _DIGITS.fullmatch(digits):
        return None
    value = int(digits)
    return value if value <= MAX_INT64 else None


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


#: the largest batch index accepted in a message id (Pulsar's batches are far smaller)
MAX_BATCH_INDEX = 1 << 20


def message_ids_with_index(
    values: list[str], name: str = "messageIds"
) -> tuple[list[Position], list[tuple[Position, int]]]:
    """The ids of a validated list (``models.BatchMessageId``): ``L:E`` (a whole entry)
    or ``L:E:I`` (message I of a batched entry), each within Java's long. Returns
    (entries, (entry, batch index) pairs). O(len(values))."""
    whole: list[Position] = []
    indexed: list[tuple[Position, int]] = []
    for value in values:
        if value.count(":") == 2:
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
