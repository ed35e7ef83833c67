"""SQL DDL and lakehouse statements (lakehouse.spark.sql: ddl.py, catalog.py).

Each statement's effect is checked through the Python API (describe_table,
list_tables, describe_view, history, read); a refused statement must raise
ValueError naming the construct, with the lakehouse version unchanged and no
data file left. One SparkSession for the run (tests/spark_fixtures.py).
"""

from __future__ import annotations

import datetime as dt
import decimal
import os

import pyarrow as pa
import pytest

import lakehouse
from lakehouse import NotFound

pytest.importorskip("pyspark", reason="pyspark is not installed (the spark extra)")
from pyspark.sql import types as T

import lakehouse.spark as lhs
from lakehouse.spark.sql import SqlSession, sql

pytest_plugins = ["spark_fixtures"]
pytestmark = pytest.mark.spark


@pytest.fixture
def lh(tmp_path):
    h = lakehouse.open(str(tmp_path / "lh"), kv_options={"fsync": False})
    with h.begin() as txn:
        txn.create_namespace("ns")
    yield h
    h.close()


def data_files(lh):
    base = lh.data_location()[0][len("file://") :]
    out = []
    for root, _, files in os.walk(base):
        out += [os.path.join(root, f) for f in files]
    return sorted(out)


def run(lh, spark, text, **kw):
    return sql(lh, spark, text, **kw)


# -- CREATE NAMESPACE / TABLE -----------------------------------------------------------------
def test_create_namespace_forms(spark, lh):
    run(lh, spark, "CREATE NAMESPACE a")
    run(lh, spark, "CREATE SCHEMA IF NOT EXISTS a")
    run(lh, spark, "CREATE DATABASE b COMMENT 'second'")
    run(lh, spark, "CREATE SCHEMA c WITH DBPROPERTIES ('owner' = 'ops', 'tier' = 2)")
    assert lh.list_namespaces() == ["a", "b", "c", "ns"]
    assert dict(lh.describe_namespace("b").properties) == {"comment": "second"}
    assert dict(lh.describe_namespace("c").properties) == {"owner": "ops", "tier": "2"}
    run(lh, spark, "ALTER NAMESPACE c SET DBPROPERTIES ('tier' = '3')")
    assert dict(lh.describe_namespace("c").properties) == {"owner": "ops", "tier": "3"}
    with pytest.raises(lakehouse.AlreadyExists):
        run(lh, spark, "CREATE NAMESPACE a")
    # neither a lakehouse namespace nor a Spark database: the lakehouse names it
    with pytest.raises(NotFound, match="nosuchns"):
        run(lh, spark, "CREATE TABLE nosuchns.t (a INT)")


def test_create_table_every_type_as_spark_writes_them(spark, lh):
    run(
        lh,
        spark,
        """CREATE TABLE ns.t (
            id BIGINT NOT NULL COMMENT 'the key', i INT, s SMALLINT, b TINYINT, ok BOOLEAN,
            f FLOAT, d DOUBLE, amount DECIMAL(10,2), name STRING, code VARCHAR(8), c CHAR(2),
            raw BINARY, day DATE, ts TIMESTAMP, local TIMESTAMP_NTZ, tags ARRAY<STRING>,
            attrs MAP<STRING, BIGINT>, point STRUCT<x: DOUBLE, y: DOUBLE NOT NULL>)""",
    )
    d = lh.describe_table("ns.t")
    expected = pa.schema(
        [
            pa.field("id", pa.int64(), False, metadata={"comment": "the key"}),
            ("i", pa.int32()),
            ("s", pa.int16()),
            ("b", pa.int8()),
            ("ok", pa.bool_()),
            ("f", pa.float32()),
            ("d", pa.float64()),
            ("amount", pa.decimal128(10, 2)),
            ("name", pa.string()),
            ("code", pa.string()),
            ("c", pa.string()),
            ("raw", pa.binary()),
            ("day", pa.date32()),
            ("ts", pa.timestamp("us", tz="UTC")),
            ("local", pa.timestamp("us")),
            ("tags", pa.list_(pa.field("element", pa.string()))),
            ("attrs", pa.map_(pa.string(), pa.int64())),
            (
                "point",
                pa.struct([("x", pa.float64()), pa.field("y", pa.float64(), nullable=False)]),
            ),
        ]
    )
    assert d.schema.equals(expected, check_metadata=True)
    assert d.partition_by == () and dict(d.properties) == {}
    # a DataFrame with the same Spark types writes into a table SQL created, unchanged
    run(lh, spark, "CREATE TABLE ns.w (id BIGINT, name STRING, amount DECIMAL(10,2), ts TIMESTAMP)")
    df = spark.createDataFrame(
        [(1, "a", decimal.Decimal("1.50"), dt.datetime(2026, 1, 2, tzinfo=dt.UTC))],
        "id bigint, name string, amount decimal(10,2), ts timestamp",
    )
    lhs.write(lh, df, "ns.w")
    got = lh.read("ns.w").to_pylist()
    assert got == [
        {
            "id": 1,
            "name": "a",
            "amount": decimal.Decimal("1.50"),
            "ts": dt.datetime(2026, 1, 2, tzinfo=dt.UTC),
        }
    ]


def test_create_table_layout_and_properties(spark, lh):
    run(
        lh,
        spark,
        """CREATE TABLE IF NOT EXISTS ns.events (id BIGINT, ts TIMESTAMP, country STRING,
            sku STRING, PRIMARY KEY (id))
           PARTITIONED BY (days(ts), country, bucket(16, id), truncate(4, sku))
           COMMENT 'all events' TBLPROPERTIES ('inline.max_rows' = '0', owner = 'ops')""",
    )
    d = lh.describe_table("ns.events")
    assert d.partition_by == ("day(ts)", "country", "bucket(16, id)", "truncate(4, sku)")
    assert d.primary_key == ("id",)
    assert dict(d.properties) == {"inline.max_rows": "0", "owner": "ops", "comment": "all events"}
    version = lh.version
    run(lh, spark, "CREATE TABLE IF NOT EXISTS ns.events (other INT)")  # exists: nothing
    assert lh.version == version and lh.describe_table("ns.events").schema == d.schema
    run(lh, spark, "CREATE TABLE ns.m (ts TIMESTAMP) PARTITIONED BY (months(ts))")
    run(lh, spark, "CREATE TABLE ns.y (ts TIMESTAMP) PARTITIONED BY (year(ts), hours(ts))")
    assert lh.describe_table("ns.m").partition_by == ("month(ts)",)
    assert lh.describe_table("ns.y").partition_by == ("year(ts)", "hour(ts)")
    with pytest.raises(lakehouse.AlreadyExists):
        run(lh, spark, "CREATE TABLE ns.m (a INT)")


def test_create_or_replace_table(spark, lh):
    run(lh, spark, "CREATE TABLE ns.t (a INT)")
    run(lh, spark, "INSERT INTO ns.t VALUES (1)")
    version = lh.version
    run(lh, spark, "CREATE OR REPLACE TABLE ns.t (b STRING)")
    assert lh.version == version + 1  # drop and create in one version
    assert lh.describe_table("ns.t").schema.names == ["b"]
    assert lh.read("ns.t").num_rows == 0


def test_ctas_rows_schema_and_one_version(spark, lh):
    run(lh, spark, "CREATE TABLE ns.src (id BIGINT NOT NULL, country STRING, qty INT)")
    lhs.write(
        lh,
        spark.createDataFrame(
            [(i, "de" if i % 2 else "fr", i * 10) for i in range(1, 7)],
            "id bigint, country string, qty int",
        ),
        "ns.src",
    )
    version = lh.version
    run(
        lh,
        spark,
        """CREATE TABLE ns.big PARTITIONED BY (country) TBLPROPERTIES ('k' = 'v')
           AS SELECT id, country, qty * 2 AS qty2, CAST(id AS DECIMAL(5,1)) AS dec
           FROM ns.src WHERE qty > 20""",
    )
    assert lh.version == version + 1
    d = lh.describe_table("ns.big")
    assert d.partition_by == ("country",) and dict(d.properties) == {"k": "v"}
    assert d.schema == pa.schema(
        [("id", pa.int64()), ("country", pa.string()), ("qty2", pa.int32()),
         ("dec", pa.decimal128(5, 1))]
    )  # fmt: skip
    got = sorted(lh.read("ns.big").to_pylist(), key=lambda r: r["id"])
    assert got == [
        {"id": i, "country": "de" if i % 2 else "fr", "qty2": i * 20, "dec": decimal.Decimal(i)}
        for i in range(3, 7)
    ]
    ops = [str(c.op) for c in lh.history()[0].changes]
    assert ops == ["create", "append"]
    # IF NOT EXISTS on an existing table: the query is not run, nothing changes
    run(lh, spark, "CREATE TABLE IF NOT EXISTS ns.big AS SELECT 1 AS x")
    assert lh.version == version + 1


def test_ctas_failure_leaves_nothing(spark, lh):
    version, files = lh.version, data_files(lh)
    with pytest.raises(ValueError, match="no type"):
        run(lh, spark, "CREATE TABLE ns.n AS SELECT 1 AS a, NULL AS b")
    with pytest.raises(ValueError):
        run(lh, spark, "CREATE TABLE ns.n AS SELECT nosuchcolumn FROM VALUES (1) AS v(a)")
    assert lh.version == version and data_files(lh) == files
    assert lh.list_tables("ns") == []


# -- views ------------------------------------------------------------------------------------
def test_views_create_replace_drop(spark, lh):
    run(lh, spark, "CREATE TABLE ns.t (a INT, b STRING)")
    run(lh, spark, "INSERT INTO ns.t VALUES (1, 'x'), (2, 'y')")
    run(lh, spark, "CREATE VIEW ns.v COMMENT 'big ones' AS SELECT a FROM ns.t WHERE a > 1")
    v = lh.describe_view("ns.v")
    assert "ns.t" in v.sql and dict(v.properties) == {"comment": "big ones"}
    assert [r.a for r in run(lh, spark, "SELECT * FROM ns.v").collect()] == [2]
    with pytest.raises(lakehouse.AlreadyExists):
        run(lh, spark, "CREATE VIEW ns.v AS SELECT 1 AS one")
    run(lh, spark, "CREATE VIEW IF NOT EXISTS ns.v AS SELECT 1 AS one")
    assert lh.describe_view("ns.v").sql == v.sql
    run(lh, spark, "CREATE OR REPLACE VIEW ns.v AS SELECT b FROM ns.t")
    assert sorted(r.b for r in run(lh, spark, "SELECT * FROM ns.v").collect()) == ["x", "y"]
    run(lh, spark, "ALTER VIEW ns.v SET TBLPROPERTIES ('team' = 'x')")
    assert dict(lh.describe_view("ns.v").properties) == {"team": "x"}
    run(lh, spark, "ALTER VIEW ns.v UNSET TBLPROPERTIES ('team')")
    assert dict(lh.describe_view("ns.v").properties) == {}
    assert lh.list_views("ns") == ["v"]
    run(lh, spark, "DROP VIEW ns.v")
    run(lh, spark, "DROP VIEW IF EXISTS ns.v")
    assert lh.list_views("ns") == []


def test_view_with_a_bad_query_is_refused(spark, lh):
    run(lh, spark, "CREATE TABLE ns.t (a INT)")
    version = lh.version
    with pytest.raises(ValueError):
        run(lh, spark, "CREATE VIEW ns.v AS SELECT nosuch FROM ns.t")
    assert lh.version == version and lh.list_views("ns") == []


def test_temp_views_go_to_spark(spark, lh):
    run(lh, spark, "CREATE TABLE ns.t (a INT)")
    run(lh, spark, "INSERT INTO ns.t VALUES (5), (6)")
    version = lh.version
    run(lh, spark, "CREATE OR REPLACE TEMP VIEW plain_tv AS SELECT 41 + 1 AS answer")
    run(lh, spark, "CREATE OR REPLACE TEMPORARY VIEW lh_tv AS SELECT a FROM ns.t WHERE a > 5")
    try:
        assert spark.sql("SELECT answer FROM plain_tv").collect()[0].answer == 42
        assert [r.a for r in spark.sql("SELECT a FROM lh_tv").collect()] == [6]
        with pytest.raises(ValueError, match="lh_tv"):  # exists (no OR REPLACE)
            run(lh, spark, "CREATE TEMPORARY VIEW lh_tv AS SELECT a FROM ns.t")
        assert lh.version == version and lh.list_views("ns") == []
    finally:
        spark.catalog.dropTempView("plain_tv")
        spark.catalog.dropTempView("lh_tv")


# -- DROP ---------------------------------------------------------------------------------------
def test_drop_table_and_namespace(spark, lh):
    run(lh, spark, "CREATE TABLE ns.t (a INT)")
    run(lh, spark, "DROP TABLE ns.t")
    assert lh.list_tables("ns") == []
    run(lh, spark, "DROP TABLE IF EXISTS ns.t")
    with pytest.raises(NotFound):
        run(lh, spark, "DROP TABLE ns.t")
    run(lh, spark, "CREATE NAMESPACE x")
    run(lh, spark, "CREATE TABLE x.t (a INT)")
    run(lh, spark, "CREATE VIEW x.v AS SELECT a FROM x.t")
    with pytest.raises(lakehouse.LakehouseError, match="still holds"):
        run(lh, spark, "DROP NAMESPACE x")
    version = lh.version
    run(lh, spark, "DROP SCHEMA x CASCADE")
    assert lh.version == version + 1 and "x" not in lh.list_namespaces()
    run(lh, spark, "DROP DATABASE IF EXISTS x")
    assert lh.version == version + 1


# -- ALTER --------------------------------------------------------------------------------------
def test_alter_table_forms(spark, lh):
    run(lh, spark, "CREATE TABLE ns.t (id INT, name STRING, old STRING)")
    run(lh, spark, "INSERT INTO ns.t VALUES (1, 'a', 'z')")
    run(lh, spark, "ALTER TABLE ns.t ADD COLUMN score DOUBLE COMMENT 'points'")
    run(lh, spark, "ALTER TABLE ns.t ADD COLUMNS (tags ARRAY<STRING>, first BIGINT FIRST)")
    s = lh.describe_table("ns.t").schema
    assert s.names == ["first", "id", "name", "old", "score", "tags"]
    assert s.field("score").metadata == {b"comment": b"points"}
    run(lh, spark, "ALTER TABLE ns.t RENAME COLUMN name TO label")
    run(lh, spark, "ALTER TABLE ns.t DROP COLUMN old")
    run(lh, spark, "ALTER TABLE ns.t DROP COLUMNS (first, tags)")
    run(lh, spark, "ALTER TABLE ns.t ALTER COLUMN id TYPE BIGINT")
    run(lh, spark, "ALTER TABLE ns.t ALTER COLUMN label COMMENT 'shown'")
    run(lh, spark, "ALTER TABLE ns.t SET TBLPROPERTIES ('a' = '1', 'b' = '2')")
    run(lh, spark, "ALTER TABLE ns.t UNSET TBLPROPERTIES ('a')")
    run(lh, spark, "ALTER TABLE ns.t UNSET TBLPROPERTIES IF EXISTS ('nosuch')")
    d = lh.describe_table("ns.t")
    assert d.schema == pa.schema(
        [
            ("id", pa.int64()),
            pa.field("label", pa.string(), metadata={"comment": "shown"}),
            pa.field("score", pa.float64(), metadata={"comment": "points"}),
        ]
    )
    assert d.schema.field("label").metadata == {b"comment": b"shown"}
    assert dict(d.properties) == {"b": "2"}
    assert lh.read("ns.t").to_pylist() == [{"id": 1, "label": "a", "score": None}]
    with pytest.raises(ValueError, match="nosuch"):
        run(lh, spark, "ALTER TABLE ns.t UNSET TBLPROPERTIES ('nosuch')")
    with pytest.raises(ValueError, match="no column"):
        run(lh, spark, "ALTER TABLE ns.t DROP COLUMN nosuch")
    with pytest.raises(ValueError):  # narrowing
        run(lh, spark, "ALTER TABLE ns.t ALTER COLUMN id TYPE INT")


def test_alter_column_nullability_position_and_change(spark, lh):
    run(lh, spark, "CREATE TABLE ns.t (id INT NOT NULL, b STRING)")
    run(lh, spark, "ALTER TABLE ns.t ALTER COLUMN id DROP NOT NULL")
    run(lh, spark, "ALTER TABLE ns.t ADD COLUMN a DOUBLE AFTER id")
    run(lh, spark, "ALTER TABLE ns.t CHANGE COLUMN b label STRING")
    run(lh, spark, "ALTER TABLE IF EXISTS ns.nosuch ADD COLUMN z INT")  # nothing to alter
    assert lh.describe_table("ns.t").schema == pa.schema(
        [("id", pa.int32()), ("a", pa.float64()), ("label", pa.string())]
    )
    with pytest.raises(ValueError, match="no column 'nosuch'"):
        run(lh, spark, "ALTER TABLE ns.t ADD COLUMN c INT AFTER nosuch")


# -- refused statements -------------------------------------------------------------------------
REFUSED = [
    ("CREATE TABLE ns.r (a INT) USING delta", "USING delta"),
    ("CREATE TABLE ns.r (a INT) USING parquet", "USING parquet"),
    ("CREATE TABLE ns.r (a INT) LOCATION '/tmp/x'", "LOCATION"),
    ("CREATE TABLE ns.r (a INT) CLUSTERED BY (a) INTO 4 BUCKETS", "CLUSTERED BY"),
    ("CREATE TABLE ns.r (a INT) CLUSTER BY (a)", "CLUSTER BY"),
    ("CREATE TABLE ns.r (a INT) STORED AS PARQUET", "STORED AS"),
    ("CREATE TABLE ns.r (a INT) ROW FORMAT DELIMITED FIELDS TERMINATED BY ','", "ROW FORMAT"),
    ("CREATE TABLE ns.r (a INT) OPTIONS ('x' = 'y')", "OPTIONS"),
    ("CREATE TEMPORARY TABLE ns.r (a INT)", "TEMPORARY"),
    ("CREATE TABLE ns.r (a INT) PARTITIONED BY (b INT)", "PARTITIONED BY with a column type"),
    ("CREATE TABLE ns.r (a INT DEFAULT 1)", "DEFAULT"),
    ("CREATE TABLE ns.r USING delta AS SELECT 1 AS a", "USING delta"),
    ("CREATE TABLE ns.r LOCATION '/tmp/x' AS SELECT 1 AS a", "LOCATION"),
    ("CREATE NAMESPACE q LOCATION '/tmp/x'", "LOCATION"),
    ("ALTER TABLE ns.base RENAME TO ns.other", "RENAME TO"),
    ("ALTER TABLE ns.base ADD COLUMN c INT NOT NULL", "NOT NULL"),
    ("ALTER TABLE ns.base ALTER COLUMN a SET NOT NULL", "SET NOT NULL"),
    ("ALTER TABLE ns.base SET LOCATION '/tmp/x'", "LOCATION"),
    ("DROP TABLE ns.base PURGE", "PURGE"),
]


@pytest.mark.parametrize(("text", "construct"), REFUSED)
def test_unsupported_constructs_refused_before_writing(spark, lh, text, construct):
    with lh.begin() as t:
        t.create_table("ns.base", pa.schema([("a", pa.int32())]))
    version, files = lh.version, data_files(lh)
    with pytest.raises(ValueError, match="unsupported in lakehouse SQL") as err:
        run(lh, spark, text)
    assert construct in str(err.value)
    assert lh.version == version and data_files(lh) == files
    assert lh.list_tables("ns") == ["base"] and lh.list_namespaces() == ["ns"]


def test_unknown_type_named(spark, lh):
    with pytest.raises(ValueError, match=r"column 'g'.*GEOGRAPHY"):
        run(lh, spark, "CREATE TABLE ns.r (a INT, g GEOGRAPHY)")
    with pytest.raises(ValueError, match=r"column 'i'.*INTERVAL"):
        run(lh, spark, "CREATE TABLE ns.r (i INTERVAL DAY)")
    assert lh.list_tables("ns") == []


# -- SHOW / DESCRIBE ----------------------------------------------------------------------------
def test_show_namespaces_tables_views_properties(spark, lh):
    run(lh, spark, "CREATE NAMESPACE sales")
    run(lh, spark, "CREATE TABLE sales.orders (id BIGINT) TBLPROPERTIES ('b' = '2', 'a' = '1')")
    run(lh, spark, "CREATE TABLE sales.items (id BIGINT)")
    run(lh, spark, "CREATE TABLE ns.t (id BIGINT)")
    run(lh, spark, "CREATE VIEW sales.recent AS SELECT id FROM sales.orders")
    df = run(lh, spark, "SHOW NAMESPACES")
    assert df.columns == ["namespace"]
    assert [r.namespace for r in df.collect()] == ["ns", "sales"]
    assert [r[0] for r in run(lh, spark, "SHOW SCHEMAS LIKE 'SAL*|x'").collect()] == ["sales"]
    df = run(lh, spark, "SHOW TABLES IN sales")
    assert df.columns == ["namespace", "tableName", "isTemporary"]
    assert [tuple(r) for r in df.collect()] == [
        ("sales", "items", False),
        ("sales", "orders", False),
    ]
    every = [tuple(r)[:2] for r in run(lh, spark, "SHOW TABLES").collect()]
    assert every == [("ns", "t"), ("sales", "items"), ("sales", "orders")]
    assert [r.tableName for r in run(lh, spark, "SHOW TABLES FROM sales LIKE 'o*'").collect()] == [
        "orders"
    ]
    df = run(lh, spark, "SHOW VIEWS IN sales")
    assert [tuple(r) for r in df.collect()] == [("sales", "recent", False)]
    df = run(lh, spark, "SHOW TBLPROPERTIES sales.orders")
    assert df.columns == ["key", "value"]
    assert [tuple(r) for r in df.collect()] == [("a", "1"), ("b", "2")]
    assert run(lh, spark, "SHOW TBLPROPERTIES sales.orders ('b')").collect()[0].value == "2"
    assert [r.col_name for r in run(lh, spark, "SHOW COLUMNS IN sales.orders").collect()] == ["id"]
    with pytest.raises(NotFound):
        run(lh, spark, "SHOW TABLES IN nosuch")


def test_show_create_table_round_trips(spark, lh):
    run(
        lh,
        spark,
        """CREATE TABLE ns.t (id BIGINT NOT NULL COMMENT 'it''s the key', ts TIMESTAMP,
            amount DECIMAL(12,2), point STRUCT<x: INT, `odd name`: STRING>,
            m MAP<STRING, ARRAY<DATE>>, PRIMARY KEY (id))
           PARTITIONED BY (day(ts), bucket(4, id)) TBLPROPERTIES ('x.y' = 'z')""".replace(
            "it''s", "it\\'s"
        ),
    )
    before = lh.describe_table("ns.t")
    (row,) = run(lh, spark, "SHOW CREATE TABLE ns.t").collect()
    text = row.createtab_stmt
    assert text.startswith("CREATE TABLE ns.t (")
    run(lh, spark, "DROP TABLE ns.t")
    run(lh, spark, text)
    after = lh.describe_table("ns.t")
    assert after.schema.equals(before.schema, check_metadata=True)
    assert after.partition_by == before.partition_by
    assert after.primary_key == before.primary_key == ("id",)
    assert dict(after.properties) == dict(before.properties)
    run(lh, spark, "CREATE VIEW ns.v TBLPROPERTIES ('o' = 'p') AS SELECT id FROM ns.t")
    (row,) = run(lh, spark, "SHOW CREATE TABLE ns.v").collect()
    view = lh.describe_view("ns.v")
    run(lh, spark, "DROP VIEW ns.v")
    run(lh, spark, row.createtab_stmt)
    again = lh.describe_view("ns.v")
    assert (again.sql, dict(again.properties)) == (view.sql, {"o": "p"})


def test_describe_table(spark, lh):
    run(
        lh,
        spark,
        """CREATE TABLE ns.t (id BIGINT NOT NULL COMMENT 'key', amount DECIMAL(10,2),
           ts TIMESTAMP, tags ARRAY<STRING>) PARTITIONED BY (days(ts))
           TBLPROPERTIES ('k' = 'v')""",
    )
    df = run(lh, spark, "DESCRIBE ns.t")
    assert df.columns == ["col_name", "data_type", "comment"]
    assert [tuple(r) for r in df.collect()] == [
        ("id", "bigint", "key"),
        ("amount", "decimal(10,2)", None),
        ("ts", "timestamp", None),
        ("tags", "array<string>", None),
        ("", "", ""),
        ("# Partitioning", "", ""),
        ("Part 0", "day(ts)", ""),
    ]
    ext = {r.col_name: r.data_type for r in run(lh, spark, "DESC TABLE EXTENDED ns.t").collect()}
    assert ext["Name"] == "ns.t" and ext["Provider"] == "lakehouse"
    assert ext["Table Properties"] == "[k=v]"
    run(lh, spark, "CREATE VIEW ns.v AS SELECT id, amount * 2 AS twice FROM ns.t")
    twice = spark.sql("SELECT CAST(1 AS DECIMAL(10,2)) * 2 AS x").schema["x"].dataType
    assert [tuple(r)[:2] for r in run(lh, spark, "DESCRIBE ns.v").collect()] == [
        ("id", "bigint"),
        ("twice", twice.simpleString()),
    ]
    df = run(lh, spark, "DESCRIBE SELECT id, ts FROM ns.t")
    assert [tuple(r)[:2] for r in df.collect()] == [("id", "bigint"), ("ts", "timestamp")]
    df = run(lh, spark, "DESCRIBE NAMESPACE ns")
    assert [tuple(r) for r in df.collect()] == [("Namespace Name", "ns")]
    with pytest.raises(NotFound):
        run(lh, spark, "DESCRIBE ns.nosuch")


def test_describe_history(spark, lh):
    run(lh, spark, "CREATE TABLE ns.t (id BIGINT, v STRING)")
    run(lh, spark, "INSERT INTO ns.t VALUES (1, 'a'), (2, 'b')")
    run(lh, spark, "ALTER TABLE ns.t SET TBLPROPERTIES ('k' = 'v')")
    run(lh, spark, "CREATE TABLE ns.other (x INT)")  # not t's history
    run(lh, spark, "DELETE FROM ns.t WHERE id = 1")
    run(lh, spark, "INSERT OVERWRITE ns.t VALUES (3, 'c')")
    df = run(lh, spark, "DESCRIBE HISTORY ns.t")
    assert df.schema["version"].dataType == T.LongType()
    assert df.schema["timestamp"].dataType == T.TimestampType()
    got = [(r.version, r.operation, dict(r.operationParameters or {})) for r in df.collect()]
    hist = {v.version: v for v in lh.history()}
    expected_ops = [
        (lh.version, "WRITE", {"mode": "Overwrite"}),
        (lh.version - 1, "DELETE", {}),
        (lh.version - 3, "SET TBLPROPERTIES", {"properties": "k"}),
        (lh.version - 4, "WRITE", {"mode": "Append"}),
        (lh.version - 5, "CREATE TABLE", {}),
    ]
    assert got == expected_ops
    stamps = [r.timestamp for r in df.collect()]
    assert stamps == sorted(stamps, reverse=True)
    assert hist[got[0][0]].created_at.timestamp() == pytest.approx(stamps[0].timestamp(), abs=1e-3)
    # a table created again under the same name has only its own history
    run(lh, spark, "DROP TABLE ns.t")
    run(lh, spark, "CREATE TABLE ns.t AS SELECT 1 AS id")
    assert [r.operation for r in run(lh, spark, "DESCRIBE HISTORY ns.t").collect()] == [
        "CREATE TABLE AS SELECT"
    ]


# -- CALL -----------------------------------------------------------------------------------------
def test_call_rollback(spark, lh):
    run(lh, spark, "CREATE TABLE ns.t (id BIGINT)")
    run(lh, spark, "INSERT INTO ns.t VALUES (1)")
    good = lh.version
    run(lh, spark, "INSERT INTO ns.t VALUES (2)")
    (row,) = run(lh, spark, f"CALL system.rollback({good})").collect()
    assert row.version == lh.version == good + 2 and row.restored_version == good
    assert lh.read("ns.t").to_pylist() == [{"id": 1}]
    run(lh, spark, "INSERT INTO ns.t VALUES (3)")
    run(lh, spark, f"CALL lakehouse.system.rollback(version => {good})")
    assert lh.read("ns.t").to_pylist() == [{"id": 1}]
    assert run(lh, spark, "DESCRIBE HISTORY ns.t").collect()[0].operation == "RESTORE"


def test_call_compact_and_expire(spark, lh):
    run(lh, spark, "CREATE TABLE ns.t (id BIGINT) TBLPROPERTIES ('inline.max_rows' = '0', "
        "'compaction.auto' = 'false')")  # fmt: skip
    for i in range(3):
        run(lh, spark, f"INSERT INTO ns.t VALUES ({i})")
    assert lh.table_stats("ns.t").files == 3
    (row,) = run(lh, spark, "CALL system.compact('ns.t')").collect()
    assert (row.files_removed, row.files_added, row.rows) == (3, 1, 3)
    assert lh.table_stats("ns.t").files == 1
    assert sorted(r["id"] for r in lh.read("ns.t").to_pylist()) == [0, 1, 2]
    oldest = min(v.version for v in lh.history())
    (row,) = run(lh, spark, "CALL system.expire_versions(keep_last => 2)").collect()
    assert row.oldest_version == lh.version - 1
    assert row.expired_versions == lh.version - 1 - oldest
    assert min(v.version for v in lh.history()) == lh.version - 1
    future = (dt.datetime.now() + dt.timedelta(days=1)).strftime("%Y-%m-%d %H:%M:%S")
    (row,) = run(
        lh, spark, f"CALL system.expire_versions(older_than => TIMESTAMP '{future}')"
    ).collect()
    assert row.oldest_version == lh.version


def test_call_bad_input(spark, lh):
    version = lh.version
    with pytest.raises(ValueError, match=r"unknown procedure system\.nosuch"):
        run(lh, spark, "CALL system.nosuch(1)")
    with pytest.raises(ValueError, match="no argument 'versions'"):
        run(lh, spark, "CALL system.rollback(versions => 1)")
    with pytest.raises(ValueError, match="needs the argument version"):
        run(lh, spark, "CALL system.rollback()")
    with pytest.raises(ValueError, match="keep_last, older_than"):
        run(lh, spark, "CALL system.expire_versions()")
    with pytest.raises(ValueError, match="table"):
        run(lh, spark, "CALL system.compact()")
    assert lh.version == version


# -- inside a transaction -------------------------------------------------------------------------
def test_ddl_in_a_session_transaction(spark, lh):
    with SqlSession(lh, spark) as s:
        s.sql("BEGIN")
        s.sql("CREATE TABLE ns.a (id BIGINT)")
        s.sql("INSERT INTO ns.a VALUES (1)")
        s.sql("CREATE TABLE ns.b AS SELECT id * 10 AS id FROM ns.a")
        s.sql("ALTER TABLE ns.a ADD COLUMN note STRING")
        # the transaction sees its own changes
        assert [r.tableName for r in s.sql("SHOW TABLES IN ns").collect()] == ["a", "b"]
        assert [r.col_name for r in s.sql("DESCRIBE ns.a").collect()] == ["id", "note"]
        assert lh.list_tables("ns") == []
        version = lh.version
        s.sql("COMMIT")
        assert lh.version == version + 1
        assert lh.list_tables("ns") == ["a", "b"]
        assert lh.read("ns.b").to_pylist() == [{"id": 10}]
        s.sql("BEGIN")
        with pytest.raises(ValueError, match="inside a transaction"):
            s.sql("CALL system.rollback(0)")
        s.sql("ROLLBACK")
        assert not s.in_transaction
    assert lh.version == version + 1
    assert lh.describe_table("ns.a").schema.names == ["id", "note"]


def test_non_lakehouse_statements_go_to_spark(spark, lh):
    version = lh.version
    df = run(lh, spark, "DESCRIBE FUNCTION abs")
    assert df.count() > 0
    run(lh, spark, "CREATE OR REPLACE TEMP VIEW tv_x AS SELECT 1 AS a")
    try:
        assert [tuple(r)[:2] for r in run(lh, spark, "DESCRIBE tv_x").collect()] == [("a", "int")]
        run(lh, spark, "DROP VIEW tv_x")
        assert not spark.catalog.tableExists("tv_x")
    finally:
        spark.catalog.dropTempView("tv_x")
    assert lh.version == version


def test_catalog_results_are_fetched_without_a_spark_job(spark, lh):
    run(lh, spark, "CREATE TABLE ns.t (id BIGINT COMMENT 'k') TBLPROPERTIES ('a' = '1')")
    run(lh, spark, "INSERT INTO ns.t VALUES (1)")
    sc = spark.sparkContext
    for text in ("SHOW TABLES", "SHOW NAMESPACES", "DESCRIBE EXTENDED ns.t",
                 "DESCRIBE HISTORY ns.t", "SHOW TBLPROPERTIES ns.t", "SHOW VIEWS"):  # fmt: skip
        df = run(lh, spark, text)
        sc.setJobGroup("h2-catalog-no-job", text)
        try:
            rows = df.collect()
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)
        assert sc.statusTracker().getJobIdsForGroup("h2-catalog-no-job") == [], text
        assert text == "SHOW VIEWS" or rows


def test_table_names_holding_dots(spark, lh):
    run(lh, spark, "CREATE TABLE ns.`a.b` (x INT) TBLPROPERTIES ('k' = 'v')")
    assert lh.list_tables("ns") == ["a.b"]
    run(lh, spark, "ALTER TABLE ns.`a.b` ADD COLUMN y STRING")
    run(lh, spark, "ALTER TABLE ns.`a.b` UNSET TBLPROPERTIES ('k')")
    assert [r.col_name for r in run(lh, spark, "DESCRIBE ns.`a.b`").collect()] == ["x", "y"]
    assert dict(lh.describe_table("ns.a.b").properties) == {}
    with pytest.raises(NotFound):
        run(lh, spark, "DESCRIBE ns.`c.d`")
    run(lh, spark, "DROP TABLE ns.`a.b`")
    assert lh.list_tables("ns") == []
