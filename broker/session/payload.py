"""What a message may be, whichever front end it arrives by: its payload within
``maxMessageSize`` and its key within Pulsar's limit. TooLargeError and
InvalidRequestError name the message (``what``) and the limit."""

from __future__ import annotations

from broker.dispatch.errors import InvalidRequestError, TooLargeError

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
