"""lakehouse.spark.SqlSession: BEGIN / COMMIT / ROLLBACK across SQL statements
(API.md "SQL from Spark", transactions).

Checked through the Python API: versions made, rows, data files on disk. One
SparkSession for the run (tests/spark_fixtures.py); the killed-driver test runs
its own driver in a subprocess.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest

import lakehouse
from lakehouse import IncompatibleConflict, Isolation, RetryableConflict

pytest.importorskip("pyspark", reason="pyspark is not installed (the spark extra)")

import lakehouse.spark as lhs

pytest_plugins = ["spark_fixtures"]
pytestmark = pytest.mark.spark

A = pa.schema([pa.field("id", pa.int64(), nullable=False), ("x", pa.string())])
B = pa.schema([pa.field("id", pa.int64(), nullable=False), ("y", pa.int64())])
#: SQL writes make data files (never inlined); no automatic compaction version after a
#: commit, so the versions counted are the transactions'
FILES_ONLY = {"inline.max_rows": "0", "compaction.auto": "false"}


def make(path: str) -> lakehouse.Lakehouse:
    h = lakehouse.open(path, kv_options={"fsync": False})
    with h.begin() as t:
        t.create_namespace("s")
        t.create_table("s.a", A, FILES_ONLY)
        t.create_table("s.b", B, FILES_ONLY)
        t.append("s.a", pa.table({"id": pa.array([1, 2, 3], pa.int64()), "x": list("abc")}, A))
        t.append("s.b", pa.table({"id": pa.array([1, 2], pa.int64()), "y": [10, 20]}, B))
    return h


@pytest.fixture
def lh(tmp_path):
    h = make(str(tmp_path / "lh"))
    yield h
    h.close()


def a_rows(h) -> list[tuple]:
    return sorted((r["id"], r["x"]) for r in h.read("s.a").to_pylist())


def b_rows(h) -> list[tuple]:
    return sorted((r["id"], r["y"]) for r in h.read("s.b").to_pylist())


def parquet_files(h) -> set[str]:
    """Every Parquet file under the lakehouse's data location."""
    base = h.data_location()[0][len("file://") :]
    out = set()
    for root, _, files in os.walk(base):
        out |= {os.path.join(root, f) for f in files if f.endswith(".parquet")}
    return out


INSERT_MANY = "INSERT INTO s.a SELECT id + 100, concat('n', id) FROM range(200)"


def test_commit_across_two_tables_is_one_version(spark, lh):
    v = lh.version
    with lhs.SqlSession(lh, spark) as s:
        assert not s.in_transaction and s.isolation is None
        s.sql("BEGIN TRANSACTION")
        assert s.in_transaction
        got = s.sql("INSERT INTO s.a VALUES (4, 'd'), (5, 'e')")
        assert got.collect()[0]["num_affected_rows"] == 2
        s.sql("DELETE FROM s.b WHERE id = 1")
        s.sql("UPDATE s.a SET x = 'B' WHERE id = 2")
        assert lh.version == v  # nothing visible before COMMIT
        assert a_rows(lh) == [(1, "a"), (2, "b"), (3, "c")]
        s.sql("COMMIT")
        assert not s.in_transaction
    assert lh.version == v + 1
    assert a_rows(lh) == [(1, "a"), (2, "B"), (3, "c"), (4, "d"), (5, "e")]
    assert b_rows(lh) == [(2, 20)]
    changed = {c.name for c in lh.version_info(v + 1).changes}
    assert {"s.a", "s.b"} <= changed


def test_create_insert_and_merge_in_one_transaction(spark, lh):
    v = lh.version
    with lhs.SqlSession(lh, spark) as s:
        s.sql("BEGIN")
        s.sql("CREATE TABLE s.c (id BIGINT NOT NULL, n BIGINT)")
        s.sql("INSERT INTO s.c SELECT id, count(*) FROM s.a GROUP BY id")
        assert not lh.table_exists("s.c")  # the new table is the transaction's only
        s.sql(
            "MERGE INTO s.c t USING (SELECT 1 AS id, 5 AS n) u ON t.id = u.id "
            "WHEN MATCHED THEN UPDATE SET n = u.n"
        )
        inside = s.sql("SELECT id, n FROM s.c").collect()
        s.sql("COMMIT")
    assert lh.version == v + 1
    got = sorted((r["id"], r["n"]) for r in lh.read("s.c").to_pylist())
    assert got == sorted(tuple(r) for r in inside) == [(1, 5), (2, 1), (3, 1)]


def test_one_sql_call_with_begin_and_commit_commits_once(spark, lh):
    v = lh.version
    lhs.sql(
        lh,
        spark,
        "BEGIN; INSERT INTO s.a VALUES (9, 'z'); INSERT INTO s.b VALUES (9, 90); COMMIT",
    )
    assert lh.version == v + 1
    assert (9, "z") in a_rows(lh) and (9, 90) in b_rows(lh)


def test_reads_inside_the_transaction_see_its_own_writes(spark, lh):
    with lhs.SqlSession(lh, spark) as s:
        s.sql("START TRANSACTION")
        s.sql(INSERT_MANY)
        s.sql("DELETE FROM s.a WHERE id = 1")
        inside = s.sql("SELECT count(*) AS n, max(id) AS m FROM s.a").collect()[0]
        assert (inside["n"], inside["m"]) == (202, 299)
        outside = lhs.sql(lh, spark, "SELECT count(*) AS n FROM s.a").collect()[0]
        assert outside["n"] == 3
        s.sql("COMMIT WORK")
    assert len(a_rows(lh)) == 202


def test_rollback_leaves_nothing_visible_and_no_files(spark, lh):
    v, rows, files = lh.version, a_rows(lh), parquet_files(lh)
    s = lhs.SqlSession(lh, spark)
    s.sql("BEGIN")
    s.sql(INSERT_MANY)
    assert parquet_files(lh) > files  # executors wrote the transaction's files
    s.sql("INSERT INTO s.b SELECT id, id FROM range(50, 60)")
    s.sql("ROLLBACK")
    assert not s.in_transaction
    assert lh.version == v and a_rows(lh) == rows
    assert parquet_files(lh) == files
    # the session goes on outside a transaction: each statement commits
    s.sql("INSERT INTO s.a VALUES (7, 'g')")
    assert lh.version == v + 1 and (7, "g") in a_rows(lh)
    s.close()


def test_close_and_garbage_collection_roll_back_an_open_transaction(spark, lh):
    v, rows, files = lh.version, a_rows(lh), parquet_files(lh)
    s = lhs.SqlSession(lh, spark)
    s.sql("BEGIN; " + INSERT_MANY)
    assert parquet_files(lh) > files
    s.close()
    assert lh.version == v and a_rows(lh) == rows and parquet_files(lh) == files
    with pytest.raises(ValueError, match="closed"):
        s.sql("SELECT 1")

    s = lhs.SqlSession(lh, spark)
    s.sql("BEGIN")
    s.sql(INSERT_MANY)
    assert parquet_files(lh) > files
    del s
    gc.collect()
    assert lh.version == v and a_rows(lh) == rows and parquet_files(lh) == files


def test_conflict_at_commit_raises_and_the_session_is_usable_again(spark, lh):
    v = lh.version
    s = lhs.SqlSession(lh, spark)
    s.sql("BEGIN ISOLATION LEVEL SNAPSHOT")
    assert s.isolation is Isolation.SNAPSHOT
    s.sql("UPDATE s.a SET x = 'mine' WHERE id = 1")
    with lh.begin() as other:  # a concurrent update of the same row commits first
        other.update("s.a", "id = 1", {"x": "'theirs'"})
    with pytest.raises(RetryableConflict):
        s.sql("COMMIT")
    assert not s.in_transaction
    assert lh.version == v + 1 and (1, "theirs") in a_rows(lh)
    # the retry, in the same session
    s.sql("BEGIN; UPDATE s.a SET x = 'mine' WHERE id = 1; COMMIT")
    assert lh.version == v + 2 and (1, "mine") in a_rows(lh)
    s.close()


def test_serializable_read_is_recorded(spark, lh):
    def run(level: str) -> None:
        with lhs.SqlSession(lh, spark) as s:
            s.sql(f"BEGIN ISOLATION LEVEL {level}")
            n = s.sql("SELECT count(*) AS n FROM s.a").collect()[0]["n"]
            s.sql(f"INSERT INTO s.b VALUES (100, {n})")
            with lh.begin() as other:  # a row the read would have counted
                other.append("s.a", pa.table({"id": pa.array([50], pa.int64()), "x": ["q"]}, A))
            s.sql("COMMIT")

    v = lh.version
    with pytest.raises(RetryableConflict):
        run("SERIALIZABLE")
    assert lh.version == v + 1 and (100, 3) not in b_rows(lh)  # only the other commit
    run("SNAPSHOT")  # write skew allowed: the read is not checked
    assert (100, 4) in b_rows(lh)


def test_transaction_statement_errors(spark, lh):
    with lhs.SqlSession(lh, spark) as s:
        with pytest.raises(ValueError, match="no transaction"):
            s.sql("COMMIT")
        with pytest.raises(ValueError, match="no transaction"):
            s.sql("ROLLBACK")
        s.sql("BEGIN")
        with pytest.raises(ValueError, match="already open"):
            s.sql("BEGIN")
        assert s.in_transaction  # the open transaction is untouched
        with pytest.raises(ValueError, match="ISOLATION LEVEL SNAPSHOT or SERIALIZABLE"):
            s.sql("ROLLBACK; BEGIN ISOLATION LEVEL READ COMMITTED")
        assert s.in_transaction  # nothing of a text with a bad statement ran
        s.sql("ROLLBACK")
        assert not s.in_transaction


def test_a_failed_write_aborts_the_transaction(spark, lh):
    v, rows = lh.version, a_rows(lh)
    with lhs.SqlSession(lh, spark) as s:
        s.sql("BEGIN")
        s.sql("INSERT INTO s.a VALUES (8, 'h')")
        with pytest.raises(ValueError):  # a failing query changes nothing: still usable
            s.sql("SELECT nope FROM s.a")
        assert s.sql("SELECT count(*) AS n FROM s.a").collect()[0]["n"] == 4
        with pytest.raises(ValueError):
            s.sql("DELETE FROM s.a WHERE nope = 1")
        assert s.in_transaction
        with pytest.raises(ValueError, match="rolled back"):
            s.sql("SELECT count(*) FROM s.a")
        with pytest.raises(ValueError, match="nothing committed"):
            s.sql("COMMIT")
        assert not s.in_transaction
    assert lh.version == v and a_rows(lh) == rows


KILLED = textwrap.dedent(
    """
    import os, signal, sys
    import lakehouse, lakehouse.spark as lhs
    spark = lhs.local_session("killed-driver", master="local[1]", shuffle_partitions=1)
    lh = lakehouse.open(sys.argv[1], kv_options={"fsync": False})
    s = lhs.SqlSession(lh, spark)
    s.sql("BEGIN")
    s.sql("INSERT INTO s.a SELECT id + 100, 'k' FROM range(300)")
    s.sql("DELETE FROM s.b WHERE id = 1")
    n = s.sql("SELECT count(*) FROM s.a").collect()[0][0]
    print("in transaction", n, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_killed_driver_mid_transaction_leaves_nothing_visible(spark, tmp_path):
    path = str(tmp_path / "lh")
    h = make(path)
    v, rows, brows = h.version, a_rows(h), b_rows(h)
    h.close()
    proc = subprocess.run(
        [sys.executable, "-c", KILLED, path],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert "in transaction 303" in proc.stdout  # it got as far as the writes
    h = lakehouse.open(path, kv_options={"fsync": False})
    try:
        assert h.version == v
        assert a_rows(h) == rows and b_rows(h) == brows
        # and the lakehouse takes new SQL transactions
        lhs.sql(h, spark, "BEGIN; INSERT INTO s.a VALUES (4, 'd'); COMMIT")
        assert h.version == v + 1 and (4, "d") in a_rows(h)
    finally:
        h.close()


def test_incompatible_conflict_also_ends_the_transaction(spark, lh):
    with lhs.SqlSession(lh, spark) as s:
        s.sql("BEGIN")
        s.sql("INSERT INTO s.b VALUES (5, 50)")
        with lh.begin() as other:
            other.drop_table("s.b")
        with pytest.raises((IncompatibleConflict, RetryableConflict)):
            s.sql("COMMIT")
        assert not s.in_transaction


def test_temporary_view_of_lakehouse_tables_refused_inside_a_transaction(spark, lh):
    rows, files = a_rows(lh), parquet_files(lh)
    s = lhs.SqlSession(lh, spark)
    s.sql("BEGIN")
    s.sql("INSERT INTO s.a VALUES (9, 'i')")
    text = "CREATE TEMPORARY VIEW r1_tv AS SELECT * FROM s.a"
    with pytest.raises(
        ValueError, match="temporary view over lakehouse tables inside a transaction"
    ):
        s.sql(text)
    assert not spark.catalog.tableExists("r1_tv")  # nothing made in the Spark session
    s.sql("ROLLBACK")
    assert a_rows(lh) == rows and parquet_files(lh) == files
    # outside a transaction (after COMMIT / ROLLBACK) it is made, over committed rows
    s.sql(text)
    try:
        assert sorted(tuple(r) for r in spark.sql("SELECT id, x FROM r1_tv").collect()) == rows
    finally:
        spark.catalog.dropTempView("r1_tv")
        s.close()
