"""Opening RocksDB (rocksdict) the way every storage class here uses it: raw bytes keys
and values (no pickling), created when missing, one write option per sync mode."""

from __future__ import annotations

import pathlib

from rocksdict import Options, Rdict, WriteOptions


def open_rocks(path: pathlib.Path) -> Rdict:
    """Open or create the database at ``path`` in raw mode (keys and values are bytes)."""
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    path.parent.mkdir(parents=True, exist_ok=True)
    return Rdict(str(path), options)


def write_options(sync: bool) -> WriteOptions:
    """WAL-synced writes (``sync=True``) return once the write survives a power loss;
    plain writes survive a process crash (the WAL is in the OS page cache)."""
    options = WriteOptions()
    options.sync = sync
    return options
