"""Entry encoding: the keyless, property-less fast path writes the same format."""

from __future__ import annotations

import struct

import pytest

from broker.ledger.entry import HEADER_SIZE, decode_message, encode_message, publish_time_of


@pytest.mark.parametrize("properties", [None, {}])
def test_a_message_without_key_or_properties_round_trips(
    properties: dict[str, str] | None,
) -> None:
    data = encode_message(b"payload", 1_700_000_000_123, 42, None, properties)
    assert data[:HEADER_SIZE] == struct.pack("<BqqII", 1, 1_700_000_000_123, 42, 0xFFFFFFFF, 0)
    message = decode_message(data)
    assert (message.publish_time, message.event_time, message.key) == (1_700_000_000_123, 42, None)
    assert (message.properties, message.payload) == ({}, b"payload")
    assert publish_time_of(data) == 1_700_000_000_123


def test_key_and_properties_round_trip_next_to_the_fast_path() -> None:
    data = encode_message(b"", 5, 0, "k\u00e9y", {"a": "b"})
    message = decode_message(data)
    assert (message.key, message.properties, message.payload) == ("k\u00e9y", {"a": "b"}, b"")
    empty_key = decode_message(encode_message(b"x", 5, 0, "", None))
    assert (empty_key.key, empty_key.payload) == ("", b"x")
