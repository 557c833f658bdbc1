"""``DataDirLock``: one storage at a time on a data directory, and who holds it.

RocksDB already refuses a second open of the metadata database (its ``LOCK`` file), but
its message names neither the directory's owner nor what to do. This lock is taken
first, on ``brokerlab.lock`` in the data directory, with ``flock`` (released by the
kernel when the holder exits, however it exits, so a crash leaves no stale lock), and
the holder's pid written in the file so a second broker can name it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import pathlib

from storage_stub.bookie.api import NO_SPACE_ERRNOS, StorageFaultError

#: the lock file's name in the data directory
LOCK_FILE = "brokerlab.lock"
#: errno values of a data directory where no file can be created
UNWRITABLE_ERRNOS = NO_SPACE_ERRNOS | {errno.EROFS}


class DataDirInUseError(StorageFaultError):
    """Another process (``pid``, None if it wrote none) holds the data directory."""

    def __init__(self, data_dir: pathlib.Path, pid: int | None) -> None:
        holder = f"process {pid}" if pid is not None else "another process"
        super().__init__("open", f"the data directory {data_dir} is in use by {holder}")
        self.data_dir = data_dir
        self.pid = pid


class DataDirLock:
    """An exclusive ``flock`` on ``data_dir/brokerlab.lock`` held until ``release``."""

    __slots__ = ("_fd", "path")

    def __init__(self, path: pathlib.Path, fd: int | None) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, data_dir: pathlib.Path) -> DataDirLock:
        """Take the lock (creating ``data_dir`` if missing) and write this pid in it.
        DataDirInUseError if another process holds it. O(1), blocking file calls."""
        data_dir.mkdir(parents=True, exist_ok=True)
        path = data_dir / LOCK_FILE
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            # a full (or read-only) disk still opens, read-only: lock what exists, if
            # anything (RocksDB's own lock on the metadata database still guards it)
            if error.errno not in UNWRITABLE_ERRNOS:
                raise
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                return cls(path, None)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            os.close(fd)
            raise DataDirInUseError(data_dir, pid) from None
        except BaseException:
            os.close(fd)
            raise
        # a full disk may refuse the pid: the lock holds all the same
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(path, fd)

    def release(self) -> None:
        """Let the next process in (the pid stays in the file, unlocked: stale, ignored)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        # a storage dropped unclosed (a failed open, a test's simulated crash) lets go,
        # as its RocksDB database does when collected
        self.release()


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
