"""broker.ledger._entries, the compiled loop of encode_payloads, against entry.py's own.

The module is optional (a machine without a compiler installs without it), so where the
machine can build it a test insists it was built: a build that broke would otherwise
leave every other test passing on the Python loop, and the broker slower.
"""

from __future__ import annotations

import json
import pathlib
import platform
import shutil
import struct
import subprocess
import sys
import sysconfig

import pytest
from crc32c import crc32c
from hypothesis import example, given, settings
from hypothesis import strategies as st

# the HTTP side binds pybase64's decoder into the compiled module (encode_rows_b64 needs it)
from broker.http.b64_entries import compiled_base64_encoder
from broker.ledger import entry
from broker.ledger.entry import (
    PLAIN_SEQUENCE_IDS,
    checksum_ok,
    compiled_encoder,
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
    For payloads and for base64 texts alike. In a fresh interpreter: under xdist the
    worker's own threads allocate and free objects too, which can run the collection
    before the call or hold it off past it."""
    probe = subprocess.run(
        [sys.executable, "-c", SHRINKING_COLLECTION, name, repr(item)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr
    emptied, refusal = json.loads(probe.stdout)
    assert emptied  # the collection ran inside the call
    assert refusal is not None and "changed" in refusal


#: the collection test's body, run alone in its process: argv names the compiled
#: function and the repr of one item of its list
SHRINKING_COLLECTION = """
import ast, gc, json, sys
from broker.http.b64_entries import compiled_base64_encoder
from broker.ledger import _entries as compiled, entry
from crc32c import crc32c

compiled_base64_encoder()  # binds the decoder encode_rows_b64 needs
name, item = sys.argv[1], ast.literal_eval(sys.argv[2])
items = [item] * 5000
tail = b"\\x18" + entry._varint(7)
rows = entry._PlainMetadata("p", len(tail)).rows(0, len(items))


class Shrinker:
    def __del__(self):
        items.clear()
        rows.clear()


tail_crc = crc32c(tail)
encode = getattr(compiled, name)
refusal = None
gc.collect()
gc.disable()
cycle = Shrinker()
cycle.self = cycle
del cycle
gc.set_threshold(1)
gc.enable()
# no container allocated before the call's own list: it collects
try:
    encode(rows, items, tail, tail_crc)
except RuntimeError as error:
    refusal = str(error)
gc.set_threshold(700)
print(json.dumps([items == [] and rows == [], refusal]))
"""


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


def _plain_answers(data: bytes) -> tuple[object, object]:
    """(compiled, Python) answers of plain_fields for ``data``, an EntryFormatError as
    its message."""
    try:
        python: object = entry._plain_fields_py(data)
    except entry.EntryFormatError as error:
        python = str(error)
    answer = compiled.plain_fields(data)
    if isinstance(answer, int):
        return entry._SPLIT_ERRORS[answer], python
    return answer, python


def _metadata_entry(metadata: bytes, size_delta: int = 0) -> bytes:
    return b"\x0e\x01\0\0\0\0" + struct.pack(">I", len(metadata) + size_delta) + metadata


varint_bytes = st.one_of(
    st.integers(0, (1 << 63) - 1).map(entry._varint),
    st.binary(min_size=0, max_size=11),  # non-canonical, unterminated, too long
)


@needs_compiled
@settings(max_examples=600, deadline=None)
@given(
    name=st.one_of(
        st.text(max_size=130).map(str.encode), st.binary(max_size=130)
    ),  # long names and bytes that are not UTF-8 too
    sequence=varint_bytes,
    publish=varint_bytes,
    after=st.one_of(st.just(b""), st.binary(max_size=4)),
    tags=st.tuples(
        st.sampled_from([0x0A, 0x0B]), st.sampled_from([0x10, 0x18]), st.sampled_from([0x18, 0x20])
    ),
    size_delta=st.sampled_from([0, 0, 0, 1, -1]),
)
@example(
    name=b"p",
    sequence=b"\x80\x01",
    publish=b"\x01",
    after=b"",
    tags=(0x0A, 0x10, 0x18),
    size_delta=0,
)
@example(
    name=b"p",
    sequence=b"\x80\x00",
    publish=b"\x01",
    after=b"",
    tags=(0x0A, 0x10, 0x18),
    size_delta=0,
)
@example(
    name=b"\xff",
    sequence=b"\x01",
    publish=b"\x01",
    after=b"",
    tags=(0x0A, 0x10, 0x18),
    size_delta=0,
)
def test_compiled_and_python_plain_fields_read_metadata_alike(
    name: bytes,
    sequence: bytes,
    publish: bytes,
    after: bytes,
    tags: tuple[int, int, int],
    size_delta: int,
) -> None:
    name_tag, sequence_tag, publish_tag = tags
    metadata = (
        bytes([name_tag, len(name) & 0xFF])
        + name
        + bytes([sequence_tag])
        + sequence
        + bytes([publish_tag])
        + publish
        + after
    )
    data = _metadata_entry(metadata, size_delta)
    compiled_answer, python_answer = _plain_answers(data)
    assert compiled_answer == python_answer


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40))
def test_compiled_and_python_plain_fields_agree_on_any_bytes(data: bytes) -> None:
    for candidate in (data, b"\x0e\x01" + data, _metadata_entry(data)):
        compiled_answer, python_answer = _plain_answers(candidate)
        assert compiled_answer == python_answer


@needs_compiled
def test_plain_fields_uses_the_compiled_reading_for_bytes() -> None:
    data = encode_message(
        b"payload", 1_700_000_000_123, producer_name="producer-7", sequence_id=4_000
    )
    assert entry.plain_fields(data) == entry._plain_fields_py(data)
    assert entry.plain_fields(data)[:3] == ("producer-7", 4_000, 1_700_000_000_123)
    assert entry._compiled_plain is compiled.plain_fields
    with pytest.raises(entry.EntryFormatError, match="no magic"):
        entry.plain_fields(b"not an entry")
    with pytest.raises(entry.EntryFormatError, match="runs past the end"):
        entry.plain_fields(_metadata_entry(b"\x0a\x01p", 1))
