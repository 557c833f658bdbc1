"""EntryLogger: records, rolls, grouped reads and the torn-tail cut."""

from __future__ import annotations

import os
import pathlib

import pytest

from storage_stub.bookie import StorageFaultError
from storage_stub.bookie.entry_log import (
    HEADER_SIZE,
    MAX_GROUPED_READ_BYTES,
    EntryLocation,
    EntryLogger,
    valid_prefix_length,
)


@pytest.fixture
def logs(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "entrylogs"


def test_appended_records_are_readable_before_any_sync(logs: pathlib.Path) -> None:
    logger = EntryLogger(logs, 1 << 20)
    locations = logger.append(7, 0, [b"alpha", b"", b"gamma" * 100])
    assert locations[0] == EntryLocation(0, 0, 5)
    assert locations[1] == EntryLocation(0, HEADER_SIZE + 5, 0)
    assert [logger.read(location) for location in locations] == [b"alpha", b"", b"gamma" * 100]
    assert logger.read_many(locations) == [b"alpha", b"", b"gamma" * 100]
    logger.close()


def test_a_batch_that_would_pass_the_size_limit_goes_to_a_new_log(logs: pathlib.Path) -> None:
    logger = EntryLogger(logs, 1000)
    first = logger.append(1, 0, [b"a" * 600])
    second = logger.append(1, 1, [b"b" * 600])
    oversized = logger.append(1, 2, [b"c" * 3000])  # alone in an empty log: allowed
    assert [first[0].log_id, second[0].log_id, oversized[0].log_id] == [0, 1, 2]
    assert sorted(p.name for p in logs.iterdir()) == ["0.log", "1.log", "2.log"]
    assert logger.read_many(first + second + oversized) == [b"a" * 600, b"b" * 600, b"c" * 3000]
    logger.close()


def test_grouped_reads_split_at_gaps_logs_and_the_span_limit(logs: pathlib.Path) -> None:
    logger = EntryLogger(logs, 1 << 30)
    big = MAX_GROUPED_READ_BYTES // 3
    locations = logger.append(1, 0, [bytes([i]) * big for i in range(5)])
    locations += logger.append(2, 0, [b"other ledger"])
    locations += logger.append(1, 5, [b"small-%d" % i for i in range(50)])
    wanted = locations[:5] + locations[6:]  # skips the other ledger's record: a gap
    expected = [bytes([i]) * big for i in range(5)] + [b"small-%d" % i for i in range(50)]
    assert logger.read_many(wanted) == expected
    assert logger.read_many(list(reversed(wanted))) == list(reversed(expected))
    logger.close()


def test_reopening_continues_the_last_log_after_its_last_record(logs: pathlib.Path) -> None:
    logger = EntryLogger(logs, 1 << 20)
    before = logger.append(1, 0, [b"one", b"two"])
    logger.sync()
    logger.close()

    reopened = EntryLogger(logs, 1 << 20)
    after = reopened.append(1, 2, [b"three"])
    assert after[0].log_id == before[0].log_id
    assert after[0].offset == before[1].offset + HEADER_SIZE + 3
    assert reopened.read_many(before + after) == [b"one", b"two", b"three"]
    reopened.close()


@pytest.mark.parametrize(
    "tail",
    [
        pytest.param(b"\x00" * 64, id="zero-filled"),
        pytest.param(b"\xff" * 5, id="short-header"),
        pytest.param(
            b"\x00\x00\x00\x00\x00\x00\x00\x01" + b"\x00" * 8 + b"\x00\x00\xff\xff",
            id="huge-length",
        ),
        pytest.param(os.urandom(300), id="random-garbage"),
    ],
)
def test_a_torn_tail_is_cut_back_to_the_last_whole_record(logs: pathlib.Path, tail: bytes) -> None:
    logger = EntryLogger(logs, 1 << 20)
    locations = logger.append(3, 0, [b"kept-%d" % i for i in range(10)])
    logger.close()
    intact = (logs / "0.log").stat().st_size
    with (logs / "0.log").open("ab") as file:
        file.write(tail)

    reopened = EntryLogger(logs, 1 << 20)
    assert (logs / "0.log").stat().st_size == intact
    assert reopened.write_offset == intact
    assert reopened.read_many(locations) == [b"kept-%d" % i for i in range(10)]
    reopened.close()


def test_a_record_with_a_flipped_payload_byte_fails_its_crc(logs: pathlib.Path) -> None:
    logger = EntryLogger(logs, 1 << 20)
    locations = logger.append(3, 0, [b"first", b"second"])
    logger.close()
    path = logs / "0.log"
    data = bytearray(path.read_bytes())
    data[locations[1].offset + HEADER_SIZE] ^= 0x01
    path.write_bytes(bytes(data))
    fd = os.open(path, os.O_RDONLY)
    try:
        assert valid_prefix_length(fd, len(data)) == locations[1].offset
    finally:
        os.close(fd)


def test_reading_a_location_outside_the_logs_is_a_storage_fault(logs: pathlib.Path) -> None:
    logger = EntryLogger(logs, 1 << 20)
    logger.append(1, 0, [b"x"])
    with pytest.raises(StorageFaultError):
        logger.read(EntryLocation(9, 0, 1))
    with pytest.raises(StorageFaultError):
        logger.read(EntryLocation(0, 0, 500))
    logger.close()


def test_unsynced_descriptors_are_handed_out_once_and_can_be_given_back(
    logs: pathlib.Path,
) -> None:
    logger = EntryLogger(logs, 1 << 20)
    logger.append(1, 0, [b"x"])
    fds = logger.take_unsynced()
    assert len(fds) == 2  # the log and, for the new file, its directory
    assert logger.take_unsynced() == []
    logger.restore_unsynced(fds)
    logger.sync()
    assert logger.take_unsynced() == []
    logger.close()
