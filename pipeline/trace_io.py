"""Reading trace files where a Spark task runs: any filesystem pyarrow knows (a local
path, ``file://``, ``hdfs://``, ``s3://``, ...), streamed in batches in file-name order,
so no process ever holds a whole trace. One broker's events are its files
(``trace-b<broker>-``, see ``broker.trace.recorder.file_prefix``) in name order."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from broker.trace.recorder import FILE_NAME

BATCH_ROWS = 65_536


def _filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    if "://" not in uri:
        return pafs.LocalFileSystem(), uri
    return pafs.FileSystem.from_uri(uri)


def parquet_files(uri: str, pattern_prefix: str = "") -> list[str]:
    """Parquet files directly under ``uri`` (name order), optionally by name prefix."""
    fs, path = _filesystem(uri)
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=False))
    names = [
        info.path
        for info in infos
        if info.is_file
        and info.base_name.endswith(".parquet")
        and info.base_name.startswith(pattern_prefix)
    ]
    return sorted(names)


def trace_brokers(uri: str) -> list[int]:
    """The brokers that wrote trace files under ``uri``, in order."""
    brokers = set()
    for name in parquet_files(uri, "trace-b"):
        match = FILE_NAME.match(name.rsplit("/", 1)[-1])
        if match is not None:
            brokers.add(int(match.group(1)))
    return sorted(brokers)


def iter_batches(uri: str, pattern_prefix: str = "") -> Iterator[pa.RecordBatch]:
    fs, _ = _filesystem(uri)
    for name in parquet_files(uri, pattern_prefix):
        with fs.open_input_file(name) as handle:
            yield from pq.ParquetFile(handle).iter_batches(batch_size=BATCH_ROWS)


def rows_of(batches: Iterable[Any]) -> Iterator[dict[str, Any]]:
    """Rows of pyarrow record batches (or tables), one dict at a time."""
    for batch in batches:
        yield from batch.to_pylist()


def iter_rows(uri: str, pattern_prefix: str = "") -> Iterator[dict[str, Any]]:
    return rows_of(iter_batches(uri, pattern_prefix))


def read_json(uri: str, name: str) -> dict[str, Any]:
    """A small JSON file beside the trace ({} if absent)."""
    fs, path = _filesystem(uri)
    target = f"{path.rstrip('/')}/{name}"
    if fs.get_file_info(target).type == pafs.FileType.NotFound:
        return {}
    with fs.open_input_stream(target) as handle:
        return dict(json.loads(handle.read()))
