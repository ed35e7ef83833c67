"""lakehouse.spark under Spark Connect: every call through ``SparkSession.builder.remote``.

A module fixture starts the Connect server bundled with pyspark
(``pyspark/jars/spark-connect_*.jar``, ``spark-submit --class
...SparkConnectServer``) on a free loopback port and stops it at the end.
The client here is a Connect session only: no ``sparkContext``, no ``_jdf``,
no RDDs. The lakehouse store stays in this process (the Connect client is
the lakehouse's driver); the server's executors read and write the data
files, at the same local paths (one machine) or on S3 (moto on loopback).

Every result is checked against the Python API: each operation also runs on
a twin lakehouse through ``txn.append/overwrite/delete/update/merge``, and
the two tables must hold the same rows.

Creating a Connect session marks the process as a Connect client
(``SPARK_CONNECT_MODE_ENABLED``: ``pyspark.sql.functions`` then build
Connect columns); the fixture restores the environment afterwards so the
classic session of other test modules in the same run is unaffected.
"""

from __future__ import annotations

import glob
import importlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from parquet_files import PARQUET

import lakehouse

pytest.importorskip("pyspark", reason="pyspark is not installed (the spark extra)")
pytest.importorskip("grpc", reason="grpcio is not installed (the connect extra)")
pytest.importorskip("grpc_status", reason="grpcio-status is not installed (the connect extra)")
pytest.importorskip("google.protobuf", reason="protobuf is not installed (the connect extra)")

import pyspark

import lakehouse.spark as lhs
from lakehouse.spark import deletions
from lakehouse.spark.session import HADOOP_CONF, default_parallelism

pytestmark = pytest.mark.spark
merge_mod = importlib.import_module("lakehouse.spark.merge")  # the package exports merge()

SPARK_HOME = Path(pyspark.__file__).parent
JARS = sorted(glob.glob(str(SPARK_HOME / "jars" / "spark-connect_*.jar")))

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("grp", pa.string()),
        ("qty", pa.int32()),
        ("at", pa.timestamp("us", tz="UTC")),
    ]
)
#: no background compaction: the deletion forms and file counts stay as written
STILL = {**PARQUET, "compaction.auto": "false"}


# -- the server and the client ------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``sc://127.0.0.1:<port>`` of a Connect server started for this module."""
    if not JARS:
        pytest.skip(f"no spark-connect jar in {SPARK_HOME / 'jars'}")
    port = _free_port()
    work = tmp_path_factory.mktemp("connect-server")
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
    }
    for k in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "PYSPARK_SUBMIT_ARGS"):
        env.pop(k, None)
    conf = {
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.shuffle.partitions": "2",
        # what local_session sets at build time (configure() sets the SQL ones per session)
        **HADOOP_CONF,
    }
    cmd = [
        str(SPARK_HOME / "bin" / "spark-submit"),
        "--class",
        "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--master",
        "local[2]",
        *[a for k, v in conf.items() for a in ("--conf", f"{k}={v}")],
        JARS[-1],
    ]
    log_path = work / "server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 180  # a readiness wait, not a measurement
        while not _listening(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log_path.read_text(errors="replace")[-3000:]
                pytest.fail(f"the Spark Connect server did not start (exit {proc.poll()}):\n{tail}")
            time.sleep(0.5)
        yield f"sc://127.0.0.1:{port}"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def spark(connect_url: str) -> Iterator[Any]:
    """A Spark Connect session (this module's own: overrides spark_fixtures' classic one)."""
    from pyspark.sql import SparkSession

    saved = {k: os.environ.get(k) for k in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE")}
    # create(), not getOrCreate(): the latter refuses while a classic session of an
    # earlier test module is alive in this process
    session = SparkSession.builder.remote(connect_url).create()
    assert type(session).__module__.startswith("pyspark.sql.connect")
    try:
        yield session
    finally:
        try:
            session.stop()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


# -- lakehouses and data -----------------------------------------------------------------------
def open_pair(root: Path, **create: Any) -> tuple[Any, Any]:
    """The lakehouse Spark writes (``lh``) and its twin the Python API writes (``ref``),
    each with table ``ns.t`` created alike."""
    out = []
    for name in ("lh", "ref"):
        h = lakehouse.open(str(root / name), kv_options={"fsync": False})
        with h.begin() as txn:
            txn.create_namespace("ns")
            txn.create_table("ns.t", SCHEMA, create.pop("properties", None) or STILL, **create)
        out.append(h)
    return out[0], out[1]


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    lh, ref = open_pair(tmp_path)
    yield lh, ref
    lh.close()
    ref.close()


def rows(ids: Any, *, grp: str = "g", groups: int = 3) -> pa.Table:
    ids = list(ids)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "grp": pa.array([f"{grp}{i % groups}" for i in ids]),
            "qty": pa.array([i % 5 for i in ids], pa.int32()),
            "at": pa.array([1_700_000_000_000_000 + i for i in ids], pa.timestamp("us", tz="UTC")),
        },
        schema=SCHEMA,
    )


def frame(spark: Any, table: pa.Table) -> Any:
    return spark.createDataFrame(table)


def ordered(t: pa.Table) -> list[dict[str, Any]]:
    return t.sort_by([(n, "ascending") for n in t.column_names]).to_pylist()


def collected(df: Any) -> list[dict[str, Any]]:
    """A Spark DataFrame's rows, as the Python API returns them (Arrow, table types)."""
    return ordered(df.toArrow().cast(SCHEMA))


def same(lh: Any, ref: Any, table: str = "ns.t") -> list[dict[str, Any]]:
    """The two lakehouses hold the same rows of ``table``; returns them."""
    got = ordered(lh.read(table))
    assert got == ordered(ref.read(table))
    return got


def python_write(ref: Any, data: pa.Table, mode: str = "append", where: str | None = None) -> None:
    with ref.begin() as txn:
        if mode == "append":
            txn.append("ns.t", data)
        elif mode == "replace_partitions":
            txn.replace_partitions("ns.t", data)
        else:
            txn.overwrite("ns.t", data, where=where)


# -- write and read ----------------------------------------------------------------------------
def test_write_modes_and_reads_at_versions(spark, pair):
    lh, ref = pair
    v1 = lhs.write(lh, frame(spark, rows(range(0, 300))), "ns.t")
    python_write(ref, rows(range(0, 300)))
    assert isinstance(v1, int)
    same(lh, ref)
    v2 = lhs.write(lh, frame(spark, rows(range(300, 400))), "ns.t", mode="append")
    python_write(ref, rows(range(300, 400)))
    same(lh, ref)
    new = rows(range(50, 80), grp="w")
    v3 = lhs.write(lh, frame(spark, new), "ns.t", mode="overwrite", where="id >= 50 AND id < 80")
    python_write(ref, new, "overwrite", "id >= 50 AND id < 80")
    after_where = same(lh, ref)
    assert sum(r["grp"].startswith("w") for r in after_where) == 30

    # reads: latest, each version, a filter; count() of a Connect frame counts in Spark
    latest = lhs.read(lh, spark, "ns.t")
    assert collected(latest) == after_where
    assert latest.count() == len(after_where)
    assert collected(lhs.read(lh, spark, "ns.t", version=v1)) == ordered(
        lh.at_version(v1).read("ns.t")
    )
    assert collected(lhs.read(lh, spark, "ns.t", version=v2)) == ordered(
        ref.at_version(ref.version - 1).read("ns.t")
    )
    some = lhs.read(lh, spark, "ns.t", where="grp = 'w1' AND id < 70")
    assert collected(some) == ordered(lh.read("ns.t", where="grp = 'w1' AND id < 70"))

    v4 = lhs.write(lh, frame(spark, rows(range(1000, 1010))), "ns.t", mode="overwrite")
    python_write(ref, rows(range(1000, 1010)), "overwrite")
    assert v4 > v3
    assert [r["id"] for r in same(lh, ref)] == list(range(1000, 1010))
    assert collected(lhs.read(lh, spark, "ns.t", version=v3)) == after_where


def test_replace_partitions_of_a_partitioned_table(spark, tmp_path):
    # identity (a Spark expression) and bucket (an Arrow UDF the server runs)
    lh, ref = open_pair(tmp_path, partition_by=["grp", "bucket(2, id)"])
    try:
        first = rows(range(0, 240), groups=4)
        lhs.write(lh, frame(spark, first).repartition(3), "ns.t")
        python_write(ref, first)
        same(lh, ref)
        # rows only of partitions g1 and g3: those two are replaced, g0 and g2 stay
        new = rows([1, 3, 5, 7, 1001, 1003], groups=4)
        lhs.write(lh, frame(spark, new), "ns.t", mode="replace_partitions")
        python_write(ref, new, "replace_partitions")
        got = same(lh, ref)
        assert {1001, 1003} <= {r["id"] for r in got}
        assert sum(r["grp"] in ("g0", "g2") for r in got) == 120
        # a read pruned by partition through Connect
        pruned = lhs.read(lh, spark, "ns.t", where="grp = 'g2'")
        assert collected(pruned) == ordered(lh.read("ns.t", where="grp = 'g2'"))
        for f in lh.list_data_files("ns.t"):
            assert set(f.partition) == {"grp", "id_bucket"}
    finally:
        lh.close()
        ref.close()


# -- delete and the two forms of reading deletions ---------------------------------------------
def test_delete_and_reads_through_both_deletion_forms(spark, pair, monkeypatch):
    lh, ref = pair
    lhs.write(lh, frame(spark, rows(range(0, 2000))).coalesce(1), "ns.t")
    python_write(ref, rows(range(0, 2000)))
    built = []
    relation = deletions._relation

    def counting(*a: Any, **kw: Any) -> Any:
        built.append(1)
        return relation(*a, **kw)

    monkeypatch.setattr(deletions, "_relation", counting)

    # one run of deleted positions: the row-index filter, no bitmap relation
    assert lhs.delete(lh, spark, "ns.t", "id >= 100 AND id < 150") == 50
    with ref.begin() as txn:
        assert txn.delete("ns.t", "id >= 100 AND id < 150") == 50
    expected = same(lh, ref)
    assert collected(lhs.read(lh, spark, "ns.t")) == expected
    assert built == []

    # scattered rows (hundreds of runs): the broadcast anti-join with bucket bitmaps
    n = lhs.delete(lh, spark, "ns.t", "id % 3 = 0")
    with ref.begin() as txn:
        assert txn.delete("ns.t", "id % 3 = 0") == n == 667 - 16  # 16 already deleted
    expected = same(lh, ref)
    assert collected(lhs.read(lh, spark, "ns.t")) == expected
    assert len(built) == 1
    # read again: the relation kept for this session serves it
    again = lhs.read(lh, spark, "ns.t", where="qty = 2")
    assert collected(again) == [r for r in expected if r["qty"] == 2]
    assert lh.table_stats("ns.t").deleted_rows == 50 + 651

    assert lhs.delete(lh, spark, "ns.t", "id < 0") == 0  # nothing matches: no commit
    from pyspark.sql import functions as F

    assert lhs.delete(lh, spark, "ns.t", F.col("id") == 1999) == 1  # a Connect Column
    with ref.begin() as txn:
        txn.delete("ns.t", "id = 1999")
    expected = same(lh, ref)
    assert lhs.delete(lh, spark, "ns.t", "grp = 'g1' AND qty = 4") == sum(
        r["grp"] == "g1" and r["qty"] == 4 for r in expected
    )


# -- update ------------------------------------------------------------------------------------
def test_update_small_and_large(spark, tmp_path):
    # inline.max_rows = 10: an update of at most 10 rows goes through the driver
    # (the scan job's rows, inlined); more are written by executors
    lh, ref = open_pair(tmp_path, properties={"inline.max_rows": "10", "compaction.auto": "false"})
    try:
        data = rows(range(0, 500))
        lhs.write(lh, frame(spark, data).repartition(2), "ns.t")
        python_write(ref, data)
        small = {"qty": "qty + 100", "grp": "'small'"}
        assert lhs.update(lh, spark, "ns.t", "id >= 10 AND id < 16", small) == 6
        with ref.begin() as txn:
            assert txn.update("ns.t", "id >= 10 AND id < 16", small) == 6
        same(lh, ref)
        large = {"qty": "qty * 2"}
        n = lhs.update(lh, spark, "ns.t", "id >= 200", large)
        with ref.begin() as txn:
            assert txn.update("ns.t", "id >= 200", large) == n == 300
        got = same(lh, ref)
        assert collected(lhs.read(lh, spark, "ns.t")) == got
        assert lhs.update(lh, spark, "ns.t", "id < 0", {"qty": "1"}) == 0
    finally:
        lh.close()
        ref.close()


# -- merge -------------------------------------------------------------------------------------
def python_merge(ref: Any, source: pa.Table, on: list[str], **kw: Any) -> Any:
    with ref.begin() as txn:
        return txn.merge("ns.t", source, on=on, **kw)


@pytest.mark.parametrize("path", ["driver", "spark"])
def test_merge_on_columns_and_on_the_primary_key(spark, tmp_path, monkeypatch, path):
    if path == "spark":  # a source larger than the driver limit stays in Spark
        monkeypatch.setattr(merge_mod, "MERGE_DRIVER_ROWS", 5)
    for how, create in (("scan", {}), ("key", {"primary_key": ["id"]})):
        lh, ref = open_pair(tmp_path / how, **create)
        try:
            lhs.write(lh, frame(spark, rows(range(0, 200))), "ns.t")
            python_write(ref, rows(range(0, 200)))
            source = rows([*range(190, 230, 2)], grp="m")  # 5 matched, 15 new
            res = lhs.merge(lh, frame(spark, source), "ns.t", on=["id"])
            assert res == python_merge(ref, source, ["id"])
            assert (res.updated, res.inserted) == (5, 15)
            same(lh, ref)
            # deletes of matched keys, new keys ignored
            gone = rows([0, 1, 2, 3, 4, 5, 6, 7, 500, 501])
            res = lhs.merge(
                lh, frame(spark, gone), "ns.t", on=["id"], when_matched="delete",
                when_not_matched="ignore",
            )  # fmt: skip
            assert res == python_merge(
                ref, gone, ["id"], when_matched="delete", when_not_matched="ignore"
            )
            assert res.deleted == 8
            # a source matching no target row: only inserts
            fresh = rows(range(5000, 5012), grp="n")
            res = lhs.merge(lh, frame(spark, fresh), "ns.t", on=["id"])
            assert res == python_merge(ref, fresh, ["id"])
            assert (res.inserted, res.updated) == (12, 0)
            # ... and one whose rows are all ignored
            res = lhs.merge(
                lh, frame(spark, rows(range(7000, 7010))), "ns.t", on=["id"],
                when_not_matched="ignore",
            )  # fmt: skip
            assert (res.inserted, res.updated, res.deleted) == (0, 0, 0)
            # a source without a column of the table: matched rows keep their values
            partial = rows([10, 11, 9000], grp="p").drop_columns(["qty"])
            res = lhs.merge(lh, frame(spark, partial), "ns.t", on=["id"])
            assert res == python_merge(ref, partial, ["id"])
            got = same(lh, ref)
            assert collected(lhs.read(lh, spark, "ns.t")) == got
        finally:
            lh.close()
            ref.close()


def test_merge_refuses_duplicate_source_keys(spark, pair, monkeypatch):
    lh, _ = pair
    lhs.write(lh, frame(spark, rows(range(0, 20))), "ns.t")
    before = lh.version
    dup = pa.concat_tables([rows([3, 4]), rows([3])])
    with pytest.raises(ValueError, match="duplicate"):
        lhs.merge(lh, frame(spark, dup), "ns.t", on=["id"])
    monkeypatch.setattr(merge_mod, "MERGE_DRIVER_ROWS", 1)
    with pytest.raises(ValueError, match="duplicate"):
        lhs.merge(lh, frame(spark, dup), "ns.t", on=["id"])
    assert lh.version == before


def test_calls_join_a_python_transaction(spark, pair):
    lh, _ = pair
    lhs.write(lh, frame(spark, rows(range(0, 50))), "ns.t")
    before = lh.version
    with lh.begin() as txn:
        assert lhs.write(lh, frame(spark, rows(range(50, 60))), "ns.t", txn=txn) is None
        txn.append("ns.t", rows([99]))
        assert lhs.delete(lh, spark, "ns.t", "id < 5", txn=txn) == 5
        assert lhs.update(lh, spark, "ns.t", "id = 99", {"qty": "42"}, txn=txn) == 1
        seen = lhs.read(lh, spark, "ns.t", txn=txn)  # the transaction's own writes
        assert collected(seen) == ordered(txn.read("ns.t"))
        assert lh.version == before
    assert lh.version == before + 1
    got = lh.read("ns.t")
    assert sorted(got.column("id").to_pylist()) == [*range(5, 60), 99]
    assert got.filter(pc.equal(got.column("id"), 99)).column("qty").to_pylist() == [42]


# -- views, errors -----------------------------------------------------------------------------
def test_register_views_and_spark_sql(spark, pair):
    lh, _ = pair
    # the Python reader's task count, without a sparkContext: the server's local[2]
    assert default_parallelism(spark) == 2
    v1 = lhs.write(lh, frame(spark, rows(range(0, 100))), "ns.t")
    lhs.delete(lh, spark, "ns.t", "id < 10")
    assert lhs.register_views(lh, spark) == ["ns.t"]
    got = spark.sql("SELECT grp, count(*) AS n FROM `ns.t` GROUP BY grp").toArrow()
    expected = pc.value_counts(lh.read("ns.t").column("grp")).to_pylist()
    assert dict(zip(got.column("grp").to_pylist(), got.column("n").to_pylist())) == {
        d["values"]: d["counts"] for d in expected
    }
    lhs.register_views(lh, spark, version=v1)
    old = spark.sql(f"SELECT count(*) AS n FROM `ns.t@v{v1}`").collect()[0]["n"]
    assert old == lh.at_version(v1).read("ns.t").num_rows == 100


def test_bad_conditions_and_bad_data_are_value_errors(spark, pair):
    lh, _ = pair
    lhs.write(lh, frame(spark, rows(range(0, 10))), "ns.t")
    before = lh.version
    with pytest.raises(ValueError, match="no column 'nope'"):
        lhs.delete(lh, spark, "ns.t", "nope = 1")
    with pytest.raises(ValueError, match="bad condition"):
        lhs.delete(lh, spark, "ns.t", "id = = 1")
    with pytest.raises(ValueError, match="bad condition"):
        lhs.update(lh, spark, "ns.t", "id +", {"qty": "1"})
    with pytest.raises(ValueError, match="qty"):
        lhs.update(lh, spark, "ns.t", "id = 1", {"qty": "'text'"})
    # a null in the non-nullable id: found inside the job, raised as ValueError
    from pyspark.sql import functions as F

    nulls = frame(spark, rows(range(20, 25))).withColumn(
        "id", F.when(F.col("id") == 22, F.lit(None)).otherwise(F.col("id"))
    )
    with pytest.raises(ValueError, match="not nullable"):
        lhs.write(lh, nulls, "ns.t")
    with pytest.raises(ValueError, match="does not match the overwrite condition"):
        lhs.write(lh, frame(spark, rows([1, 50])), "ns.t", mode="overwrite", where="id < 10")
    assert lh.version == before
    assert lh.read("ns.t").num_rows == 10


# -- S3: every byte through Python tasks the server's executors run ---------------------------
def s3_keys(s3_client: Any, bucket: str) -> set[str]:
    out: set[str] = set()
    for page in s3_client.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix="lh/data/"
    ):
        out |= {o["Key"][len("lh/data/") :] for o in page.get("Contents", [])}
    return out


@pytest.mark.s3
def test_write_read_delete_update_merge_on_s3(spark, tmp_path, s3_bucket, s3_options, s3_client):
    lh = lakehouse.open(f"s3://{s3_bucket}/lh", storage_options=s3_options)
    ref = lakehouse.open(str(tmp_path / "ref"), kv_options={"fsync": False})
    try:
        for h in (lh, ref):
            with h.begin() as txn:
                txn.create_namespace("ns")
                txn.create_table("ns.t", SCHEMA, STILL)
        assert lh.data_location()[0].startswith("s3://")
        v1 = lhs.write(lh, frame(spark, rows(range(0, 300))).repartition(2), "ns.t")
        python_write(ref, rows(range(0, 300)))
        assert collected(lhs.read(lh, spark, "ns.t")) == same(lh, ref)

        n = lhs.delete(lh, spark, "ns.t", "id % 3 = 0")
        with ref.begin() as txn:
            assert txn.delete("ns.t", "id % 3 = 0") == n == 100
        assert collected(lhs.read(lh, spark, "ns.t")) == same(lh, ref)

        n = lhs.update(lh, spark, "ns.t", "id >= 250", {"grp": "'u'"})
        with ref.begin() as txn:
            assert txn.update("ns.t", "id >= 250", {"grp": "'u'"}) == n == 34
        source = rows(range(290, 310), grp="m")
        res = lhs.merge(lh, frame(spark, source), "ns.t", on=["id"])
        assert res == python_merge(ref, source, ["id"])
        got = same(lh, ref)
        assert collected(lhs.read(lh, spark, "ns.t")) == got
        assert collected(lhs.read(lh, spark, "ns.t", version=v1)) == ordered(rows(range(0, 300)))

        # a failed job commits nothing and leaves no object behind
        from pyspark.sql import functions as F

        registered = {f.path for f in lh.list_data_files("ns.t")}
        assert s3_keys(s3_client, s3_bucket) == registered
        bad = frame(spark, rows(range(400, 420))).withColumn(
            "id", F.when(F.col("id") == 411, F.lit(None)).otherwise(F.col("id"))
        )
        before = lh.version
        with pytest.raises(ValueError, match="not nullable"):
            lhs.write(lh, bad, "ns.t")
        assert lh.version == before
        assert s3_keys(s3_client, s3_bucket) == registered
    finally:
        lh.close()
        ref.close()


# -- SQL ---------------------------------------------------------------------------------------
def test_sql_statements_and_a_transaction_session(spark, pair):
    lh, ref = pair
    run = lambda text: lhs.sql(lh, spark, text)  # noqa: E731
    got = run("INSERT INTO ns.t (id, grp, qty) VALUES (1, 'a', 10), (2, 'b', 20), (3, 'a', 30)")
    assert got.collect()[0]["num_affected_rows"] == 3
    v1 = lh.version
    ref_rows = pa.table(
        {"id": [1, 2, 3], "grp": ["a", "b", "a"], "qty": pa.array([10, 20, 30], pa.int32())}
    )
    python_write(ref, ref_rows)
    assert run("UPDATE ns.t SET qty = qty + 1 WHERE grp = 'a'").first()["num_affected_rows"] == 2
    assert run("DELETE FROM ns.t WHERE id = 2").first()["num_affected_rows"] == 1
    merged = run(
        "MERGE INTO ns.t AS t USING (SELECT 3 AS id, 'm' AS grp UNION ALL SELECT 9, 'm') AS s "
        "ON t.id = s.id WHEN MATCHED THEN UPDATE SET grp = s.grp "
        "WHEN NOT MATCHED THEN INSERT (id, grp, qty) VALUES (s.id, s.grp, 0)"
    ).first()
    assert (merged["num_updated_rows"], merged["num_inserted_rows"]) == (1, 1)
    with ref.begin() as txn:
        txn.update("ns.t", "grp = 'a'", {"qty": "qty + 1"})
        txn.delete("ns.t", "id = 2")
        txn.update("ns.t", "id = 3", {"grp": "'m'"})
        txn.append("ns.t", pa.table({"id": [9], "grp": ["m"], "qty": pa.array([0], pa.int32())}))
    expected = same(lh, ref)

    query = "SELECT id, grp, qty, at FROM ns.t"
    assert collected(run(query)) == expected
    assert collected(run(f"SELECT * FROM ns.t VERSION AS OF {v1}")) == ordered(
        lh.at_version(v1).read("ns.t")
    )
    totals = run("SELECT grp, sum(qty) AS q FROM ns.t GROUP BY grp").collect()
    assert {r["grp"]: r["q"] for r in totals} == {"a": 11, "m": 31}
    history = run("DESCRIBE HISTORY ns.t").collect()
    assert history[0]["version"] == lh.version

    # DDL and lakehouse statements: their results are DataFrames built on the client
    run("CREATE TABLE ns.p (k BIGINT NOT NULL, c STRING) PARTITIONED BY (c)")
    run("INSERT INTO ns.p SELECT id, grp FROM ns.t")
    run("INSERT OVERWRITE ns.p VALUES (100, 'm')")  # replaces partition c = 'm' only
    assert ordered(lh.read("ns.p")) == [{"k": 1, "c": "a"}, {"k": 100, "c": "m"}]
    run("CREATE TABLE ns.c AS SELECT grp, count(*) AS n FROM ns.t GROUP BY grp")
    assert ordered(lh.read("ns.c")) == [{"grp": "a", "n": 1}, {"grp": "m", "n": 2}]
    tables = run("SHOW TABLES IN ns").collect()
    assert sorted(r["tableName"] for r in tables) == ["c", "p", "t"]
    described = run("DESCRIBE TABLE ns.p").collect()
    assert [(r["col_name"], r["data_type"]) for r in described][:2] == [
        ("k", "bigint"),
        ("c", "string"),
    ]
    run("DROP TABLE ns.c")
    assert lh.list_tables("ns") == ["p", "t"]

    # BEGIN ... COMMIT: one version for two statements; ROLLBACK: nothing visible
    with lhs.SqlSession(lh, spark) as session:
        before = lh.version
        session.sql("BEGIN")
        session.sql("INSERT INTO ns.t (id, grp, qty) VALUES (20, 'x', 1)")
        session.sql("DELETE FROM ns.t WHERE id = 1")
        assert session.in_transaction
        session.sql("COMMIT")
        assert lh.version == before + 1
        session.sql("BEGIN")
        session.sql("DELETE FROM ns.t WHERE id = 20")
        session.sql("ROLLBACK")
        assert lh.version == before + 1
    ids = sorted(lh.read("ns.t").column("id").to_pylist())
    assert ids == [3, 9, 20]
