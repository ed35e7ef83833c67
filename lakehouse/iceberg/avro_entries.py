"""Manifest entries encoded to Avro binary (:mod:`lakehouse.iceberg.avro` writes
the manifests): :class:`EntryEncoder` encodes an entry directly
(:mod:`lakehouse.iceberg.avro_binary`) where it can, else with fastavro from
the parsed ``manifest_entry`` schema of its partition type, giving the same
bytes either way; :class:`Encoded` is an entry so encoded.
"""

from __future__ import annotations

import functools
import io
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import fastavro

from lakehouse.iceberg import avro_binary
from lakehouse.iceberg.avro_schemas import entry_schema, partition_key, partition_record_schema

#: a partition field as the writer fills it: Iceberg name, Avro name, and the
#: union branch to tag its value with
_PartField = tuple[str, str, str]


@functools.lru_cache(maxsize=64)
def _parsed_entry_schema(
    key: tuple[tuple[int, str, str], ...],
) -> tuple[Any, tuple[_PartField, ...]]:
    """The parsed ``manifest_entry`` schema of a partition type, and its fields."""
    record = partition_record_schema([{"field-id": f, "name": n, "type": t} for f, n, t in key])
    part = []
    for (_, n, _), field in zip(key, record["fields"], strict=True):
        typ = field["type"][1]  # ["null", the type]
        # a union branch is named by its type, or by its name for a named type
        branch = typ if isinstance(typ, str) else typ.get("name", typ["type"])
        part.append((n, field["name"], branch))
    return fastavro.parse_schema(entry_schema(record)), tuple(part)


# Speed: fastavro picks the branch of a union (every optional field) by
# validating the value against each branch, which walks a whole metrics list.
# A value tagged ``(branch, value)`` skips that (half the time of a manifest).
_LISTS = (
    "column_sizes",
    "value_counts",
    "null_value_counts",
    "nan_value_counts",
    "lower_bounds",
    "upper_bounds",
    "split_offsets",
    "equality_ids",
)


def tagged(
    entries: Iterable[Mapping[str, Any]], part: tuple[_PartField, ...]
) -> Iterator[dict[str, Any]]:
    """``entries`` as fastavro writes them fastest: union values tagged with
    their branch, partition fields under their Avro names (the given dicts
    are not changed)."""
    for e in entries:
        df = e["data_file"]
        d = dict(df)
        for k in _LISTS:
            v = d.get(k)
            if v is not None:
                d[k] = ("array", v)
        given = df["partition"]
        p = {}
        for name, aname, branch in part:
            v = given.get(name)
            if isinstance(v, uuid.UUID):  # fastavro's uuid is a string's, ours a fixed
                v = v.bytes
            p[aname] = None if v is None else (branch, v)
        d["partition"] = p
        yield {**e, "data_file": d}


@dataclass(frozen=True, slots=True)
class Encoded:
    """A manifest entry already in Avro binary (:class:`EntryEncoder`), with what
    its manifest's list row needs of it (:func:`lakehouse.iceberg.avro.manifest_file_for`):
    writing a manifest of many new files then keeps no entry dicts alive."""

    raw: bytes
    status: int
    sequence_number: int | None
    record_count: int
    partition: Mapping[str, Any]


class EntryEncoder:
    """Encodes manifest entries of one partition type (``partition_fields``) to
    Avro binary, directly where it can (:mod:`lakehouse.iceberg.avro_binary`),
    else with fastavro: the same bytes either way."""

    def __init__(self, partition_fields: Sequence[Mapping[str, Any]]) -> None:
        self.key = partition_key(partition_fields)
        self.schema, self.part = _parsed_entry_schema(self.key)

    def raw(self, e: Mapping[str, Any]) -> bytes:
        """``e`` (an :func:`lakehouse.iceberg.avro.entry` dict) as one Avro record."""
        try:
            return avro_binary.encode_entry(e, self.part, e["data_file"]["partition"])
        except avro_binary.Unsupported:
            buf = io.BytesIO()
            [record] = tagged([e], self.part)
            fastavro.schemaless_writer(buf, self.schema, record)
            return buf.getvalue()

    def __call__(self, e: Mapping[str, Any]) -> Encoded:
        df = e["data_file"]
        return Encoded(
            self.raw(e), e["status"], e["sequence_number"], df["record_count"], df["partition"]
        )
