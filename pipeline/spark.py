"""The SparkSession the pipeline runs on: ``local[*]`` on a laptop, or a cluster given
its master URL. Workers run the driver's Python (``PYSPARK_PYTHON``), so they import the
same ``broker.cache`` the broker runs."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class SparkMissing(Exception):
    """PySpark is not installed (it comes with the ``pipeline`` and ``test`` extras)."""


def spark_session(master: str = "local[*]", app_name: str = "brokerlab-analyze") -> SparkSession:
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise SparkMissing(
            "PySpark is not installed: pip install -e '.[pipeline]' (Java 17 on PATH)"
        ) from None
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app_name)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = (
            builder.config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "8")
        )
    builder = builder.config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
