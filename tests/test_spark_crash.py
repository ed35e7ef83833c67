"""Kill the driver during a Spark write: after reopening, the table is in its
old or its new state, and no data file of the dead write is referenced.

A child process opens the lakehouse, starts its own local Spark and writes
through :func:`lakehouse.spark.write`; it is killed with SIGKILL

* ``mid-job``: by one of its own Spark tasks, while the other task's file is
  already written (the driver has not seen the job end);
* ``before-commit``: after ``add_files`` registered the renamed files in the
  transaction, just before the commit (the lakehouse's testing injection
  point, the ``commit_hook`` option);
* ``after-commit``: right after the commit returned;

with Spark's Parquet writer (``jvm``), and once mid-job with the Python-task
writer (a ``large_string`` column, which Spark does not write).

The parent then kills what is left of the child's process group (its JVM),
reopens the lakehouse and checks the table and its files. Each case starts a
JVM of its own, so these tests are marked ``slow``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from datetime import timedelta

import pyarrow as pa
import pytest
from parquet_files import PARQUET

import lakehouse

pytest.importorskip("pyspark")

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])
PY_SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.large_string())])

CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import lakehouse, lakehouse.spark as lhs
    from pyspark.sql import functions as F

    path, point = sys.argv[1], sys.argv[2]
    me = os.getpid()
    spark = lhs.local_session("crash-child", master="local[2]")

    def die(*_):
        os.kill(me, signal.SIGKILL)

    hook = die if point == "before-commit" else None
    lh = lakehouse.open(path, kv_options={"fsync": True}, commit_hook=hook)

    data_dir = lh.data_location()[0][len("file://") :]
    existing = {os.path.join(r, x) for r, _, names in os.walk(data_dir) for x in names}

    def other_file_written():
        # a new Parquet file, closed: its footer's magic ends it
        for root, _, names in os.walk(data_dir):
            for name in names:
                p = os.path.join(root, name)
                if name.endswith(".parquet") and p not in existing:
                    try:
                        with open(p, "rb") as f:
                            f.seek(-4, 2)
                            if f.read(4) == b"PAR1":
                                return True
                    except OSError:  # too short yet, or renamed meanwhile
                        pass
        return False

    def maybe_kill(x):
        from pyspark import TaskContext
        import time
        if point == "mid-job" and TaskContext.get().partitionId() == 1 and x == 1500:
            deadline = time.monotonic() + 120  # only bounds a hang
            while not other_file_written() and time.monotonic() < deadline:
                time.sleep(0.01)  # until partition 0 has written its file
            os.kill(me, signal.SIGKILL)
        return x

    df = spark.range(1000, 2000, numPartitions=2).select(
        F.udf(maybe_kill, "long")(F.col("id")).alias("id"),
        F.col("id").cast("string").alias("v"),
    )
    print("writing", flush=True)
    lhs.write(lh, df, "ns.t")
    if point == "after-commit":
        die()
    print("survived", flush=True)
    """
)


@pytest.mark.parametrize(
    "point, writer",
    [
        ("mid-job", "jvm"),
        ("mid-job", "python"),
        ("before-commit", "jvm"),
        ("after-commit", "jvm"),
    ],
)
def test_driver_killed_during_spark_write(tmp_path, point, writer):
    path = str(tmp_path / "lh")
    # a large_string column is not a type Spark's writer produces: Python tasks write
    schema = SCHEMA if writer == "jvm" else PY_SCHEMA
    with lakehouse.open(path) as lh:
        with lh.begin() as txn:
            txn.create_namespace("ns")
            txn.create_table("ns.t", schema, PARQUET)  # files: what a crash may leave
        with lh.begin() as txn:
            txn.append("ns.t", pa.table({"id": pa.array(range(100), pa.int64())}))
        before = {f.path for f in lh.list_data_files("ns.t")}
        v_before = lh.version
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    child = subprocess.Popen(
        [sys.executable, str(script), path, point],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    try:
        out, _ = child.communicate(timeout=300)
    finally:
        try:
            os.killpg(child.pid, signal.SIGKILL)  # the orphaned JVM and Python workers
        except ProcessLookupError:
            pass
    assert child.returncode == -signal.SIGKILL, out
    assert b"writing" in out and b"survived" not in out

    with lakehouse.open(path) as lh:
        files = {f.path for f in lh.list_data_files("ns.t")}
        n = lh.table_stats("ns.t").rows
        data_dir = lh.data_location()[0][len("file://") :]
        if point == "after-commit":
            assert (lh.version, n) == (v_before + 1, 1100)
            assert before < files
        else:
            assert (lh.version, n) == (v_before, 100)
            assert files == before  # nothing of the dead write is referenced
        assert sorted(lh.read("ns.t").column("id").to_pylist())[:100] == list(range(100))
        for p in files:
            assert os.path.exists(os.path.join(data_dir, p))
        if point == "mid-job" and writer == "python":
            # the other task's file was written before the kill (the JVM writer's
            # staging files may be gone: the JVM cleans up when its driver dies)
            on_disk = {os.path.join(root, x) for root, _, names in os.walk(data_dir) for x in names}
            assert any(
                p.endswith(".parquet") for p in on_disk - {os.path.join(data_dir, f) for f in files}
            ), on_disk
        # the dead write's files are orphans: remove_orphan_files reclaims the ones named
        # <epoch ms>-...parquet; Spark's own staging directory (<epoch ms>-spark-<job>/, its
        # files named by Spark) is all that may be left
        lh.remove_orphan_files(older_than=timedelta(0))
        left = set()
        for root, _, names in os.walk(data_dir):
            left |= {os.path.relpath(os.path.join(root, x), data_dir) for x in names}
        assert files <= left
        assert all("-spark-" in p.split("/")[1] for p in left - files), left - files
        if writer == "python":
            assert left == files
