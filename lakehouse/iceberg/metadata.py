"""The Iceberg table metadata JSON (format version 2) of a table at a version.

Pure functions: the table's definition at the effective version plus what the
listed snapshots' sidecars hold (:class:`lakehouse.iceberg.state.Light`) give
one JSON document, deterministic byte for byte (same inputs, same bytes)::

    format-version 2, table-uuid (the table id), location, last-sequence-number,
    last-updated-ms, last-column-id, schemas (every listed snapshot's and the
    current one), current-schema-id, partition-specs, default-spec-id,
    last-partition-id, properties (the table's, the name mapping, the omitted
    columns), current-snapshot-id, snapshots, snapshot-log, metadata-log (empty),
    sort-orders, default-sort-order-id, refs {"main": branch}
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from lakehouse.iceberg import types
from lakehouse.iceberg.state import Light
from lakehouse.model import TableDef

#: Iceberg's last-partition-id of a table without partition fields (field ids start at 1000)
NO_PARTITION_ID = 999


def table_uuid(table_id: str) -> str:
    """The Iceberg ``table-uuid`` of lakehouse table ``table_id`` (32 hex digits)."""
    return str(uuid.UUID(hex=table_id))


def schema_json(d: TableDef) -> tuple[dict[str, Any], list[str], int]:
    """``d``'s Iceberg schema with its ``schema-id``, the omitted columns, the
    largest field id."""
    body, omitted, last = types.iceberg_schema(d.columns, d.schema)
    return {"schema-id": types.schema_id(body), **body}, omitted, last


def specs_of(d: TableDef) -> list[Any]:
    """Every partition spec of ``d`` (spec 0, unpartitioned, when it never had one)."""
    if d.partition_specs:
        return list(d.partition_specs)
    return [d.spec_by_id(0)]


def _max_field_id(typ: Any) -> int:
    if not isinstance(typ, dict):
        return 0
    out = 0
    for f in typ.get("fields", ()):
        out = max(out, int(f["id"]), _max_field_id(f["type"]))
    if "element-id" in typ:
        out = max(out, int(typ["element-id"]), _max_field_id(typ["element"]))
    if "key-id" in typ:
        out = max(out, int(typ["key-id"]), int(typ["value-id"]))
        out = max(out, _max_field_id(typ["key"]), _max_field_id(typ["value"]))
    return out


def name_mapping(
    d: TableDef, snapshots: Sequence[Light]
) -> tuple[list[dict[str, Any]], dict[int, set[str]]]:
    """The name mapping of a metadata JSON of ``d`` listing ``snapshots`` (every name
    their files use, and the current names), and the names older ids lost."""
    names: dict[int, set[str]] = {}
    for s in snapshots:
        for cid, ns in s.names.items():
            names.setdefault(int(cid), set()).update(ns)
    return types.name_mapping(d.columns, d.schema, names, schemas=[s.schema for s in snapshots])


def build(
    d: TableDef,
    *,
    location: str,
    snapshots: Sequence[Light],
    current: int,
    mapping: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The metadata JSON of table ``d`` (its definition at the effective version)
    listing ``snapshots`` (oldest first; ``current`` is the current snapshot id);
    ``mapping``: their :func:`name_mapping` when the caller computed it already."""
    cur_schema, omitted, _ = schema_json(d)
    schemas: dict[int, dict[str, Any]] = {}
    for s in snapshots:
        schemas.setdefault(int(s.schema["schema-id"]), s.schema)
    schemas.setdefault(int(cur_schema["schema-id"]), cur_schema)
    if mapping is None:
        mapping, _ = name_mapping(d, snapshots)
    props = dict(d.properties)
    props[types.NAME_MAPPING_PROPERTY] = json.dumps(mapping, separators=(",", ":"))
    if omitted:
        props[types.OMITTED_PROPERTY] = ",".join(omitted)
    specs = [types.partition_spec_json(s, d.columns, d.schema) for s in specs_of(d)]
    last_partition = max(
        [NO_PARTITION_ID] + [int(f["field-id"]) for s in specs for f in s["fields"]]
    )
    orders, default_order = types.sort_orders(d)
    entries = [s.snapshot for s in snapshots]
    by_id = {int(e["snapshot-id"]): e for e in entries}
    head = by_id[current]
    last_column = max([d.last_column_id] + [_max_field_id(s) for s in schemas.values()])
    return {
        "format-version": 2,
        "table-uuid": table_uuid(d.table_id),
        "location": location,
        "last-sequence-number": max(int(e["sequence-number"]) for e in entries),
        "last-updated-ms": int(head["timestamp-ms"]),
        "last-column-id": last_column,
        "current-schema-id": int(cur_schema["schema-id"]),
        "schemas": [schemas[k] for k in sorted(schemas)],
        "default-spec-id": d.spec_id,
        "partition-specs": specs,
        "last-partition-id": last_partition,
        "default-sort-order-id": default_order,
        "sort-orders": orders,
        "properties": dict(sorted(props.items())),
        "current-snapshot-id": current,
        "refs": {"main": {"snapshot-id": current, "type": "branch"}},
        "snapshots": entries,
        "snapshot-log": [
            {"timestamp-ms": int(e["timestamp-ms"]), "snapshot-id": int(e["snapshot-id"])}
            for e in entries
        ],
        "metadata-log": [],
    }


def encode(doc: Mapping[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()
