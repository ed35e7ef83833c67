"""Iceberg v2 manifests and manifest lists, written as Avro with fastavro.

An Iceberg snapshot names one *manifest list*; each of its rows names one
*manifest*; each manifest row (a ``manifest_entry``) names one data or
delete file::

    snap-<u>.avro (manifest_file rows)      <u>-m<k>.avro (manifest_entry rows)
    +-------------------------------+        +---------------------------------+
    | manifest_path ----------------+------> | status, snapshot_id, seq, fseq  |
    | content 0 data / 1 deletes    |        | data_file { content, file_path, |
    | sequence_number, counts       |        |   partition {..}, record_count, |
    | partitions [field summaries]  |        |   metrics maps, ... }           |
    +-------------------------------+        +---------------------------------+

The Avro schemas below are the spec's (https://iceberg.apache.org/spec/,
"Manifests" and "Manifest Lists", format version 2), field for field: every
field carries its ``field-id``, every list its ``element-id``, and a map with
int keys is an array of ``k<key id>_v<value id>`` records with
``"logicalType": "map"``, as the Java writer spells them. Readers (Java,
pyiceberg, DuckDB) resolve manifest fields by those ids, so the ids are the
format; fastavro keeps such extra attributes in the schema it writes into the
file header (``avro.schema``), which the tests check.

The ``partition`` record of a manifest depends on the partition spec: its
fields are the spec's partition fields (ids 1000+, all optional), with Iceberg
types mapped to Avro as the spec says (date: int/``date``; timestamp:
long/``timestamp-micros`` with ``adjust-to-utc``; decimal: fixed/``decimal``;
...). A parsed schema is cached per partition type.

Files carry the header metadata the spec asks for: manifests ``schema``,
``schema-id``, ``partition-spec``, ``partition-spec-id``, ``format-version``
and ``content``; manifest lists ``snapshot-id``, ``parent-snapshot-id``,
``sequence-number`` and ``format-version``. The bytes are deterministic (the
Avro sync marker is derived from the header metadata, not random), so two
writers of the same object write the same bytes. Codec: deflate.

``referenced_data_file`` (field 143) is a v3 field and is not written: readers
match a positional delete file to its data file by the ``file_path`` bounds
(id 2147483546), which the caller sets to the data file's path.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import fastavro

from lakehouse.iceberg import avro_binary
from lakehouse.iceberg.avro_entries import Encoded as Encoded
from lakehouse.iceberg.avro_entries import EntryEncoder as EntryEncoder
from lakehouse.iceberg.avro_schemas import MANIFEST_FILE_SCHEMA as MANIFEST_FILE_SCHEMA
from lakehouse.iceberg.avro_schemas import avro_name as avro_name
from lakehouse.iceberg.avro_schemas import avro_type as avro_type
from lakehouse.iceberg.avro_schemas import decimal_required_bytes as decimal_required_bytes
from lakehouse.iceberg.avro_schemas import manifest_entry_schema as manifest_entry_schema
from lakehouse.iceberg.avro_schemas import partition_key
from lakehouse.iceberg.avro_schemas import partition_record_schema as partition_record_schema

FORMAT_VERSION = 2

#: manifest_entry.status
EXISTING, ADDED, DELETED = 0, 1, 2
#: data_file.content
DATA, POSITION_DELETES, EQUALITY_DELETES = 0, 1, 2
#: manifest_file.content
MANIFEST_DATA, MANIFEST_DELETES = 0, 1

CODEC = "deflate"
_CONTENT_NAMES = {"data": MANIFEST_DATA, "deletes": MANIFEST_DELETES}


_PARSED_MANIFEST_FILE = fastavro.parse_schema(MANIFEST_FILE_SCHEMA)


# -- rows ------------------------------------------------------------------------------
def _kv(m: Mapping[int, Any] | Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]] | None:
    if m is None:
        return None
    if isinstance(m, Mapping):
        return [{"key": k, "value": v} for k, v in m.items()]
    return list(m)  # type: ignore[arg-type]


def data_file(
    *,
    file_path: str,
    record_count: int,
    file_size_in_bytes: int,
    partition: Mapping[str, Any] | None = None,
    content: int = DATA,
    file_format: str = "PARQUET",
    column_sizes: Mapping[int, int] | Sequence[Mapping[str, Any]] | None = None,
    value_counts: Mapping[int, int] | Sequence[Mapping[str, Any]] | None = None,
    null_value_counts: Mapping[int, int] | Sequence[Mapping[str, Any]] | None = None,
    nan_value_counts: Mapping[int, int] | Sequence[Mapping[str, Any]] | None = None,
    lower_bounds: Mapping[int, bytes] | Sequence[Mapping[str, Any]] | None = None,
    upper_bounds: Mapping[int, bytes] | Sequence[Mapping[str, Any]] | None = None,
    key_metadata: bytes | None = None,
    split_offsets: Sequence[int] | None = None,
    equality_ids: Sequence[int] | None = None,
    sort_order_id: int | None = None,
) -> dict[str, Any]:
    """A ``data_file`` record (spec field names; ids 100-140).

    Keys: ``content`` (0 data, 1 position deletes, 2 equality deletes),
    ``file_path`` (absolute location), ``file_format`` ("PARQUET"),
    ``partition`` (partition field name -> Iceberg partition value: int for
    int/bucket/year/month/hour, ``datetime.date`` or days for date/day,
    ``datetime``/micros for timestamps, ``Decimal`` for decimal, str, bytes;
    None allowed), ``record_count`` (rows; for a delete file: deletes),
    ``file_size_in_bytes``, the metric maps ``column_sizes``, ``value_counts``,
    ``null_value_counts``, ``nan_value_counts``, ``lower_bounds``,
    ``upper_bounds`` (field id -> value; given as a dict or already as Avro's
    ``[{"key": id, "value": v}]``; bounds in Iceberg's single-value
    serialization), ``key_metadata``, ``split_offsets``, ``equality_ids``,
    ``sort_order_id``. Absent keys are written as null.
    """
    d: dict[str, Any] = {
        "content": content,
        "file_path": file_path,
        "file_format": file_format,
        "partition": dict(partition) if partition else {},
        "record_count": record_count,
        "file_size_in_bytes": file_size_in_bytes,
    }
    for name, m in (
        ("column_sizes", column_sizes),
        ("value_counts", value_counts),
        ("null_value_counts", null_value_counts),
        ("nan_value_counts", nan_value_counts),
        ("lower_bounds", lower_bounds),
        ("upper_bounds", upper_bounds),
    ):
        if m is not None:
            d[name] = _kv(m)
    if key_metadata is not None:
        d["key_metadata"] = key_metadata
    if split_offsets is not None:
        d["split_offsets"] = list(split_offsets)
    if equality_ids is not None:
        d["equality_ids"] = list(equality_ids)
    if sort_order_id is not None:
        d["sort_order_id"] = sort_order_id
    return d


def entry(
    data_file: dict[str, Any],
    *,
    status: int = ADDED,
    snapshot_id: int | None = None,
    sequence_number: int | None = None,
    file_sequence_number: int | None = None,
) -> dict[str, Any]:
    """A ``manifest_entry`` record: ``status`` (0 EXISTING, 1 ADDED, 2 DELETED),
    ``snapshot_id`` (the snapshot that added or deleted the file), the file's
    data ``sequence_number`` and ``file_sequence_number``, and ``data_file``
    (a :func:`data_file` dict). None ids / sequence numbers are inherited from
    the manifest list row by readers, which the spec allows only for ADDED
    entries; EXISTING and DELETED entries must carry them."""
    if status != ADDED and (
        snapshot_id is None or sequence_number is None or file_sequence_number is None
    ):
        raise ValueError(
            f"manifest entry for {data_file.get('file_path')} with status {status} needs "
            "explicit snapshot_id, sequence_number and file_sequence_number (only ADDED "
            "entries inherit them)"
        )
    return {
        "status": status,
        "snapshot_id": snapshot_id,
        "sequence_number": sequence_number,
        "file_sequence_number": file_sequence_number,
        "data_file": data_file,
    }


def manifest_file(
    *,
    manifest_path: str,
    manifest_length: int,
    partition_spec_id: int,
    content: int,
    sequence_number: int,
    min_sequence_number: int,
    added_snapshot_id: int,
    added_files_count: int,
    existing_files_count: int,
    deleted_files_count: int,
    added_rows_count: int,
    existing_rows_count: int,
    deleted_rows_count: int,
    partitions: Sequence[Mapping[str, Any]] | None = None,
    key_metadata: bytes | None = None,
) -> dict[str, Any]:
    """A ``manifest_file`` record of a manifest list (spec ids 500-519):
    ``content`` 0 data / 1 deletes; ``sequence_number`` of the snapshot that
    wrote the manifest; ``min_sequence_number`` the smallest data sequence
    number of its live files; counts of ADDED / EXISTING / DELETED entries and
    their rows; ``partitions`` one summary per partition field
    (``{"contains_null", "contains_nan", "lower_bound", "upper_bound"}``, see
    :func:`partition_summaries`)."""
    return {
        "manifest_path": manifest_path,
        "manifest_length": manifest_length,
        "partition_spec_id": partition_spec_id,
        "content": content,
        "sequence_number": sequence_number,
        "min_sequence_number": min_sequence_number,
        "added_snapshot_id": added_snapshot_id,
        "added_files_count": added_files_count,
        "existing_files_count": existing_files_count,
        "deleted_files_count": deleted_files_count,
        "added_rows_count": added_rows_count,
        "existing_rows_count": existing_rows_count,
        "deleted_rows_count": deleted_rows_count,
        "partitions": None if partitions is None else list(partitions),
        "key_metadata": key_metadata,
    }


def manifest_file_for(
    entries: Iterable[Mapping[str, Any] | Encoded],
    *,
    manifest_path: str,
    manifest_length: int,
    partition_spec_id: int,
    content: str,
    sequence_number: int,
    added_snapshot_id: int,
    partition_fields: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """The :func:`manifest_file` record of a manifest holding ``entries``
    (counts, ``min_sequence_number``, partition summaries computed from them;
    an entry without a sequence number inherits ``sequence_number``)."""
    counts = [0, 0, 0]
    rows = [0, 0, 0]
    min_seq: int | None = None
    partitions = []
    for e in entries:
        if isinstance(e, Encoded):
            s, seq, n, part = e.status, e.sequence_number, e.record_count, e.partition
        else:
            df = e["data_file"]
            s, seq, n, part = e["status"], e["sequence_number"], df["record_count"], df["partition"]
        counts[s] += 1
        rows[s] += n
        if s != DELETED:
            seq = sequence_number if seq is None else seq
            min_seq = seq if min_seq is None or seq < min_seq else min_seq
        partitions.append(part)
    return manifest_file(
        manifest_path=manifest_path,
        manifest_length=manifest_length,
        partition_spec_id=partition_spec_id,
        content=_CONTENT_NAMES[content],
        sequence_number=sequence_number,
        min_sequence_number=sequence_number if min_seq is None else min_seq,
        added_snapshot_id=added_snapshot_id,
        added_files_count=counts[ADDED],
        existing_files_count=counts[EXISTING],
        deleted_files_count=counts[DELETED],
        added_rows_count=rows[ADDED],
        existing_rows_count=rows[EXISTING],
        deleted_rows_count=rows[DELETED],
        partitions=partition_summaries(partition_fields, partitions),
    )


# -- partition summaries ---------------------------------------------------------------
def partition_summaries(
    partition_fields: Sequence[Mapping[str, Any]], partitions: Iterable[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """One ``field_summary`` per partition field over the partition records of
    a manifest's entries: ``contains_null``, ``contains_nan`` (float types),
    ``lower_bound`` / ``upper_bound`` (serialized; None when every value is
    null), serialized by :func:`lakehouse.iceberg.types.bound_bytes`."""
    from lakehouse.iceberg.types import bound_bytes

    fields = partition_key(partition_fields)
    nulls = [False] * len(fields)
    nans = [False] * len(fields)
    lows: list[Any] = [None] * len(fields)
    highs: list[Any] = [None] * len(fields)
    for p in partitions:
        for i, (_, name, _) in enumerate(fields):
            v = p.get(name)
            if v is None:
                nulls[i] = True
            elif isinstance(v, float) and math.isnan(v):
                nans[i] = True
            else:
                if lows[i] is None or v < lows[i]:
                    lows[i] = v
                if highs[i] is None or v > highs[i]:
                    highs[i] = v
    out = []
    for i, (_, _, typ) in enumerate(fields):
        is_float = typ.strip() in ("float", "double")
        out.append(
            {
                "contains_null": nulls[i],
                "contains_nan": nans[i] if is_float else None,
                "lower_bound": bound_bytes(typ.strip(), lows[i]),
                "upper_bound": bound_bytes(typ.strip(), highs[i]),
            }
        )
    return out


# -- files -----------------------------------------------------------------------------
def _write(schema: Any, records: Iterable[Mapping[str, Any]], metadata: dict[str, str]) -> bytes:
    # a sync marker derived from the header keeps the bytes deterministic
    digest = hashlib.sha256(json.dumps(metadata, sort_keys=True).encode()).digest()
    buf = io.BytesIO()
    fastavro.writer(buf, schema, records, codec=CODEC, metadata=metadata, sync_marker=digest[:16])
    return buf.getvalue()


def _compact(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def manifest_bytes(
    *,
    entries: Sequence[Mapping[str, Any] | Encoded],
    content: str,
    partition_fields: Sequence[Mapping[str, Any]],
    schema_json: Mapping[str, Any],
    spec_json: Mapping[str, Any],
) -> bytes:
    """An Iceberg v2 manifest of ``entries`` (:func:`entry` dicts, or entries
    :class:`EntryEncoder` encoded for the same partition type).

    ``content``: "data" or "deletes" (a manifest holds one kind of file);
    ``partition_fields``: the spec's partition type (``[{"field-id", "name",
    "type"}]``; empty for an unpartitioned spec); ``schema_json``: the table
    schema as in table metadata, with its ``schema-id``; ``spec_json``: the
    partition spec (``{"spec-id", "fields"}``)."""
    if content not in _CONTENT_NAMES:
        raise ValueError(f"manifest content must be 'data' or 'deletes', not {content!r}")
    if "schema-id" in schema_json:
        sid = int(schema_json["schema-id"])
    else:
        from lakehouse.iceberg.types import schema_id

        sid = schema_id(dict(schema_json))
    metadata = {
        "schema": _compact(schema_json),
        "schema-id": str(sid),
        "partition-spec": _compact(spec_json.get("fields", [])),
        "partition-spec-id": str(spec_json.get("spec-id", 0)),
        "format-version": str(FORMAT_VERSION),
        "content": content,
    }
    enc = EntryEncoder(partition_fields)
    records = (e.raw if isinstance(e, Encoded) else enc.raw(e) for e in entries)
    digest = hashlib.sha256(json.dumps(metadata, sort_keys=True).encode()).digest()
    return avro_binary.container(enc.schema, enc.key, records, metadata, digest[:16])


def manifest_list_bytes(
    manifests: Sequence[Mapping[str, Any]],
    *,
    snapshot_id: int,
    parent_id: int | None,
    sequence_number: int,
) -> bytes:
    """An Iceberg v2 manifest list of ``manifests`` (:func:`manifest_file`
    dicts) for snapshot ``snapshot_id``."""
    metadata = {
        "snapshot-id": str(snapshot_id),
        "parent-snapshot-id": "null" if parent_id is None else str(parent_id),
        "sequence-number": str(sequence_number),
        "format-version": str(FORMAT_VERSION),
    }
    return _write(_PARSED_MANIFEST_FILE, manifests, metadata)
