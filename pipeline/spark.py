"""The SparkSession the pipeline runs on, and brokerlab's code shipped to its executors.

Which session (``brokerlab analyze`` passes its ``--master`` and ``--remote``):

- ``remote`` (``sc://host:port``, or a master given as ``sc://...``): a Spark Connect
  session; the whole analysis is DataFrame operations, so it runs there as anywhere;
- ``master`` (``local[*]``, ``spark://host:7077``, ``yarn``, ``k8s://...``): a classic
  session on that master. An explicit master wins over a ``SPARK_REMOTE`` in the
  environment (which PySpark would otherwise refuse to combine with a master);
- neither: ``SPARK_REMOTE`` if set (Connect), else ``local[*]``.

On a ``local`` master the executors' Python is the driver's own (``PYSPARK_PYTHON``
defaults to it), which imports brokerlab as the driver does. Anywhere else the
executors' Python is the cluster's (``PYSPARK_PYTHON`` or ``spark.pyspark.python``, as
for any PySpark job) and need not have brokerlab, nor its dependencies but those
PySpark's Arrow UDFs need themselves (pyarrow, pandas, numpy): :func:`ship_code` zips
the packages a task imports (the analysis's :data:`SHIPPED_PACKAGES`, ``broker`` and
``pipeline``, or those its caller names; pure Python, checked, the optional compiled
accelerators of :data:`OPTIONAL_COMPILED` left out) with the third-party pure-Python
packages they import (:data:`SHIPPED_DEPENDENCIES`: sortedcontainers) on the driver and
adds the zip to the session (``addPyFile`` on a classic session,
``addArtifacts(pyfile=True)`` on Connect), so tasks import them from there.

A compiled dependency cannot travel in a zip. The analysis's tasks import none but
pyarrow and numpy; libcachesim (the ``reference`` extra) runs on the driver only
(``pipeline.reference.BatchReferences``, beside the bound's job), so executors never
need it. The sweep's tasks (``simulation.spark``) import more compiled
packages, which its executors' Python must have.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import pathlib
import shutil
import sys
import tempfile
import weakref
import zipfile
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: the top-level packages a task imports (the replay, the bound, the references, I/O)
SHIPPED_PACKAGES = ("broker", "pipeline")
#: third-party packages those import that are pure Python: shipped in the zip with them
#: (the executor's Python need not have them; one it has is shadowed by the driver's
#: copy). A package here that turns out compiled makes :func:`code_archive` refuse.
#: ``tests/pipeline/test_io_and_shipping.py`` runs the tasks' code on a Python with only
#: pyarrow, pandas and numpy, which fails on an import missing here.
SHIPPED_DEPENDENCIES = ("sortedcontainers",)
#: files that cannot be imported from a zip
_COMPILED = (".so", ".pyd", ".dylib")
#: compiled modules the zip leaves out: optional accelerators whose package works without
#: them (an executor's Python, maybe of another platform, runs the Python reference:
#: ``broker.ledger.entry``, ``storage_stub.bookie.entry_log`` and ``.api``; without
#: ``_writer`` a disk bookie writes on the loop, and memory mode never uses it)
OPTIONAL_COMPILED = frozenset(
    {"broker.ledger._entries", "storage_stub.bookie._frames", "storage_stub.bookie._writer"}
)

#: per session, the packages shipped to it so far
_shipped: weakref.WeakKeyDictionary[Any, frozenset[str]] = weakref.WeakKeyDictionary()


class SparkMissing(Exception):
    """PySpark is not installed (it comes with the ``pipeline`` and ``test`` extras)."""


def spark_session(
    master: str | None = None,
    remote: str | None = None,
    app_name: str = "brokerlab-analyze",
) -> SparkSession:
    """A classic or Connect session, as the module's docstring says."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise SparkMissing(
            "PySpark is not installed: pip install -e '.[pipeline]' (Java 17 on PATH)"
        ) from None
    kind, where = session_target(master, remote, os.environ)
    if kind == "remote":
        try:
            import pyspark.sql.connect.session  # noqa: F401
        except ImportError as error:
            raise SparkMissing(
                f"Spark Connect's client is missing ({error}): pip install -e '.[pipeline]'"
            ) from None
        return SparkSession.builder.remote(where).appName(app_name).getOrCreate()
    master = where
    missing = java_missing(os.environ)
    if missing is not None:
        raise SparkMissing(missing)
    # a master was chosen: a SPARK_REMOTE in the environment would make PySpark refuse it
    os.environ.pop("SPARK_REMOTE", None)
    # the analysis prints its own progress, a line per phase (pipeline.progress), not
    # Spark's bar per stage
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.showConsoleProgress", "false")
    )
    if master.startswith("local"):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = (
            builder.config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "8")
        )
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session


def java_missing(environ: Mapping[str, str]) -> str | None:
    """Why a classic session cannot start its driver's JVM, or None if it can: PySpark
    runs ``$JAVA_HOME/bin/java`` when JAVA_HOME is set, else ``java`` on PATH (without
    one it ends in a gateway traceback). Spark 4 needs Java 17 or newer."""
    fix = "install Java 17 (Debian: apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
    java_home = environ.get("JAVA_HOME")
    if java_home:
        if os.access(pathlib.Path(java_home, "bin", "java"), os.X_OK):
            return None
        return f"JAVA_HOME={java_home} has no bin/java: {fix} to a Java 17 installation"
    if shutil.which("java", path=environ.get("PATH")) is not None:
        return None
    return f"Spark needs Java, and there is no java on PATH and no JAVA_HOME: {fix}"


def session_target(
    master: str | None, remote: str | None, environ: Mapping[str, str]
) -> tuple[str, str]:
    """``("remote", url)`` for a Connect session, ``("master", master)`` for a classic
    one: ``remote`` (or a master given as ``sc://...``), else ``master``, else the
    environment's ``SPARK_REMOTE``, else ``local[*]``."""
    if remote:
        return "remote", remote
    if master:
        return ("remote", master) if master.startswith("sc://") else ("master", master)
    if environ.get("SPARK_REMOTE"):
        return "remote", environ["SPARK_REMOTE"]
    return "master", "local[*]"


def is_connect(session: Any) -> bool:
    """Whether ``session`` is a Spark Connect session."""
    return type(session).__module__.startswith("pyspark.sql.connect")


def _is_local(session: Any) -> bool:
    master = str(session.conf.get("spark.master", ""))
    return master.startswith("local")


def ship_code(session: Any, packages: Sequence[str] | None = None) -> pathlib.Path | None:
    """Add brokerlab's ``packages`` (None: :data:`SHIPPED_PACKAGES`) and the pure-Python
    packages they import (:data:`SHIPPED_DEPENDENCIES`) to ``session``, unless its
    executors run the driver's own Python (a classic ``local`` master) or earlier calls
    shipped them all. Returns the zip added (None if none was).

    A call naming a package not shipped yet adds a zip of all it names: two zips may then
    hold a package, the same code (this process's), and executors import either."""
    wanted = frozenset(SHIPPED_PACKAGES if packages is None else packages)
    shipped = _shipped.get(session, frozenset())
    if wanted <= shipped:
        return None
    connect = is_connect(session)
    if not connect and _is_local(session):
        return None
    archive = code_archive(packages=sorted(wanted))
    if connect:
        session.addArtifacts(str(archive), pyfile=True)
    else:
        session.sparkContext.addPyFile(str(archive))
    _shipped[session] = shipped | wanted
    return archive


def code_archive(
    directory: pathlib.Path | None = None,
    packages: Sequence[str] | None = None,
    dependencies: Sequence[str] | None = None,
) -> pathlib.Path:
    """A zip of ``packages`` (None: :data:`SHIPPED_PACKAGES`) and ``dependencies``
    (None: :data:`SHIPPED_DEPENDENCIES`), packages or single modules, as this process
    imports them, named by its content (``brokerlab-<hash>.zip``: a changed tree is a
    new artifact name, which Connect requires) in ``directory`` (a temporary one by
    default). RuntimeError for a compiled module not in :data:`OPTIONAL_COMPILED`."""
    import importlib.util

    members: list[tuple[str, bytes]] = []
    wanted = [*(SHIPPED_PACKAGES if packages is None else packages)]
    wanted += [name for name in (SHIPPED_DEPENDENCIES if dependencies is None else dependencies)
               if name not in wanted]  # fmt: skip
    for package in wanted:
        # found, not imported (a compiled module is refused, not loaded)
        spec = importlib.util.find_spec(package)
        if spec is None or spec.origin is None:
            raise RuntimeError(f"{package}: not found, or not a module of files, to ship")
        source = pathlib.Path(spec.origin)
        if spec.submodule_search_locations is None:  # a module of its own (six.py)
            if source.suffix != ".py":
                raise RuntimeError(f"{source}: a compiled module cannot be shipped in a zip")
            members.append((source.name, source.read_bytes()))
            continue
        root = source.parent
        for path in sorted(root.rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts or path.suffix == ".pyc":
                continue
            name = f"{package}/{path.relative_to(root).as_posix()}"
            if path.suffix in _COMPILED:
                module_name = name.rpartition("/")[0].replace("/", ".")
                module_name += "." + path.name.partition(".")[0]
                if module_name in OPTIONAL_COMPILED:
                    continue
                raise RuntimeError(f"{path}: a compiled module cannot be shipped in a zip")
            members.append((name, path.read_bytes()))
    # zipimport finds a package without __init__.py (a namespace package: broker.ledger,
    # broker.dispatch) only by its directory's own entry, which writestr does not make
    names = {name for name, _ in members}
    folders = {str(up) for name in names for up in pathlib.PurePosixPath(name).parents}
    namespaces = sorted(f for f in folders - {"."} if f"{f}/__init__.py" not in names)
    members += [(f"{folder}/", b"") for folder in namespaces]
    digest = hashlib.sha256()
    for name, data in members:
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    if directory is None:
        directory = pathlib.Path(tempfile.mkdtemp(prefix="brokerlab-code-"))
        atexit.register(shutil.rmtree, directory, True)
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"brokerlab-{digest.hexdigest()[:16]}.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            if info.is_dir():
                info.external_attr = 0o40755 << 16 | 0x10  # a directory (MS-DOS flag too)
            else:
                info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return target
