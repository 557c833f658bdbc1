"""What a message may be, whichever front end it arrives by: its payload within
``maxMessageSize``, its key within Pulsar's limit, and an entry a client built itself
one that can be trusted (:func:`check_entry`). TooLargeError and InvalidRequestError
name the message (``what``) and the limit; CorruptEntryError what is wrong with the
entry."""

from __future__ import annotations

from broker.dispatch.errors import CorruptEntryError, InvalidRequestError, TooLargeError
from broker.ledger.entry import EntryFormatError
from broker.ledger.entry import check_entry as _check_entry

#: the longest key a message may have, in UTF-8 bytes
MAX_KEY_BYTES = 65535


def check_payload(payload: bytes, max_size: int, what: str) -> None:
    """TooLargeError if ``payload`` is over ``max_size`` bytes. O(1)."""
    if len(payload) > max_size:
        raise TooLargeError(f"{what} is {len(payload)} bytes; maxMessageSize is {max_size}")


def check_batch(payload_bytes: int, max_size: int) -> None:
    """TooLargeError if a batch's payloads together are over ``max_size`` bytes."""
    if payload_bytes > max_size:
        raise TooLargeError(f"the batch's payloads exceed maxMessageSize ({max_size} bytes)")


def check_key(key: str | None, what: str) -> None:
    """InvalidRequestError if ``key`` is over MAX_KEY_BYTES in UTF-8. O(1) for a key of
    at most MAX_KEY_BYTES / 4 characters (it cannot be over), else O(len(key))."""
    if key is not None and len(key) * 4 > MAX_KEY_BYTES and len(key.encode()) > MAX_KEY_BYTES:
        raise InvalidRequestError(f"{what}.key is over {MAX_KEY_BYTES} bytes")


def check_entry(entry: bytes, num_messages: int | None = None) -> int:
    """The messages of an entry whose metadata a client wrote (the binary protocol's
    SEND carries it as the client built it); CorruptEntryError, before anything is
    stored, when it cannot be trusted: metadata that does not parse, a batch header
    that counts at most 0 messages or more than the entry holds, a batch message whose
    SingleMessageMetadata does not parse (``broker.ledger.entry.check_entry``), or a
    ``num_messages`` claimed beside it (the SEND's) that differs from its metadata's
    count. The HTTP and WebSocket producers send fields, not metadata: their entries
    are built by the broker (``broker.ledger.entry``'s encoders), trustworthy by
    construction, and not checked again. O(metadata size), O(messages) for a batch."""
    try:
        count = _check_entry(entry)
    except EntryFormatError as error:
        raise CorruptEntryError(str(error)) from None
    if num_messages is not None and num_messages != count:
        raise CorruptEntryError(
            f"num_messages {num_messages} differs from the {count} the entry's metadata counts"
        )
    return count
