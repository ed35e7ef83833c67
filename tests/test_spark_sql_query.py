"""lakehouse.spark.sql queries (API.md "SQL from Spark"): lakehouse table references
rewritten to read() DataFrames, time travel, views, CTEs, subqueries, errors.

Every result is checked row for row against the Python API (``lh.read``,
``lh.at_version(v).read``) on the same lakehouse. One SparkSession for the run
(tests/spark_fixtures.py); one lakehouse for the read-only tests of the module.
"""

from __future__ import annotations

import datetime as dt
import time
from zoneinfo import ZoneInfo

import pyarrow as pa
import pytest

import lakehouse

pytest.importorskip("pyspark", reason="pyspark is not installed (the spark extra)")

import lakehouse.spark as lhs

pytest_plugins = ["spark_fixtures"]
pytestmark = pytest.mark.spark

A = pa.schema([pa.field("id", pa.int64(), nullable=False), ("x", pa.string()), ("grp", pa.int32())])
B = pa.schema([pa.field("id", pa.int64(), nullable=False), ("y", pa.int64())])
FILES_ONLY = {"inline.max_rows": "0"}


def a_rows(start: int, stop: int) -> pa.Table:
    ids = list(range(start, stop))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "x": [f"x{i % 7}" for i in ids],
            "grp": pa.array([i % 3 for i in ids], pa.int32()),
        },
        schema=A,
    )


class Lake:
    """The module's lakehouse: s.a in three files (versions v1, v2, v3), s.b, a view."""

    def __init__(self, path: str) -> None:
        self.lh = h = lakehouse.open(path, kv_options={"fsync": False})
        with h.begin() as t:
            t.create_namespace("s")
            t.create_table("s.a", A, FILES_ONLY)
            t.create_table("s.b", B, FILES_ONLY)
        with h.begin() as t:
            t.append("s.a", a_rows(0, 50))
            ids = pa.array(range(0, 60, 4), pa.int64())
            t.append("s.b", pa.table({"id": ids, "y": pa.compute.multiply(ids, 10)}, schema=B))
        self.v1 = h.version
        time.sleep(0.01)  # versions in distinct milliseconds (TIMESTAMP AS OF between them)
        with h.begin() as t:
            t.append("s.a", a_rows(50, 100))
        self.v2 = h.version
        time.sleep(0.01)
        with h.begin() as t:
            t.append("s.a", a_rows(1000, 1020))
            t.delete("s.a", "id % 10 = 3")
            t.create_view("s.v", "SELECT a.id, a.x, b.y FROM s.a a JOIN s.b b ON a.id = b.id")
        self.v3 = h.version


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    lk = Lake(str(tmp_path_factory.mktemp("sqlq") / "lh"))
    yield lk
    lk.lh.close()


def rows(frame) -> list[tuple]:
    return sorted(tuple(r) for r in frame.collect())


def py(table: pa.Table, cols: list[str] | None = None) -> list[tuple]:
    cols = cols or table.column_names
    return sorted(tuple(r[c] for c in cols) for r in table.to_pylist())


def sql(lake, spark, text, **kw):
    return lhs.sql(lake.lh, spark, text, **kw)


# -- plain queries -----------------------------------------------------------------------------
def test_select_star_is_the_python_read(spark, lake):
    got = sql(lake, spark, "SELECT * FROM s.a")
    assert got.columns == ["id", "x", "grp"]
    assert rows(got) == py(lake.lh.read("s.a"))


def test_quoted_and_catalog_qualified_names(spark, lake):
    want = py(lake.lh.read("s.a"))
    assert rows(sql(lake, spark, "SELECT * FROM `s`.`a`")) == want
    assert rows(sql(lake, spark, "SELECT * FROM lakehouse.s.a")) == want


def test_where_pushed_to_the_read_prunes_files_and_keeps_rows(spark, lake):
    got = sql(lake, spark, "SELECT id, x FROM s.a WHERE id >= 1000 AND x <> 'x1'")
    want = [(r["id"], r["x"]) for r in lake.lh.read("s.a").to_pylist()]
    assert rows(got) == sorted((i, x) for i, x in want if i >= 1000 and x != "x1")
    # the WHERE's simple conjunct reached read(where=): only the file of ids >= 1000
    assert len(got.inputFiles()) == 1 < len(sql(lake, spark, "SELECT * FROM s.a").inputFiles())
    # a condition that is not simple is left to Spark only (same rows)
    got = sql(lake, spark, "SELECT id FROM s.a WHERE id + grp = 1001 OR upper(x) = 'X0'")
    want2 = [r["id"] for r in lake.lh.read("s.a").to_pylist()]
    a = {r["id"]: r for r in lake.lh.read("s.a").to_pylist()}
    assert rows(got) == sorted(
        (i,) for i in want2 if i + a[i]["grp"] == 1001 or a[i]["x"].upper() == "X0"
    )


def test_qualified_columns_without_an_alias(spark, lake):
    got = sql(lake, spark, "SELECT s.a.id, a.x FROM s.a WHERE a.grp = 1")
    assert rows(got) == sorted(
        (r["id"], r["x"]) for r in lake.lh.read("s.a").to_pylist() if r["grp"] == 1
    )


def test_alias_with_column_names(spark, lake):
    got = sql(lake, spark, "SELECT q.k, q.v FROM s.a AS q(k, v, g) WHERE g = 2 AND k < 20")
    want = [(r["id"], r["x"]) for r in lake.lh.read("s.a").to_pylist()]
    a = {r["id"]: r["grp"] for r in lake.lh.read("s.a").to_pylist()}
    assert rows(got) == sorted((i, x) for i, x in want if a[i] == 2 and i < 20)
    got = sql(lake, spark, "SELECT count(*) FROM s.v w(i, xx, yy) WHERE yy > 100")
    b = {r["id"]: r["y"] for r in lake.lh.read("s.b").to_pylist()}
    assert rows(got) == [(sum(1 for i in a if b.get(i, 0) > 100),)]


def test_join_of_two_lakehouse_tables(spark, lake):
    got = sql(
        lake,
        spark,
        "SELECT a.id, a.x, b.y FROM s.a a JOIN s.b AS b ON a.id = b.id WHERE b.y > 100",
    )
    b = {r["id"]: r["y"] for r in lake.lh.read("s.b").to_pylist()}
    want = sorted(
        (r["id"], r["x"], b[r["id"]])
        for r in lake.lh.read("s.a").to_pylist()
        if r["id"] in b and b[r["id"]] > 100
    )
    assert want and rows(got) == want
    # a self-join: one DataFrame under both aliases
    got = sql(lake, spark, "SELECT count(*) FROM s.a x JOIN s.a y ON x.id = y.id + 1")
    ids = {r["id"] for r in lake.lh.read("s.a").to_pylist()}
    assert rows(got) == [(sum(1 for i in ids if i - 1 in ids),)]


def test_cte_subqueries_and_set_operations(spark, lake):
    a = lake.lh.read("s.a").to_pylist()
    b = {r["id"]: r["y"] for r in lake.lh.read("s.b").to_pylist()}
    # a CTE named like the table part does not shadow the lakehouse table s.a
    got = sql(
        lake,
        spark,
        "WITH a AS (SELECT id FROM s.b WHERE y >= 200) "
        "SELECT count(*) AS n FROM s.a WHERE id IN (SELECT id FROM a)",
    )
    assert rows(got) == [(sum(1 for r in a if b.get(r["id"], 0) >= 200),)]
    # scalar subquery in the select list, EXISTS, UNION ALL
    got = sql(
        lake,
        spark,
        "SELECT (SELECT max(y) FROM s.b) AS m, "
        "(SELECT count(*) FROM s.a t WHERE EXISTS (SELECT 1 FROM s.b u WHERE u.id = t.id)) AS k",
    )
    assert rows(got) == [(max(b.values()), sum(1 for r in a if r["id"] in b))]
    got = sql(lake, spark, "SELECT id FROM s.a WHERE grp = 0 UNION ALL SELECT id FROM s.b")
    assert rows(got) == sorted([(r["id"],) for r in a if r["grp"] == 0] + [(i,) for i in b])


# -- time travel -------------------------------------------------------------------------------
def test_version_as_of(spark, lake):
    for v in (lake.v1, lake.v2):
        got = sql(lake, spark, f"SELECT * FROM s.a VERSION AS OF {v}")
        assert rows(got) == py(lake.lh.at_version(v).read("s.a"))
    # two versions of one table in one query
    got = sql(
        lake,
        spark,
        f"SELECT count(*) FROM s.a VERSION AS OF {lake.v2} o LEFT ANTI JOIN s.a n ON o.id = n.id",
    )
    assert rows(got) == [(len({i for i in range(100) if i % 10 == 3}),)]
    # with a WHERE pushed to the versioned read
    got = sql(lake, spark, f"SELECT id FROM s.a VERSION AS OF {lake.v1} WHERE id < 10")
    assert rows(got) == [(i,) for i in range(10)]


def test_timestamp_as_of_in_the_session_time_zone(spark, lake):
    ms = lake.lh.version_info(lake.v2).created_ms
    zone = "America/New_York"
    old = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", zone)
    try:
        local = dt.datetime.fromtimestamp(ms / 1000, ZoneInfo(zone)).replace(tzinfo=None)
        text = local.isoformat(sep=" ", timespec="milliseconds")
        got = sql(lake, spark, f"SELECT * FROM s.a TIMESTAMP AS OF '{text}'")
    finally:
        spark.conf.set("spark.sql.session.timeZone", old)
    want = py(lake.lh.at_time(ms).read("s.a"))
    assert want == py(lake.lh.at_version(lake.v2).read("s.a"))
    assert rows(got) == want != py(lake.lh.read("s.a"))
    # any constant expression (Spark evaluates it), and a version as a string
    got = sql(lake, spark, f"SELECT * FROM s.a TIMESTAMP AS OF timestamp_millis({ms})")
    assert rows(got) == want
    assert rows(sql(lake, spark, f"SELECT * FROM s.a VERSION AS OF '{lake.v2}'")) == want


def test_version_of_a_table_that_did_not_exist_then(spark, lake):
    with pytest.raises(lakehouse.NotFound):
        sql(lake, spark, "SELECT * FROM s.a VERSION AS OF 0")


# -- views -------------------------------------------------------------------------------------
def test_lakehouse_view_expands_as_a_subquery(spark, lake):
    b = {r["id"]: r["y"] for r in lake.lh.read("s.b").to_pylist()}
    want = sorted(
        (r["id"], r["x"], b[r["id"]]) for r in lake.lh.read("s.a").to_pylist() if r["id"] in b
    )
    assert rows(sql(lake, spark, "SELECT * FROM s.v")) == want
    got = sql(lake, spark, "SELECT v.id FROM s.v WHERE v.y >= 300")
    assert rows(got) == sorted((i,) for i, _, y in want if y >= 300)


def test_temp_view_mixed_with_a_lakehouse_table(spark, lake):
    spark.createDataFrame([(1,), (2,), (3,), (1001,)], "id long").createOrReplaceTempView(
        "sqlq_ids"
    )
    try:
        got = sql(lake, spark, "SELECT a.id, a.x FROM s.a a JOIN sqlq_ids t ON a.id = t.id")
    finally:
        spark.catalog.dropTempView("sqlq_ids")
    want = sorted(
        (r["id"], r["x"]) for r in lake.lh.read("s.a").to_pylist() if r["id"] in (1, 2, 3, 1001)
    )
    assert rows(got) == want


# -- statements, errors ------------------------------------------------------------------------
def test_query_without_lakehouse_objects_goes_to_spark(spark, lake):
    assert rows(sql(lake, spark, "SELECT 1 AS one, '{x}' AS b")) == [(1, "{x}")]


def test_explain_shows_the_plan_over_the_lakehouse_files(spark, lake):
    plan = sql(lake, spark, "EXPLAIN SELECT count(*) FROM s.a WHERE id > 10").collect()[0][0]
    assert "parquet" in plan.lower() and "Exception" not in plan
    plan = sql(lake, spark, "EXPLAIN EXTENDED SELECT * FROM s.a").collect()[0][0]
    assert "== Analyzed Logical Plan ==" in plan


def test_braces_in_a_rewritten_query(spark, lake):
    got = sql(lake, spark, "SELECT concat('{', x, '}') AS c FROM s.a WHERE id = 1")
    assert rows(got) == [("{x1}",)]


def test_unknown_table_is_a_value_error_naming_it(spark, lake):
    with pytest.raises(ValueError, match=r"s\.nope"):
        sql(lake, spark, "SELECT * FROM s.a JOIN s.nope USING (id)")
    with pytest.raises(ValueError, match=r"nons\.t"):
        sql(lake, spark, "SELECT 1 FROM nons.t")
    # one-part names are Spark's (temp views, CTEs): Spark's "not found" as ValueError
    with pytest.raises(ValueError, match="sqlq_no_such_view"):
        sql(lake, spark, "SELECT * FROM sqlq_no_such_view")
    with pytest.raises(ValueError, match="sqlq_no_such_view"):
        sql(lake, spark, "SELECT * FROM s.a JOIN sqlq_no_such_view USING (id)")


def test_syntax_error_anywhere_runs_nothing(spark, lake):
    key = "lakehouse.test.sqlq.marker"
    spark.conf.unset(key)
    with pytest.raises(ValueError, match="statement 3: SQL syntax error"):
        sql(lake, spark, f"SET {key} = 1; SELECT * FROM s.a; SELECT * FROM WHERE")
    assert spark.conf.get(key, None) is None  # the first statement did not run
    with pytest.raises(ValueError, match="SQL syntax error"):
        sql(lake, spark, "SELEC 1")


def test_several_statements_return_the_last_result(spark, lake):
    key = "lakehouse.test.sqlq.n"
    try:
        got = sql(lake, spark, f"SET {key} = 7; SELECT count(*) FROM s.b; SELECT 2 AS two;")
        assert rows(got) == [(2,)]
        assert spark.conf.get(key) == "7"
    finally:
        spark.conf.unset(key)


def test_transaction_statements_need_a_session(spark, lake):
    for text in ("BEGIN", "COMMIT", "ROLLBACK", "SELECT 1; BEGIN"):
        with pytest.raises(ValueError, match="SqlSession"):
            sql(lake, spark, text)


def test_query_inside_a_python_transaction_sees_its_writes(spark, tmp_path):
    lh = lakehouse.open(str(tmp_path / "lh"), kv_options={"fsync": False})
    try:
        with lh.begin() as t:
            t.create_namespace("s")
            t.create_table("s.a", A)
            t.append("s.a", a_rows(0, 5))
        v = lh.version
        txn = lh.begin()
        txn.append("s.a", a_rows(5, 8))
        got = lhs.sql(lh, spark, "SELECT max(id), count(*) FROM s.a", txn=txn)
        assert rows(got) == [(7, 8)]
        # a version inside the transaction reads that version of the lakehouse
        got = lhs.sql(lh, spark, f"SELECT count(*) FROM s.a VERSION AS OF {v}", txn=txn)
        assert rows(got) == [(5,)]
        with pytest.raises(ValueError, match="caller"):
            lhs.sql(lh, spark, "COMMIT", txn=txn)
        txn.rollback()
        assert lh.version == v and lh.read("s.a").num_rows == 5
    finally:
        lh.close()


def test_names_resolve_ignoring_case_as_spark_does(spark, lake):
    want = py(lake.lh.read("s.a"))
    assert rows(sql(lake, spark, "SELECT * FROM S.A")) == want
    assert rows(sql(lake, spark, "SELECT * FROM `S`.`a` x WHERE x.ID >= 0")) == want
    view = rows(sql(lake, spark, "SELECT * FROM s.v"))
    assert rows(sql(lake, spark, "SELECT * FROM s.V")) == view
    with pytest.raises(ValueError, match=r"S\.nope"):
        lhs.sql(lake.lh, spark, "SELECT * FROM S.nope")


# -- same table name in two namespaces; doubled quotes in string literals -----------------------
X = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())])


def x_rows(ids: list[int], names: list[str | None]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "name": names}, schema=X)


def test_same_table_name_in_two_namespaces_joins_as_in_spark(spark, tmp_path):
    lh = lakehouse.open(str(tmp_path / "lh"), kv_options={"fsync": False})
    try:
        with lh.begin() as t:
            for ns in ("a", "b"):
                t.create_namespace(ns)
                t.create_table(f"{ns}.x", X)
            t.append("a.x", x_rows([1, 2, 3], ["a1", "a2", "a3"]))
            t.append("b.x", x_rows([2, 3, 4], ["b2", "b3", "b4"]))
        a = {r["id"]: r["name"] for r in lh.read("a.x").to_pylist()}
        b = {r["id"]: r["name"] for r in lh.read("b.x").to_pylist()}
        want = sorted((a[i], b[i]) for i in a.keys() & b.keys())
        got = lhs.sql(lh, spark, "SELECT a.x.name, b.x.name FROM a.x JOIN b.x ON a.x.id = b.x.id")
        assert rows(got) == want
        text = (
            "SELECT lakehouse.a.x.name, b.x.name FROM lakehouse.a.x JOIN b.x "
            "ON lakehouse.a.x.id = b.x.id WHERE b.x.id > 2"
        )
        assert rows(lhs.sql(lh, spark, text)) == [w for w in want if w[1] != "b2"]
        # a correlated subquery: a.x.id is the outer reference's column, not b.x's
        text = "SELECT id FROM a.x WHERE NOT EXISTS (SELECT 1 FROM b.x WHERE b.x.id = a.x.id)"
        assert rows(lhs.sql(lh, spark, text)) == sorted((i,) for i in a.keys() - b.keys())
        # the bare name names neither, as in Spark
        with pytest.raises(ValueError, match="bad query"):
            lhs.sql(lh, spark, "SELECT x.name FROM a.x JOIN b.x ON a.x.id = b.x.id").collect()
        # one reference of that name: the bare name and the full name both resolve
        got = lhs.sql(lh, spark, "SELECT x.name, a.x.id FROM a.x WHERE a.x.id = 1")
        assert rows(got) == [("a1", 1)]
    finally:
        lh.close()


def test_doubled_quote_in_a_string_literal_is_one_quote_as_in_spark(spark, tmp_path):
    lh = lakehouse.open(str(tmp_path / "lh"), kv_options={"fsync": False})
    try:
        with lh.begin() as t:
            t.create_namespace("a")
            t.create_table("a.x", X)
            t.append("a.x", x_rows([1, 2, 3, 4], ["it's", "its", 'say "hi"', "'"]))
        by_name = {r["name"]: r["id"] for r in lh.read("a.x").to_pylist()}
        for literal, name in [
            ("'it''s'", "it's"),
            ("'it' 's'", "its"),  # a gap: two literals, concatenated (as in Spark)
            ('"say ""hi"""', 'say "hi"'),  # a double-quoted literal doubles its own quote
            ("''''", "'"),
        ]:
            got = lhs.sql(lh, spark, f"SELECT id, name FROM a.x WHERE name = {literal}")
            assert rows(got) == [(by_name[name], name)], literal
            # Spark itself reads the literal the same way
            assert spark.sql(f"SELECT {literal} AS v").first()[0] == name
        # a view's query made through the Python API is read the same way
        with lh.begin() as t:
            t.create_view("a.v", "SELECT id FROM a.x WHERE name = 'it''s'")
        assert rows(lhs.sql(lh, spark, "SELECT * FROM a.v")) == [(by_name["it's"],)]
    finally:
        lh.close()
