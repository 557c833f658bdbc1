"""broker.ledger._entries, the compiled loop of encode_payloads, against entry.py's own.

The module is optional (a machine without a compiler installs without it), so where the
machine can build it a test insists it was built: a build that broke would otherwise
leave every other test passing on the Python loop, and the broker slower.
"""

from __future__ import annotations

import binascii
import gc
import itertools
import pathlib
import platform
import shutil
import sysconfig
from typing import Any

import pybase64
import pytest
from crc32c import crc32c
from hypothesis import example, given, settings
from hypothesis import strategies as st

from broker.http.b64 import decode_base64_strict
from broker.ledger import entry
from broker.ledger.entry import (
    PLAIN_SEQUENCE_IDS,
    checksum_ok,
    compiled_base64_encoder,
    compiled_encoder,
    encode_base64_payloads,
    encode_batch,
    encode_batch_base64,
    encode_batch_payloads,
    encode_message,
    encode_payloads,
    encode_rows,
)

try:
    from broker.ledger import _entries as compiled
except ImportError:
    compiled = None  # type: ignore[assignment]

needs_compiled = pytest.mark.skipif(
    compiled is None, reason="broker.ledger._entries not built here"
)
needs_fused = pytest.mark.skipif(
    not compiled_base64_encoder(), reason="no compiled loop or no pybase64 decoder here"
)


def can_build_extensions() -> bool:
    """Whether setup.py's optional extensions should have built here: the compiler this
    Python builds extensions with, and its headers."""
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    headers = pathlib.Path(sysconfig.get_paths()["include"], "Python.h")
    return shutil.which(compiler) is not None and headers.exists()


def _can_build() -> bool:
    flags = pathlib.Path("/proc/cpuinfo")
    sse42 = flags.exists() and " sse4_2" in flags.read_text()
    return platform.machine() == "x86_64" and sse42 and can_build_extensions()


def test_the_compiled_loop_is_built_and_used_where_the_machine_can_build_it() -> None:
    if not _can_build():
        pytest.skip("no x86-64 with SSE4.2, a C compiler and Python's headers here")
    assert compiled is not None, "setup.py's optional build of broker.ledger._entries failed"
    assert compiled_encoder()


def _rows(count: int, publish_time: int, producer: str, first: int) -> tuple[list, bytes]:
    tail = b"\x18" + entry._varint(publish_time)
    table = entry._PlainMetadata(producer, len(tail))
    return table.rows(first, count), tail


@needs_compiled
@settings(max_examples=400, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=40) | st.binary(min_size=1000, max_size=1100), max_size=8),
    publish_time=st.integers(0, (1 << 64) - 1),
    producer=st.text(max_size=150),
    first=st.integers(0, PLAIN_SEQUENCE_IDS - 8),
)
@example(payloads=[b""], publish_time=0, producer="", first=0)
@example(payloads=[bytes(range(256)) * 4], publish_time=1 << 63, producer="p", first=4087)
def test_compiled_and_python_loops_write_the_same_bytes(
    payloads: list[bytes], publish_time: int, producer: str, first: int
) -> None:
    """Payload sizes on both sides of every 8-byte step of the CRC's word loop, and
    1 KiB ones; every varint length of the publish time and sequence id."""
    rows, tail = _rows(len(payloads), publish_time, producer, first)
    tail_crc = crc32c(tail)
    built = compiled.encode_rows(rows, payloads, tail, tail_crc)
    assert built == encode_rows(rows, payloads, tail, tail_crc)
    assert built == [
        encode_message(payload, publish_time, producer_name=producer, sequence_id=first + index)
        for index, payload in enumerate(payloads)
    ]
    assert all(checksum_ok(data) for data in built)


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=2100), value=st.integers(0, (1 << 32) - 1))
@example(data=b"", value=0)
@example(data=b"123456789", value=0)  # the check value: 0xE3069283
def test_the_compiled_crc32c_agrees_with_the_crc32c_package(data: bytes, value: int) -> None:
    assert compiled.crc32c(data, value) == crc32c(data, value)
    assert compiled.crc32c(b"123456789") == 0xE3069283


@needs_compiled
def test_encode_payloads_uses_the_compiled_loop_for_lists_only() -> None:
    payloads = [b"a" * 1024, b"", b"xyz"]
    expected = [encode_message(p, 7, sequence_id=i) for i, p in enumerate(payloads)]
    assert encode_payloads(payloads, 7) == expected  # list: compiled
    assert encode_payloads(tuple(payloads), 7) == expected  # any other sequence: Python
    # a list holding other bytes-like payloads: refused by the compiled loop, encoded
    # by entry.py's own
    views = [bytearray(b"a" * 1024), memoryview(b""), b"xyz"]
    assert encode_payloads(views, 7) == expected  # type: ignore[arg-type]


@needs_compiled
@pytest.mark.parametrize(
    ("name", "item"),
    [("encode_rows", b"x" * 10), pytest.param("encode_rows_b64", "QUJD", marks=needs_fused)],
)
def test_lists_emptied_by_a_collection_during_the_call_are_refused(
    name: str, item: bytes | str
) -> None:
    """Allocating the result list may run a garbage collection, and a __del__ it runs
    may shrink the lists the loop is about to read: refused, not read past their end.
    For payloads and for base64 texts alike."""
    items = [item] * 5000
    rows, tail = _rows(len(items), 7, "p", 0)

    class Shrinker:
        def __del__(self) -> None:
            items.clear()
            rows.clear()

    tail_crc = crc32c(tail)
    encode = getattr(compiled, name)
    refused: RuntimeError | None = None
    gc.collect()
    thresholds = gc.get_threshold()
    gc.disable()
    try:
        cycle = Shrinker()
        cycle.self = cycle  # type: ignore[attr-defined]
        del cycle
        gc.set_threshold(1)
        gc.enable()
        # no container allocated before the call's own list: it collects
        try:
            encode(rows, items, tail, tail_crc)
        except RuntimeError as error:
            refused = error
    finally:
        gc.set_threshold(*thresholds)
        gc.enable()
    assert items == [] and rows == []  # the collection ran inside the call
    assert refused is not None and "changed" in str(refused)


@needs_compiled
@pytest.mark.parametrize(
    ("rows", "payloads", "tail", "tail_crc", "error"),
    [
        ([(b"h", 1, 2)], (b"p",), b"t", 0, TypeError),  # payloads not a list
        (((b"h", 1, 2),), [b"p"], b"t", 0, TypeError),  # rows not a list
        ([(b"h", 1, 2)], [b"p"], bytearray(b"t"), 0, TypeError),  # tail not bytes
        ([(b"h", 1, 2)], [b"p", b"q"], b"t", 0, ValueError),  # lengths differ
        ([(b"h", 1)], [b"p"], b"t", 0, TypeError),  # a row of two
        ([[b"h", 1, 2]], [b"p"], b"t", 0, TypeError),  # a row not a tuple
        ([("h", 1, 2)], [b"p"], b"t", 0, TypeError),  # a head not bytes
        ([(b"h", 1, 2)], [memoryview(b"p")], b"t", 0, TypeError),  # a payload not bytes
        ([(b"h", 1 << 32, 2)], [b"p"], b"t", 0, ValueError),  # size over 32 bits
        ([(b"h", -1, 2)], [b"p"], b"t", 0, OverflowError),  # a negative size
        ([(b"h", 1, 2.0)], [b"p"], b"t", 0, TypeError),  # a carried CRC not an int
        ([(b"h", 1, 2)], [b"p"], b"t", 1 << 32, ValueError),  # tail CRC over 32 bits
        ([(b"h", 1, 2), (b"h", 1, True)], [b"p", b"q"], b"t", 0, TypeError),  # bool: not exact
    ],
)
def test_bad_arguments_raise_and_build_nothing(
    rows: object, payloads: object, tail: object, tail_crc: object, error: type[Exception]
) -> None:
    with pytest.raises(error):
        compiled.encode_rows(rows, payloads, tail, tail_crc)


# ------------------------------------------------- base64 decoded into the entries


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
        assert built == encode_payloads(decoded, publish_time)  # type: ignore[arg-type]
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
            encode_message(payload, publish_time, sequence_id=index)
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
    monkeypatch.setattr(entry, "_b64_bound", False)
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
        assert encode_base64_payloads(["QUJD"], 7) == encode_payloads([b"ABC"], 7)


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
        assert built == encode_batch_payloads(decoded, publish_time)  # type: ignore[arg-type]
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
            [(payload, None, None, 0) for payload in payloads], publish_time
        )


@needs_fused
def test_a_batch_over_the_size_limit_or_empty_is_left_to_the_caller() -> None:
    texts = ["QUJD", "QQ=="]  # 3 + 1 bytes
    assert encode_batch_base64(texts, 7, 4) == encode_batch_payloads([b"ABC", b"A"], 7)
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
