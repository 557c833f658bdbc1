"""The file-system layer of ``brokerlab analyze``: every byte the pipeline reads or
writes (trace files, ``trace-meta.json``, the ``next_reads`` parts, the result tables,
``report.html``) goes through here, on the driver and in Spark tasks alike.

**Locations are URIs, resolved on the driver.** :func:`resolve_uri` turns what a user
typed into an absolute URI before anything is handed to Spark: a relative path
(``run1/trace``) becomes ``file:///abs/path/run1/trace`` against the driver's working
directory, since an executor of a cluster runs in a working directory of its own;
``s3a://`` (Hadoop's name) becomes ``s3://``; any other scheme is kept. A URI may carry
the file system's options as a query (``s3://bucket/run?endpoint_override=host:8333&
scheme=http``): :func:`join_uri` appends names to the path and keeps the query.

**pyarrow's file systems, not Spark's and not fsspec.** Spark reads and writes through
Hadoop's file systems, and its S3 connector (``hadoop-aws`` and the AWS SDK bundle) is not
part of the pyspark package: a user would have to bring jars matching the cluster's
Hadoop build. Tasks do the I/O themselves instead, with ``pyarrow.fs``:

- pyarrow is already what every process of the pipeline has: the broker writes traces
  with it and PySpark's Arrow UDFs (``mapInArrow``, used for every job) need it on the
  executors anyway, so it adds nothing to install on a cluster;
- its file systems are native (C++): local files, ``s3://`` (the AWS SDK, any
  S3-compatible server through ``endpoint_override``, credentials from the usual
  ``AWS_*`` variables or files), ``gs://``, ``hdfs://`` (Hadoop's own ``libhdfs`` through
  JNI, as Spark uses it, where ``HADOOP_HOME``/``CLASSPATH`` are set) and Azure's
  ``abfs://``; Parquet files stream from them into the reader with no Python in between;
- fsspec would add s3fs, its aiobotocore and aiohttp pins (the broker depends on
  aiohttp), and Python-level I/O under the Parquet reader, for schemes a production
  cluster rarely needs beyond these.

The costs: a scheme pyarrow does not know (``wasbs://``, ``webhdfs://``) is refused, and
every process (driver, executors, the Connect server's workers) needs the file system's
credentials in its environment (the ``AWS_*`` variables for S3).

Reads stream record batches in file-name order, so no process ever holds a whole trace.
One broker's events are its files (``trace-b<broker>-``, see
``broker.trace.recorder.file_prefix``) in name order. Writes go to a hidden temporary
name (``.tmp-...``, which Parquet readers skip) and are moved to their name when
complete: a reader never sees half a file, and a retried task writes the same name again.
"""

from __future__ import annotations

import itertools
import json
import pathlib
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from broker.trace.recorder import FILE_NAME

BATCH_ROWS = 65_536
#: Hadoop's scheme names that pyarrow knows under another name
_SCHEMES = {"s3a": "s3", "s3n": "s3"}


def resolve_uri(location: str | pathlib.Path) -> str:
    """An absolute URI for ``location``, to be resolved on the driver: a path (relative
    to the working directory, or absolute) becomes a ``file://`` URI; ``s3a://`` becomes
    ``s3://``; other URIs are kept as given."""
    text = str(location)
    scheme, separator, rest = text.partition("://")
    if not separator:
        return pathlib.Path(text).expanduser().resolve().as_uri()
    scheme = scheme.lower()
    if scheme == "file" and not rest.startswith("/"):
        raise ValueError(f"{text}: a file:// URI takes an absolute path (file:///...)")
    return f"{_SCHEMES.get(scheme, scheme)}://{rest}"


def join_uri(uri: str, *names: str) -> str:
    """``uri`` with ``names`` appended to its path, its query (file-system options) kept."""
    base, separator, query = uri.partition("?")
    path = "/".join([base.rstrip("/"), *(name.strip("/") for name in names)])
    return f"{path}{separator}{query}"


def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """The file system of ``uri`` and the path in it (a plain path is a local one)."""
    if "://" not in uri:
        return pafs.LocalFileSystem(), uri
    scheme, _, rest = uri.partition("://")
    return pafs.FileSystem.from_uri(f"{_SCHEMES.get(scheme.lower(), scheme)}://{rest}")


def parquet_files(uri: str, pattern_prefix: str = "") -> list[str]:
    """Parquet files directly under ``uri`` (name order), optionally by name prefix: their
    paths in ``uri``'s file system (open them with :func:`iter_file_batches`)."""
    fs, path = filesystem(uri)
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


def iter_file_batches(
    uri: str, path: str, columns: list[str] | None = None
) -> Iterator[pa.RecordBatch]:
    """The record batches of one file, ``path`` in ``uri``'s file system (only
    ``columns``, if given)."""
    fs, _ = filesystem(uri)
    with fs.open_input_file(path) as handle:
        yield from pq.ParquetFile(handle).iter_batches(batch_size=BATCH_ROWS, columns=columns)


def iter_batches(
    uri: str, pattern_prefix: str = "", columns: list[str] | None = None
) -> Iterator[pa.RecordBatch]:
    for name in parquet_files(uri, pattern_prefix):
        yield from iter_file_batches(uri, name, columns)


def rows_of(batches: Iterable[Any]) -> Iterator[dict[str, Any]]:
    """Rows of pyarrow record batches (or tables), one dict at a time."""
    for batch in batches:
        yield from batch.to_pylist()


def iter_rows(uri: str, pattern_prefix: str = "") -> Iterator[dict[str, Any]]:
    return rows_of(iter_batches(uri, pattern_prefix))


def read_json(uri: str, name: str) -> dict[str, Any]:
    """A small JSON file under ``uri`` ({} if absent)."""
    text = read_text(join_uri(uri, name))
    return {} if text is None else dict(json.loads(text))


def read_text(uri: str) -> str | None:
    """A small text file (None if absent)."""
    fs, path = filesystem(uri)
    if fs.get_file_info(path).type == pafs.FileType.NotFound:
        return None
    with fs.open_input_stream(path) as handle:
        return bytes(handle.read()).decode()


def read_table(uri: str) -> pa.Table:
    """Every Parquet part under ``uri`` (name order) as one table."""
    tables = [pq.read_table(path, filesystem=filesystem(uri)[0]) for path in parquet_files(uri)]
    return pa.concat_tables(tables, promote_options="default") if tables else pa.table({})


def clear_dir(uri: str) -> None:
    """``uri`` as an empty directory (what a previous run left there is deleted)."""
    fs, path = filesystem(uri)
    fs.create_dir(path, recursive=True)
    fs.delete_dir_contents(path, missing_dir_ok=True)


def _publish(fs: pafs.FileSystem, path: str, write: Any) -> None:
    """``write(stream)`` into a hidden temporary file beside ``path``, then the move."""
    directory, _, name = path.rpartition("/")
    if directory:
        fs.create_dir(directory, recursive=True)
    temporary = f"{directory}/.tmp-{uuid.uuid4().hex}-{name}" if directory else f".tmp-{name}"
    try:
        with fs.open_output_stream(temporary) as stream:
            write(stream)
        fs.move(temporary, path)
    except BaseException:
        if fs.get_file_info(temporary).type != pafs.FileType.NotFound:
            fs.delete_file(temporary)
        raise


def write_text(uri: str, text: str) -> str:
    """Write a text file at ``uri`` (whole or not at all); returns ``uri``."""
    fs, path = filesystem(uri)
    data = text.encode()
    _publish(fs, path, lambda stream: stream.write(data))
    return uri


def write_table(uri: str, table: pa.Table, name: str = "part-00000.parquet") -> str:
    """``table`` as the only Parquet file of the directory ``uri``; returns ``uri``."""
    clear_dir(uri)
    write_part(uri, name, [table])
    return uri


def write_part(uri: str, name: str, tables: Iterable[pa.Table | pa.RecordBatch]) -> int:
    """One Parquet file ``name`` under ``uri`` from tables or batches of one schema
    (streamed, whole or not at all); returns its rows. Nothing is written for none."""
    fs, path = filesystem(uri)
    pieces = iter(tables)
    first = next(pieces, None)
    if first is None:
        return 0
    rows = 0

    def write(stream: Any) -> None:
        nonlocal rows
        with pq.ParquetWriter(stream, first.schema) as writer:
            for piece in itertools.chain([first], pieces):
                table = piece if isinstance(piece, pa.Table) else pa.Table.from_batches([piece])
                writer.write_table(table)
                rows += table.num_rows

    _publish(fs, f"{path.rstrip('/')}/{name}", write)
    return rows
