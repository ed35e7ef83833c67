"""``merge`` with a source lacking some of the table's columns (issue 19, part 4).

Matched rows keep the values of the columns the source does not have; only the
source's columns are updated. Inserted rows get nulls there, and a missing
non-nullable column is refused (naming it) when a row would be inserted, with
nothing written and the transaction left as it was. The same table of cases
runs through ``txn.merge`` and the Spark merge (``lakehouse.spark.merge``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakehouse

pytest_plugins = ["spark_fixtures"]

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("a", pa.string()),
        pa.field("b", pa.int64(), nullable=False),
        pa.field("c", pa.float64()),
    ]
)
TARGET = pa.table(
    {"id": [1, 2, 3], "a": ["x", "y", "z"], "b": [10, 20, 30], "c": [1.5, None, 3.5]},
    schema=SCHEMA,
)


def _expected(source: dict[str, list[Any]], when_matched: str, when_not_matched: str) -> list:
    """What the merge must leave, computed row by row from the target and the source."""
    rows = {r["id"]: dict(r) for r in TARGET.to_pylist()}
    for i, key in enumerate(source["id"]):
        given = {name: values[i] for name, values in source.items()}
        if key in rows:
            if when_matched == "update":
                rows[key].update(given)  # only the source's columns change
            elif when_matched == "delete":
                del rows[key]
        elif when_not_matched == "insert":
            rows[key] = {n: given.get(n) for n in SCHEMA.names}
    return sorted(rows.values(), key=lambda r: r["id"])


# (source columns, when_matched, when_not_matched); every source has `id` and `b`
# where rows may be inserted (b may not be null)
CASES = [
    ({"id": [2, 3], "a": ["Y", "Z"]}, "update", "ignore"),
    ({"id": [1, 4], "b": [11, 44]}, "update", "insert"),
    ({"id": [1, 4], "a": ["X", "W"], "b": [11, 44]}, "update", "insert"),
    ({"id": [3], "c": [9.0]}, "update", "ignore"),
    ({"id": [2, 5], "b": [22, 55]}, "delete", "insert"),
    ({"id": [2, 5], "b": [22, 55]}, "ignore", "insert"),
    ({"id": [1, 2, 3], "a": [None, "q", None]}, "update", "insert"),  # all matched
    (
        {"id": [1, 2, 3, 4], "a": ["p", "q", "r", "s"], "b": [1, 2, 3, 4], "c": [0.0] * 4},
        "update",
        "insert",
    ),
]


@pytest.fixture
def lh(tmp_path: Path) -> Iterator[lakehouse.Lakehouse]:
    with lakehouse.open(str(tmp_path / "lh")) as lh:
        with lh.begin() as txn:
            txn.create_namespace("s")
            txn.create_table("s.t", SCHEMA)
        lh.append("s.t", TARGET)
        yield lh


def _source(cols: dict[str, list[Any]]) -> pa.Table:
    return pa.table({n: pa.array(v, SCHEMA.field(n).type) for n, v in cols.items()})


@pytest.mark.parametrize(("source", "when_matched", "when_not_matched"), CASES)
def test_merge_updates_only_the_source_columns(
    lh: lakehouse.Lakehouse, source: dict[str, list[Any]], when_matched: str, when_not_matched: str
) -> None:
    lh.merge(
        "s.t", _source(source), "id", when_matched=when_matched, when_not_matched=when_not_matched
    )
    got = lh.read("s.t").sort_by("id").to_pylist()
    assert got == _expected(source, when_matched, when_not_matched)


def test_missing_not_null_column_refused_only_when_a_row_is_inserted(
    lh: lakehouse.Lakehouse,
) -> None:
    before = lh.version
    with lh.begin() as txn:
        with pytest.raises(ValueError, match=r"'b'.*may not be null"):
            txn.merge("s.t", _source({"id": [2, 9], "a": ["Y", "N"]}), "id")
        # the failed merge left nothing in the transaction: its commit changes nothing
        assert txn.read("s.t").sort_by("id").equals(TARGET)
    assert lh.read("s.t").sort_by("id").equals(TARGET)
    assert lh.version in (before, before + 1)
    # the same source without the row to insert is fine
    lh.merge("s.t", _source({"id": [2], "a": ["Y"]}), "id", when_not_matched="ignore")
    assert lh.read("s.t", where="id = 2").to_pylist() == [{"id": 2, "a": "Y", "b": 20, "c": None}]


def test_partial_merge_is_an_update_in_the_change_feed(lh: lakehouse.Lakehouse) -> None:
    v = lh.version
    lh.merge("s.t", _source({"id": [3], "a": ["Z2"]}), "id")
    changes = lh.changes("s.t", v + 1)
    after = [r for r in changes.to_pylist() if r["_change_type"] in ("insert", "update_postimage")]
    assert [(r["id"], r["a"], r["b"], r["c"]) for r in after] == [(3, "Z2", 30, 3.5)]


@pytest.mark.spark
@pytest.mark.parametrize(("source", "when_matched", "when_not_matched"), CASES[:5])
def test_spark_merge_updates_only_the_source_columns(
    spark: Any,
    lh: lakehouse.Lakehouse,
    source: dict[str, list[Any]],
    when_matched: str,
    when_not_matched: str,
) -> None:
    import lakehouse.spark as lhs

    df = spark.createDataFrame(_source(source).to_pandas())
    lhs.merge(lh, df, "s.t", "id", when_matched=when_matched, when_not_matched=when_not_matched)
    got = lh.read("s.t").sort_by("id").to_pylist()
    assert got == _expected(source, when_matched, when_not_matched)


@pytest.mark.spark
def test_spark_merge_missing_not_null_column_refused(spark: Any, lh: lakehouse.Lakehouse) -> None:
    import lakehouse.spark as lhs

    df = spark.createDataFrame(_source({"id": [2, 9], "a": ["Y", "N"]}).to_pandas())
    with pytest.raises(ValueError, match=r"'b'.*may not be null"):
        lhs.merge(lh, df, "s.t", "id")
    assert lh.read("s.t").sort_by("id").equals(TARGET)
