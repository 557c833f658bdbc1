"""The O_DIRECT write path of the entry log: whatever groups of frames are written, the
logs hold exactly the bytes the page-cache path writes; writes are block-aligned and
rewrite the partly filled last block unchanged; a failed write is cut back; a file
system that refuses O_DIRECT gets the page-cache path."""

from __future__ import annotations

import errno
import os
import pathlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage_stub.bookie import StorageFaultError, entry_log
from storage_stub.bookie.direct_io import DIRECT_IO_ALIGNMENT
from storage_stub.bookie.entry_log import EntryLogger, EntryRun
from storage_stub.bookie.frame import Frame, FrameLocation, payloads_offset


def log_bytes(directory: pathlib.Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.glob("*.log"))}


def read_back(logger: EntryLogger, location: FrameLocation, frame: Frame) -> list[bytes]:
    run = EntryRun(
        location.log_id,
        payloads_offset(location.offset, frame.count),
        [len(entry) for entry in frame.entries],
    )
    return logger.read_runs([run])


def frames_of(sizes: list[list[int]], first_entry: int) -> list[Frame]:
    """Frames of entries of the given sizes (ledger 1, ids from ``first_entry``), each
    entry's bytes all its id mod 251."""
    frames = []
    for frame_sizes in sizes:
        entries = [bytes([first_entry % 251]) * size for size in frame_sizes]
        frames.append(Frame(1, first_entry, entries))
        first_entry += len(entries)
    return frames


# A group is a list of frames, each a list of entry sizes; "reopen" closes and reopens.
groups = st.lists(
    st.one_of(
        st.lists(st.lists(st.integers(0, 3000), min_size=1, max_size=4), min_size=1, max_size=5),
        st.just("reopen"),
    ),
    min_size=1,
    max_size=12,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(plan=groups, size_limit=st.sampled_from([2_000, 9_000, 1 << 20]))
def test_direct_logs_hold_the_bytes_the_page_cache_path_writes(
    tmp_path_factory: pytest.TempPathFactory, plan: list[Any], size_limit: int
) -> None:
    root = tmp_path_factory.mktemp("logs")
    written: dict[bool, list[tuple[FrameLocation, Frame]]] = {}
    for direct in (False, True):
        directory = root / ("direct" if direct else "buffered")
        logger = EntryLogger(directory, size_limit, direct_io=direct)
        assert logger.direct_io == direct
        frames_written: list[tuple[FrameLocation, Frame]] = []
        next_entry = 0
        for step in plan:
            if step == "reopen":
                logger.close()
                logger = EntryLogger(directory, size_limit, direct_io=direct)
                continue
            frames = frames_of(step, next_entry)
            next_entry += sum(map(len, step))
            frames_written += zip(logger.write_group(frames), frames, strict=True)
        for location, frame in frames_written:
            assert read_back(logger, location, frame) == list(frame.entries)
        logger.close()
        written[direct] = frames_written
    assert [loc for loc, _ in written[True]] == [loc for loc, _ in written[False]]
    assert log_bytes(root / "direct") == log_bytes(root / "buffered")


def test_each_write_is_block_aligned_and_rewrites_the_last_block_unchanged(
    tmp_path: pathlib.Path,
) -> None:
    logger = EntryLogger(tmp_path, 1 << 20, direct_io=True)
    first = Frame(1, 0, [b"a" * 1000])
    logger.write_group([first])
    before = (tmp_path / "0.log").read_bytes()[: logger.write_offset]

    second = Frame(1, 1, [b"b" * 5000])
    write = logger.plan_direct([second])
    assert write.start % DIRECT_IO_ALIGNMENT == 0 and write.length % DIRECT_IO_ALIGNMENT == 0
    assert write.start == 0  # the first frame's block goes out again
    assert write.buffer[: len(before)] == before
    assert write.end == len(before) + len(second.header) + second.payload_bytes
    assert write.buffer[write.end - write.start : write.length] == bytes(
        write.length - (write.end - write.start)
    )
    write.execute()
    logger.finish_direct(write)
    assert read_back(logger, FrameLocation(0, 0), first) == [b"a" * 1000]
    assert read_back(logger, write.locations[0], second) == [b"b" * 5000]
    logger.close()


def test_a_failed_direct_write_is_cut_back_and_the_next_write_goes_where_it_would_have(
    tmp_path: pathlib.Path,
) -> None:
    logger = EntryLogger(tmp_path, 1 << 20, direct_io=True)
    kept = Frame(1, 0, [b"k" * 700])
    logger.write_group([kept])
    offset = logger.write_offset

    lost = Frame(1, 1, [b"x" * 9000])
    write = logger.plan_direct([lost])
    with pytest.raises(StorageFaultError, match="entry log write failed"):
        logger.abandon_direct(write, OSError(errno.EIO, "injected"))
    assert logger.write_offset == offset
    assert (tmp_path / "0.log").stat().st_size == offset

    again = Frame(1, 1, [b"y" * 300])
    [location] = logger.write_group([again])
    assert location == FrameLocation(0, offset)
    assert read_back(logger, FrameLocation(0, 0), kept) == [b"k" * 700]
    assert read_back(logger, location, again) == [b"y" * 300]
    logger.close()

    reopened = EntryLogger(tmp_path, 1 << 20, direct_io=True)
    assert reopened.write_offset == offset + len(again.header) + again.payload_bytes
    reopened.close()


def test_a_group_that_passes_the_size_limit_rolls_to_a_new_log_midway(
    tmp_path: pathlib.Path,
) -> None:
    logger = EntryLogger(tmp_path, 5000, direct_io=True)
    frames = [Frame(1, i, [bytes([i]) * 2000]) for i in range(5)]
    locations = logger.write_group(frames)
    assert [location.log_id for location in locations] == [0, 0, 1, 1, 2]
    for location, frame in zip(locations, frames, strict=True):
        assert read_back(logger, location, frame) == list(frame.entries)
    logger.close()


def test_a_file_system_refusing_o_direct_gets_the_page_cache_path(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_open = os.open

    def refusing_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "O_DIRECT not supported")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing_open)
    logger = EntryLogger(tmp_path, 1 << 20, direct_io=True)
    assert not logger.direct_io
    frame = Frame(1, 0, [b"still written"])
    [location] = logger.write_group([frame])
    assert read_back(logger, location, frame) == [b"still written"]
    with pytest.raises(ValueError):
        logger.plan_direct([frame])
    logger.close()


def test_a_file_system_refusing_the_alignment_gets_the_page_cache_path(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Some file systems open O_DIRECT files but refuse 4 KiB-aligned writes to them: the
    probe write at open finds out before any frame depends on it."""
    direct_fds: set[int] = set()
    real_open, real_pwrite = os.open, os.pwrite

    def tracking_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        fd = real_open(path, flags, *args, **kwargs)
        if flags & os.O_DIRECT:
            direct_fds.add(fd)
        return fd

    def refusing_pwrite(fd: int, data: Any, offset: int) -> int:
        if fd in direct_fds:
            raise OSError(errno.EINVAL, "alignment refused")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "open", tracking_open)
    monkeypatch.setattr(os, "pwrite", refusing_pwrite)
    logger = EntryLogger(tmp_path, 1 << 20, direct_io=True)
    assert direct_fds and not logger.direct_io
    frame = Frame(1, 0, [b"written through the page cache"])
    [location] = logger.write_group([frame])
    assert read_back(logger, location, frame) == [b"written through the page cache"]
    logger.close()
    assert (tmp_path / "0.log").stat().st_size == logger.write_offset


def test_a_group_larger_than_one_direct_write_goes_out_in_several(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(entry_log, "MAX_DIRECT_WRITE_BYTES", 3 * DIRECT_IO_ALIGNMENT)
    logger = EntryLogger(tmp_path, 1 << 20, direct_io=True)
    frames = [Frame(1, i, [bytes([i]) * 5000]) for i in range(5)]
    planned = []
    while (first := sum(len(write.locations) for write in planned)) < len(frames):
        write = logger.plan_direct(frames, first)
        assert len(write.locations) <= 2  # two 5 KiB frames fit 12 KiB, three do not
        write.execute()
        logger.finish_direct(write)
        planned.append(write)
    assert [len(write.locations) for write in planned] == [2, 2, 1]
    locations = [location for write in planned for location in write.locations]
    for location, frame in zip(locations, frames, strict=True):
        assert read_back(logger, location, frame) == list(frame.entries)
    logger.close()
