"""The Avro schemas of Iceberg v2 manifests and manifest lists (the spec's, field
for field; see :mod:`lakehouse.iceberg.avro` for how they are written).

Every field carries its ``field-id``, every list its ``element-id``, and a map
with int keys is an array of ``k<key id>_v<value id>`` records with
``"logicalType": "map"``, as the Java writer spells them. The ``partition``
record (``r102``) depends on the partition spec: one optional field per
partition field, Iceberg types mapped to Avro as the spec says.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any


def _opt(name: str, field_id: int, avro_type: Any) -> dict[str, Any]:
    return {"name": name, "type": ["null", avro_type], "default": None, "field-id": field_id}


def _req(name: str, field_id: int, avro_type: Any) -> dict[str, Any]:
    return {"name": name, "type": avro_type, "field-id": field_id}


def _int_map(
    name: str, field_id: int, key_id: int, value_id: int, value_type: str
) -> dict[str, Any]:
    kv = {
        "type": "record",
        "name": f"k{key_id}_v{value_id}",
        "fields": [_req("key", key_id, "int"), _req("value", value_id, value_type)],
    }
    return _opt(name, field_id, {"type": "array", "items": kv, "logicalType": "map"})


def _list(name: str, field_id: int, element_id: int, element_type: str) -> dict[str, Any]:
    return _opt(name, field_id, {"type": "array", "items": element_type, "element-id": element_id})


def entry_schema(partition_record: dict[str, Any]) -> dict[str, Any]:
    """The ``manifest_entry`` schema around a partition record (``r102``)."""
    data_file = {
        "type": "record",
        "name": "r2",
        "fields": [
            _req("content", 134, "int"),
            _req("file_path", 100, "string"),
            _req("file_format", 101, "string"),
            _req("partition", 102, partition_record),
            _req("record_count", 103, "long"),
            _req("file_size_in_bytes", 104, "long"),
            _int_map("column_sizes", 108, 117, 118, "long"),
            _int_map("value_counts", 109, 119, 120, "long"),
            _int_map("null_value_counts", 110, 121, 122, "long"),
            _int_map("nan_value_counts", 137, 138, 139, "long"),
            _int_map("lower_bounds", 125, 126, 127, "bytes"),
            _int_map("upper_bounds", 128, 129, 130, "bytes"),
            _opt("key_metadata", 131, "bytes"),
            _list("split_offsets", 132, 133, "long"),
            _list("equality_ids", 135, 136, "int"),
            _opt("sort_order_id", 140, "int"),
        ],
    }
    return {
        "type": "record",
        "name": "manifest_entry",
        "fields": [
            _req("status", 0, "int"),
            _opt("snapshot_id", 1, "long"),
            _opt("sequence_number", 3, "long"),
            _opt("file_sequence_number", 4, "long"),
            _req("data_file", 2, data_file),
        ],
    }


MANIFEST_FILE_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "manifest_file",
    "fields": [
        _req("manifest_path", 500, "string"),
        _req("manifest_length", 501, "long"),
        _req("partition_spec_id", 502, "int"),
        _req("content", 517, "int"),
        _req("sequence_number", 515, "long"),
        _req("min_sequence_number", 516, "long"),
        _req("added_snapshot_id", 503, "long"),
        _req("added_files_count", 504, "int"),
        _req("existing_files_count", 505, "int"),
        _req("deleted_files_count", 506, "int"),
        _req("added_rows_count", 512, "long"),
        _req("existing_rows_count", 513, "long"),
        _req("deleted_rows_count", 514, "long"),
        _opt(
            "partitions",
            507,
            {
                "type": "array",
                "element-id": 508,
                "items": {
                    "type": "record",
                    "name": "r508",
                    "fields": [
                        _req("contains_null", 509, "boolean"),
                        _opt("contains_nan", 518, "boolean"),
                        _opt("lower_bound", 510, "bytes"),
                        _opt("upper_bound", 511, "bytes"),
                    ],
                },
            },
        ),
        _opt("key_metadata", 519, "bytes"),
    ],
}

_DECIMAL = re.compile(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
_FIXED = re.compile(r"fixed\[\s*(\d+)\s*\]$")
_PRIMITIVE_AVRO: dict[str, Any] = {
    "boolean": "boolean",
    "int": "int",
    "long": "long",
    "float": "float",
    "double": "double",
    "string": "string",
    "binary": "bytes",
    "date": {"type": "int", "logicalType": "date"},
    "time": {"type": "long", "logicalType": "time-micros"},
    "timestamp": {"type": "long", "logicalType": "timestamp-micros", "adjust-to-utc": False},
    "timestamptz": {"type": "long", "logicalType": "timestamp-micros", "adjust-to-utc": True},
}


def decimal_required_bytes(precision: int) -> int:
    """Bytes of the smallest two's complement fixed that holds every unscaled
    value of ``precision`` digits (the spec's decimal encoding in Avro)."""
    n = 1
    while 2 ** (8 * n - 1) < 10**precision:
        n += 1
    return n


def avro_type(iceberg_type: str, defined: set[str] | None = None, field_id: int = 0) -> Any:
    """The Avro type of a primitive Iceberg type (as spelled in schema JSON).
    ``defined``: names of Avro named types (fixed) already defined in the same
    schema; Avro forbids redefining one and pyiceberg cannot resolve a
    reference by name, so a repeated one is renamed ``<name>_<field_id>``."""
    t = iceberg_type.strip()
    if t in _PRIMITIVE_AVRO:
        return _PRIMITIVE_AVRO[t]
    if t == "uuid":
        named: dict[str, Any] = {
            "type": "fixed",
            "size": 16,
            "logicalType": "uuid",
            "name": "uuid_fixed",
        }
    elif m := _DECIMAL.match(t):
        p, s = int(m.group(1)), int(m.group(2))
        named = {
            "type": "fixed",
            "size": decimal_required_bytes(p),
            "logicalType": "decimal",
            "precision": p,
            "scale": s,
            "name": f"decimal_{p}_{s}",
        }
    elif m := _FIXED.match(t):
        named = {"type": "fixed", "size": int(m.group(1)), "name": f"fixed_{m.group(1)}"}
    else:
        raise ValueError(f"Iceberg type {iceberg_type!r} cannot be a partition field type")
    if defined is not None:
        if named["name"] in defined:
            named["name"] = f"{named['name']}_{field_id}"
        defined.add(named["name"])
    return named


def avro_name(name: str) -> str:
    """``name`` made a valid Avro name the way Iceberg's Java writer does
    (``_x2D`` for ``-``, ``_1`` for a leading digit); Avro names are ASCII."""
    out = []
    for i, ch in enumerate(name):
        ok = ch.isascii() and (ch.isalpha() or ch == "_" or (i > 0 and ch.isdigit()))
        out.append(ch if ok else ("_" + ch if ch.isdigit() else f"_x{ord(ch):X}"))
    return "".join(out)


def partition_key(
    partition_fields: Sequence[Mapping[str, Any]],
) -> tuple[tuple[int, str, str], ...]:
    """A partition type as a hashable key: (field id, name, Iceberg type) per field."""
    return tuple((int(f["field-id"]), str(f["name"]), str(f["type"])) for f in partition_fields)


def partition_record_schema(partition_fields: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The Avro ``r102`` record of a partition type: one optional field per
    partition field (``{"field-id", "name", "type"}``), in order."""
    defined: set[str] = set()
    fields = []
    for fid, name, typ in partition_key(partition_fields):
        field = _opt(avro_name(name), fid, avro_type(typ, defined, fid))
        if field["name"] != name:
            field["iceberg-field-name"] = name
        fields.append(field)
    return {"type": "record", "name": "r102", "fields": fields}


def manifest_entry_schema(partition_fields: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The whole ``manifest_entry`` Avro schema for a partition type (unparsed)."""
    return entry_schema(partition_record_schema(partition_fields))
