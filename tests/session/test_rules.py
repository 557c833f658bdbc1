"""The rules every front end reads its wire format by: boolean options, ack sets,
start positions, payload limits."""

from __future__ import annotations

import pytest

from broker.dispatch.errors import InvalidRequestError, TooLargeError
from broker.ledger.position import Position
from broker.session.acks import mask_of, unacked_after, words_of
from broker.session.message_ids import MAX_INT64, signed, start_of
from broker.session.options import flag
from broker.session.payload import MAX_KEY_BYTES, check_batch, check_key, check_payload

UINT64_MINUS_ONE = (1 << 64) - 1


@pytest.mark.parametrize(
    ("text", "value"),
    [("true", True), ("True", True), ("TRUE", True), ("false", False), ("False", False)],
)
def test_a_boolean_option_is_true_or_false_in_any_letter_case(text: str, value: bool) -> None:
    assert flag("force", text, not value) is value


@pytest.mark.parametrize("text", ["", "1", "0", "yes", "no", " true", "truE "])
def test_any_other_spelling_of_a_boolean_is_refused_naming_the_option(text: str) -> None:
    with pytest.raises(InvalidRequestError, match="batchingEnabled"):
        flag("batchingEnabled", text, False)


def test_an_absent_boolean_is_its_default() -> None:
    assert flag("pullMode", None, True) is True


def test_a_batch_index_ack_leaves_the_rest_of_the_batch_unacked() -> None:
    assert unacked_after(4, 1, cumulative=False) == 0b1101
    assert unacked_after(4, 1, cumulative=True) == 0b1100
    assert unacked_after(4, 3, cumulative=True) == 0
    assert unacked_after(200, 150, cumulative=False) == ((1 << 200) - 1) & ~(1 << 150)


@pytest.mark.parametrize("mask", [0, 1, (1 << 63), (1 << 64) - 1, (1 << 130) | 5])
def test_an_ack_set_survives_pulsars_signed_words(mask: int) -> None:
    words = words_of(mask)
    assert all(-(1 << 63) <= word < (1 << 63) for word in words)
    assert mask_of(words) == mask


def test_start_markers_and_positions() -> None:
    assert start_of(UINT64_MINUS_ONE, UINT64_MINUS_ONE) == "earliest"
    assert start_of(MAX_INT64, MAX_INT64) == "latest"
    assert start_of(3, UINT64_MINUS_ONE) == Position(3, -1)
    assert start_of(3, 7) == Position(3, 7)
    assert signed(UINT64_MINUS_ONE) == -1 and signed(5) == 5


def test_a_payload_over_max_message_size_is_too_large() -> None:
    check_payload(b"x" * 10, 10, "message")
    with pytest.raises(TooLargeError, match=r"messages\[2\] is 11 bytes; maxMessageSize is 10"):
        check_payload(b"x" * 11, 10, "messages[2]")
    with pytest.raises(TooLargeError):
        check_batch(11, 10)


def test_a_key_over_its_limit_in_utf8_bytes_is_refused() -> None:
    check_key(None, "message")
    check_key("k" * MAX_KEY_BYTES, "message")
    check_key("é" * (MAX_KEY_BYTES // 2), "message")
    with pytest.raises(InvalidRequestError, match=r"message\.key"):
        check_key("é" * (MAX_KEY_BYTES // 2 + 1), "message")
