"""A Spark delete whose condition names a missing column (issue 19, part 8).

The error is a short ``ValueError`` naming the table and the column, raised on
the driver before any job, without pyspark's error log of the failed
analysis (the exception with its JVM stack), and its suggestions are the
table's columns, never the lakehouse's internal ``_lh_file``/``_lh_row``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakehouse

pytest.importorskip("pyspark", reason="pyspark is not installed (the spark extra)")
from pyspark.sql import functions as F

import lakehouse.spark as lhs

pytest_plugins = ["spark_fixtures"]
pytestmark = pytest.mark.spark

ROWS = pa.table({"x": [1, 2, 3], "name": ["a", "b", "c"]})


@pytest.fixture
def lh(tmp_path: Path) -> Iterator[lakehouse.Lakehouse]:
    with lakehouse.open(str(tmp_path / "lh")) as lh:
        with lh.begin() as txn:
            txn.create_namespace("s")
            txn.create_table("s.t", ROWS.schema)
        lh.append("s.t", ROWS)
        yield lh


def _quiet(capfd: pytest.CaptureFixture[str]) -> None:
    out, err = capfd.readouterr()
    for text in (out, err):
        assert "QueryContextLogger" not in text
        assert "UNRESOLVED_COLUMN" not in text
        assert "Traceback" not in text


@pytest.mark.parametrize(
    ("condition", "missing", "hint"),
    [
        ("nosuch = 1", "nosuch", None),
        ("_lh_ro > 0", "_lh_ro", None),  # close to an internal column: not suggested
        ("x > 0 AND nme = 'a'", "nme", "'name'"),
        ("exists(array(x), v -> v > 0) AND colour = 'red'", "colour", None),
    ],
)
def test_delete_naming_a_missing_column(
    spark: Any,
    lh: lakehouse.Lakehouse,
    capfd: pytest.CaptureFixture[str],
    condition: str,
    missing: str,
    hint: str | None,
) -> None:
    before = lh.version
    capfd.readouterr()
    with pytest.raises(ValueError) as info:
        lhs.delete(lh, spark, "s.t", condition)
    msg = str(info.value)
    assert f"s.t has no column {missing!r}" in msg and "_lh_row" not in msg
    assert "_lh_file" not in msg and len(msg.splitlines()) == 1
    if hint is not None:
        assert f"did you mean {hint}?" in msg
    _quiet(capfd)
    assert lh.version == before and lh.read("s.t").equals(ROWS)


def test_a_column_condition_is_checked_by_spark_quietly(
    spark: Any, lh: lakehouse.Lakehouse, capfd: pytest.CaptureFixture[str]
) -> None:
    capfd.readouterr()
    with pytest.raises(ValueError) as info:
        lhs.delete(lh, spark, "s.t", F.col("_lh_ro") > 0)
    msg = str(info.value)
    assert "_lh_ro" in msg and "_lh_row" not in msg and "_lh_file" not in msg
    _quiet(capfd)
    assert lh.read("s.t").equals(ROWS)


def test_known_columns_still_delete(spark: Any, lh: lakehouse.Lakehouse) -> None:
    # Spark resolves names case-insensitively by default, and so does the check;
    # lambda variables and double-quoted strings are not columns
    assert lhs.delete(lh, spark, "s.t", 'X = 1 OR name = "b"') == 2
    assert lhs.delete(lh, spark, "s.t", "exists(array(x), v -> v = 3)") == 1
    assert lh.read("s.t").num_rows == 0
