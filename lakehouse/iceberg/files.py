"""Parquet files the Iceberg metadata names that the lakehouse does not keep
itself: positional delete files (one per data file and deletion vector) and
*materialised* data files (inlined batches, and files whose column names
would be ambiguous under the name mapping), both with Parquet field ids.

A positional delete file is the spec's::

    file_path: string, required, field id 2147483546   (the data file, every row)
    pos:       long,   required, field id 2147483545   (a deleted row, ascending)

Both kinds are written with the same settings as the lakehouse's own data
files (snappy, no dictionaries, statistics, page checksums) and without the
Arrow schema in the footer, so the bytes depend only on the rows and the
pyarrow version: two writers of the same object write the same bytes.
"""

from __future__ import annotations

import io
from collections.abc import Mapping

import pyarrow as pa
from pyroaring import BitMap

from lakehouse.data.files import write_parquet

#: the spec's reserved field ids of a positional delete file
FILE_PATH_ID = 2147483546
POS_ID = 2147483545

POSITION_DELETES_SCHEMA = pa.schema(
    [
        pa.field(
            "file_path",
            pa.string(),
            nullable=False,
            metadata={b"PARQUET:field_id": str(FILE_PATH_ID).encode()},
        ),
        pa.field(
            "pos", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": str(POS_ID).encode()}
        ),
    ]
)


def _parquet(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    write_parquet(table, buf, store_schema=False)
    return buf.getvalue()


def position_deletes_bytes(data_file_path: str, positions: BitMap) -> bytes:
    """A positional delete file deleting ``positions`` (0-based row positions)
    of the data file at ``data_file_path`` (its location as the manifests name
    it); rows sorted by position."""
    pos = pa.array(positions.to_array(), type=pa.uint32()).cast(pa.int64())
    paths = pa.repeat(pa.scalar(data_file_path, pa.string()), len(pos))
    return _parquet(pa.Table.from_arrays([paths, pos], schema=POSITION_DELETES_SCHEMA))


def materialised_bytes(rows: pa.Table, ids_by_name: Mapping[str, int]) -> bytes:
    """``rows`` as Parquet with a ``PARQUET:field_id`` on every field, nested
    ones included (``ids_by_name``: top-level column name -> field id; nested
    ids follow from it, see :func:`lakehouse.iceberg.types.field_ids_schema`).
    Same rows in the same order, so positions in deletion vectors stay valid."""
    from lakehouse.iceberg.types import field_ids_schema

    return _parquet(rows.cast(field_ids_schema(rows.schema, ids_by_name)))
