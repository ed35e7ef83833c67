"""Spark writes carry no Parquet field ids (``parquet.field.id`` column metadata).

Spark writes a StructField's ``parquet.field.id`` metadata as the Parquet field id
(``spark.sql.parquet.fieldId.write.enabled``, on by default), and Iceberg readers
prefer a file's field ids over the name mapping ``write_metadata`` gives them. The
DataFrames here carry ids in the reverse order of the table's column ids: every
file written (Spark's JVM writer for flat tables, the Python writer for a nested
column) must have none, and pyiceberg must read the same rows as the lakehouse.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.table import StaticTable
from pyspark.sql import types as T

import lakehouse
import lakehouse.spark as lhs
from lakehouse.iceberg import write_metadata
from lakehouse.model import FIELD_ID_KEY
from lakehouse.spark.writer import drop_field_ids

pytest_plugins = ["spark_fixtures"]
pytestmark = pytest.mark.spark

FILES_ONLY = {"inline.max_rows": "0", "compaction.auto": "false"}
FLAT = pa.schema([("a", pa.int64()), ("b", pa.int64()), ("c", pa.string())])
NESTED = pa.schema([("a", pa.int64()), ("s", pa.struct([("x", pa.int32()), ("y", pa.int32())]))])


def _ids(i: int, **other: str) -> dict[str, Any]:
    return {"parquet.field.id": i, **other}


FLAT_DF = T.StructType(
    [
        T.StructField("a", T.LongType(), True, _ids(3)),
        T.StructField("b", T.LongType(), True, _ids(2, comment="the b")),
        T.StructField("c", T.StringType(), True, _ids(1)),
    ]
)
NESTED_DF = T.StructType(
    [
        T.StructField("a", T.LongType(), True, _ids(2)),
        T.StructField(
            "s",
            T.StructType(
                [
                    T.StructField("x", T.IntegerType(), True, _ids(12)),
                    T.StructField("y", T.IntegerType(), True, _ids(11)),
                ]
            ),
            True,
            _ids(1),
        ),
    ]
)


@pytest.fixture
def lh(tmp_path: Path) -> Any:
    h = lakehouse.open(str(tmp_path / "lh"), kv_options={"fsync": False})
    yield h
    h.close()


def _files(lh: Any) -> list[Path]:
    base = Path(lh.data_location()[0][len("file://") :])
    files = sorted(base.rglob("*.parquet"))
    assert files
    return files


def _has_ids(t: pa.DataType) -> bool:
    return pa.types.is_struct(t) and any(
        (f.metadata and FIELD_ID_KEY in f.metadata) or _has_ids(f.type) for f in t
    )


def _check(lh: Any, table: str) -> None:
    for f in _files(lh):
        schema = pq.read_schema(f)
        assert not any(
            (fld.metadata and FIELD_ID_KEY in fld.metadata) or _has_ids(fld.type) for fld in schema
        ), f"{f} carries field ids: {schema}"
    got = StaticTable.from_metadata(write_metadata(lh, table)).scan().to_arrow()
    assert got.sort_by("a").to_pylist() == lh.read(table).sort_by("a").to_pylist()


def test_drop_field_ids_keeps_other_metadata(spark: Any) -> None:
    df = spark.createDataFrame([(1, 2, "x")], FLAT_DF)
    out = drop_field_ids(df)
    assert [f.metadata for f in out.schema.fields] == [{}, {"comment": "the b"}, {}]
    assert drop_field_ids(out) is out
    nested = drop_field_ids(spark.createDataFrame([(1, (2, 3))], NESTED_DF))
    s = nested.schema["s"]
    assert isinstance(s.dataType, T.StructType)
    assert s.metadata == {} and [f.metadata for f in s.dataType.fields] == [{}, {}]


@pytest.mark.parametrize("layout", ["plain", "partitioned_sorted"])
def test_jvm_writes_have_no_field_ids(spark: Any, lh: Any, layout: str) -> None:
    extra: dict[str, Any] = {}
    if layout == "partitioned_sorted":
        extra = {"partition_by": ["c"], "sort_keys": ["b"]}
    with lh.begin() as t:
        t.create_namespace("n")
        t.create_table("n.t", FLAT, FILES_ONLY, **extra)
    rows = [(i, 100 + i, f"c{i % 3}") for i in range(30)]
    lhs.write(lh, spark.createDataFrame(rows, FLAT_DF), "n.t")
    new = [(i, 1000 + i, f"c{i % 3}") for i in range(5)]
    lhs.write(lh, spark.createDataFrame(new, FLAT_DF), "n.t", mode="overwrite", where="a < 5")
    _check(lh, "n.t")
    got = lh.read("n.t").sort_by("a")
    assert got.column("b").to_pylist() == [1000 + i if i < 5 else 100 + i for i in range(30)]


def test_python_writes_have_no_field_ids(spark: Any, lh: Any) -> None:
    with lh.begin() as t:
        t.create_namespace("n")
        t.create_table("n.t", NESTED, FILES_ONLY)  # a struct column: the Python writer
    rows = [(i, (i, -i)) for i in range(20)]
    lhs.write(lh, spark.createDataFrame(rows, NESTED_DF), "n.t")
    _check(lh, "n.t")
    assert lh.read("n.t").sort_by("a").column("s").to_pylist()[:2] == [
        {"x": 0, "y": 0},
        {"x": 1, "y": -1},
    ]
