"""``brokerlab trace export``: a recorded trace's reads as a request trace libCacheSim's
own tools read (``cachesim``, its Python package's ``TraceReader``), so a researcher can
run any of its policies on what a broker's cursors asked for.

**The requests.** One request per ``read`` row of one broker (each row is one entry read
by a cursor), in ``seq`` order. The object is the entry, (topic, ledger, entry); its id
is a number given in order of first read (1, 2, ...), the same for every read of the
entry. Its size is the entry's size in bytes: a read the live design missed has no size
in its row, so it is the size its ``add`` or ``fill`` row recorded (as ``brokerlab
analyze`` does, ``pipeline.jobs.reads_with_sizes``); a read whose entry has no known
size anywhere (a storage read that failed, with no add in the trace) is left out and
counted. The time is whole seconds since the broker's recorder started.

What the export leaves out, on purpose: the ``add`` rows (libCacheSim would count them
as requests; ``pipeline.reference`` feeds them uncounted, so the references of ``analyze``
can keep what was just written, and an exported trace cannot), and the ``restart`` rows
(a libCacheSim cache carries on where the broker's cache started empty: the number of
restarts is reported). A trace of several brokers is several caches: one broker is
exported at a time.

**oracleGeneral** (libCacheSim's ``traceReader/customizedReader/oracle/
oracleGeneralBin.h`` and ``bin/traceUtils/traceConv.cpp``): 24-byte little-endian
records, packed: ``uint32 clock_time, uint64 obj_id, uint32 obj_size, int64
next_access_vtime``, where next_access_vtime is the 1-based position of the object's
next request in the file (libCacheSim's "reference count starts with 1"), -1 if none.
Its Belady policies need that field. ``cachesim FILE oracleGeneral lru 1mb``.

**csv**: a header line, then ``time,obj_id,obj_size,next_access_vtime,topic,ledger,
entry`` per request (the last three name the entry; topic names have no commas).
libCacheSim's csv reader takes the first three by column number and ignores the rest:
``cachesim FILE csv lru 1mb -t "time-col=1, obj-id-col=2, obj-size-col=3,
delimiter=,, has-header=true, obj-id-is-num=true"``.

Cost: O(n) time for n trace rows, memory O(reads + entries), one pass over the files.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import pathlib
from array import array
from collections.abc import Callable
from typing import BinaryIO

import numpy as np

from broker.trace.recorder import file_prefix
from pipeline import trace_io

FORMATS = ("oracleGeneral", "csv")
#: one oracleGeneral record: 24 bytes, no padding (numpy packs a dtype built from a list)
ORACLE_GENERAL = np.dtype(
    [
        ("clock_time", "<u4"),
        ("obj_id", "<u8"),
        ("obj_size", "<u4"),
        ("next_access_vtime", "<i8"),
    ]
)
CSV_HEADER = "time,obj_id,obj_size,next_access_vtime,topic,ledger,entry"
_COLUMNS = ["kind", "ts_ns", "topic", "ledger", "entry", "size"]
_NANOS = 1_000_000_000


class ExportError(Exception):
    """What the user asked for cannot be exported: the message says why."""


@dataclasses.dataclass
class ExportedReads:
    """One broker's reads as requests, in order: ``requests`` (ORACLE_GENERAL records),
    ``entries`` (entry of obj_id i at index i - 1), what was left out."""

    broker: int
    requests: np.ndarray
    entries: list[tuple[str, int, int]]
    unsized: int
    restarts: int


def read_requests(trace: str, broker: int | None = None) -> ExportedReads:
    """The reads of ``broker`` (the trace's only broker if None) of the trace at URI or
    path ``trace`` as requests. Raises ExportError (no trace there, a broker not in it,
    several brokers and none chosen) or OSError."""
    uri = trace_io.resolve_uri(trace)
    try:
        brokers = trace_io.trace_brokers(uri)
    except FileNotFoundError:
        raise ExportError(f"{trace}: no such directory") from None
    except NotADirectoryError:
        raise ExportError(f"{trace}: not a directory (give the trace's directory)") from None
    except OSError as error:
        if error.errno == errno.ENOTDIR:
            raise ExportError(f"{trace}: not a directory (give the trace's directory)") from None
        raise
    if not brokers:
        raise ExportError(f"{trace}: no trace files (trace-b<broker>-<n>.parquet) in it")
    if broker is None:
        if len(brokers) > 1:
            raise ExportError(
                f"{trace}: a trace of {len(brokers)} brokers, each a cache of its own; "
                f"export one at a time with --broker ({', '.join(map(str, brokers))})"
            )
        broker = brokers[0]
    elif broker not in brokers:
        raise ExportError(
            f"{trace}: no broker {broker} in it (brokers: {', '.join(map(str, brokers))})"
        )
    ids: dict[tuple[str, int, int], int] = {}
    sizes: dict[int, int] = {}  # obj_id -> size, from any row that has it
    stored: dict[tuple[str, int, int], int] = {}  # entries added or filled before any read
    read_ids, read_seconds = array("Q"), array("I")
    restarts = 0
    for batch in trace_io.iter_batches(uri, file_prefix(broker), _COLUMNS):
        columns = batch.to_pydict()
        for kind, ts_ns, topic, ledger, entry, size in zip(
            columns["kind"],
            columns["ts_ns"],
            columns["topic"],
            columns["ledger"],
            columns["entry"],
            columns["size"],
            strict=True,
        ):
            if kind == "read":
                key = (topic, ledger, entry)
                obj_id = ids.get(key)
                if obj_id is None:
                    obj_id = ids[key] = len(ids) + 1
                    known = stored.pop(key, None)
                    if known is not None:
                        sizes[obj_id] = known
                if size is not None and size > sizes.get(obj_id, -1):
                    sizes[obj_id] = size
                read_ids.append(obj_id)
                read_seconds.append(ts_ns // _NANOS)
            elif kind in ("add", "fill") and size is not None:
                key = (topic, ledger, entry)
                obj_id = ids.get(key)
                if obj_id is None:
                    stored[key] = max(size, stored.get(key, 0))
                elif size > sizes.get(obj_id, -1):
                    sizes[obj_id] = size
            elif kind == "restart":
                restarts += 1
    by_id = np.zeros(len(ids) + 1, dtype=np.int64) - 1
    for obj_id, size in sizes.items():
        by_id[obj_id] = size
    obj_ids = np.array(read_ids, dtype=np.uint64)
    seconds = np.array(read_seconds, dtype=np.uint32)
    obj_sizes = by_id[obj_ids.astype(np.int64)]
    sized = obj_sizes >= 0
    requests = np.zeros(int(sized.sum()), dtype=ORACLE_GENERAL)
    requests["clock_time"] = seconds[sized]
    requests["obj_id"] = obj_ids[sized]
    requests["obj_size"] = obj_sizes[sized]
    requests["next_access_vtime"] = next_access_vtimes(requests["obj_id"])
    entries = [key for key, _ in sorted(ids.items(), key=lambda item: item[1])]
    return ExportedReads(broker, requests, entries, int((~sized).sum()), restarts)


def next_access_vtimes(obj_ids: np.ndarray) -> np.ndarray:
    """For each request, the 1-based position of the same object's next request, -1 if
    none (oracleGeneral's next_access_vtime). O(n log n): a stable sort by object."""
    count = len(obj_ids)
    result = np.full(count, -1, dtype=np.int64)
    if count == 0:
        return result
    order = np.argsort(obj_ids, kind="stable")  # each object's requests, in order
    same = obj_ids[order][1:] == obj_ids[order][:-1]
    result[order[:-1][same]] = order[1:][same] + 1
    return result


def write_oracle_general(reads: ExportedReads, out: pathlib.Path) -> None:
    _publish(out, lambda handle: handle.write(reads.requests.tobytes()))


def write_csv(reads: ExportedReads, out: pathlib.Path) -> None:
    def write(handle: BinaryIO) -> None:
        lines = [CSV_HEADER]
        entries = reads.entries
        for clock, obj_id, size, upcoming in reads.requests.tolist():
            topic, ledger, entry = entries[obj_id - 1]
            lines.append(f"{clock},{obj_id},{size},{upcoming},{topic},{ledger},{entry}")
        handle.write(("\n".join(lines) + "\n").encode())

    _publish(out, write)


def export_trace(
    trace: str, out: pathlib.Path, fmt: str, broker: int | None = None
) -> ExportedReads:
    """Write the reads of ``trace`` (one broker's) to ``out`` in ``fmt`` (one of
    :data:`FORMATS`); returns what was written. Raises ExportError or OSError."""
    if fmt not in FORMATS:
        raise ExportError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")
    if not out.parent.is_dir():
        raise ExportError(f"cannot write {out}: no directory {out.parent}")
    reads = read_requests(trace, broker)
    (write_oracle_general if fmt == "oracleGeneral" else write_csv)(reads, out)
    return reads


def _publish(out: pathlib.Path, write: Callable[[BinaryIO], object]) -> None:
    """Write under a hidden name beside ``out``, then rename: never half a file."""
    temporary = out.with_name(f".{out.name}.partial")
    try:
        with open(temporary, "wb") as handle:
            write(handle)
        os.replace(temporary, out)
    finally:
        temporary.unlink(missing_ok=True)
