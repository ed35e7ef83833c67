"""SQL INSERT / DELETE / UPDATE on lakehouse tables (lakehouse.spark.sql, dml.py).

Every statement's rows are checked through the Python API (``lh.read``); bad
input must raise ValueError before anything is committed or left on disk.
One SparkSession for the run (tests/spark_fixtures.py); tiny tables.
"""

from __future__ import annotations

import datetime as dt
import os
from decimal import Decimal

import pyarrow as pa
import pytest

import lakehouse

pytest.importorskip("pyspark", reason="pyspark is not installed (the spark extra)")
from pyspark.sql import types as T

from lakehouse.spark.sql import SqlSession, sql

pytest_plugins = ["spark_fixtures"]
pytestmark = pytest.mark.spark

PEOPLE = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("name", pa.string()),
        ("score", pa.float64()),
        ("day", pa.date32()),
    ]
)
SALES = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), ("country", pa.string()), ("qty", pa.int32())]
)
WIDE = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("n", pa.int32()),
        ("amount", pa.decimal128(12, 2)),
    ]
)
D1 = dt.date(2026, 1, 1)


@pytest.fixture
def lh(tmp_path):
    h = lakehouse.open(str(tmp_path / "lh"), kv_options={"fsync": False})
    with h.begin() as txn:
        txn.create_namespace("ns")
        txn.create_table("ns.t", PEOPLE)
        txn.create_table("ns.u", PEOPLE, {"inline.max_rows": "0"})  # rows in files
        txn.create_table("ns.p", SALES, {"inline.max_rows": "0"}, partition_by=["country"])
        txn.create_table("ns.w", WIDE)
    yield h
    h.close()


def rows(lh, table, key="id"):
    return sorted(lh.read(table).to_pylist(), key=lambda r: (r[key], str(r)))


def affected(df):
    assert df.schema["num_affected_rows"].dataType == T.LongType()
    (row,) = df.collect()
    return row["num_affected_rows"]


def person(i, name=None, score=None, day=None):
    return {"id": i, "name": name, "score": score, "day": day}


def test_insert_values_literals_cast_to_the_column_types(lh, spark):
    n = sql(
        lh, spark, "INSERT INTO ns.t VALUES (1, 'a', 1.5, DATE '2026-01-01'), (2, NULL, 2, NULL)"
    )
    assert affected(n) == 2
    sql(lh, spark, "INSERT INTO ns.t VALUES (3, 'c', -0.25, '2026-01-01')")
    assert rows(lh, "ns.t") == [
        person(1, "a", 1.5, D1),
        person(2, None, 2.0),
        person(3, "c", -0.25, D1),
    ]
    sql(
        lh,
        spark,
        "INSERT INTO ns.w VALUES (1, '2026-01-01 10:00:00', -3, 7), "
        "(2, TIMESTAMP '2026-01-02 11:30:00', 2147483647, 1.5), (3, NULL, NULL, -0.25)",
    )
    utc = dt.UTC
    assert [tuple(r.values()) for r in rows(lh, "ns.w")] == [
        (1, dt.datetime(2026, 1, 1, 10, tzinfo=utc), -3, Decimal("7.00")),
        (2, dt.datetime(2026, 1, 2, 11, 30, tzinfo=utc), 2147483647, Decimal("1.50")),
        (3, None, None, Decimal("-0.25")),
    ]


def test_insert_with_a_column_list_fills_the_others_with_null(lh, spark):
    assert affected(sql(lh, spark, "INSERT INTO ns.u (name, id) VALUES ('x', 7), ('y', 8)")) == 2
    assert rows(lh, "ns.u") == [person(7, "x"), person(8, "y")]
    assert lh.table_stats("ns.u").files >= 1  # written by the Spark job, not inlined


def test_insert_select_from_a_temp_view_and_from_a_lakehouse_table(lh, spark):
    spark.range(5).selectExpr(
        "id", "concat('n', CAST(id AS STRING)) AS name", "CAST(id AS DOUBLE) / 2 AS score"
    ).createOrReplaceTempView("src_people")
    try:
        got = sql(
            lh,
            spark,
            "INSERT INTO ns.t (id, name, score) "
            "SELECT id, name, score FROM src_people WHERE id > 1",
        )
    finally:
        spark.catalog.dropTempView("src_people")
    assert affected(got) == 3
    assert rows(lh, "ns.t") == [person(i, f"n{i}", i / 2) for i in (2, 3, 4)]
    # from another lakehouse table (read by Spark), with an expression; TABLE x
    got = sql(lh, spark, "INSERT INTO ns.u SELECT id + 10, upper(name), score, day FROM ns.t")
    assert affected(got) == 3
    assert affected(sql(lh, spark, "INSERT INTO ns.u TABLE ns.t")) == 3
    assert rows(lh, "ns.u") == [person(i, f"n{i}", i / 2) for i in (2, 3, 4)] + [
        person(i + 10, f"N{i}", i / 2) for i in (2, 3, 4)
    ]


def test_insert_by_name_and_with_a_cte(lh, spark):
    got = sql(lh, spark, "INSERT INTO ns.t BY NAME SELECT 'z' AS NAME, 9L AS id, 0.5D AS score")
    assert affected(got) == 1
    sql(
        lh,
        spark,
        "WITH q AS (SELECT 10L AS id, 'w' AS name) INSERT INTO ns.t (id, name) SELECT * FROM q",
    )
    assert rows(lh, "ns.t") == [person(9, "z", 0.5), person(10, "w")]


def test_insert_replace_where_overwrites_the_matching_rows(lh, spark):
    people(lh)
    got = sql(lh, spark, "INSERT INTO ns.u REPLACE WHERE id >= 3 VALUES (3, 'x', 0, NULL)")
    assert affected(got) == 1
    assert rows(lh, "ns.u") == [person(1, "a", 1.0), person(2, "b", 2.0), person(3, "x", 0.0)]


def test_insert_into_a_spark_table_goes_to_spark(lh, spark, tmp_path):
    spark.sql(f"CREATE TABLE plain_sql_dml (a INT) USING parquet LOCATION '{tmp_path}/plain'")
    try:
        sql(lh, spark, "INSERT INTO plain_sql_dml VALUES (1), (2)")
        assert sorted(r.a for r in spark.table("plain_sql_dml").collect()) == [1, 2]
        with pytest.raises(ValueError, match="the Spark table plain_sql_dml from the lakehouse"):
            sql(lh, spark, "INSERT INTO plain_sql_dml SELECT CAST(id AS INT) FROM ns.u")
    finally:
        spark.sql("DROP TABLE plain_sql_dml")


def test_insert_overwrite_unpartitioned_replaces_every_row(lh, spark):
    sql(lh, spark, "INSERT INTO ns.u VALUES (1, 'a', 1, NULL), (2, 'b', 2, NULL)")
    got = sql(lh, spark, "INSERT OVERWRITE TABLE ns.u SELECT 5L, 'e', 5D, DATE '2026-01-01'")
    assert affected(got) == 1
    assert rows(lh, "ns.u") == [person(5, "e", 5.0, D1)]


def sales(lh, spark):
    sql(
        lh,
        spark,
        "INSERT INTO ns.p VALUES (1, 'de', 10), (2, 'de', 20), (3, 'fr', 30), (4, 'us', 40)",
    )
    return lh.version


def test_insert_overwrite_dynamic_replaces_only_the_partitions_written(lh, spark):
    sales(lh, spark)
    got = sql(lh, spark, "INSERT OVERWRITE ns.p SELECT * FROM VALUES (5, 'de', 50), (6, 'it', 60)")
    assert affected(got) == 2
    expect = [(3, "fr", 30), (4, "us", 40), (5, "de", 50), (6, "it", 60)]
    assert rows(lh, "ns.p") == [dict(zip(SALES.names, r)) for r in expect]
    # PARTITION (country) without a value: dynamic too
    sql(lh, spark, "INSERT OVERWRITE ns.p PARTITION (country) VALUES (7, 'fr', 70)")
    expect = [(4, "us", 40), (5, "de", 50), (6, "it", 60), (7, "fr", 70)]
    assert rows(lh, "ns.p") == [dict(zip(SALES.names, r)) for r in expect]


def test_insert_with_a_static_partition(lh, spark):
    sales(lh, spark)
    got = sql(
        lh, spark, "INSERT OVERWRITE TABLE ns.p PARTITION (country = 'de') VALUES (8, 80), (9, 90)"
    )
    assert affected(got) == 2
    expect = [(3, "fr", 30), (4, "us", 40), (8, "de", 80), (9, "de", 90)]
    assert rows(lh, "ns.p") == [dict(zip(SALES.names, r)) for r in expect]
    # static and no rows: the partition is emptied (overwrite where country = 'fr')
    spark.range(0).selectExpr("id", "CAST(id AS INT) AS qty").createOrReplaceTempView("none")
    try:
        got = sql(lh, spark, "INSERT OVERWRITE ns.p PARTITION (country = 'fr') SELECT * FROM none")
    finally:
        spark.catalog.dropTempView("none")
    assert affected(got) == 0
    # INSERT INTO with a static partition appends
    sql(lh, spark, "INSERT INTO ns.p PARTITION (country = 'us') (qty, id) VALUES (41, 11)")
    expect = [(4, "us", 40), (8, "de", 80), (9, "de", 90), (11, "us", 41)]
    assert rows(lh, "ns.p") == [dict(zip(SALES.names, r)) for r in expect]


def people(lh):
    """Four rows in ns.u, through the Python API (one data file)."""
    data = [person(i, "abcd"[i - 1], float(i)) for i in (1, 2, 3, 4)]
    with lh.begin() as txn:
        txn.append("ns.u", pa.Table.from_pylist(data, PEOPLE))


def test_delete_with_and_without_where_and_with_an_alias(lh, spark):
    people(lh)
    assert affected(sql(lh, spark, "DELETE FROM ns.u WHERE score >= 4")) == 1
    got = sql(lh, spark, "DELETE FROM ns.u AS x WHERE x.id = 1 OR ns.u.name = 'b'")
    assert affected(got) == 2
    assert rows(lh, "ns.u") == [person(3, "c", 3.0)]
    assert affected(sql(lh, spark, "DELETE FROM ns.u")) == 1
    assert rows(lh, "ns.u") == []


def test_update_with_expressions_and_an_alias(lh, spark):
    people(lh)
    got = sql(
        lh,
        spark,
        "UPDATE ns.u AS x SET x.score = score * 10, name = upper(x.name), "
        "day = DATE '2026-01-01' WHERE x.id > 2",
    )
    assert affected(got) == 2
    assert rows(lh, "ns.u") == [
        person(1, "a", 1.0),
        person(2, "b", 2.0),
        person(3, "C", 30.0, D1),
        person(4, "D", 40.0, D1),
    ]
    assert affected(sql(lh, spark, "UPDATE ns.u SET score = -1")) == 4
    assert {r["score"] for r in rows(lh, "ns.u")} == {-1.0}


def test_statements_join_the_callers_transaction(lh, spark):
    people(lh)
    before = lh.version
    with lh.begin() as txn:
        sql(lh, spark, "INSERT INTO ns.u VALUES (5, 'e', 5, NULL)", txn=txn)
        sql(lh, spark, "DELETE FROM ns.u WHERE id = 1", txn=txn)
        sql(lh, spark, "UPDATE ns.u SET name = 'E' WHERE id = 5", txn=txn)
        assert lh.version == before  # nothing committed yet
    assert lh.version == before + 1
    assert [r["id"] for r in rows(lh, "ns.u")] == [2, 3, 4, 5]
    assert rows(lh, "ns.u")[-1] == person(5, "E", 5.0)


def test_a_rolled_back_session_leaves_no_row_and_no_file(lh, spark):
    people(lh)
    version, files, before = lh.version, data_files(lh), rows(lh, "ns.u")
    assert files  # people()'s file
    with SqlSession(lh, spark) as session:
        session.sql("BEGIN")
        session.sql("INSERT INTO ns.u SELECT id + 10, 'n', 1D, NULL FROM range(3)")
        assert affected(session.sql("DELETE FROM ns.u WHERE id = 1")) == 1
        # the statements see the transaction's own writes
        assert affected(session.sql("UPDATE ns.u SET name = 'z' WHERE id >= 10")) == 3
        assert data_files(lh) > files  # the job's files, not committed yet
        session.sql("ROLLBACK")
    assert lh.version == version
    assert data_files(lh) == files
    assert rows(lh, "ns.u") == before


def data_files(lh):
    """Every file under the lakehouse's data directory (all tables, temporary files too)."""
    root = os.path.join(lh.url.removeprefix("file://"), "data")
    assert os.path.isdir(root)
    return {os.path.join(d, n) for d, _, names in os.walk(root) for n in names}


@pytest.mark.parametrize(
    ("statement", "message"),
    [
        ("INSERT INTO ns.u VALUES (1, 'a')", "2 values for the 4 columns"),
        ("INSERT INTO ns.u SELECT 1L, 'a'", "gives 2 columns"),
        ("INSERT INTO ns.u (id, nme) VALUES (1, 'a')", "no column 'nme'"),
        ("INSERT INTO ns.u VALUES ('abc', 'a', 1, NULL)", "'id'"),
        ("INSERT INTO ns.u VALUES (NULL, 'a', 1, NULL)", "'id'"),
        ("INSERT INTO ns.u VALUES (9, 'a', 1, 'not a date')", "'day'"),
        ("INSERT INTO ns.u SELECT 1.5, 'a', 1D, NULL", "'id'"),
        # found by the write job (a null for the NOT NULL id): its files are deleted
        (
            "INSERT INTO ns.u SELECT IF(id = 30, NULL, id), 'x', 1D, NULL FROM range(50)",
            "'id'",
        ),
        ("INSERT INTO ns.missing VALUES (1)", "ns.missing"),
        ("INSERT INTO ns.p PARTITION (qty = 1) VALUES (1, 'x')", "not an identity partition"),
        ("INSERT INTO ns.w (id, n) VALUES (1, 3000000000)", "'n'"),
        ("INSERT INTO ns.w (id, amount) VALUES (1, 1.555)", "'amount'"),
        ("INSERT INTO ns.w (id, ts) VALUES (1, 'yesterday')", "'ts'"),
        ("DELETE FROM ns.u WHERE id IN (SELECT id FROM ns.t)", "subquery"),
        ("DELETE FROM ns.u WHERE nope = 1", "nope"),
        ("DELETE FROM ns.missing WHERE id = 1", "ns.missing"),
        ("UPDATE ns.u SET nope = 1", "no column 'nope'"),
        ("UPDATE ns.u SET id = 'abc'", "'id'"),
        ("UPDATE ns.u SET score = 1 WHERE EXISTS (SELECT 1)", "subquery"),
    ],
)
def test_bad_statements_raise_before_anything_is_written(lh, spark, statement, message):
    people(lh)
    version = lh.version
    files = data_files(lh)
    assert files  # people()'s file
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        sql(lh, spark, statement)
    assert lh.version == version
    assert data_files(lh) == files
    assert len(rows(lh, "ns.u")) == 4


def test_doubled_quotes_in_string_literals_are_one_quote_as_in_spark(lh, spark):
    people(lh)
    with lh.begin() as txn:
        txn.append("ns.u", pa.Table.from_pylist([person(5, "it's"), person(6, "its")], PEOPLE))
    assert affected(sql(lh, spark, "INSERT INTO ns.u VALUES (7, 'o''k', NULL, NULL)")) == 1
    assert affected(sql(lh, spark, "UPDATE ns.u SET name = 'o''k' WHERE name = 'it''s'")) == 1
    assert affected(sql(lh, spark, 'UPDATE ns.u SET name = "say ""hi""" WHERE id = 1')) == 1
    names = {r["id"]: r["name"] for r in rows(lh, "ns.u")}
    assert names == {1: 'say "hi"', 2: "b", 3: "c", 4: "d", 5: "o'k", 6: "its", 7: "o'k"}
    assert affected(sql(lh, spark, "DELETE FROM ns.u WHERE name = 'o''k'")) == 2
    assert [r["id"] for r in rows(lh, "ns.u")] == [1, 2, 3, 4, 6]


def test_overwrite_partition_and_replace_where_with_backslashes_and_quotes(lh, spark):
    # Spark reads 'a\\' as a\ and 'o\'b' as o'b; the lakehouse's own parser (which
    # deletes the rows replaced) has no backslash escapes: the two must agree
    odd = ["a\\", "a\\\\", "o'b", "x"]
    with lh.begin() as txn:
        txn.append(
            "ns.p", pa.table({"id": [1, 2, 3, 4], "country": odd, "qty": [1, 2, 3, 4]}, SALES)
        )
        txn.append(
            "ns.u", pa.Table.from_pylist([person(i + 1, n) for i, n in enumerate(odd)], PEOPLE)
        )
    got = sql(lh, spark, "INSERT OVERWRITE ns.p PARTITION (country = 'a\\\\') VALUES (5, 50)")
    assert affected(got) == 1
    got = sql(lh, spark, "INSERT OVERWRITE ns.p PARTITION (country = 'o\\'b') VALUES (6, 60)")
    assert affected(got) == 1
    expect = [(2, "a\\\\", 2), (4, "x", 4), (5, "a\\", 50), (6, "o'b", 60)]
    assert rows(lh, "ns.p") == [dict(zip(SALES.names, r)) for r in expect]
    got = sql(
        lh, spark, "INSERT INTO ns.u REPLACE WHERE name = 'a\\\\' VALUES (7, 'a\\\\', 0, NULL)"
    )
    assert affected(got) == 1
    got = sql(
        lh, spark, "INSERT INTO ns.u REPLACE WHERE name = \"o\\'b\" VALUES (8, 'o\\'b', 0, NULL)"
    )
    assert affected(got) == 1
    names = {r["id"]: r["name"] for r in rows(lh, "ns.u")}
    assert names == {2: "a\\\\", 4: "x", 7: "a\\", 8: "o'b"}
    # a new row outside Spark's condition is refused (Spark's check, same value)
    with pytest.raises(ValueError):
        sql(
            lh,
            spark,
            "INSERT INTO ns.u REPLACE WHERE name = 'a\\\\' VALUES (9, 'a\\\\\\\\', 0, NULL)",
        )
    assert names == {r["id"]: r["name"] for r in rows(lh, "ns.u")}
