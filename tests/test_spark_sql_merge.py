"""SQL ``MERGE INTO`` through ``lakehouse.spark.sql``: every form, exact rows.

The table after each statement is read back with the Python API (``lh.read``)
and compared with rows computed here; the one-row result gives the counts.
The simple form (key equalities, unconditioned ``UPDATE SET *`` / ``DELETE`` /
``INSERT *``) must take the key merge, everything else the clause merge
(checked by counting calls). One SparkSession for the run
(tests/spark_fixtures.py).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakehouse

pytest.importorskip("pyspark", reason="pyspark is not installed (the spark extra)")

import lakehouse.spark as lhs

merge_mod = importlib.import_module("lakehouse.spark.merge")

pytest_plugins = ["spark_fixtures"]
pytestmark = pytest.mark.spark

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("name", pa.string()),
        ("qty", pa.int32()),
    ]
)
PROPS = {"inline.max_rows": "5", "compaction.auto": "false"}
#: the target: ids 0..9, name n<i>, qty i
TARGET = {i: (f"n{i}", i) for i in range(10)}
#: the source table s.u: two matched, one new
SOURCE = {2: ("a", 20), 3: ("b", 1), 12: ("c", 5)}


def make(root: Path) -> Any:
    lh = lakehouse.open(str(root), kv_options={"fsync": False})
    with lh.begin() as txn:
        txn.create_namespace("s")
        txn.create_table("s.t", SCHEMA, PROPS)
        txn.create_table("s.u", SCHEMA, PROPS)
    lh.append("s.t", table_of(TARGET))
    lh.append("s.u", table_of(SOURCE))
    return lh


def table_of(rows: dict[int, tuple[str, int]]) -> pa.Table:
    ids = sorted(rows)
    return pa.table(
        {
            "id": ids,
            "name": [rows[i][0] for i in ids],
            "qty": pa.array([rows[i][1] for i in ids], pa.int32()),
        },
        schema=SCHEMA,
    )


def rows_of(lh: Any, table: str = "s.t") -> dict[int, tuple[Any, Any]]:
    out = {}
    for r in lh.read(table).to_pylist():
        assert r["id"] not in out, f"id {r['id']} twice"
        out[r["id"]] = (r["name"], r["qty"])
    return out


@pytest.fixture
def lh(tmp_path):
    h = make(tmp_path / "lh")
    yield h
    h.close()


@pytest.fixture
def calls(monkeypatch):
    """How many merges took the clause path and the key path."""
    seen = {"clauses": 0, "keys": 0}
    clause_merge = merge_mod.merge_clauses
    key_merge = merge_mod._merge

    def counted_clauses(*a: Any, **kw: Any) -> Any:
        seen["clauses"] += 1
        return clause_merge(*a, **kw)

    def counted_keys(*a: Any, **kw: Any) -> Any:
        seen["keys"] += 1
        return key_merge(*a, **kw)

    monkeypatch.setattr(merge_mod, "merge_clauses", counted_clauses)
    monkeypatch.setattr(merge_mod, "_merge", counted_keys)
    return seen


def run(spark, lh, text: str, **kw: Any) -> tuple[int, int, int, int]:
    row = lhs.sql(lh, spark, text, **kw).collect()
    assert len(row) == 1
    r = row[0].asDict()
    assert list(r) == [
        "num_affected_rows",
        "num_updated_rows",
        "num_deleted_rows",
        "num_inserted_rows",
    ]
    return tuple(r.values())  # type: ignore[return-value]


def test_simple_upsert_from_a_lakehouse_table_takes_the_key_merge(spark, lh, calls):
    got = run(
        spark,
        lh,
        "MERGE INTO s.t USING s.u ON s.t.id = s.u.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
    )
    assert got == (3, 2, 0, 1)
    assert rows_of(lh) == {**TARGET, **SOURCE}
    assert calls == {"clauses": 0, "keys": 1}


def test_simple_delete_and_insert_only_with_aliases(spark, lh, calls):
    assert run(
        spark, lh, "MERGE INTO s.t AS x USING s.u AS y ON y.id = x.id WHEN MATCHED THEN DELETE"
    ) == (2, 0, 2, 0)
    want = {i: v for i, v in TARGET.items() if i not in SOURCE}
    assert rows_of(lh) == want
    assert run(
        spark, lh, "MERGE INTO s.t x USING s.u y ON x.id = y.id WHEN NOT MATCHED THEN INSERT *"
    ) == (3, 0, 0, 3)
    assert rows_of(lh) == {**want, **SOURCE}
    assert calls == {"clauses": 0, "keys": 2}


def test_clauses_with_conditions_set_lists_and_insert_values(spark, lh, calls):
    got = run(
        spark,
        lh,
        """MERGE INTO s.t AS t
        USING (SELECT id, name, qty FROM s.u UNION ALL SELECT 7, 'd', 0 UNION ALL
               SELECT 30, 'e', 9) AS s
        ON t.id = s.id
        WHEN MATCHED AND s.qty > 10 THEN UPDATE SET t.qty = t.qty + s.qty, name = upper(s.name)
        WHEN MATCHED AND s.qty = 0 THEN DELETE
        WHEN MATCHED THEN UPDATE SET *
        WHEN NOT MATCHED AND s.qty > 6 THEN INSERT (id, name) VALUES (s.id + 100, s.name)
        WHEN NOT MATCHED BY TARGET THEN INSERT (qty, id) VALUES (-1, s.id)""",
    )
    assert got == (5, 2, 1, 2)
    want = dict(TARGET)
    want[2] = ("A", 2 + 20)
    want[3] = ("b", 1)
    del want[7]
    want[12] = (None, -1)
    want[130] = ("e", None)
    assert rows_of(lh) == want
    assert calls == {"clauses": 1, "keys": 0}


def test_using_a_temp_view_and_a_version_of_a_lakehouse_table(spark, lh, calls):
    v = lh.version
    lh.append("s.u", table_of({4: ("late", 44)}))  # not in the version read below
    spark.createDataFrame(
        [(5, "v", 55), (40, "w", 4)], "id long, name string, qty int"
    ).createOrReplaceTempView("h3_src")
    try:
        got = run(
            spark,
            lh,
            "MERGE INTO s.t USING h3_src ON t.id = h3_src.id "
            "WHEN MATCHED AND h3_src.qty > 50 THEN UPDATE SET qty = h3_src.qty "
            "WHEN NOT MATCHED THEN INSERT *",
        )
    finally:
        spark.catalog.dropTempView("h3_src")
    assert got == (2, 1, 0, 1)
    got = run(
        spark,
        lh,
        f"MERGE INTO s.t USING s.u VERSION AS OF {v} AS s ON t.id = s.id "
        "WHEN MATCHED AND s.qty > 10 THEN UPDATE SET * ",
    )
    assert got == (1, 1, 0, 0)
    want = dict(TARGET)
    want[5] = ("n5", 55)
    want[40] = ("w", 4)
    want[2] = SOURCE[2]
    assert rows_of(lh) == want
    assert calls["clauses"] == 2


def test_when_not_matched_by_source(spark, lh, calls):
    got = run(
        spark,
        lh,
        """MERGE INTO s.t USING s.u ON t.id = u.id
        WHEN MATCHED THEN UPDATE SET *
        WHEN NOT MATCHED BY SOURCE AND t.qty >= 8 THEN DELETE
        WHEN NOT MATCHED BY SOURCE AND qty < 2 THEN UPDATE SET name = concat(name, '!')""",
    )
    assert got == (6, 4, 2, 0)
    want = {i: v for i, v in TARGET.items() if i not in (8, 9)}
    want.update({0: ("n0!", 0), 1: ("n1!", 1), 2: SOURCE[2], 3: SOURCE[3]})
    assert rows_of(lh) == want
    assert calls == {"clauses": 1, "keys": 0}


def test_merge_inside_a_transaction(spark, lh):
    v = lh.version
    text = (
        "MERGE INTO s.t USING s.u ON t.id = u.id "
        "WHEN MATCHED AND u.qty < 5 THEN DELETE WHEN NOT MATCHED THEN INSERT *"
    )
    txn = lh.begin()
    assert run(spark, lh, text, txn=txn) == (2, 0, 1, 1)
    assert lh.version == v
    txn.rollback()
    assert rows_of(lh) == TARGET
    with lhs.SqlSession(lh, spark) as session:
        session.sql("BEGIN")
        session.sql(text)
        session.sql("UPDATE s.u SET qty = 0 WHERE id = 2")
        # the session's own writes are seen: 2 now matches with qty 0 and is
        # deleted, 3 (deleted) is inserted, 12 (inserted) matches and stays
        r = session.sql(text).collect()[0]
        assert (r.num_deleted_rows, r.num_inserted_rows) == (1, 1)
        session.sql("COMMIT")
    assert lh.version == v + 1
    want = {i: x for i, x in TARGET.items() if i != 2}
    want[3] = SOURCE[3]
    want[12] = SOURCE[12]
    assert rows_of(lh) == want


def test_source_keys_the_key_merge_refuses_get_sql_semantics(spark, lh, calls):
    src = "(SELECT * FROM s.u UNION ALL SELECT 50, 'x', 1 UNION ALL SELECT 50, 'y', 2)"
    got = run(
        spark,
        lh,
        f"MERGE INTO s.t USING {src} AS s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
    )
    assert got == (5, 2, 0, 3)  # two new rows with one key: both inserted, as in SQL
    assert calls == {"clauses": 1, "keys": 1}
    after = lh.read("s.t")
    assert sorted(r["name"] for r in after.to_pylist() if r["id"] == 50) == ["x", "y"]
    # a target row two source rows would change: refused, nothing written
    v = lh.version
    twice = "(SELECT * FROM s.u UNION ALL SELECT 2, 'z', 1)"
    with pytest.raises(ValueError, match="several source rows matched the same target row"):
        lhs.sql(
            lh,
            spark,
            f"MERGE INTO s.t USING {twice} AS s ON t.id = s.id WHEN MATCHED THEN UPDATE SET *",
        )
    assert lh.version == v
    assert lh.read("s.t").equals(after)
    # a null key matches nothing (the key merge refuses it; SQL does not)
    nulls = "(SELECT * FROM s.u UNION ALL SELECT CAST(NULL AS BIGINT), 'n', 1)"
    got = run(
        spark,
        lh,
        f"MERGE INTO s.t USING {nulls} AS s ON t.id = s.id WHEN MATCHED THEN DELETE",
    )
    assert got == (3, 0, 3, 0)
    assert calls == {"clauses": 3, "keys": 3}
    ids = sorted(r["id"] for r in lh.read("s.t").to_pylist())
    assert ids == sorted([i for i in TARGET if i not in SOURCE] + [50, 50])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "MERGE INTO s.t USING s.u ON t.id = u.id WHEN NOT MATCHED BY SOURCE THEN UPDATE SET *",
            "UPDATE SET \\* is not allowed",
        ),
        (
            "MERGE INTO s.t USING s.u ON t.id = u.id "
            "WHEN NOT MATCHED BY SOURCE AND u.qty > 1 THEN DELETE",
            "sees only the target's columns",
        ),
        (
            "MERGE INTO s.nope USING s.u ON nope.id = u.id WHEN MATCHED THEN DELETE",
            "not a lakehouse table",
        ),
        (
            "MERGE INTO s.t USING s.u ON t.id = u.id WHEN MATCHED THEN UPDATE SET nope = 1",
            "no column 'nope'",
        ),
        (
            "MERGE INTO s.t USING s.u ON t.id = u.nope WHEN MATCHED THEN DELETE",
            "no column 'nope'",
        ),
        (
            "MERGE INTO s.t USING s.u ON t.id = u.id "
            "WHEN MATCHED AND u.id IN (SELECT 1) THEN DELETE",
            "unsupported in lakehouse SQL: a subquery",
        ),
        (
            "MERGE INTO s.t USING s.u ON t.id = u.id "
            "WHEN NOT MATCHED THEN INSERT (id, qty) VALUES (u.id)",
            "2 columns but gives 1 values",
        ),
        (
            "MERGE INTO s.t USING s.u ON t.id = u.id "
            "WHEN NOT MATCHED THEN INSERT (id, qty) VALUES (u.id, u.name)",
            "column 'qty'",
        ),
        (
            "MERGE INTO s.t USING s.t ON t.id = t.id WHEN MATCHED THEN DELETE",
            "both called 't'",
        ),
        (
            "MERGE INTO s.t VERSION AS OF 1 USING s.u ON t.id = u.id WHEN MATCHED THEN DELETE",
            "unsupported in lakehouse SQL: .*at a version",
        ),
    ],
)
def test_bad_merges_raise_before_anything_is_written(spark, lh, text, message):
    v = lh.version
    with pytest.raises(ValueError, match=message):
        lhs.sql(lh, spark, text)
    assert lh.version == v
    assert rows_of(lh) == TARGET
