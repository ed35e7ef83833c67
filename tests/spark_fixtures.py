"""One local SparkSession for the whole test run (a pytest plugin).

Test modules load it with ``pytest_plugins = ["spark_fixtures"]``. Starting a
JVM costs ~6 s, so the session is built once, lazily (a run without Spark
tests never starts one), and stopped at the end of the run. Tests must not
change session-wide settings they do not restore.

The master is ``local[2,2]``: two cores, and each task may fail once and be
retried, which the retry tests rely on (plain ``local[2]`` fails the job at
the first task failure).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark", reason="pyspark is not installed (the spark extra)")
    from lakehouse.spark.session import local_session

    session = local_session("lakehouse-tests", master="local[2,2]", shuffle_partitions=2)
    try:
        yield session
    finally:
        session.stop()
