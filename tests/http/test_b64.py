"""Produce payload decoding accepts and rejects exactly what binascii's strict mode does."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.http.b64 import decode_all_strict, decode_base64_strict


def verdict(decode: Callable[[str], bytes], text: str) -> bytes | str:
    try:
        result = decode(text)
    except (binascii.Error, ValueError):
        return "rejected"
    return result


def reference(text: str) -> bytes:
    return binascii.a2b_base64(text, strict_mode=True)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "QQ==",
        "QUI=",
        "QUJD",
        "AAAA=",
        "AAAA==",
        "AB==",
        "=",
        "==QQ",
        "QQ=",
        "QQ",
        "Q",
        "QQ==QQ==",
        "QQ==\n",
        " QQ==",
        "QQ-_",
        "QUJ\u00e9",
        "AAAA=A",
        "AA=A",
        "\x00AAA",
    ],
)
def test_edge_cases_get_binascii_strict_verdicts(text: str) -> None:
    assert verdict(decode_base64_strict, text) == verdict(reference, text)


@given(st.text(alphabet=st.sampled_from("AQgw/+=9zZ \n-_\u00e9\x00"), max_size=24))
def test_any_text_gets_the_binascii_strict_verdict(text: str) -> None:
    assert verdict(decode_base64_strict, text) == verdict(reference, text)


@given(
    st.binary(max_size=64),
    st.integers(min_value=0, max_value=100),
    st.sampled_from(["=", "==", "A", "-", " ", "\n", "\u00e9", ""]),
)
def test_valid_payloads_with_one_change_get_the_binascii_strict_verdict(
    payload: bytes, where: int, insert: str
) -> None:
    text = base64.b64encode(payload).decode()
    where = where % (len(text) + 1)
    changed = text[:where] + insert + text[where:]
    assert verdict(decode_base64_strict, text) == payload
    assert verdict(decode_base64_strict, changed) == verdict(reference, changed)


@given(st.lists(st.text(alphabet=st.sampled_from("AQgw/+=9zZ \n-_\u00e9\x00"), max_size=12)))
def test_batch_decoding_refuses_whatever_strict_decoding_refuses(texts: list[str]) -> None:
    try:
        decoded = decode_all_strict(texts)
    except (binascii.Error, ValueError):
        return  # the caller falls back to decode_base64_strict text by text
    assert decoded == [reference(text) for text in texts]


def test_batch_decoding_refuses_a_text_that_is_not_a_string() -> None:
    with pytest.raises(TypeError):
        decode_all_strict(["QQ==", 5])  # type: ignore[list-item]
