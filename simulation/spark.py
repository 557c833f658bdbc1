"""A sweep of virtual-time runs on Spark: each (variant, seed) run of
:func:`simulation.run.run_virtual` is one Spark task, the results back on the driver in
the order of the tasks.

The runs share nothing, and each is the whole broker in one process on a virtual clock,
so a sweep is embarrassingly parallel and its results do not depend on where a task ran
(the same scenario, settings and seed give the same results on every machine, but for
the wall-clock measurements ``wallSeconds``, ``virtualToWall`` and
``evictionCpuSeconds``). The session is ``pipeline.spark``'s, as ``brokerlab analyze``
makes it (``--master``/``--remote``), and the job is DataFrame operations only, so the
same code runs on a classic session and on Spark Connect:
``spark.range(n, numPartitions=n)`` gives one row, so one task, per run, whose
``mapInArrow`` function runs it and returns its results as JSON.

The driver does everything that reads its own files: broker.conf and storage.conf are
resolved as a local run resolves them (the given path, else ``./conf/broker.conf`` when
there is one) and their text travels in the task (:func:`sweep_task`); an executor, in a
working directory of its own and maybe on another machine, writes them to a temporary
directory for the run. Nothing is written beside the results: no ``results.json``, plots
or trace (a task has no output directory).

Off a ``local`` master the executors' Python need not have brokerlab:
:data:`SWEEP_PACKAGES` go to the session as a zip (``pipeline.spark.ship_code``; the
compiled accelerators are left out, and their Python fallbacks give the same bytes and
the same results, slower), with the pure-Python packages of
``pipeline.spark.SHIPPED_DEPENDENCIES`` (sortedcontainers). That Python needs the rest
of what those packages import: pydantic, orjson, aiohttp, mmh3, pybase64, crc32c, isal,
rbloom, rocksdict, protobuf, hdrhistogram and rich, besides pyarrow and pandas for
PySpark's Arrow UDFs.

Costs: a task holds one run in memory, as a local run does, and its Python worker
imports the broker once (Python workers are reused between tasks). The function Spark
ships to every task carries every task (scenarios of a few KiB; each distinct conf text
once, however many tasks share it). A task's output (the broker's warnings) is kept in a
temporary file rather than flooding the driver's or the executor's console, and shown
only when the task fails. A task that raises does not stop the others: the sweep raises
:class:`SweepFailed`, naming every failed task and its seed, once all have ended; Spark
does not retry it (the same run fails the same way). A failure of Spark itself (a
worker lost, an executor's Python unable to import this module) fails the job as any
Spark job fails.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import pathlib
import tempfile
import traceback
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    import pyarrow as pa

    from loadgen.scenario import Scenario

# Only the standard library above: an executor imports this module to run a task (the
# function Spark ships is defined here), and an import that fails in :func:`run_task`
# (a package its Python lacks) is then reported as the task's failure, naming it.

#: the top-level packages a task imports (``pipeline`` is the driver's only)
SWEEP_PACKAGES = ("broker", "storage_stub", "loadgen", "simulation")
#: the Spark application's name, when the sweep makes the session
APP_NAME = "brokerlab-compare"
#: a failed task's error keeps the end of its captured output, this many characters
OUTPUT_TAIL_CHARS = 4000
_RESULT_DDL = "index long, result string, error string"


@dataclasses.dataclass(frozen=True)
class SweepTask:
    """One virtual-time run: what :func:`~simulation.run.run_virtual` needs, in JSON
    types, with the conf files' texts as the driver read them (:func:`sweep_task`)."""

    #: the variant's name, recorded in the results as ``variant``
    name: str
    #: ``Scenario.model_dump(mode="json")``
    scenario: dict[str, Any]
    #: replaces the scenario's seed
    seed: int
    #: broker.conf keys (win over the scenario's ``[broker]`` table)
    broker_overrides: dict[str, str]
    #: storage.conf keys (the run keeps storage in memory whatever they say)
    storage_overrides: dict[str, str]
    #: the scenario scaled to this length (None: its own)
    duration_s: float | None
    #: the text of broker.conf (None: no file, the defaults)
    broker_conf: str | None
    #: the text of storage.conf (None: no file, the defaults)
    storage_conf: str | None

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> SweepTask:
        return cls(**json.loads(text))


class SweepFailed(Exception):
    """Tasks of a sweep raised. ``failures`` has each failed task with its error (the
    traceback and the end of what the run wrote); the message names every failed task
    and its seed, and gives the first one's error whole."""

    def __init__(self, failures: Sequence[tuple[SweepTask, str]], total: int) -> None:
        self.failures = list(failures)
        lines = [f"{len(self.failures)} of {total} sweep tasks failed:"]
        for task, error in self.failures:
            last = error.strip().splitlines()[-1] if error.strip() else "(no message)"
            lines.append(f"- {task.name} (seed {task.seed}): {last}")
        first, error = self.failures[0]
        lines.append(f"{first.name} (seed {first.seed}):\n{error.rstrip()}")
        super().__init__("\n".join(lines))


def sweep_task(
    name: str,
    scenario: Scenario,
    seed: int,
    *,
    config: pathlib.Path | None = None,
    storage_config: pathlib.Path | None = None,
    broker_overrides: Mapping[str, str] | None = None,
    storage_overrides: Mapping[str, str] | None = None,
    duration_s: float | None = None,
) -> SweepTask:
    """The task of one run, made on the driver: the conf files resolved here as
    :func:`~simulation.run.run_virtual` resolves them (``config``, else
    ``./conf/broker.conf`` when there is one; storage.conf likewise) and read, since an
    executor may not have them. OSError for a file that cannot be read."""
    from simulation.run import conf_path

    return SweepTask(
        name=name,
        scenario=scenario.model_dump(mode="json"),
        seed=seed,
        broker_overrides=dict(broker_overrides or {}),
        storage_overrides=dict(storage_overrides or {}),
        duration_s=duration_s,
        broker_conf=_read_conf(conf_path(config, "broker.conf")),
        storage_conf=_read_conf(conf_path(storage_config, "storage.conf")),
    )


def _read_conf(path: pathlib.Path | None) -> str | None:
    # as storage_stub.confparse reads a conf file (a byte-order mark is dropped)
    return None if path is None else path.read_text(encoding="utf-8-sig")


def run_task(task: SweepTask) -> dict[str, Any]:
    """Run ``task`` here (what a Spark task does): its conf texts written to a temporary
    directory, an empty file for None (the defaults, whatever this working directory's
    ``conf/`` holds); the results of :func:`~simulation.run.run_virtual`, with
    ``variant``. Raises what it raises."""
    from loadgen.runner import RunOptions
    from loadgen.scenario import Scenario
    from simulation.run import run_virtual

    scenario = Scenario.model_validate(task.scenario)
    with tempfile.TemporaryDirectory(prefix="brokerlab-sweep-") as directory:
        config = pathlib.Path(directory, "broker.conf")
        config.write_text(task.broker_conf or "", encoding="utf-8")
        storage_config = pathlib.Path(directory, "storage.conf")
        storage_config.write_text(task.storage_conf or "", encoding="utf-8")
        options = RunOptions(
            config=config,
            storage_config=storage_config,
            broker_overrides=dict(task.broker_overrides),
            storage_overrides=dict(task.storage_overrides),
            duration_s=task.duration_s,
        )
        results = run_virtual(scenario, options, seed=task.seed)
    results["variant"] = task.name
    return results


def run_sweep_on_spark(
    tasks: Sequence[SweepTask], master: str | None = None, remote: str | None = None
) -> list[dict[str, Any]]:
    """Run every task as a Spark task on the session ``pipeline.spark.spark_session``
    makes of ``master`` and ``remote`` (an existing one if the process has it); their
    results in the order of ``tasks``. SweepFailed once all have ended if any raised;
    SparkMissing without PySpark."""
    if not tasks:
        return []
    # imported here: executors import this module from a zip without ``pipeline``
    from pipeline.spark import ship_code, spark_session

    spark = spark_session(master, remote, app_name=APP_NAME)
    ship_code(spark, SWEEP_PACKAGES)
    runner = _Runner(_shared_texts(tasks))
    frame = spark.range(len(tasks), numPartitions=len(tasks)).mapInArrow(runner, _RESULT_DDL)
    rows = sorted(frame.collect(), key=lambda row: int(row["index"]))
    indexes = [int(row["index"]) for row in rows]
    if indexes != list(range(len(tasks))):
        raise RuntimeError(f"the sweep's {len(tasks)} tasks returned rows for {indexes}")
    failures = [(tasks[i], str(row["error"])) for i, row in enumerate(rows) if row["error"]]
    if failures:
        raise SweepFailed(failures, len(tasks))
    return [json.loads(row["result"]) for row in rows]


def _shared_texts(tasks: Sequence[SweepTask]) -> tuple[SweepTask, ...]:
    """The tasks with equal conf texts made one object: pickle writes an object it meets
    again as a reference, so the function Spark ships holds each distinct text once."""
    texts: dict[str, str] = {}

    def shared(text: str | None) -> str | None:
        return None if text is None else texts.setdefault(text, text)

    return tuple(
        dataclasses.replace(
            task, broker_conf=shared(task.broker_conf), storage_conf=shared(task.storage_conf)
        )
        for task in tasks
    )


@dataclasses.dataclass(frozen=True)
class _Runner:
    """``mapInArrow`` function: for each task index that comes in (one per partition),
    the task run, its output captured; one row of results JSON, or of the error."""

    tasks: tuple[SweepTask, ...]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        for batch in batches:
            for index in batch.column(0).to_pylist():
                result, error = self._run(self.tasks[index])
                yield pa.RecordBatch.from_pydict(
                    {"index": [index], "result": [result], "error": [error]},
                    schema=pa.schema(
                        [("index", pa.int64()), ("result", pa.string()), ("error", pa.string())]
                    ),
                )

    @staticmethod
    def _run(task: SweepTask) -> tuple[str | None, str | None]:
        with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as output:
            try:
                with _redirected(output):
                    results = run_task(task)
                return json.dumps(results), None
            except Exception:
                output.seek(0)
                written = output.read()[-OUTPUT_TAIL_CHARS:]
                # the exception's line last: SweepFailed's summary shows it
                shown = f"the run's last output:\n{written.rstrip()}\n" if written else ""
                return None, shown + traceback.format_exc()


@contextlib.contextmanager
def _redirected(output: TextIO) -> Iterator[None]:
    """Standard output and error to ``output``: the run's log handler (made during the
    run, on ``sys.stderr``), logging's last resort and warnings write there."""
    with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
        yield
