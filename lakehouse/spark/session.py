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
:mod:`lakehouse.spark` does so, where the session's value differs; the
lakehouse's own scans also pass the checksum, rebase and corrupt-file options
per read) and, once per session, checks that its Python tasks can import this
package (:func:`check_python`: the one requirement a session fixes when it
starts, ``PYSPARK_PYTHON``, has a runtime override); :func:`local_session` builds a
whole local session with all of them, for scripts, the demo, the benchmark
and the tests.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import sys
import threading
import weakref
from collections.abc import Iterator
from typing import Any

from lakehouse.errors import LakehouseError
from lakehouse.spark.jobs import first_line

log = logging.getLogger("lakehouse.spark")

#: SQL settings every session used with a lakehouse needs
REQUIRED_CONF = {
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "100000",
    "parquet.page.verify-checksum.enabled": "true",
    "parquet.page.write-checksum.enabled": "true",
    # Spark 4's default; LEGACY would rebase dates before 1582 and timestamps before
    # 1900 into the Julian calendar in the files Spark writes (pyarrow reads them 5-10
    # days off)
    "spark.sql.parquet.datetimeRebaseModeInWrite": "CORRECTED",
}
#: the SQL setting naming the Python that runs Python tasks (Arrow UDFs, mapInArrow);
#: unlike ``PYSPARK_PYTHON`` / ``spark.pyspark.python`` it can be set at runtime
PYTHON_CONF = "spark.sql.execution.pyspark.python"
#: Hadoop settings of a session :func:`local_session` builds
HADOOP_CONF = {
    "spark.hadoop.parquet.page.verify-checksum.enabled": "true",
    "spark.hadoop.parquet.page.write-checksum.enabled": "true",
}

_checked: weakref.WeakSet[Any] = weakref.WeakSet()
_lock = threading.Lock()


class SparkConfigError(LakehouseError, RuntimeError):
    """The Spark session cannot run :mod:`lakehouse.spark`'s calls: a setting that
    cannot be changed on a running session is missing or wrong. The message names
    the setting and how to set it; nothing was written."""


def configure(spark: Any) -> None:
    """Make ``spark`` ready for the lakehouse's calls (every call of
    :mod:`lakehouse.spark` runs this first; thread-safe).

    Applies :data:`REQUIRED_CONF` wherever the session's value differs (a few
    ``conf.get`` calls: a setting changed between two calls is set again before
    the next one). The first call on a session also checks that its executors run
    a Python that can import this package (:func:`check_python`)."""
    for k, v in REQUIRED_CONF.items():
        if spark.conf.get(k, None) != v:
            spark.conf.set(k, v)
    if _seen(spark):
        return
    with _lock:
        if _seen(spark):
            return
        check_python(spark)
        _remember(spark)


def _seen(spark: Any) -> bool:
    try:
        return spark in _checked
    except TypeError:  # not weakly referenceable: check every time
        return False


def _remember(spark: Any) -> None:
    try:
        _checked.add(spark)
    except TypeError:
        pass


def _is_local(spark: Any) -> bool:
    """A classic session whose executors run on this machine (``local[...]``)."""
    return not is_connect(spark) and str(spark.sparkContext.master).startswith("local")


#: what the lakehouse's Python tasks import (the probe imports them on an executor)
TASK_MODULES = ("lakehouse.spark.partitions", "lakehouse.spark.reader", "lakehouse.spark.writer")


def _probe_task(batches: Iterator[Any]) -> Iterator[Any]:
    """Runs in a Python task: import what the lakehouse's tasks import."""
    import importlib

    import pyarrow as pa

    # by name: these modules import this one (no import edge back to them)
    for name in TASK_MODULES:
        importlib.import_module(name)
    for _ in batches:
        pass
    yield pa.RecordBatch.from_pydict({"python": [f"{sys.version_info[0]}.{sys.version_info[1]}"]})


def _probe(spark: Any) -> str | None:
    """Run :func:`_probe_task` in one task; the failure's gist, or None if it worked."""
    try:
        spark.range(1, numPartitions=1).mapInArrow(_probe_task, "python string").collect()
    except Exception as exc:
        text = str(exc)
        found = re.findall(r"\b(\w+(?:Error|Exception): [^\n]+)", text)
        found = [f for f in found if "Python worker" not in f and "Traceback" not in f]
        if "PYTHON_VERSION_MISMATCH" in text:
            found = [m.group(0) for m in re.finditer(r"\[PYTHON_VERSION_MISMATCH\][^\n]*", text)]
        return (found[-1] if found else first_line(exc))[:400]
    return None


def _same_python(exe: str) -> bool:
    """``exe`` (as the JVM starts it: a path or a name on ``PATH``) is this interpreter
    (by path, not by resolved link: a virtual environment's ``python`` links to
    the base interpreter but has other packages)."""
    found = shutil.which(exe) if os.sep not in exe else exe
    return found is not None and os.path.abspath(found) == os.path.abspath(sys.executable)


def check_python(spark: Any) -> None:
    """Check that ``spark``'s Python tasks can import :mod:`lakehouse.spark` (S3
    reads and writes, bucket partitions and the Python writer run in them).

    The Python they run is ``spark.sql.execution.pyspark.python`` if set, else
    the ``PYSPARK_PYTHON`` the SparkContext started with (default ``python3``
    from ``PATH``). A local session whose tasks run this very interpreter needs
    no check. Otherwise one task tries the imports; when it fails on a local
    session where :data:`PYTHON_CONF` is unset, the setting is pointed at this
    interpreter (logged) and tried again. Raises :class:`SparkConfigError`
    naming the setting when the executors still cannot run the tasks.
    """
    local = _is_local(spark)
    chosen = spark.conf.get(PYTHON_CONF, None)
    exe = chosen or (None if is_connect(spark) else spark.sparkContext.pythonExec)
    if local and exe and _same_python(exe):
        return
    problem = _probe(spark)
    if problem is None:
        return
    if local and not chosen:
        spark.conf.set(PYTHON_CONF, sys.executable)
        if _probe(spark) is None:
            log.warning(
                "Spark's Python tasks ran %r, which cannot import lakehouse.spark (%s); "
                "set %s=%s on this session",
                exe,
                problem,
                PYTHON_CONF,
                sys.executable,
            )
            return
        spark.conf.unset(PYTHON_CONF)
    where = f" (executors' Python: {exe!r})" if exe else ""
    raise SparkConfigError(
        f"Spark's Python tasks cannot import lakehouse.spark{where}: {problem}. "
        "lakehouse.spark runs Python tasks for S3 tables, bucket partitions and "
        "columns Spark cannot write; they need a Python with lakehouse[spark] installed "
        "(the driver's minor version): start the session with PYSPARK_PYTHON=<that "
        "python> in the environment (or spark.pyspark.python), or set it on the "
        f"running session with spark.conf.set({PYTHON_CONF!r}, <that python>); on "
        "a cluster that path must exist on every worker"
    )


def is_connect(spark: Any) -> bool:
    """``spark`` is a Spark Connect session (``SparkSession.builder.remote(...)``):
    no ``sparkContext``, no ``_jdf``, no RDDs; only the DataFrame API reaches it."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def default_parallelism(spark: Any) -> int:
    """Spark's default parallelism (tasks a job of small inputs is split into). A
    Connect session has no ``sparkContext`` to ask: ``spark.default.parallelism``
    when set, else the cores of a ``local[n]`` master, else the cluster's executor
    cores when configured, else 8."""
    if not is_connect(spark):
        return int(spark.sparkContext.defaultParallelism)
    conf = spark.conf
    value = conf.get("spark.default.parallelism", None)
    if value:
        return max(1, int(value))
    master = str(conf.get("spark.master", "") or "")
    m = re.fullmatch(r"local\[(\d+|\*)(?:,\d+)?\]", master)
    if m:
        return (os.cpu_count() or 1) if m.group(1) == "*" else max(1, int(m.group(1)))
    if master == "local":
        return 1
    executors = conf.get("spark.executor.instances", None)
    cores = conf.get("spark.executor.cores", None)
    if executors and cores:
        return max(1, int(executors) * int(cores))
    return 8


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
    if not is_connect(spark):  # SPARK_REMOTE set: getOrCreate connected instead
        spark.sparkContext.setLogLevel("ERROR")
    configure(spark)
    return spark
