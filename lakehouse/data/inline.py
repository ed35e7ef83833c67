"""Inlined rows: small writes kept in the kvstore as inline data files.

A write of at most ``inline.max_rows`` rows (a table property, default
:data:`DEFAULT_MAX_ROWS`; ``0`` turns inlining off) does not create a Parquet
file: its rows become an *inline data file*, a :class:`~lakehouse.model.DataFile`
whose bytes live in the file's own kvstore record (``S/<ns>00<t>00F/<file id>``)
instead of object storage::

    +------+-------------------+-------------------------------+----------------+
    | 0x02 | u32 BE JSON length | {"kind":"file","inline":true, | payload        |
    |      |                    |  "id":...,"path":...,...}     | (Arrow IPC)    |
    +------+-------------------+-------------------------------+----------------+

(:mod:`lakehouse.data.record`). The payload is an Arrow IPC *stream* of the
rows, buffers compressed (LZ4, :data:`CODEC`), field names the table's column
names at the write; the record's ``cols`` pairs column ids with those names exactly as
a Parquet file's record does, so renames and added columns read through ids.
``size`` is the payload's length, ``crc`` its CRC-32C (checked by every read
and by ``lakehouse verify``), and ``stats`` the bounds a Parquet footer of the
same rows would give (:func:`lakehouse.data.stats.arrow_stats`), so pruning
treats both alike.

Because it is a data file (a file id, rows at positions 0..n-1, a deletion
vector, a partition), an inline file takes part in every path with nothing
new: reads, deletes, time travel, conflicts and rebase, ``changes``,
restore and clone, export (the state keys carry it), readers in other
processes, crash recovery (it is as durable as the commit that wrote it).
Only code that touches the *storage bytes of a path* branches on
``DataFile.is_inline``: its path (``<table id>/<file id>.inline``) is never
written to storage, so reads take the bytes from the record
(:func:`lakehouse.data.scan.data_of`), and garbage collection, orphan removal
and export have nothing to delete or copy. Compaction moves inline files into
Parquet files.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from crc32c import crc32c

from lakehouse.data.stats import arrow_stats
from lakehouse.errors import CorruptionError
from lakehouse.model import Column, DataFile, TableDef, rows_without_field_ids

#: the path suffix of an inline data file (never a file in storage)
SUFFIX = ".inline"

#: the table property bounding the rows of an inlined write
PROPERTY = "inline.max_rows"

#: rows a write may have to be inlined when the table does not say
#: (measured: docs/lakehouse.md, "Inlined rows")
DEFAULT_MAX_ROWS = 10_000

#: the payload's buffer compression: LZ4 frames, not zstd (measured, 1,000 rows of
#: the benchmark's table: 20.6 KB, decoded in ~30 us; zstd: 12.4 KB, ~165 us, which
#: a read of 300 inlined batches pays 300 times). Decoding takes either.
CODEC = "lz4"

_WRITE_OPTIONS = pa.ipc.IpcWriteOptions(compression=CODEC, use_threads=False)
_READ_OPTIONS = pa.ipc.IpcReadOptions(use_threads=False)


def check_property(value: str) -> int:
    """``value`` of :data:`PROPERTY` as a row count (ValueError naming the property
    unless it is a non-negative integer)."""
    text = value.strip() if isinstance(value, str) else ""
    if not text.isascii() or not text.isdigit():
        raise ValueError(
            f"table property {PROPERTY} must be a non-negative integer (0 turns inlining "
            f"off), not {value!r}"
        )
    return int(text)


def max_rows(d: TableDef) -> int:
    """The most rows a write to ``d`` inlines (0: none)."""
    raw = d.properties.get(PROPERTY)
    return DEFAULT_MAX_ROWS if raw is None else check_property(raw)


def path_of(table_id: str, file_id: str) -> str:
    """The path an inline file of table ``table_id`` is named by."""
    return f"{table_id}/{file_id}{SUFFIX}"


def encode(rows: pa.Table) -> bytes:
    """The payload of an inline file: ``rows`` as an Arrow IPC stream, its buffers
    compressed (:data:`CODEC`); without field ids (they would reach the Parquet
    file an Iceberg reader is given, see :func:`~lakehouse.model.without_field_ids`)."""
    rows = rows_without_field_ids(rows)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema, options=_WRITE_OPTIONS) as writer:
        writer.write_table(rows)
    payload: bytes = sink.getvalue().to_pybytes()
    return payload


def decode(payload: bytes, path: str) -> pa.Table:
    """The rows of an inline file (CorruptionError naming ``path`` on bad bytes)."""
    try:
        with pa.ipc.open_stream(pa.BufferReader(payload), options=_READ_OPTIONS) as reader:
            t = reader.read_all()
        t.validate(full=True)
    except (pa.ArrowException, OSError, ValueError, IndexError) as exc:
        raise CorruptionError(f"inline data file {path} is not readable: {exc}") from None
    return t


def describe(path: str, payload: bytes, rows: pa.Table, columns: Sequence[Column]) -> DataFile:
    """The record of an inline file at ``path`` holding ``rows`` (encoded as
    ``payload``); its columns are matched to the table's ``columns`` by name."""
    by_name = {c.name: c for c in columns}
    ids = {name: by_name[name].id for name in rows.column_names if name in by_name}
    return DataFile(
        path,
        len(payload),
        rows.num_rows,
        file_id=path.rsplit("/", 1)[-1].removesuffix(SUFFIX),
        columns=tuple((cid, name) for name, cid in ids.items()),
        raw_stats=arrow_stats(rows, ids),
        crc=crc32c(payload),
        inline=payload,
    )


__all__ = [
    "DEFAULT_MAX_ROWS",
    "PROPERTY",
    "SUFFIX",
    "check_property",
    "decode",
    "describe",
    "encode",
    "max_rows",
    "path_of",
]
