"""lakehouse/iceberg/partitions.py: partition specs, types and records and sort orders,
checked against pyiceberg 0.12's transforms."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from iceberg_fixtures import FILES_ONLY, lakehouse_with_namespace
from pyiceberg.partitioning import PartitionSpec as IcebergSpec
from pyiceberg.schema import Schema
from pyiceberg.table.sorting import SortOrder
from pyiceberg.types import (
    DateType,
    TimestampType,
    TimestamptzType,
    TimeType,
)

import lakehouse
from lakehouse.iceberg import types as it
from lakehouse.model import DataFile, assign_columns
from lakehouse.partition import PartitionField, PartitionSpec, Transform

UTC = dt.UTC


@pytest.fixture
def lh(tmp_path: Path) -> Iterator[lakehouse.Lakehouse]:
    yield from lakehouse_with_namespace(tmp_path)


# -- partition specs and sort orders ---------------------------------------------------------
PART_SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64(), nullable=False),
        ("ts", pa.timestamp("us", "UTC")),
        ("lts", pa.timestamp("ms")),
        ("day", pa.date32()),
        ("country", pa.string()),
        ("dec", pa.decimal128(9, 2)),
        ("n", pa.int32()),
        ("tns", pa.timestamp("ns")),
        ("t", pa.time64("us")),
        ("bin", pa.binary()),
    ]
)
PARTITION_BY = [
    "country",
    "day(ts)",
    "bucket(4, k)",
    "truncate(2, country)",
    "month(lts)",
    "year(day)",
    "hour(ts)",
    "truncate(10, dec)",
    "truncate(5, n)",
    "day",
    "dec",
    "t",
    "bucket(3, bin)",
    "day(tns)",
]
PART_ROWS = {
    "k": [1, 1],
    "ts": [dt.datetime(1969, 12, 31, 23, 30, tzinfo=UTC)] * 2,
    "lts": [dt.datetime(2024, 2, 29, 12)] * 2,
    "day": [dt.date(1999, 12, 31)] * 2,
    "country": ["NL", "NL"],
    "dec": [Decimal("-12.34")] * 2,
    "n": [-3, -3],
    "tns": [dt.datetime(2024, 1, 1)] * 2,
    "t": [dt.time(1, 2, 3, 4)] * 2,
    "bin": [b"\x01\x02"] * 2,
}


def test_partition_spec_and_records_match_pyiceberg(lh: lakehouse.Lakehouse) -> None:
    with lh.begin() as t:
        t.create_table(
            "ns.t", PART_SCHEMA, FILES_ONLY, partition_by=PARTITION_BY, sort_keys=["k", "ts"]
        )
    with lh.begin() as t:
        t.append("ns.t", pa.table(PART_ROWS, PART_SCHEMA))
    d = lh.describe_table("ns.t")
    (f,) = lh.list_data_files("ns.t")
    spec = d.spec
    schema_json, omitted, _ = it.iceberg_schema(d.columns, d.schema)
    assert omitted == ["tns"]
    ischema = Schema.model_validate({**schema_json, "schema-id": 0})
    sj = it.partition_spec_json(spec, d.columns, d.schema)
    assert [x["name"] for x in sj["fields"]] == [pf.name for pf in spec.fields][
        :-1
    ]  # day(tns) left out
    ispec = IcebergSpec.model_validate(sj)
    assert ispec.spec_id == spec.spec_id
    ptype = it.partition_type(spec, d.columns, d.schema)
    iptype = ispec.partition_type(ischema)
    assert [(p["field-id"], p["name"], p["type"]) for p in ptype] == [
        (x.field_id, x.name, str(x.field_type)) for x in iptype.fields
    ]
    assert {p["name"]: p["type"] for p in ptype}["ts_day"] == "date"
    record = it.partition_record(spec, f, d.columns, d.schema)
    assert list(record) == [p["name"] for p in ptype]
    cached = it.file_partition(d, f)
    assert cached == record and cached is not it.file_partition(d, f)  # a copy each time
    cached.clear()
    assert it.file_partition(d, f) == record
    # pyiceberg's transforms of the rows' values, given as Iceberg's Python values
    py = pa.table(PART_ROWS, PART_SCHEMA).slice(0, 1).to_pylist()[0]
    for pf in ispec.fields:
        src = ischema.find_field(pf.source_id)
        value = py[src.name]
        if isinstance(src.field_type, TimestampType | TimestamptzType):
            value = it.long_value("timestamp", value)
        elif isinstance(src.field_type, DateType):
            value = it.long_value("date", value)
        elif isinstance(src.field_type, TimeType):
            value = it.long_value("time", value)
        want = pf.transform.transform(src.field_type)(value)
        assert record[pf.name] == want, pf.name
    assert (
        it.partition_spec_json(spec)["fields"][-1]["transform"] == "day"
    )  # all fields without columns
    # unpartitioned spec 0
    unpartitioned = it.partition_spec_json(PartitionSpec(0))
    assert unpartitioned == {"spec-id": 0, "fields": []}
    assert IcebergSpec.model_validate(unpartitioned).is_unpartitioned()
    orders, default = it.sort_orders(d)
    assert default == 1
    parsed = [SortOrder.model_validate(o) for o in orders]
    assert parsed[0].is_unsorted
    assert [(x.source_id, x.direction.value, x.null_order.value) for x in parsed[1].fields] == [
        (1, "asc", "nulls-first"),
        (2, "asc", "nulls-first"),
    ]


def test_sort_orders_stop_at_a_key_iceberg_cannot_describe(lh: lakehouse.Lakehouse) -> None:
    with lh.begin() as t:
        t.create_table("ns.t", PART_SCHEMA)
        t.create_table("ns.u", PART_SCHEMA, sort_keys=["country", "tns", "k"])
        t.create_table("ns.v", PART_SCHEMA, sort_keys=["tns", "k"])
    assert it.sort_orders(lh.describe_table("ns.t")) == ([{"order-id": 0, "fields": []}], 0)
    orders, default = it.sort_orders(lh.describe_table("ns.u"))
    assert default == 1 and [x["source-id"] for x in orders[1]["fields"]] == [5]
    assert it.sort_orders(lh.describe_table("ns.v"))[1] == 0


def test_partition_record_null_and_values_override() -> None:
    schema = pa.schema([("d", pa.date32()), ("x", pa.decimal128(6, 2)), ("ts", pa.timestamp("ms"))])
    cols, _ = assign_columns(schema)
    spec = PartitionSpec(
        1,
        (
            PartitionField(1, Transform("identity"), "d", 1000),
            PartitionField(2, Transform("truncate", 5), "x_trunc", 1001),
            PartitionField(3, Transform("identity"), "ts", 1002),
            PartitionField(7, Transform("identity"), "gone", 1003),  # a dropped column
        ),
    )
    values = {"d": dt.date(1970, 1, 2), "x_trunc": Decimal("-0.05"), "ts": None}
    got = it.partition_record(spec, DataFile("x"), cols, schema, values)
    assert got == {"d": 1, "x_trunc": Decimal("-0.05"), "ts": None}
    assert [p["name"] for p in it.partition_type(spec, cols, schema)] == ["d", "x_trunc", "ts"]
    with pytest.raises(ValueError, match="'d'"):
        it.partition_record(spec, DataFile("x"), cols, schema, {"d": "soon"})
