"""Opening RocksDB (rocksdict) the way every storage class here uses it: raw bytes keys
and values (no pickling), created when missing, one write option per sync mode.

``RocksDatabase`` adds what a full disk asks of a database:

- every RocksDB failure becomes a StorageFaultError naming the operation and carrying
  RocksDB's message (NoSpaceError when the file system is full), never a raw exception;
- a failed write marks the database ``failed``: RocksDB keeps its background error and
  refuses every later write. rocksdict exposes no ``DB::Resume``, and RocksDB's own
  recovery (its SstFileManager retries every 5 s) waits until ``write_buffer_size`` (64
  MiB) is free. ``resume``, once space is back, first tries a write in case RocksDB has
  recovered by itself, and otherwise reopens the database;
- where a read-write open fails for want of space (RocksDB writes a new MANIFEST, WAL and
  OPTIONS file when it opens, some tens of KiB), the database can be opened read-only:
  reads work, and ``reopen`` makes it writable later;
- ``close`` never raises (a database with a background error fails its final flush):
  it logs and lets the files go.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pathlib
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from concurrent.futures import Executor

from rocksdict import AccessType, DbClosedError, Options, Rdict, WriteOptions

from storage_stub.bookie.api import (
    NO_SPACE_ERRNOS,
    BookieReadOnlyError,
    NoSpaceError,
    StorageFaultError,
)

log = logging.getLogger(__name__)

#: A key no user has (theirs start with a ledger id, b"L", b"M" or b"N"): ``resume``
#: deletes it to test whether the database takes writes.
_PROBE_KEY = b"\x00brokerlab: does this database take writes?"
_SYNC = WriteOptions()
_SYNC.sync = True
#: How RocksDB's IOError messages say that the file system is full (strerror of ENOSPC
#: and EDQUOT, which RocksDB quotes).
_NO_SPACE_MESSAGES = (
    "No space left on device",
    "Disk quota exceeded",
    "NoSpace",
)


def open_rocks(path: pathlib.Path, *, read_only: bool = False) -> Rdict:
    """Open or create the database at ``path`` in raw mode (keys and values are bytes);
    ``read_only``: open an existing database for reads only (writes nothing)."""
    options = Options(raw_mode=True)
    if read_only:
        return Rdict(str(path), options, access_type=AccessType.read_only())
    options.create_if_missing(True)
    path.parent.mkdir(parents=True, exist_ok=True)
    return Rdict(str(path), options)


def write_options(sync: bool) -> WriteOptions:
    """WAL-synced writes (``sync=True``) return once the write survives a power loss;
    plain writes survive a process crash (the WAL is in the OS page cache)."""
    options = WriteOptions()
    options.sync = sync
    return options


def is_rocks_error(error: BaseException) -> bool:
    """True for what rocksdict raises for a RocksDB status (a plain Exception carrying
    RocksDB's message, or DbClosedError), so programming errors are not disguised."""
    return type(error) is Exception or isinstance(error, DbClosedError)


def is_no_space(error: BaseException) -> bool:
    """True when ``error`` (an OSError or a RocksDB error) says the file system is full."""
    if isinstance(error, OSError):
        return error.errno in NO_SPACE_ERRNOS
    message = str(error)
    return any(text in message for text in _NO_SPACE_MESSAGES)


class RocksDatabase:
    """One RocksDB database (``db``) shared by its users, who call ``fault`` or
    ``write_fault`` on a failure and run blocking writes on the executors listed in
    ``writers`` (so ``reopen`` can hold them off). Costs nothing on the success path: the
    users reach the database through ``db``, one attribute load per call.
    """

    __slots__ = ("db", "failed", "name", "on_write_failure", "path", "read_only", "writers")

    def __init__(self, path: pathlib.Path, *, name: str, allow_read_only: bool = False) -> None:
        """Open (creating if missing) the database at ``path``; ``name`` says what it is in
        messages. ``allow_read_only``: when the read-write open fails because the disk is
        full, open an existing database read-only instead (``read_only`` is then set).
        StorageFaultError (NoSpaceError for a full disk) when it cannot be opened."""
        self.path = path
        self.name = name
        #: the RocksDB message of the write that left the database failed, else None
        self.failed: str | None = None
        #: opened read-only because the disk was full: reads work, writes are refused
        self.read_only: str | None = None
        #: single-thread executors on which users run blocking writes of this database
        self.writers: list[Executor] = []
        #: called (on the event loop) by a user whose write failed: the bookie turns
        #: read-only and checks the disk at once
        self.on_write_failure: Callable[[StorageFaultError], None] | None = None
        try:
            self.db = open_rocks(path)
        except Exception as error:
            if not is_rocks_error(error) and not isinstance(error, OSError):
                raise
            if not (allow_read_only and is_no_space(error) and (path / "CURRENT").exists()):
                raise self._open_fault(error) from None
            self.db = self._open_read_only(error)
            self.read_only = f"the disk was full when the {name} database opened: {error}"
            log.warning("%s: opened read-only, the disk is full: %s", path, error)

    @classmethod
    def wrapping(cls, db: Rdict, *, name: str) -> RocksDatabase:
        """A RocksDatabase around an Rdict opened elsewhere (``reopen`` opens its path)."""
        database = cls.__new__(cls)
        database.db = db
        database.path = pathlib.Path(db.path())
        database.name = name
        database.failed = None
        database.read_only = None
        database.writers = []
        database.on_write_failure = None
        return database

    def _open_read_only(self, cause: BaseException) -> Rdict:
        try:
            return open_rocks(self.path, read_only=True)
        except Exception as error:
            if not is_rocks_error(error):
                raise
            raise self._open_fault(cause, also=error) from None

    def _open_fault(
        self, error: BaseException, also: BaseException | None = None
    ) -> StorageFaultError:
        detail = f"cannot open the {self.name} database at {self.path}: {error}"
        if also is not None:
            detail += f"; nor read-only: {also}"
        if is_no_space(error):
            return NoSpaceError("open", detail)
        return StorageFaultError("open", detail)

    @property
    def writable(self) -> bool:
        """Neither failed nor opened read-only."""
        return self.failed is None and self.read_only is None

    def fault(self, operation: str, what: str, error: Exception) -> Exception:
        """What to raise for a failed read: StorageFaultError naming ``operation`` with
        ``what`` and RocksDB's message (``error`` itself if it is not a RocksDB error)."""
        if not is_rocks_error(error):
            return error
        return StorageFaultError(operation, f"{what} failed: {error}")

    def write_fault(self, operation: str, what: str, error: Exception) -> Exception:
        """What to raise for a failed write, marking the database failed (any thread):
        NoSpaceError for a full disk, BookieReadOnlyError if the database is open
        read-only, else StorageFaultError; ``error`` itself if it is not a RocksDB error."""
        if not is_rocks_error(error):
            return error
        if self.read_only is not None:
            return BookieReadOnlyError(operation, self.read_only)
        self.failed = str(error)
        detail = f"{what} failed: {error}"
        if is_no_space(error):
            return NoSpaceError(operation, detail)
        return StorageFaultError(operation, detail)

    def report(self, fault: StorageFaultError) -> None:
        """Tell ``on_write_failure`` (event loop only)."""
        if self.on_write_failure is not None:
            self.on_write_failure(fault)

    async def resume(self) -> None:
        """Make a failed or read-only database writable again (call once space is back):
        if RocksDB has cleared a failed write's error by itself (a synced test write
        works) nothing more is needed; otherwise ``reopen``."""
        if self.read_only is None and self.failed is not None:
            try:
                await asyncio.to_thread(self.db.delete, _PROBE_KEY, _SYNC)
            except Exception as error:
                if not is_rocks_error(error):
                    raise
            else:
                self.failed = None
                log.info("%s: RocksDB takes writes again by itself", self.path)
                return
        await self.reopen()

    async def reopen(self) -> None:
        """Close the database and open it read-write again, while every executor in
        ``writers`` is held between two jobs and the event loop runs nothing else (the
        close and open run on the loop: about 15 ms measured on a small database, plus
        the replay of the WAL). Clears ``failed`` and ``read_only``. StorageFaultError if
        the open fails; the database is then open read-only if that works (reads go on),
        ``failed`` otherwise."""
        async with _held(self.writers):
            self.reopen_now()

    def reopen_now(self) -> None:
        """``reopen`` for a caller that knows nothing else uses the database meanwhile."""
        self._close_quietly()
        try:
            self.db = open_rocks(self.path)
        except Exception as error:
            if not is_rocks_error(error) and not isinstance(error, OSError):
                raise
            try:
                self.db = open_rocks(self.path, read_only=True)
                self.read_only = f"reopening the {self.name} database failed: {error}"
                self.failed = None
            except Exception as read_only_error:
                if not is_rocks_error(read_only_error):
                    raise
                self.failed = f"the {self.name} database is closed: {error}"
            raise self._open_fault(error) from None
        self.failed = None
        self.read_only = None
        log.info("%s: reopened read-write", self.path)

    def _close_quietly(self, flush: bool = True) -> None:
        db = self.db
        flush = flush and self.failed is None
        if not flush:
            # A flush that fails for want of space makes RocksDB wait a second before
            # the close goes on: stop the background work first, so the close does not
            # flush. The WAL keeps every write RocksDB acknowledged.
            with contextlib.suppress(Exception):
                db.cancel_all_background(False)
        try:
            db.close()
        except Exception as error:
            log.log(logging.WARNING if flush else logging.DEBUG, "%s: close: %s", self.path, error)

    def close(self, *, flush: bool = True) -> None:
        """Flush the memtable (unless ``flush`` is false or the database failed a write:
        a full disk) and close; never raises (logs instead)."""
        self._close_quietly(flush)


@contextlib.asynccontextmanager
async def _held(executors: Iterable[Executor]) -> AsyncIterator[None]:
    """Hold each (single-thread) executor between two jobs: park a job on it that waits
    until the block is left. Inside the block no other job of theirs runs."""
    loop = asyncio.get_running_loop()
    release = threading.Event()
    parked: list[asyncio.Future[None]] = []

    def park(arrived: asyncio.Future[None]) -> None:
        loop.call_soon_threadsafe(_set_done, arrived)
        release.wait()

    try:
        for executor in executors:
            arrived: asyncio.Future[None] = loop.create_future()
            parked.append(loop.run_in_executor(executor, park, arrived))
            await arrived
        yield
    finally:
        release.set()
        if parked:
            await asyncio.gather(*parked, return_exceptions=True)


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
