"""EntryLogger: frames, rolls, preallocation, grouped reads and the torn-tail cut; every
test runs on both write paths (through the page cache, and O_DIRECT)."""

from __future__ import annotations

import os
import pathlib
import struct
from collections.abc import Iterator

import pytest
from isal.isal_zlib import crc32

from storage_stub.bookie import StorageFaultError
from storage_stub.bookie.entry_log import (
    FORMAT,
    FORMAT_FILE,
    MAX_GROUPED_READ_BYTES,
    EntryLogger,
    EntryRun,
)
from storage_stub.bookie.frame import (
    FRAME_HEADER_SIZE,
    LENGTH_SIZE,
    Frame,
    FrameLocation,
    payloads_offset,
    valid_prefix_length,
)

_direct_io = False


@pytest.fixture(autouse=True, params=[False, True], ids=["buffered", "direct"])
def write_path(request: pytest.FixtureRequest) -> Iterator[bool]:
    global _direct_io
    _direct_io = request.param
    yield request.param
    _direct_io = False


def logger_at(directory: pathlib.Path, size_limit: int) -> EntryLogger:
    """An EntryLogger on the write path of the running test's parameter."""
    logger = EntryLogger(directory, size_limit, direct_io=_direct_io)
    assert logger.direct_io == _direct_io
    return logger


@pytest.fixture
def logs(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "entrylogs"


def frame_size(entries: list[bytes]) -> int:
    return FRAME_HEADER_SIZE + LENGTH_SIZE * len(entries) + sum(map(len, entries))


def runs_of(location: FrameLocation, entries: list[bytes]) -> list[EntryRun]:
    """One run per entry of a written frame (as the index hands them out)."""
    runs = []
    offset = payloads_offset(location.offset, len(entries))
    for payload in entries:
        runs.append(EntryRun(location.log_id, offset, [len(payload)]))
        offset += len(payload)
    return runs


def whole_run(location: FrameLocation, entries: list[bytes]) -> EntryRun:
    return EntryRun(
        location.log_id, payloads_offset(location.offset, len(entries)), list(map(len, entries))
    )


def valid_length_of(path: pathlib.Path) -> int:
    fd = os.open(path, os.O_RDONLY)
    try:
        return valid_prefix_length(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def test_appended_frames_are_readable_before_any_sync(logs: pathlib.Path) -> None:
    logger = logger_at(logs, 1 << 20)
    entries = [b"alpha", b"", b"gamma" * 100]
    location = logger.append(7, 0, entries)
    assert location == FrameLocation(0, 0)
    assert logger.write_offset == frame_size(entries)
    assert logger.read_runs([whole_run(location, entries)]) == entries
    assert logger.read_runs(runs_of(location, entries)) == entries
    assert logger.read_runs(runs_of(location, entries)[1:]) == entries[1:]
    logger.close()


def test_a_frame_holds_its_ids_count_lengths_and_a_crc_over_everything_after_it(
    logs: pathlib.Path,
) -> None:
    entries = [b"one", b"three"]
    frame = Frame(9, 40, entries)
    frame.seal()
    header = bytes(frame.header)
    crc, ledger_id, first, count, payload_bytes = struct.unpack_from(">IQqIQ", header)
    assert (ledger_id, first, count, payload_bytes) == (9, 40, 2, 8)
    assert struct.unpack_from(">2I", header, FRAME_HEADER_SIZE) == (3, 5)
    assert bytes(frame.raw_lengths) == struct.pack(">2I", 3, 5)
    assert crc == crc32(header[4:] + b"".join(entries))
    with pytest.raises(ValueError):
        Frame(9, 0, [])


def test_a_batch_that_would_pass_the_size_limit_goes_to_a_new_log(logs: pathlib.Path) -> None:
    logger = logger_at(logs, 1000)
    first = logger.append(1, 0, [b"a" * 600])
    second = logger.append(1, 1, [b"b" * 600])
    oversized = logger.append(1, 2, [b"c" * 3000])  # alone in an empty log: allowed
    assert [first.log_id, second.log_id, oversized.log_id] == [0, 1, 2]
    assert sorted(p.name for p in logs.glob("*.log")) == ["0.log", "1.log", "2.log"]
    runs = [
        whole_run(first, [b"a" * 600]),
        whole_run(second, [b"b" * 600]),
        whole_run(oversized, [b"c" * 3000]),
    ]
    assert logger.read_runs(runs) == [b"a" * 600, b"b" * 600, b"c" * 3000]
    logger.close()
    # Rolled logs keep no preallocated tail past their last frame.
    assert (logs / "0.log").stat().st_size == frame_size([b"a" * 600])
    assert (logs / "1.log").stat().st_size == frame_size([b"b" * 600])


def test_grouped_reads_span_frames_and_split_at_logs_order_and_the_span_limit(
    logs: pathlib.Path,
) -> None:
    logger = logger_at(logs, 1 << 30)
    big = MAX_GROUPED_READ_BYTES // 3
    big_entries = [bytes([i]) * big for i in range(5)]
    small_entries = [b"small-%d" % i for i in range(50)]
    runs = runs_of(logger.append(1, 0, big_entries), big_entries)
    other = logger.append(2, 0, [b"other ledger"])
    runs += runs_of(logger.append(1, 5, small_entries[:20]), small_entries[:20])
    runs += runs_of(logger.append(1, 25, small_entries[20:]), small_entries[20:])
    expected = big_entries + small_entries
    assert logger.read_runs(runs) == expected  # reads over the other ledger's frame
    assert logger.read_runs(list(reversed(runs))) == list(reversed(expected))
    with_other = [*runs[:5], whole_run(other, [b"other ledger"]), *runs[5:]]
    assert logger.read_runs(with_other) == [*big_entries, b"other ledger", *small_entries]
    logger.close()


def test_a_frame_of_more_entries_than_one_pwritev_takes_is_written_whole(
    logs: pathlib.Path,
) -> None:
    logger = logger_at(logs, 1 << 30)
    entries = [b"e%d" % i for i in range(3000)]
    location = logger.append(1, 0, entries)
    assert logger.write_offset == frame_size(entries)
    assert logger.read_runs([whole_run(location, entries)]) == entries
    logger.close()
    assert valid_length_of(logs / "0.log") == frame_size(entries)


def test_reopening_continues_the_last_log_after_its_last_frame(logs: pathlib.Path) -> None:
    logger = logger_at(logs, 1 << 20)
    before = logger.append(1, 0, [b"one", b"two"])
    logger.sync()
    logger.close()

    reopened = logger_at(logs, 1 << 20)
    after = reopened.append(1, 2, [b"three"])
    assert after.log_id == before.log_id
    assert after.offset == frame_size([b"one", b"two"])
    runs = [whole_run(before, [b"one", b"two"]), whole_run(after, [b"three"])]
    assert reopened.read_runs(runs) == [b"one", b"two", b"three"]
    reopened.close()


def test_logs_grow_in_preallocated_steps_and_close_trims_the_rest(logs: pathlib.Path) -> None:
    logger = logger_at(logs, 1 << 20)
    logger.append(1, 0, [b"x" * 100])
    written = logger.write_offset
    assert (logs / "0.log").stat().st_size >= written  # preallocated (where supported)
    logger.close()
    assert (logs / "0.log").stat().st_size == written


def test_a_killed_writer_leaves_a_preallocated_tail_that_reopening_cuts(
    logs: pathlib.Path,
) -> None:
    logger = logger_at(logs, 1 << 20)
    entries = [b"kept-%d" % i for i in range(10)]
    location = logger.append(3, 0, entries)
    logger.sync()
    intact = logger.write_offset
    # Simulates a kill: no close, so the zero-filled preallocation stays.
    with (logs / "0.log").open("r+b") as file:
        file.truncate(intact + 8192)

    reopened = logger_at(logs, 1 << 20)
    assert (logs / "0.log").stat().st_size == intact
    assert reopened.write_offset == intact
    assert reopened.read_runs([whole_run(location, entries)]) == entries
    after = reopened.append(3, 10, [b"next"])
    assert after.offset == intact
    reopened.close()
    logger.close()


@pytest.mark.parametrize(
    "tail",
    [
        pytest.param(b"\x00" * 64, id="zero-filled"),
        pytest.param(b"\xff" * 5, id="short-header"),
        pytest.param(
            b"\x00" * 4 + b"\x00\x00\x00\x00\x00\x00\x00\x01" + b"\x00" * 8 + b"\x00\x00\xff\xff",
            id="huge-count",
        ),
        pytest.param(os.urandom(300), id="random-garbage"),
    ],
)
def test_a_torn_tail_is_cut_back_to_the_last_whole_frame(logs: pathlib.Path, tail: bytes) -> None:
    logger = logger_at(logs, 1 << 20)
    entries = [b"kept-%d" % i for i in range(10)]
    location = logger.append(3, 0, entries)
    logger.close()
    intact = (logs / "0.log").stat().st_size
    with (logs / "0.log").open("ab") as file:
        file.write(tail)

    reopened = logger_at(logs, 1 << 20)
    assert (logs / "0.log").stat().st_size == intact
    assert reopened.write_offset == intact
    assert reopened.read_runs([whole_run(location, entries)]) == entries
    reopened.close()


def test_a_frame_cut_short_anywhere_is_cut_off(logs: pathlib.Path) -> None:
    logger = logger_at(logs, 1 << 20)
    logger.append(3, 0, [b"first" * 10])
    intact = logger.write_offset
    logger.append(3, 1, [b"second" * 10, b"third" * 10])
    logger.close()
    whole = (logs / "0.log").read_bytes()
    for cut in (intact + 3, intact + FRAME_HEADER_SIZE + 2, len(whole) - 1):
        (logs / "0.log").write_bytes(whole[:cut])
        assert valid_length_of(logs / "0.log") == intact


@pytest.mark.parametrize("where", ["payload", "length", "first-entry-id"])
def test_a_frame_with_a_flipped_byte_fails_its_crc(logs: pathlib.Path, where: str) -> None:
    logger = logger_at(logs, 1 << 20)
    logger.append(3, 0, [b"first"])
    second = logger.append(3, 1, [b"second", b"third"])
    logger.close()
    path = logs / "0.log"
    data = bytearray(path.read_bytes())
    flip = {
        "payload": payloads_offset(second.offset, 2) + 1,
        "length": second.offset + FRAME_HEADER_SIZE + 3,
        "first-entry-id": second.offset + 19,
    }[where]
    data[flip] ^= 0x01
    path.write_bytes(bytes(data))
    assert valid_length_of(path) == second.offset


def test_lengths_that_do_not_add_up_to_the_payload_bytes_make_a_frame_invalid(
    logs: pathlib.Path,
) -> None:
    logger = logger_at(logs, 1 << 20)
    logger.append(3, 0, [b"ab", b"cd"])
    logger.close()
    path = logs / "0.log"
    data = bytearray(path.read_bytes())
    struct.pack_into(">I", data, FRAME_HEADER_SIZE, 3)  # lengths 3 + 2 != 4 bytes
    struct.pack_into(">I", data, 0, crc32(bytes(data[4:])))  # even with a matching CRC
    path.write_bytes(bytes(data))
    assert valid_length_of(path) == 0


def test_reading_outside_the_logs_is_a_storage_fault(logs: pathlib.Path) -> None:
    logger = logger_at(logs, 1 << 20)
    logger.append(1, 0, [b"x"])
    logger.close()
    logger = logger_at(logs, 1 << 20)
    with pytest.raises(StorageFaultError):
        logger.read_runs([EntryRun(9, 0, [1])])
    with pytest.raises(StorageFaultError):
        logger.read_runs([EntryRun(0, 0, [500])])
    logger.close()


def test_unsynced_descriptors_are_handed_out_once_and_can_be_given_back(
    logs: pathlib.Path,
) -> None:
    logger = logger_at(logs, 1 << 20)
    logger.append(1, 0, [b"x"])
    fds = logger.take_unsynced()
    assert len(fds) == 2  # the log and, for the new file, its directory
    assert logger.take_unsynced() == []
    logger.restore_unsynced(fds)
    logger.sync()
    assert logger.take_unsynced() == []
    logger.close()


def test_logs_of_the_old_one_record_per_entry_format_are_refused_not_cut(
    logs: pathlib.Path,
) -> None:
    logs.mkdir()
    old_record = struct.pack(">QqII", 1, 0, 3, 12345) + b"abc"
    (logs / "0.log").write_bytes(old_record)
    with pytest.raises(ValueError, match="older brokerlab"):
        logger_at(logs, 1 << 20)
    assert (logs / "0.log").read_bytes() == old_record
    (logs / FORMAT_FILE).write_bytes(b"something else\n")
    with pytest.raises(ValueError, match="unknown format"):
        logger_at(logs, 1 << 20)


def test_a_new_log_directory_is_marked_with_its_format(logs: pathlib.Path) -> None:
    logger_at(logs, 1 << 20).close()
    assert (logs / FORMAT_FILE).read_bytes() == FORMAT
    logger_at(logs, 1 << 20).close()  # and reopens
