"""storage_stub.bookie._frames, compiled frame headers and copies, against frame.py's.

The module is optional (a machine without a compiler installs without it), so where the
machine can build it a test insists it was built.
"""

from __future__ import annotations

import mmap
import pathlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage_stub.bookie import direct_writer
from storage_stub.bookie import frame as frame_module
from storage_stub.bookie.api import total_size
from storage_stub.bookie.frame import Frame, copy_frame, frame_header
from tests.ledger.test_entries_compiled import can_build_extensions

try:
    from storage_stub.bookie import _frames as compiled
except ImportError:
    compiled = None  # type: ignore[assignment]

needs_compiled = pytest.mark.skipif(compiled is None, reason="_frames not built here")


def test_the_compiled_frames_are_built_and_used_where_the_machine_can_build_them() -> None:
    if not can_build_extensions():
        pytest.skip("no C compiler and Python's headers here")
    assert compiled is not None, "setup.py's optional build of storage_stub.bookie._frames failed"
    assert frame_module._compiled is compiled
    assert frame_module.compiled_frames()


entries_strategy = st.lists(
    st.binary(max_size=64) | st.binary(min_size=1000, max_size=1030), min_size=1, max_size=12
)


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(
    ledger_id=st.integers(0, (1 << 64) - 1),
    first=st.integers(-(1 << 63), (1 << 63) - 1),
    entries=entries_strategy,
    as_tuple=st.booleans(),
)
def test_compiled_and_python_headers_are_the_same_bytes(
    ledger_id: int, first: int, entries: list[bytes], as_tuple: bool
) -> None:
    given_entries = tuple(entries) if as_tuple else entries
    assert compiled.frame_header(ledger_id, first, given_entries) == frame_header(
        ledger_id, first, given_entries
    )


@needs_compiled
@settings(max_examples=200, deadline=None)
@given(entries=entries_strategy, position=st.integers(0, 5000), slack=st.integers(0, 100))
def test_compiled_and_python_copies_write_the_same_bytes(
    entries: list[bytes], position: int, slack: int
) -> None:
    frame = Frame(7, 3, entries)
    size = frame.size
    ours = bytearray(b"\xaa" * (position + size + slack))
    theirs = bytearray(ours)
    assert compiled.copy_frame(ours, position, frame.header, frame.entries) == position + size
    data = b"".join((frame.header, *entries))
    theirs[position : position + size] = data
    assert ours == theirs


@needs_compiled
def test_a_copy_that_would_overrun_copies_nothing() -> None:
    frame = Frame(1, 0, [b"x" * 100])
    buffer = mmap.mmap(-1, 4096)
    with pytest.raises(ValueError, match="overruns"):
        copy_frame(buffer, 4096 - frame.size + 1, frame)
    with pytest.raises(ValueError, match="overruns"):
        compiled.copy_frame(buffer, -1, frame.header, frame.entries)
    assert buffer[:] == bytes(4096)
    assert copy_frame(buffer, 4096 - frame.size, frame) == 4096
    frame_python = frame_module._compiled
    try:
        frame_module._compiled = None  # type: ignore[assignment]
        with pytest.raises(ValueError, match="overruns"):
            copy_frame(buffer, -1, frame)
    finally:
        frame_module._compiled = frame_python


@needs_compiled
def test_a_header_that_views_the_destination_is_copied_as_a_slice_assignment_would() -> None:
    ours = bytearray(bytes(range(256)) * 4)
    theirs = bytearray(ours)
    end = compiled.copy_frame(ours, 1, memoryview(ours)[0:512], [b"xy"])
    theirs[1:513] = bytes(theirs[0:512])
    theirs[513:515] = b"xy"
    assert (end, ours) == (515, theirs)


@needs_compiled
@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((1, 0, []), ValueError),  # no entries
        ((1, 0, [b"a", bytearray(b"b")]), TypeError),  # not bytes
        ((1, 0, iter([b"a"])), TypeError),  # not a list or tuple
        ((-1, 0, [b"a"]), OverflowError),  # ledger id under 0
        ((1 << 64, 0, [b"a"]), OverflowError),
        ((1, 1 << 63, [b"a"]), OverflowError),
        ((1.0, 0, [b"a"]), TypeError),
    ],
)
def test_bad_headers_raise(args: tuple[object, object, object], error: type[Exception]) -> None:
    with pytest.raises(error):
        compiled.frame_header(*args)


def test_a_frame_of_entries_the_compiled_code_refuses_is_built_in_python() -> None:
    """Frame and copy_frame fall back on TypeError: entries of bytearrays or a generator
    list still make the same frame as bytes would."""
    as_bytes = Frame(5, 9, [b"ab", b"cde"])
    other = Frame(5, 9, [bytearray(b"ab"), memoryview(b"cde")])  # type: ignore[list-item]
    assert other.header == as_bytes.header and other.payload_bytes == as_bytes.payload_bytes == 5
    buffer = mmap.mmap(-1, 4096)
    end = copy_frame(buffer, 10, other)
    assert buffer[10:end] == b"".join((as_bytes.header, b"ab", b"cde"))


@needs_compiled
@settings(max_examples=200, deadline=None)
@given(entries=st.lists(st.binary(max_size=3000), max_size=20), as_tuple=st.booleans())
def test_compiled_total_size_is_the_sum_of_the_lengths(
    entries: list[bytes], as_tuple: bool
) -> None:
    given_entries = tuple(entries) if as_tuple else entries
    assert compiled.total_size(given_entries) == sum(map(len, entries))
    assert total_size(given_entries) == sum(map(len, entries))


@needs_compiled
def test_total_size_of_what_the_compiled_code_refuses_is_summed_in_python() -> None:
    with pytest.raises(TypeError):
        compiled.total_size([b"ab", bytearray(b"c")])
    with pytest.raises(TypeError):
        compiled.total_size(iter([b"ab"]))
    assert total_size([b"ab", bytearray(b"c"), memoryview(b"de")]) == 5  # type: ignore[list-item]
    assert total_size(iter([b"ab", b"c"])) == 3  # type: ignore[arg-type]


def test_the_compiled_writer_is_built_with_isa_l_where_the_machine_can_build_it() -> None:
    """storage_stub.bookie._writer also needs zlib's headers (zlib1g-dev, which Debian's
    Python headers pull in); its CRC comes from the isal wheel's library."""
    if not can_build_extensions() or not pathlib.Path("/usr/include/zlib.h").exists():
        pytest.skip("no C compiler, Python's headers or zlib's headers here")
    assert direct_writer.thread_writer_built(), "setup.py's build of _writer failed"
    assert direct_writer.thread_writer_crc() == "isa-l"
