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
for any PySpark job) and need not have brokerlab: :func:`ship_code` zips the packages a
task imports (``broker``, ``pipeline``; pure Python, checked, the optional compiled
accelerators of :data:`OPTIONAL_COMPILED` left out) on the driver and adds the
zip to the session (``addPyFile`` on a classic session, ``addArtifacts(pyfile=True)`` on
Connect), so tasks import them from there. The executors' Python needs what those
packages import: pyarrow, numpy, pandas (PySpark's Arrow UDFs), sortedcontainers, and
libcachesim for the references if the driver has it.
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
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: the top-level packages a task imports (the replay, the bound, the references, I/O)
SHIPPED_PACKAGES = ("broker", "pipeline")
#: files that cannot be imported from a zip
_COMPILED = (".so", ".pyd", ".dylib")
#: compiled modules the zip leaves out: optional accelerators whose package works without
#: them (an executor's Python, maybe of another platform, runs the Python reference)
OPTIONAL_COMPILED = frozenset({"broker.ledger._entries"})

_shipped: weakref.WeakSet[Any] = weakref.WeakSet()


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
    # a master was chosen: a SPARK_REMOTE in the environment would make PySpark refuse it
    os.environ.pop("SPARK_REMOTE", None)
    builder = SparkSession.builder.master(master).appName(app_name)
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


def ship_code(session: Any) -> pathlib.Path | None:
    """Add brokerlab's code to ``session`` (once per session), unless its executors run
    the driver's own Python (a classic ``local`` master). Returns the zip added."""
    if session in _shipped:
        return None
    connect = is_connect(session)
    if not connect and _is_local(session):
        return None
    archive = code_archive()
    if connect:
        session.addArtifacts(str(archive), pyfile=True)
    else:
        session.sparkContext.addPyFile(str(archive))
    _shipped.add(session)
    return archive


def code_archive(directory: pathlib.Path | None = None) -> pathlib.Path:
    """A zip of :data:`SHIPPED_PACKAGES` as this process imports them, named by its
    content (``brokerlab-<hash>.zip``: a changed tree is a new artifact name, which
    Connect requires) in ``directory`` (a temporary one by default)."""
    import importlib

    members: list[tuple[str, bytes]] = []
    for package in SHIPPED_PACKAGES:
        module = importlib.import_module(package)
        root = pathlib.Path(module.__file__ or "").parent
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
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return target
