"""broker.http.b64_entries: the HTTP producer's base64 payloads decoded straight into
their entries by the compiled module, against decoding with broker.http.b64 and encoding
with broker.ledger.entry.

Where the machine can build the compiled module a test insists pybase64's decoder was
bound: a binding that broke would otherwise leave every other test passing on the
decode-then-encode path, and the broker slower.
"""

from __future__ import annotations

import binascii
import itertools
from typing import Any

import pybase64
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.http import b64_entries
from broker.http.b64 import decode_base64_strict
from broker.http.b64_entries import (
    HTTP_PRODUCER,
    compiled_base64_encoder,
    encode_base64_payloads,
    encode_batch_base64,
)
from broker.ledger.entry import (
    checksum_ok,
    encode_batch,
    encode_batch_payloads,
    encode_message,
    encode_payloads,
)
from tests.ledger.test_entries_compiled import _can_build, compiled, needs_compiled, needs_fused


def _strict_or_none(text: object) -> bytes | None:
    """The broker's strict decoding of a produce payload (broker.http.b64), or None where
    it refuses the text."""
    try:
        return decode_base64_strict(text)  # type: ignore[arg-type]
    except (ValueError, TypeError, binascii.Error):
        return None


def _fused_agrees(texts: list[Any], publish_time: int = 1_700_000_000_000) -> list[bytes] | None:
    """encode_base64_payloads of texts, checked against decoding each text the broker's
    strict way and encoding the payloads: where it encodes, the same entries, and it
    answers None only where some text is not canonical base64."""
    built = encode_base64_payloads(texts, publish_time)
    decoded = [_strict_or_none(text) for text in texts]
    if built is not None:
        assert None not in decoded, texts
        assert built == encode_payloads(decoded, publish_time, HTTP_PRODUCER)  # type: ignore[arg-type]
    return built


def _canonical(text: object) -> bool:
    """Canonical base64: an ASCII str that pybase64's strict decoding (the first the
    broker tries) accepts; whole quads, '=' only at the end. Trailing bits that are not
    zero ("QR==") count: every strict decoder here accepts them."""
    if type(text) is not str or not text.isascii():
        return False
    try:
        pybase64.b64decode(text, None, True)
    except (ValueError, binascii.Error):
        return False
    return True


def test_the_base64_decoder_is_bound_where_the_loop_is_built() -> None:
    if not _can_build():
        pytest.skip("no x86-64 with SSE4.2, a C compiler and Python's headers here")
    assert compiled_base64_encoder(), "pybase64's base64_decode was not found"


_B64_CHARS = "AQgw/+9z=-_ \n.\x00é"


@needs_fused
def test_every_short_text_is_decoded_as_the_strict_decoder_decodes_it_or_refused() -> None:
    """All texts of up to 4 characters, and 8 with a quad of "QUJD" before or after,
    over characters of each kind: letters whose low bits are zero or not, digits, '+'
    and '/', padding, URL-safe characters, whitespace, NUL and a non-ASCII letter. Each
    canonical text is encoded; nothing else is, and what is encoded is the strict
    decoder's bytes."""
    encoded = 0
    for length in range(5):
        for chars in itertools.product(_B64_CHARS, repeat=length):
            text = "".join(chars)
            for whole in (text, "QUJD" + text, text + "QUJD"):
                built = _fused_agrees([whole])
                if _canonical(whole):
                    assert built is not None, whole
                    encoded += 1
    assert encoded > 1000  # the canonical texts of every quad kind were decoded


@needs_fused
def test_non_canonical_padding_is_left_to_the_strict_decoder() -> None:
    """binascii's strict mode accepts padding after a complete quad ("QUJD="), which the
    broker accepts; decoding into the entries refuses it and the broker decodes it its
    own way. Trailing bits that are not zero ("QR==") are accepted by both decoders."""
    assert _strict_or_none("QUJD=") == b"ABC"
    assert encode_base64_payloads(["QUJD="], 7) is None
    assert _fused_agrees(["QR=="]) is not None


@needs_fused
@settings(max_examples=300, deadline=None)
@given(
    payloads=st.lists(
        st.binary(max_size=40) | st.binary(min_size=1000, max_size=1100), min_size=1, max_size=8
    ),
    publish_time=st.integers(0, (1 << 64) - 1),
    spoil=st.none()
    | st.tuples(st.integers(0, 7), st.integers(0, 1500), st.sampled_from("=-_ é.*")),
)
def test_payloads_decoded_into_entries_equal_decoding_then_encoding(
    payloads: list[bytes], publish_time: int, spoil: tuple[int, int, str] | None
) -> None:
    """Canonical texts of every length modulo 3 (so each kind of padding) and of 1 KiB
    payloads, whose decoding runs the SIMD loop, are encoded; one character spoiled
    anywhere leaves the request to the strict decoder whenever it is no longer
    canonical."""
    texts = [pybase64.b64encode(payload).decode() for payload in payloads]
    if spoil is not None:
        index, at, char = spoil
        index %= len(texts)
        text = texts[index]
        at %= len(text) + 1
        texts[index] = text[:at] + char + text[at + 1 :]
    built = _fused_agrees(texts, publish_time)
    assert (built is not None) == all(map(_canonical, texts))
    if spoil is None:
        assert built == [
            encode_message(payload, publish_time, producer_name=HTTP_PRODUCER, sequence_id=index)
            for index, payload in enumerate(payloads)
        ]


@needs_fused
@pytest.mark.parametrize(
    "text",
    [
        b"QUJD",
        bytearray(b"QUJD"),
        5,
        None,
        ["QUJD"],
        "QUJ",
        "QUJDQ",
        "QUJ\u00e9",
        "QU\x00D",
        # two bytes a character: its first four bytes read as ASCII spell "QUJD"
        "\u5551\u444a\u5551\u444a",
    ],
)
def test_texts_that_are_not_canonical_base64_strings_are_refused(text: object) -> None:
    """Not a str, not a whole number of quads, a character outside the alphabet, or a
    str that is not stored one byte a character."""
    assert encode_base64_payloads(["QUJD", text, "QUJD"], 7) is None


@needs_compiled
@pytest.mark.parametrize(
    ("rows", "texts", "tail", "tail_crc", "error"),
    [
        ([(b"h", 1, 2)], ("QUJD",), b"t", 0, TypeError),  # texts not a list
        ([(b"h", 1, 2)], ["QUJD", "QUJD"], b"t", 0, ValueError),  # lengths differ
        ([(b"h", 1, 2)], ["QUJD"], "t", 0, TypeError),  # tail not bytes
        ([("h", 1, 2)], ["QUJD"], b"t", 0, TypeError),  # a head not bytes
        ([(b"h", 1 << 32, 2)], ["QUJD"], b"t", 0, ValueError),  # size over 32 bits
        ([(b"h", 1, 2)], ["QUJD"], b"t", -1, OverflowError),  # a negative tail CRC
    ],
)
def test_bad_rows_for_base64_texts_raise(
    rows: object, texts: object, tail: object, tail_crc: object, error: type[Exception]
) -> None:
    with pytest.raises(error):
        compiled.encode_rows_b64(rows, texts, tail, tail_crc)


def test_without_the_bound_decoder_nothing_is_encoded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where pybase64's decoder was not found the caller gets None and decodes its own
    way (the produce route then decodes with broker.http.b64)."""
    monkeypatch.setattr(b64_entries, "_b64_bound", False)
    assert encode_base64_payloads(["QUJD"], 7) is None
    assert not compiled_base64_encoder()


@needs_compiled
@pytest.mark.parametrize(
    "path",
    ["", "/nonexistent/lib.so", getattr(pybase64, "_pybase64", pybase64).__file__ + "\x00junk"],
)
def test_bind_base64_refuses_what_is_not_a_library_holding_the_decoder(path: str) -> None:
    """An empty path would open the program itself and a NUL would cut the path short:
    refused, like a path with no library; the decoder bound before stays bound."""
    with pytest.raises((ValueError, OSError)):
        compiled.bind_base64(path)
    if compiled_base64_encoder():
        assert encode_base64_payloads(["QUJD"], 7) == encode_payloads([b"ABC"], 7, HTTP_PRODUCER)


@needs_compiled
def test_bind_base64_refuses_a_library_without_base64_decode() -> None:
    with pytest.raises(OSError, match="no base64_decode"):
        compiled.bind_base64(compiled.__file__)


def _batch_agrees(texts: list[Any], publish_time: int = 1_700_000_000_000) -> bytes | None:
    """encode_batch_base64 of texts, checked against decoding each text the broker's
    strict way and batching the payloads: where it encodes, the same entry, and it
    answers None only where some text is not canonical base64."""
    built = encode_batch_base64(texts, publish_time, 1 << 30)
    decoded = [_strict_or_none(text) for text in texts]
    if built is not None:
        assert None not in decoded, texts
        assert built == encode_batch_payloads(decoded, publish_time, HTTP_PRODUCER)  # type: ignore[arg-type]
        assert checksum_ok(built)
    return built


@needs_fused
def test_every_short_text_is_batched_as_the_strict_decoder_decodes_it_or_refused() -> None:
    """As for single entries: each text of up to 4 characters alone, then before and
    after a canonical one (whose framing follows or precedes it in the batch)."""
    encoded = 0
    for length in range(5):
        for chars in itertools.product(_B64_CHARS, repeat=length):
            text = "".join(chars)
            for texts in ([text], ["QUJD", text], [text, "QQ=="]):
                built = _batch_agrees(texts)
                assert (built is not None) == all(map(_canonical, texts)), texts
                encoded += built is not None
    assert encoded > 1000


@needs_fused
@settings(max_examples=300, deadline=None)
@given(
    payloads=st.lists(
        st.binary(max_size=40) | st.binary(min_size=1000, max_size=1100), min_size=1, max_size=8
    ),
    publish_time=st.integers(0, (1 << 64) - 1),
    spoil=st.none()
    | st.tuples(st.integers(0, 7), st.integers(0, 1500), st.sampled_from("=-_ é.*")),
)
def test_payloads_decoded_into_a_batch_equal_decoding_then_batching(
    payloads: list[bytes], publish_time: int, spoil: tuple[int, int, str] | None
) -> None:
    """Payloads of one size (the framing table's path) and of mixed sizes, every kind of
    padding, the last one's included (the entry is cut to size after it)."""
    texts = [pybase64.b64encode(payload).decode() for payload in payloads]
    if spoil is not None:
        index, at, char = spoil
        index %= len(texts)
        text = texts[index]
        at %= len(text) + 1
        texts[index] = text[:at] + char + text[at + 1 :]
    built = _batch_agrees(texts, publish_time)
    assert (built is not None) == all(map(_canonical, texts))
    if spoil is None:
        assert built == encode_batch(
            [(payload, None, None, 0) for payload in payloads], publish_time, HTTP_PRODUCER
        )


@needs_fused
def test_a_batch_over_the_size_limit_or_empty_is_left_to_the_caller() -> None:
    texts = ["QUJD", "QQ=="]  # 3 + 1 bytes
    assert encode_batch_base64(texts, 7, 4) == encode_batch_payloads(
        [b"ABC", b"A"], 7, HTTP_PRODUCER
    )
    assert encode_batch_base64(texts, 7, 3) is None
    assert encode_batch_base64([], 7, 4) is None


@needs_fused
@pytest.mark.parametrize(
    ("metadata", "framing", "texts", "error"),
    [
        (bytearray(b"m"), [b"f"], ["QUJD"], TypeError),  # metadata not bytes
        (b"m", (b"f",), ["QUJD"], TypeError),  # framing not a list
        (b"m", [b"f"], ("QUJD",), TypeError),  # texts not a list
        (b"m", [b"f", b"g"], ["QUJD"], ValueError),  # lengths differ
        (b"m", ["f"], ["QUJD"], TypeError),  # a frame not bytes
    ],
)
def test_bad_batch_arguments_raise(
    metadata: object, framing: object, texts: object, error: type[Exception]
) -> None:
    with pytest.raises(error):
        compiled.encode_batch_b64(metadata, framing, texts)


@needs_fused
def test_decoded_sizes_are_the_payload_sizes_of_whole_quads() -> None:
    assert compiled.decoded_sizes(["", "QUJD", "QUI=", "QQ==", "QUJDQQ=="]) == [0, 3, 2, 1, 4]
    for bad in ("QUJ", 5, b"QUJD", "QUJ\u00e9"):
        assert compiled.decoded_sizes(["QUJD", bad]) is None
    with pytest.raises(TypeError):
        compiled.decoded_sizes(("QUJD",))
