"""Partition specs, partition records and sort orders of the lakehouse's tables
as Iceberg manifests and metadata declare them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lakehouse.data import partitioning
from lakehouse.iceberg.bounds import long_value, unscaled
from lakehouse.iceberg.typemap import NESTED_BASE, primitive_type
from lakehouse.model import Column, DataFile, TableDef

if TYPE_CHECKING:
    from lakehouse.partition import PartitionField, PartitionSpec


# -- partition specs ----------------------------------------------------------------------------
def _result_type(pf: PartitionField, source: str) -> str:
    name = pf.transform.name
    if name in ("identity", "truncate"):
        return source
    return "date" if name == "day" else "int"  # pyiceberg's DayTransform.result_type: date


def _kept(
    spec: PartitionSpec, columns: Sequence[Column] | None, schema: pa.Schema | None
) -> Iterator[tuple[PartitionField, str | None]]:
    """The fields of ``spec`` Iceberg can describe, with their source's Iceberg type:
    all of them (type None) when no columns are given, else those whose source
    column is a primitive of the Iceberg schema."""
    if columns is None or schema is None:
        yield from ((pf, None) for pf in spec.fields)
        return
    types = {c.id: t for c, t in ((c, schema.field(c.name).type) for c in columns)}
    for pf in spec.fields:
        t = types.get(pf.source_id)
        ice = None if t is None or not 0 < pf.source_id < NESTED_BASE else primitive_type(t)
        if ice is not None:
            yield pf, ice


def partition_type(
    spec: PartitionSpec, columns: Sequence[Column], schema: pa.Schema
) -> list[dict[str, Any]]:
    """The partition fields of ``spec`` as manifests declare them:
    ``[{"field-id", "name", "type"}]`` (types as pyiceberg's transforms give them:
    identity and truncate the source's, day ``date``, the others ``int``). A
    field whose source column is not in the Iceberg schema (dropped, or of a type
    Iceberg cannot hold) is left out, here and in :func:`partition_spec_json` and
    :func:`partition_record` given the same columns."""
    return [
        {"field-id": pf.field_id, "name": pf.name, "type": _result_type(pf, ice or "")}
        for pf, ice in _kept(spec, columns, schema)
    ]


def partition_spec_json(
    spec: PartitionSpec,
    columns: Sequence[Column] | None = None,
    schema: pa.Schema | None = None,
) -> dict[str, Any]:
    """``{"spec-id", "fields": [{"source-id", "field-id", "name", "transform"}]}``
    (with ``columns`` and ``schema``: only the fields :func:`partition_type` keeps)."""
    return {
        "spec-id": spec.spec_id,
        "fields": [
            {
                "source-id": pf.source_id,
                "field-id": pf.field_id,
                "name": pf.name,
                "transform": str(pf.transform),
            }
            for pf, _ in _kept(spec, columns, schema)
        ],
    }


def partition_record(
    spec: PartitionSpec,
    f: DataFile,
    columns: Sequence[Column],
    schema: pa.Schema,
    values: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``f``'s partition as the manifest's Avro record: field name -> value of the
    field's Iceberg type as fastavro takes it (int for int, date (days), year/month/
    hour/bucket; microseconds for time and timestamps; Decimal, str, bytes, float,
    bool as they are). ``values``: the partition by field name (default
    ``f.partition``, which ``list_data_files`` fills)."""
    given = f.partition if values is None else values
    out: dict[str, Any] = {}
    for pf, ice in _kept(spec, columns, schema):
        rtype = _result_type(pf, ice or "")
        out[pf.name] = _avro_value(rtype, given.get(pf.name), pf.name)
    return out


#: partition records of the last table definition's files by (spec id, raw partition)
_records: tuple[TableDef | None, dict[tuple[int, Any], dict[str, Any]]] = (None, {})
_MAX_RECORDS = 65536


def file_partition(d: TableDef, f: DataFile) -> dict[str, Any]:
    """:func:`partition_record` of ``f`` under ``d`` (its values decoded from
    ``f.raw_partition``), cached per table definition (by identity) and (spec id,
    raw partition): the files of one snapshot share few partitions."""
    global _records
    held, cache = _records
    if held is not d:
        cache = {}
        _records = (d, cache)
    key = (f.spec_id, f.raw_partition)
    rec = cache.get(key)
    if rec is None:
        values = partitioning.partition_dict(d, f)
        rec = partition_record(d.spec_by_id(f.spec_id), f, d.columns, d.schema, values)
        if len(cache) >= _MAX_RECORDS:
            cache.clear()
        cache[key] = rec
    return dict(rec)


def _avro_value(t: str, v: Any, name: str) -> Any:
    if v is None:
        return None
    if t in ("int", "long", "date", "time", "timestamp", "timestamptz"):
        n = long_value(t, v)
        if n is None:
            raise ValueError(f"partition field {name!r}: {v!r} is not a {t} value")
        return n
    if t.startswith("decimal("):
        s = int(t[len("decimal(") : -1].split(",")[1])
        n = unscaled(v, s)
        if n is None:
            raise ValueError(f"partition field {name!r}: {v!r} is not a {t} value")
        return Decimal(n).scaleb(-s)
    if t in ("float", "double"):
        return float(v)
    return v


# -- sort orders ---------------------------------------------------------------------------------
def sort_orders(d: TableDef) -> tuple[list[dict[str, Any]], int]:
    """The table's sort orders and the default one's id: order 0 unsorted; with sort
    keys, order 1 sorts by each (identity, ascending, nulls first), up to the first
    key Iceberg cannot describe (a sort on fewer leading keys still holds)."""
    orders: list[dict[str, Any]] = [{"order-id": 0, "fields": []}]
    ids = d.column_ids()
    fields = []
    for key in d.sort_keys:
        cid = ids.get(key)
        if cid is None or not 0 < cid < NESTED_BASE:
            break
        if primitive_type(d.schema.field(key).type) is None:
            break
        fields.append(
            {
                "transform": "identity",
                "source-id": cid,
                "direction": "asc",
                "null-order": "nulls-first",
            }
        )
    if not fields:
        return orders, 0
    orders.append({"order-id": 1, "fields": fields})
    return orders, 1
