"""One real SparkSession (local[2]) for the pipeline tests that need one."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pipeline.spark import spark_session


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    session = spark_session("local[2]")
    session.conf.set("spark.sql.shuffle.partitions", "2")
    yield session
    session.stop()
