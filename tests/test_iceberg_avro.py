"""Iceberg manifests, manifest lists and delete files (lakehouse.iceberg.avro,
lakehouse.iceberg.files), read back by pyiceberg and fastavro.

The oracle is pyiceberg's own reader (which resolves manifest fields by field
id, so a missing or wrong id loses the value) and its single-value
serialization (``pyiceberg.conversions.to_bytes``) for the partition
summaries; a last test reads a whole hand-built v2 table through
``StaticTable`` and compares its rows with the Parquet rows minus the
positional deletes.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import io
import json
import uuid
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from iceberg_fixtures import run_duckdb
from pyiceberg.conversions import to_bytes
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import (
    DATA_FILE_TYPE,
    MANIFEST_LIST_FILE_SCHEMAS,
    DataFileContent,
    ManifestContent,
    ManifestEntryStatus,
    read_manifest_list,
)
from pyiceberg.table import StaticTable
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IntegerType,
    LongType,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)
from pyiceberg.utils.schema_conversion import AvroSchemaConversion
from pyroaring import BitMap

from lakehouse.iceberg import avro, files

SCHEMA_JSON: dict[str, Any] = {
    "type": "struct",
    "schema-id": 0,
    "fields": [
        {"id": 1, "name": "id", "required": False, "type": "long"},
        {"id": 2, "name": "name", "required": False, "type": "string"},
        {"id": 3, "name": "day", "required": False, "type": "date"},
    ],
}
UNPARTITIONED: dict[str, Any] = {"spec-id": 0, "fields": []}

# a partition type with one field of each kind a spec can produce
PARTITION_FIELDS: list[dict[str, Any]] = [
    {"field-id": 1000, "name": "day", "type": "date"},
    {"field-id": 1001, "name": "id_bucket", "type": "int"},
    {"field-id": 1002, "name": "name-trunc", "type": "string"},  # not an Avro name
    {"field-id": 1003, "name": "ts", "type": "timestamp"},
    {"field-id": 1004, "name": "amount", "type": "decimal(9, 2)"},
    {"field-id": 1005, "name": "h1", "type": "fixed[4]"},
    {"field-id": 1006, "name": "h2", "type": "fixed[4]"},  # a second fixed[4]
    {"field-id": 1007, "name": "flag", "type": "boolean"},
    {"field-id": 1008, "name": "ratio", "type": "double"},
    {"field-id": 1009, "name": "big", "type": "long"},
    {"field-id": 1010, "name": "tz", "type": "timestamptz"},
    {"field-id": 1011, "name": "clock", "type": "time"},
    {"field-id": 1012, "name": "key", "type": "uuid"},
    {"field-id": 1013, "name": "ratio32", "type": "float"},
    {"field-id": 1014, "name": "blob", "type": "binary"},
    {"field-id": 1015, "name": "9wide", "type": "decimal(38,0)"},  # no Avro name either
]
# names that are no Avro names, escaped as Iceberg's Java writer does
ESCAPED = {"name-trunc": "name_x2Dtrunc", "9wide": "_9wide"}
PARTITION_ICEBERG_TYPES = [
    DateType(),
    IntegerType(),
    StringType(),
    TimestampType(),
    DecimalType(9, 2),
    FixedType(4),
    FixedType(4),
    BooleanType(),
    DoubleType(),
    LongType(),
    TimestamptzType(),
    TimeType(),
    UUIDType(),
    FloatType(),
    BinaryType(),
    DecimalType(38, 0),
]
SPEC: dict[str, Any] = {
    "spec-id": 3,
    "fields": [
        {"name": f["name"], "transform": "identity", "source-id": 1, "field-id": f["field-id"]}
        for f in PARTITION_FIELDS
    ],
}
PARTITIONS: list[dict[str, Any]] = [
    {
        "day": datetime.date(2024, 1, 2),
        "id_bucket": 7,
        "name-trunc": "ab",
        "ts": datetime.datetime(2024, 1, 2, 3, 4, 5, 6),
        "amount": decimal.Decimal("12.34"),
        "h1": b"\x00\x01\x02\x03",
        "h2": b"wxyz",
        "flag": True,
        "ratio": 0.5,
        "big": 1 << 40,
        "tz": datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.UTC),
        "clock": datetime.time(23, 59, 59, 999_999),
        "key": uuid.UUID(int=1 << 100),
        "ratio32": -0.25,
        "blob": b"\x00\xff",
        "9wide": decimal.Decimal(-(10**37)),
    },
    {
        "day": datetime.date(2023, 12, 31),
        "id_bucket": 3,
        "name-trunc": "zz",
        "ts": None,
        "amount": decimal.Decimal("-5.00"),
        "h1": b"\x09\x09\x09\x09",
        "h2": None,
        "flag": False,
        "ratio": float("nan"),
        "big": -1,
        "tz": datetime.datetime(1969, 12, 31, 23, 0, tzinfo=datetime.UTC),
        "clock": datetime.time(0, 0, 1),
        "key": uuid.UUID(int=3),
        "ratio32": None,
        "blob": b"",
        "9wide": decimal.Decimal(10**37 + 1),
    },
]


def iceberg_value(v: Any) -> Any:
    """A partition value as pyiceberg reads it back: dates as days, times and
    timestamps as microseconds."""
    if isinstance(v, datetime.datetime):
        epoch = datetime.datetime(1970, 1, 1, tzinfo=v.tzinfo)
        return (v - epoch) // datetime.timedelta(microseconds=1)
    if isinstance(v, datetime.date):
        return (v - datetime.date(1970, 1, 1)).days
    if isinstance(v, datetime.time):
        return ((v.hour * 60 + v.minute) * 60 + v.second) * 10**6 + v.microsecond
    return v


def metrics(seed: int) -> dict[str, Any]:
    return {
        "column_sizes": {1: 100 + seed, 2: 200 + seed},
        "value_counts": {1: 10 + seed, 2: 10 + seed, 3: 10 + seed},
        "null_value_counts": {1: 0, 2: seed, 3: 1},
        "nan_value_counts": {},
        "lower_bounds": {1: to_bytes(LongType(), seed), 2: b"a"},
        "upper_bounds": {1: to_bytes(LongType(), 100 + seed), 2: b"z" * (seed + 1)},
    }


def write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def manifest_and_row(
    path: str,
    entries: list[dict[str, Any]],
    *,
    content: str,
    fields: list[dict[str, Any]],
    spec: dict[str, Any],
    seq: int,
) -> tuple[bytes, dict[str, Any]]:
    """Writes a manifest of ``entries`` (added at snapshot ``seq``) to ``path``; returns
    its bytes and its manifest list row."""
    data = avro.manifest_bytes(
        entries=entries,
        content=content,
        partition_fields=fields,
        schema_json=SCHEMA_JSON,
        spec_json=spec,
    )
    write(Path(path), data)
    row = avro.manifest_file_for(
        entries,
        manifest_path=path,
        manifest_length=len(data),
        partition_spec_id=spec["spec-id"],
        content=content,
        sequence_number=seq,
        added_snapshot_id=seq,
        partition_fields=fields,
    )
    return data, row


def write_manifest(
    tmp_path: Path,
    entries: list[dict[str, Any]],
    *,
    content: str,
    fields: list[dict[str, Any]],
    spec: dict[str, Any],
    seq: int,
    parent_id: int | None,
) -> tuple[bytes, str, str]:
    """Writes a manifest of ``entries`` and the manifest list of snapshot ``seq`` naming it;
    returns the manifest's bytes, its path and the list's path."""
    mpath = str(tmp_path / f"{seq}-m0.avro")
    data, mf = manifest_and_row(mpath, entries, content=content, fields=fields, spec=spec, seq=seq)
    lpath = write(
        tmp_path / f"snap-{seq}.avro",
        avro.manifest_list_bytes([mf], snapshot_id=seq, parent_id=parent_id, sequence_number=seq),
    )
    return data, mpath, lpath


def entries_of(manifest_path: str, manifest_list: str) -> tuple[Any, list[Any]]:
    io_ = PyArrowFileIO()
    manifests = list(read_manifest_list(io_.new_input(manifest_list)))
    [m] = [m for m in manifests if m.manifest_path == manifest_path]
    return m, m.fetch_manifest_entry(io_, discard_deleted=False)


# -- schemas -------------------------------------------------------------------------
def walk_fields(schema: Any) -> list[dict[str, Any]]:
    """Every record field of an Avro schema, nested ones included."""
    out: list[dict[str, Any]] = []

    def visit(t: Any) -> None:
        if isinstance(t, list):
            for b in t:
                visit(b)
        elif isinstance(t, dict):
            if t.get("type") == "record":
                for f in t["fields"]:
                    out.append(f)
                    visit(f["type"])
            elif t.get("type") == "array":
                assert "element-id" in t or t.get("logicalType") == "map", t
                visit(t["items"])

    visit(schema)
    return out


def header(data: bytes) -> tuple[dict[str, Any], dict[str, str]]:
    reader = fastavro.reader(io.BytesIO(data))
    meta = {k: v.decode() if isinstance(v, bytes) else v for k, v in reader.metadata.items()}
    return json.loads(meta["avro.schema"]), meta


def test_manifest_schema_in_the_file_is_the_specs_with_every_field_id() -> None:
    df = avro.data_file(file_path="/a.parquet", record_count=1, file_size_in_bytes=1)
    data = avro.manifest_bytes(
        entries=[avro.entry(df)],
        content="data",
        partition_fields=PARTITION_FIELDS,
        schema_json=SCHEMA_JSON,
        spec_json=SPEC,
    )
    schema, _ = header(data)
    fields = walk_fields(schema)
    assert all("field-id" in f for f in fields), [f["name"] for f in fields if "field-id" not in f]

    # the file's schema, as pyiceberg reads it (by field id), is the spec's
    got = AvroSchemaConversion().avro_to_iceberg(schema)
    assert [(f.field_id, f.name, f.required) for f in got.fields] == [
        (0, "status", True),
        (1, "snapshot_id", False),
        (3, "sequence_number", False),
        (4, "file_sequence_number", False),
        (2, "data_file", True),
    ]
    data_file: Any = got.find_field(2).field_type
    assert isinstance(data_file, StructType)
    expected = DATA_FILE_TYPE[2]
    assert [f.field_id for f in data_file.fields] == [f.field_id for f in expected.fields]
    for mine, spec in zip(data_file.fields, expected.fields, strict=True):
        assert (mine.name, mine.required) == (spec.name, spec.required)
        if mine.field_id == 135:  # the spec says list<int>; pyiceberg declares list<long>
            assert str(mine.field_type) == "list<int>"
        elif mine.field_id != 102:
            assert mine.field_type == spec.field_type, mine.name
    partition: Any = data_file.field(102).field_type  # type: ignore[union-attr]
    # a name that is no Avro name is escaped as Java does (pyiceberg reads the
    # escaped name; Java restores it from "iceberg-field-name")
    assert [(f.field_id, f.name, f.field_type, f.required) for f in partition.fields] == [
        (f["field-id"], ESCAPED.get(f["name"], f["name"]), t, False)
        for f, t in zip(PARTITION_FIELDS, PARTITION_ICEBERG_TYPES, strict=True)
    ]
    originals = {f.get("iceberg-field-name") for f in fields if f["field-id"] >= 1000}
    assert originals == {None, *ESCAPED}


def test_manifest_list_schema_in_the_file_is_the_specs() -> None:
    data = avro.manifest_list_bytes([], snapshot_id=1, parent_id=None, sequence_number=1)
    schema, meta = header(data)
    assert all("field-id" in f for f in walk_fields(schema))
    got = AvroSchemaConversion().avro_to_iceberg(schema)

    def shape(fields: Any) -> list[tuple[int, str, str, bool]]:
        return [(f.field_id, f.name, str(f.field_type), f.required) for f in fields]

    assert shape(got.fields) == shape(MANIFEST_LIST_FILE_SCHEMAS[2].fields)
    assert meta["snapshot-id"] == "1"
    assert meta["parent-snapshot-id"] == "null"


# -- manifests through pyiceberg --------------------------------------------------------
def test_data_manifest_unpartitioned_round_trips_through_pyiceberg(tmp_path: Path) -> None:
    added = avro.data_file(
        file_path="/data/a.parquet", record_count=10, file_size_in_bytes=1000, **metrics(0)
    )
    existing = avro.data_file(
        file_path="s3://b/data/b.parquet",
        record_count=11,
        file_size_in_bytes=1100,
        split_offsets=[4, 500],
        sort_order_id=1,
        **metrics(1),
    )
    deleted = avro.data_file(file_path="/data/c.parquet", record_count=12, file_size_in_bytes=1200)
    entries = [
        avro.entry(added, snapshot_id=None, sequence_number=None, file_sequence_number=None),
        avro.entry(
            existing,
            status=avro.EXISTING,
            snapshot_id=3,
            sequence_number=3,
            file_sequence_number=4,
        ),
        avro.entry(
            deleted, status=avro.DELETED, snapshot_id=9, sequence_number=2, file_sequence_number=2
        ),
    ]
    data, mpath, lpath = write_manifest(
        tmp_path, entries, content="data", fields=[], spec=UNPARTITIONED, seq=9, parent_id=3
    )

    m, got = entries_of(mpath, lpath)
    assert m.manifest_length == len(data)
    assert m.partition_spec_id == 0
    assert m.content == ManifestContent.DATA
    assert (m.sequence_number, m.min_sequence_number, m.added_snapshot_id) == (9, 3, 9)
    assert (m.added_files_count, m.existing_files_count, m.deleted_files_count) == (1, 1, 1)
    assert (m.added_rows_count, m.existing_rows_count, m.deleted_rows_count) == (10, 11, 12)
    assert m.partitions == []

    assert [e.status for e in got] == [
        ManifestEntryStatus.ADDED,
        ManifestEntryStatus.EXISTING,
        ManifestEntryStatus.DELETED,
    ]
    # the ADDED entry inherits its snapshot and sequence numbers from the list
    assert [(e.snapshot_id, e.sequence_number, e.file_sequence_number) for e in got] == [
        (9, 9, 9),
        (3, 3, 4),
        (9, 2, 2),
    ]
    for e, src, seed in zip(got, (added, existing), (0, 1), strict=False):
        f = e.data_file
        assert f.content == DataFileContent.DATA
        assert f.file_path == src["file_path"]
        assert f.file_format.name == "PARQUET"
        assert (f.record_count, f.file_size_in_bytes) == (
            src["record_count"],
            src["file_size_in_bytes"],
        )
        for name, value in metrics(seed).items():
            assert dict(getattr(f, name) or {}) == value, name
    assert got[1].data_file.split_offsets == [4, 500]
    assert got[1].data_file.sort_order_id == 1
    assert got[0].data_file.split_offsets is None
    assert got[2].data_file.value_counts is None

    _, meta = header(data)
    assert json.loads(meta["schema"]) == SCHEMA_JSON
    assert meta["schema-id"] == "0"
    assert json.loads(meta["partition-spec"]) == []
    assert meta["partition-spec-id"] == "0"
    assert meta["format-version"] == "2"
    assert meta["content"] == "data"
    assert meta["avro.codec"] == "deflate"
    _, lmeta = header(Path(lpath).read_bytes())
    assert lmeta == {
        "avro.schema": lmeta["avro.schema"],
        "avro.codec": "deflate",
        "snapshot-id": "9",
        "parent-snapshot-id": "3",
        "sequence-number": "9",
        "format-version": "2",
    }


def test_partitioned_manifest_values_and_summaries(tmp_path: Path) -> None:
    entries = [
        avro.entry(
            avro.data_file(
                file_path=f"/data/{i}.parquet",
                record_count=5 + i,
                file_size_in_bytes=50,
                partition=p,
            )
        )
        for i, p in enumerate(PARTITIONS)
    ]
    _, mpath, lpath = write_manifest(
        tmp_path, entries, content="data", fields=PARTITION_FIELDS, spec=SPEC, seq=4, parent_id=None
    )
    m, got = entries_of(mpath, lpath)
    assert m.partition_spec_id == 3

    for e, p in zip(got, PARTITIONS, strict=True):
        assert e.data_file.spec_id == 3
        values = [e.data_file.partition[i] for i in range(len(PARTITION_FIELDS))]
        expect = [iceberg_value(p[f["name"]]) for f in PARTITION_FIELDS]
        nan_index = [f["name"] for f in PARTITION_FIELDS].index("ratio")
        if expect[nan_index] != expect[nan_index]:  # NaN
            assert values[nan_index] != values[nan_index]
            values[nan_index] = expect[nan_index] = None
        assert values == expect

    # summaries: nulls, NaN, and bounds in Iceberg's single-value serialization
    summaries = m.partitions
    assert len(summaries) == len(PARTITION_FIELDS)
    for f, t, s in zip(PARTITION_FIELDS, PARTITION_ICEBERG_TYPES, summaries, strict=True):
        values = [p[f["name"]] for p in PARTITIONS]
        live = [iceberg_value(v) for v in values if v is not None and v == v]
        assert s.contains_null == (None in values), f["name"]
        if f["type"] in ("double", "float"):
            assert s.contains_nan == any(v != v for v in values), f["name"]
        else:
            assert s.contains_nan is None
        assert s.lower_bound == to_bytes(t, min(live)), f["name"]
        assert s.upper_bound == to_bytes(t, max(live)), f["name"]


def test_delete_manifest_round_trips(tmp_path: Path) -> None:
    target = "/data/a.parquet"
    df = avro.data_file(
        file_path="/deletes/a-1.parquet",
        content=avro.POSITION_DELETES,
        record_count=2,
        file_size_in_bytes=300,
        partition={"day": datetime.date(2024, 1, 2)},
        lower_bounds={files.FILE_PATH_ID: target.encode()},
        upper_bounds={files.FILE_PATH_ID: target.encode()},
    )
    entries = [avro.entry(df, snapshot_id=6, sequence_number=5, file_sequence_number=6)]
    fields = PARTITION_FIELDS[:1]
    spec = {"spec-id": 1, "fields": SPEC["fields"][:1]}
    data, mpath, lpath = write_manifest(
        tmp_path, entries, content="deletes", fields=fields, spec=spec, seq=6, parent_id=5
    )
    m, [e] = entries_of(mpath, lpath)
    assert m.content == ManifestContent.DELETES
    assert m.min_sequence_number == 5
    assert (e.status, e.snapshot_id, e.sequence_number, e.file_sequence_number) == (
        ManifestEntryStatus.ADDED,
        6,
        5,
        6,
    )
    assert e.data_file.content == DataFileContent.POSITION_DELETES
    assert e.data_file.partition[0] == (datetime.date(2024, 1, 2) - datetime.date(1970, 1, 1)).days
    assert e.data_file.lower_bounds == {files.FILE_PATH_ID: target.encode()}
    _, meta = header(data)
    assert meta["content"] == "deletes"
    assert meta["partition-spec-id"] == "1"
    assert json.loads(meta["partition-spec"]) == spec["fields"]


def test_fastavro_reads_back_what_was_written() -> None:
    entries = [
        avro.entry(
            avro.data_file(
                file_path="/x.parquet",
                record_count=3,
                file_size_in_bytes=30,
                partition={"day": datetime.date(2024, 5, 6)},
                value_counts={1: 3},
                equality_ids=[1, 2],
            ),
            snapshot_id=2,
            sequence_number=2,
            file_sequence_number=2,
        )
    ]
    data = avro.manifest_bytes(
        entries=entries,
        content="data",
        partition_fields=PARTITION_FIELDS[:1],
        schema_json=SCHEMA_JSON,
        spec_json=SPEC,
    )
    [row] = list(fastavro.reader(io.BytesIO(data)))
    assert isinstance(row, dict)
    f = row["data_file"]
    assert row["status"] == avro.ADDED
    assert (row["snapshot_id"], row["sequence_number"], row["file_sequence_number"]) == (2, 2, 2)
    assert f["partition"] == {"day": datetime.date(2024, 5, 6)}
    assert f["value_counts"] == [{"key": 1, "value": 3}]
    assert f["equality_ids"] == [1, 2]
    assert f["lower_bounds"] is None and f["key_metadata"] is None


def test_bytes_are_deterministic() -> None:
    def manifest() -> bytes:
        df = avro.data_file(
            file_path="/a", record_count=1, file_size_in_bytes=2, partition=PARTITIONS[0]
        )
        return avro.manifest_bytes(
            entries=[avro.entry(df)],
            content="data",
            partition_fields=PARTITION_FIELDS,
            schema_json=SCHEMA_JSON,
            spec_json=SPEC,
        )

    assert manifest() == manifest()
    mf = avro.manifest_file_for(
        [],
        manifest_path="/m",
        manifest_length=1,
        partition_spec_id=0,
        content="data",
        sequence_number=1,
        added_snapshot_id=1,
        partition_fields=[],
    )
    one = avro.manifest_list_bytes([mf], snapshot_id=1, parent_id=None, sequence_number=1)
    assert one == avro.manifest_list_bytes([mf], snapshot_id=1, parent_id=None, sequence_number=1)
    bm = BitMap([9, 2, 700_000])
    assert files.position_deletes_bytes("/a", bm) == files.position_deletes_bytes("/a", BitMap(bm))


def test_entry_refuses_inheritance_for_existing_and_deleted() -> None:
    df = avro.data_file(file_path="/a", record_count=1, file_size_in_bytes=1)
    for status in (avro.EXISTING, avro.DELETED):
        with pytest.raises(ValueError, match="/a"):
            avro.entry(df, status=status, snapshot_id=1)
    with pytest.raises(ValueError, match="content"):
        avro.manifest_bytes(
            entries=[], content="rows", partition_fields=[], schema_json=SCHEMA_JSON, spec_json={}
        )


# -- Parquet files ---------------------------------------------------------------------
def test_position_deletes_file_has_the_specs_columns() -> None:
    data = files.position_deletes_bytes("s3://b/t/f.parquet", BitMap([7, 1, 4, 100_000]))
    pf = pq.ParquetFile(io.BytesIO(data))
    cols = [pf.schema.column(i) for i in range(2)]
    assert [(c.name, c.physical_type, c.max_definition_level) for c in cols] == [
        ("file_path", "BYTE_ARRAY", 0),  # required
        ("pos", "INT64", 0),
    ]
    arrow = pf.schema_arrow
    assert arrow.field("file_path").metadata[b"PARQUET:field_id"] == b"2147483546"
    assert arrow.field("pos").metadata[b"PARQUET:field_id"] == b"2147483545"
    t = pf.read()
    assert t.column("pos").to_pylist() == [1, 4, 7, 100_000]
    assert set(t.column("file_path").to_pylist()) == {"s3://b/t/f.parquet"}
    assert files.position_deletes_bytes("/f", BitMap()) != b""


def parquet_field_ids(schema: pa.Schema) -> dict[str, int]:
    """Every field's id, by dotted path (nested fields included)."""
    out: dict[str, int] = {}

    def visit(f: pa.Field, prefix: str) -> None:
        path = prefix + f.name
        out[path] = int((f.metadata or {})[b"PARQUET:field_id"])
        t = f.type
        if pa.types.is_struct(t):
            for i in range(t.num_fields):
                visit(t.field(i), path + ".")
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            # Parquet calls a list's child "element" whatever Arrow called it
            visit(t.value_field.with_name("element"), path + ".")
        elif pa.types.is_map(t):
            visit(t.key_field, path + ".")
            visit(t.item_field, path + ".")

    for f in schema:
        visit(f, "")
    return out


def test_materialised_file_has_field_ids_everywhere_and_the_same_rows() -> None:
    types = pytest.importorskip("lakehouse.iceberg.types")
    rows = pa.table(
        {
            "a": pa.array([1, 2, 3], pa.int64()),
            "s": pa.array(
                [{"x": 1, "y": "p"}, None, {"x": 3, "y": None}],
                pa.struct([("x", pa.int32()), ("y", pa.string())]),
            ),
            "l": pa.array([[1.5], [], None], pa.list_(pa.float64())),
            "m": pa.array([[("k", 1)], None, []], pa.map_(pa.string(), pa.int64())),
        }
    )
    ids = {"a": 4, "s": 7, "l": 9, "m": 11}
    data = files.materialised_bytes(rows, ids)
    assert data == files.materialised_bytes(rows, ids)
    pf = pq.ParquetFile(io.BytesIO(data))
    got = parquet_field_ids(pf.schema_arrow)
    expected = parquet_field_ids(types.field_ids_schema(rows.schema, ids))
    assert got == expected
    assert {got[n] for n in ids} == set(ids.values())
    assert len(set(got.values())) == len(got)  # nested ids are distinct too
    assert pf.read().to_pylist() == rows.to_pylist()


# -- a whole table through StaticTable and DuckDB --------------------------------------
DAYS = [datetime.date(2024, 1, 1), datetime.date(2024, 1, 2)]
DELETED = BitMap([1, 3])  # positions deleted from the first file at snapshot 2


@dataclasses.dataclass
class MiniTable:
    metadata: str
    tables: list[pa.Table]  # the two data files' rows
    paths: list[str]  # their locations
    delete_file: str

    def rows(self, snapshot: int) -> list[tuple[Any, ...]]:
        """The table's rows at ``snapshot`` (1 or 2), sorted."""
        out = []
        for k, t in enumerate(self.tables):
            for i, r in enumerate(t.to_pylist()):
                if not (k == 0 and i in DELETED and snapshot == 2):
                    out.append((r["id"], r["name"], r["day"]))
        return sorted(out)


def mini_table(tmp_path: Path) -> MiniTable:
    """Two data files of two days (snapshot 1: append, sequence 1), then a
    positional delete file deleting two rows of the first (snapshot 2,
    sequence 2, its manifest list reusing snapshot 1's data manifest); a
    hand-built v2 metadata JSON with a name mapping (the data files carry no
    field ids)."""
    days = DAYS
    tables = [
        pa.table(
            {
                "id": pa.array(range(k * 10, k * 10 + 5), pa.int64()),
                "name": [f"n{k}{i}" for i in range(5)],
                "day": pa.array([days[k]] * 5, pa.date32()),
            }
        )
        for k in range(2)
    ]
    data_dir = tmp_path / "data"
    meta_dir = tmp_path / "metadata"
    data_dir.mkdir()
    meta_dir.mkdir()
    paths = []
    for k, t in enumerate(tables):  # plain Parquet without field ids: the name mapping
        p = data_dir / f"f{k}.parquet"
        pq.write_table(t, p)
        paths.append(str(p))

    fields = [{"field-id": 1000, "name": "day", "type": "date"}]
    spec = {
        "spec-id": 0,
        "fields": [{"name": "day", "transform": "identity", "source-id": 3, "field-id": 1000}],
    }
    data_entries = [
        avro.entry(
            avro.data_file(
                file_path=paths[k],
                record_count=5,
                file_size_in_bytes=Path(paths[k]).stat().st_size,
                partition={"day": days[k]},
                value_counts={1: 5, 2: 5, 3: 5},
                null_value_counts={1: 0, 2: 0, 3: 0},
                lower_bounds={1: to_bytes(LongType(), k * 10)},
                upper_bounds={1: to_bytes(LongType(), k * 10 + 4)},
            )
        )
        for k in range(2)
    ]

    def manifest(
        name: str, entries: list[dict[str, Any]], content: str, seq: int
    ) -> dict[str, Any]:
        path = str(meta_dir / name)
        _, row = manifest_and_row(path, entries, content=content, fields=fields, spec=spec, seq=seq)
        return row

    m1 = manifest("1-m0.avro", data_entries, "data", 1)
    list1 = write(
        meta_dir / "snap-1.avro",
        avro.manifest_list_bytes([m1], snapshot_id=1, parent_id=None, sequence_number=1),
    )
    deleted = DELETED
    dpath = write(tmp_path / "deletes-f0.parquet", files.position_deletes_bytes(paths[0], deleted))
    delete_entry = avro.entry(
        avro.data_file(
            file_path=dpath,
            content=avro.POSITION_DELETES,
            record_count=len(deleted),
            file_size_in_bytes=Path(dpath).stat().st_size,
            partition={"day": days[0]},
            lower_bounds={files.FILE_PATH_ID: paths[0].encode()},
            upper_bounds={files.FILE_PATH_ID: paths[0].encode()},
        )
    )
    m2 = manifest("2-m0.avro", [delete_entry], "deletes", 2)
    list2 = write(
        meta_dir / "snap-2.avro",
        avro.manifest_list_bytes([m1, m2], snapshot_id=2, parent_id=1, sequence_number=2),
    )

    mapping = [{"field-id": f["id"], "names": [f["name"]]} for f in SCHEMA_JSON["fields"]]
    snapshots = [
        {
            "snapshot-id": 1,
            "sequence-number": 1,
            "timestamp-ms": 1_700_000_000_000,
            "manifest-list": list1,
            "summary": {"operation": "append"},
            "schema-id": 0,
        },
        {
            "snapshot-id": 2,
            "parent-snapshot-id": 1,
            "sequence-number": 2,
            "timestamp-ms": 1_700_000_001_000,
            "manifest-list": list2,
            "summary": {"operation": "delete"},
            "schema-id": 0,
        },
    ]
    metadata = {
        "format-version": 2,
        "table-uuid": str(uuid.UUID(int=7)),
        "location": str(tmp_path),
        "last-sequence-number": 2,
        "last-updated-ms": 1_700_000_001_000,
        "last-column-id": 3,
        "current-schema-id": 0,
        "schemas": [SCHEMA_JSON],
        "default-spec-id": 0,
        "partition-specs": [spec],
        "last-partition-id": 1000,
        "default-sort-order-id": 0,
        "sort-orders": [{"order-id": 0, "fields": []}],
        "properties": {"schema.name-mapping.default": json.dumps(mapping)},
        "current-snapshot-id": 2,
        "snapshots": snapshots,
        "snapshot-log": [
            {"snapshot-id": s["snapshot-id"], "timestamp-ms": s["timestamp-ms"]} for s in snapshots
        ],
        "metadata-log": [],
        "refs": {"main": {"snapshot-id": 2, "type": "branch"}},
    }
    mpath = write(meta_dir / "v2.metadata.json", json.dumps(metadata).encode())
    return MiniTable(mpath, tables, paths, dpath)


def test_static_table_reads_rows_minus_positional_deletes(tmp_path: Path) -> None:
    mini = mini_table(tmp_path)
    table = StaticTable.from_metadata(mini.metadata)

    def rows(scan: Any) -> list[tuple[Any, ...]]:
        t = scan.to_arrow()
        return sorted(zip(*(t.column(n).to_pylist() for n in ("id", "name", "day")), strict=True))

    assert rows(table.scan()) == mini.rows(2)
    assert len(mini.rows(2)) == 8
    # partition pruning by the day partition, and by the id bounds
    day1 = [r for r in mini.rows(2) if r[2] == DAYS[1]]
    assert rows(table.scan(row_filter=f"day = '{DAYS[1].isoformat()}'")) == day1
    assert rows(table.scan(row_filter="id < 10")) == [r for r in mini.rows(2) if r[0] < 10]
    plan = list(table.scan(row_filter="id >= 10").plan_files())
    assert [t.file.file_path for t in plan] == [mini.paths[1]]
    [task0] = [t for t in table.scan().plan_files() if t.file.file_path == mini.paths[0]]
    assert [d.file_path for d in task0.delete_files] == [mini.delete_file]
    assert task0.file.partition[0] == (DAYS[0] - datetime.date(1970, 1, 1)).days
    # time travel to snapshot 1: the deletes are not there yet
    assert rows(table.scan(snapshot_id=1)) == mini.rows(1)
    assert len(mini.rows(1)) == 10


def test_duckdb_reads_the_same_table(tmp_path: Path) -> None:
    mini = mini_table(tmp_path)
    results = run_duckdb(
        [
            {"mode": "scan", "metadata": mini.metadata, "snapshot": None},
            {"mode": "scan", "metadata": mini.metadata, "snapshot": 1},
        ]
    )
    for snapshot, r in zip((2, 1), results, strict=True):
        assert r["ok"], r
        t = r["table"]
        got = sorted(zip(*(t.column(n).to_pylist() for n in ("id", "name", "day")), strict=True))
        assert got == mini.rows(snapshot)
