"""The direct Avro encoder of manifest entries (lakehouse.iceberg.avro_binary) writes
exactly the bytes fastavro writes for the same entries, and what it cannot encode
goes through fastavro."""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import uuid
from decimal import Decimal
from typing import Any

import fastavro
import pytest

from lakehouse.iceberg import avro, avro_binary, avro_entries

PARTITION_FIELDS = [
    {"field-id": 1000, "name": "i", "type": "int"},
    {"field-id": 1001, "name": "l", "type": "long"},
    {"field-id": 1002, "name": "s", "type": "string"},
    {"field-id": 1003, "name": "b", "type": "binary"},
    {"field-id": 1004, "name": "flag", "type": "boolean"},
    {"field-id": 1005, "name": "f", "type": "float"},
    {"field-id": 1006, "name": "d", "type": "double"},
    {"field-id": 1007, "name": "day", "type": "date"},
    {"field-id": 1008, "name": "ts", "type": "timestamptz"},
    {"field-id": 1009, "name": "a-b c", "type": "string"},
]
SCHEMA = {"type": "struct", "schema-id": 3, "fields": []}
SPEC = {"spec-id": 2, "fields": []}


def fastavro_bytes(entries: list[dict[str, Any]], fields: list[dict[str, Any]]) -> bytes:
    """The manifest as fastavro alone writes it (the reference)."""
    sid = int(SCHEMA["schema-id"])  # type: ignore[call-overload]
    metadata = {
        "schema": json.dumps(SCHEMA, separators=(",", ":")),
        "schema-id": str(sid),
        "partition-spec": json.dumps(SPEC["fields"], separators=(",", ":")),
        "partition-spec-id": str(SPEC["spec-id"]),
        "format-version": "2",
        "content": "data",
    }
    enc = avro.EntryEncoder(fields)
    digest = hashlib.sha256(json.dumps(metadata, sort_keys=True).encode()).digest()
    buf = io.BytesIO()
    fastavro.writer(
        buf,
        enc.schema,
        list(avro_entries.tagged(entries, enc.part)),
        codec="deflate",
        metadata=metadata,
        sync_marker=digest[:16],
    )
    return buf.getvalue()


def ours(entries: list[Any], fields: list[dict[str, Any]]) -> bytes:
    return avro.manifest_bytes(
        entries=entries, content="data", partition_fields=fields, schema_json=SCHEMA,
        spec_json=SPEC,
    )  # fmt: skip


def entry_of(k: int, partition: dict[str, Any], **extra: Any) -> dict[str, Any]:
    df = avro.data_file(
        file_path=f"/data/ünïcode/{k:06d}.parquet",
        record_count=k * 1_000_003,
        file_size_in_bytes=(1 << 40) + k,
        partition=partition,
        column_sizes=[],
        value_counts={1: k, 2: -k, 3: 1 << 62},
        null_value_counts={1: 0},
        lower_bounds={1: b"\x00" * 8, 3: f"low-{k}".encode()},
        upper_bounds={1: b"\xff" * 8},
        **extra,
    )
    status = (avro.ADDED, avro.EXISTING, avro.DELETED)[k % 3]
    seq = None if status == avro.ADDED and k % 2 else k
    return avro.entry(df, status=status, snapshot_id=seq, sequence_number=seq,
                      file_sequence_number=seq)  # fmt: skip


def values(k: int) -> dict[str, Any]:
    return {
        "i": -k,
        "l": (1 << 50) * (-1) ** k,
        "s": f"v{k}é",
        "b": bytes([k % 256]) * 3,
        "flag": bool(k % 2),
        "f": k / 3,
        "d": -k * 1e300,
        "day": 19_000 + k,
        "ts": 1_700_000_000_000_000 + k,
        "a-b c": None if k % 4 == 0 else "x",
    }


def test_same_bytes_as_fastavro_over_many_blocks() -> None:
    entries = [entry_of(k, values(k)) for k in range(400)]  # several 16 kB blocks
    entries[5]["data_file"].update(key_metadata=b"km", split_offsets=[4, 1 << 33],
                                   equality_ids=[1, 2], sort_order_id=1)  # fmt: skip
    entries[6]["data_file"]["partition"] = {}  # every field null
    want = fastavro_bytes(entries, PARTITION_FIELDS)
    assert ours(entries, PARTITION_FIELDS) == want
    enc = avro.EntryEncoder(PARTITION_FIELDS)
    assert ours([enc(e) for e in entries], PARTITION_FIELDS) == want
    rows: list[Any] = list(fastavro.reader(io.BytesIO(want)))
    assert len(list(fastavro.block_reader(io.BytesIO(want)))) > 1  # several blocks
    assert [r["data_file"]["file_path"] for r in rows] == [
        e["data_file"]["file_path"] for e in entries
    ]


@pytest.mark.parametrize(
    ("typ", "value"),
    [
        ("decimal(9, 2)", Decimal("12.34")),
        ("uuid", uuid.UUID(int=7)),
        ("date", dt.date(2024, 1, 2)),
        ("timestamp", dt.datetime(2024, 1, 2, 3, 4, 5)),
        ("fixed[3]", b"abc"),
        ("int", True),  # a bool is not an int to the direct encoder
        ("double", 3),  # an int for a double: fastavro converts it
    ],
)
def test_values_it_does_not_encode_go_through_fastavro(typ: str, value: Any) -> None:
    fields = [{"field-id": 1000, "name": "x", "type": typ}]
    e = entry_of(1, {"x": value})
    with pytest.raises(avro_binary.Unsupported):
        avro_binary.encode_entry(e, avro.EntryEncoder(fields).part, {"x": value})
    assert ours([e, entry_of(2, {"x": None})], fields) == fastavro_bytes(
        [e, entry_of(2, {"x": None})], fields
    )


def test_manifest_list_row_from_encoded_entries() -> None:
    entries = [entry_of(k, values(k)) for k in range(6)]
    enc = avro.EntryEncoder(PARTITION_FIELDS)
    kw: dict[str, Any] = dict(manifest_path="/m.avro", manifest_length=1, partition_spec_id=2,
                              content="data", sequence_number=9, added_snapshot_id=9,
                              partition_fields=PARTITION_FIELDS)  # fmt: skip
    assert avro.manifest_file_for([enc(e) for e in entries], **kw) == avro.manifest_file_for(
        entries, **kw
    )


def test_long_bytes_edges() -> None:
    for n in (0, -1, 1, 63, -64, 64, -65, (1 << 63) - 1, -(1 << 63)):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, "long", n)
        assert avro_binary.long_bytes(n) == buf.getvalue(), n
    for bad in (1 << 63, True, 1.0):
        with pytest.raises(avro_binary.Unsupported):
            avro_binary.long_bytes(bad)  # type: ignore[arg-type]


def test_metric_maps_given_as_dicts_encode_as_their_lists() -> None:
    e = entry_of(3, values(3))
    as_dict = {**e, "data_file": {**e["data_file"], "value_counts": {1: 3, 2: -3, 3: 1 << 62}}}
    part = avro.EntryEncoder(PARTITION_FIELDS).part
    p = e["data_file"]["partition"]
    assert avro_binary.encode_entry(as_dict, part, p) == avro_binary.encode_entry(e, part, p)
