"""How a client spells its options where they travel as text (the HTTP routes' and the
WebSocket handshake's query parameters): one rule for each kind, so the two front ends
cannot disagree. Failures are InvalidRequestError naming the option."""

from __future__ import annotations

from broker.dispatch.errors import InvalidRequestError


def flag(name: str, text: str | None, default: bool) -> bool:
    """A boolean option: ``true`` or ``false`` in any letter case (``True``, ``FALSE``),
    as Pulsar's Java reads them; absent, ``default``; anything else (``1``, ``yes``, an
    empty value) is refused rather than read as false."""
    if text is None:
        return default
    lowered = text.lower()
    if lowered == "true":
        return True
    if lowered != "false":
        raise InvalidRequestError(f"query parameter {name} must be true or false")
    return False
