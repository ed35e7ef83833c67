"""A local SparkSession set up the way :mod:`lakehouse.spark` needs it.

The settings that matter (measured on PySpark 4.3, Java 17, 2 cores):

* ``PYSPARK_PYTHON`` = this interpreter, so Python tasks import the same
  packages (pyarrow, fsspec, pyroaring) as the driver;
* ``SPARK_LOCAL_IP=127.0.0.1``: no name lookups, no network;
* ``spark.ui.enabled=false`` and no console progress bar;
* ``spark.sql.parquet.outputTimestampType=TIMESTAMP_MICROS``: Spark's default
  (INT96) reads back through pyarrow as ``timestamp[ns]`` without a zone, not
  the ``timestamp[us, tz=UTC]`` the table declares;
* ``spark.sql.sources.parallelPartitionDiscovery.threshold`` raised: planning
  a read of 1,000 files took 3.5-6.8 s at the default (32: above it Spark runs
  a job just to list the files it was given) and 0.2 s raised;
* page checksums: parquet-mr writes them by default
  (``parquet.page.write-checksum.enabled``) but never verifies them unless
  ``parquet.page.verify-checksum.enabled`` is true. Spark copies a session's
  SQL settings into the Hadoop configuration of every file scan, so setting
  it with ``spark.conf.set`` works on a running session (as does
  ``spark.hadoop.parquet.page.verify-checksum.enabled`` at build time).

:func:`configure` applies the SQL settings to any session (every call of
:mod:`lakehouse.spark` does so, once per session; the lakehouse's own scans
also pass the checksum options per read); :func:`local_session` builds a
whole local session with all of them, for scripts, the demo, the benchmark
and the tests.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

#: SQL settings every session used with a lakehouse needs
REQUIRED_CONF = {
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "100000",
    "parquet.page.verify-checksum.enabled": "true",
    "parquet.page.write-checksum.enabled": "true",
}
#: Hadoop settings of a session :func:`local_session` builds
HADOOP_CONF = {
    "spark.hadoop.parquet.page.verify-checksum.enabled": "true",
    "spark.hadoop.parquet.page.write-checksum.enabled": "true",
}

_configured: set[int] = set()
_lock = threading.Lock()


def configure(spark: Any) -> None:
    """Apply :data:`REQUIRED_CONF` to ``spark`` (idempotent, thread-safe)."""
    key = id(spark)
    if key in _configured:
        return
    with _lock:
        if key in _configured:
            return
        for k, v in REQUIRED_CONF.items():
            if spark.conf.get(k, None) != v:
                spark.conf.set(k, v)
        _configured.add(key)


def local_session(
    app_name: str = "lakehouse",
    *,
    master: str = "local[2]",
    shuffle_partitions: int = 4,
    driver_memory: str = "2g",
    conf: dict[str, str] | None = None,
) -> Any:
    """A local SparkSession on this machine (``getOrCreate``: reuses a live one).

    ``master`` ``"local[2,2]"`` lets each task fail once and be retried
    (plain ``local[n]`` fails the job at the first task failure).
    ``driver_memory``: the JVM heap, which in local mode also runs the tasks
    (Spark's default 1g is tight for millions of rows); it only applies when
    this call starts the JVM.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", driver_memory)
    )
    for k, v in {**REQUIRED_CONF, **HADOOP_CONF, **(conf or {})}.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    configure(spark)
    return spark
