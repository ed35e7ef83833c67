"""A table version as a Spark DataFrame: data files plus deletion vectors.

The driver resolves the version to a scan plan (``scan_plan(table)``: one
entry per data file with its URL, row count, deleted positions and the
names its columns have in the file) and builds a lazy DataFrame; executors
read the files.

**JVM reader** (local data directory, every column readable by Spark's
Parquet reader). Files are grouped by column mapping (files written before
a rename carry old names) and by whether they have deletions; each group is
one ``spark.read.schema(...).parquet(*urls)`` whose columns are renamed to
the current names (absent columns read as nulls; narrower stored types are
widened by the reader). Groups with deletions carry each row's file key
(``_metadata.file_size``, or the file name when two sizes are equal) and
``_metadata.row_index``, and drop the deleted rows by the cheapest form
for their deletion vectors (:mod:`lakehouse.spark.deletions`): a filter on
the row index for a few deleted runs, else a broadcast anti-join with one
8 KiB bitmap per (file, 65,536 rows) that has deletions::

    files without deletions ──────── read ───────────────────────────┐
    files with deletions ── read + (file key, row index) ──┐          ├─ union ─▶ rows
      few runs:  filter NOT (key = k AND row BETWEEN a AND b ...) ─────┤
      many rows: bitmaps (driver, cached) ── broadcast ── left anti ──┘

Column pruning and filter pushdown reach the Parquet scans through the
renames, the join and the union (plain Spark operators).

**Python reader** (S3, or stored types Spark cannot read such as
``timestamp[ns]``). One small task row per file is shipped to
``mapInArrow``; each task opens its files with pyarrow + fsspec, reads row
group by row group, renames and casts to the table's types, and drops the
deleted positions itself. Spark cannot prune columns or push filters into
it; it reads what the table holds.

With ``positions=True`` both add ``_lh_file`` (the data file's base name,
unique: names carry a uuid4) and ``_lh_row`` (the row's position in it), for
deletes and merges.

**Inlined rows** (inline data files, :mod:`lakehouse.data.inline`) have no
object in storage for an executor to open: their bytes are in the plan
(``ScanFile.inline``, at most ``inline.max_rows`` rows each). The driver
checks each payload's CRC, decodes it, renames and casts its columns as a
Python task does for a file, drops its deleted positions, and hands the rows
to Spark as one DataFrame built from Arrow, unioned with the file scan; with
``positions=True`` they carry ``_lh_file`` (the inline file's base name,
``<id>.inline``) and ``_lh_row`` exactly as file rows do, so deletes and
merges of inlined rows take the same path::

    data files ──── executors: JVM or Python reader ───────────┐
    inline files ── driver: decode payloads ── createDataFrame ─┴─ union ─▶ rows
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import reduce
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse.data import files as datafiles
from lakehouse.data.scan import storage_failed
from lakehouse.errors import CorruptionError, DataFileMissing
from lakehouse.spark import deletions
from lakehouse.spark.location import Location
from lakehouse.spark.session import default_parallelism
from lakehouse.spark.types import arrow_type, jvm_readable, spark_schema, spark_type
from lakehouse.spark.writer import col

FILE_COL = "_lh_file"
ROW_COL = "_lh_row"


class ScanFileLike(Protocol):
    """What the reader needs of one entry of ``scan_plan(table)``."""

    path: str
    url: str
    rows: int
    deleted: Any  # pyroaring.BitMap
    columns: dict[str, str]
    size: int
    footer_size: int | None
    footer_crc: int | None
    crc: int | None
    #: an inline file's payload (None: a file in storage)
    inline: bytes | None


def base_name(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def scan_frame(
    spark: SparkSession,
    files: Sequence[ScanFileLike],
    schema: pa.Schema,
    loc: Location,
    *,
    positions: bool = False,
) -> DataFrame:
    """The live rows of ``files`` as a DataFrame with the table's ``schema``."""
    names = [base_name(f.path) for f in files]
    if len(set(names)) != len(names):
        raise ValueError("two data files of the table share a base name; cannot scan it")
    inline = [f for f in files if f.inline is not None]
    stored = [f for f in files if f.inline is None]
    inlined = _inline_rows(inline, schema, positions) if inline else None
    check_footers(stored, loc)
    if not stored and inlined is not None:
        return _inline_frame(spark, inlined, schema, positions)
    if loc.jvm and all(jvm_readable(f.type) for f in schema):
        frame = _jvm_frame(spark, stored, schema, positions)
    else:
        frame = _python_frame(spark, stored, schema, loc, positions)
    if inlined is None:
        return frame
    return frame.unionByName(_inline_frame(spark, inlined, schema, positions))


def _empty(spark: SparkSession, schema: pa.Schema, positions: bool) -> DataFrame:
    s = spark_schema(schema)
    if positions:
        s = s.add(FILE_COL, T.StringType(), False).add(ROW_COL, T.LongType(), False)
    return spark.createDataFrame([], s)


def check_footers(files: Sequence[ScanFileLike], loc: Location) -> None:
    """On the driver, before any job: the footer and length of every file to read
    against what its commit recorded (one tail read each, in parallel, one byte past
    the recorded end), so no executor trusts a damaged footer, nor Spark's reader a
    footer it finds at another end (CorruptionError naming the first damaged file)."""
    todo = [f for f in files if datafiles.tail_length(f) is not None]
    if not todo or not datafiles.VERIFY:
        return

    def one(f: ScanFileLike) -> None:
        n = datafiles.tail_length(f) or 0
        try:
            tail = loc.read_tail(f.path, f.size + 1, n + 1)
        except FileNotFoundError:
            raise DataFileMissing(
                f"data file {f.path} is referenced by the table but missing from storage", f.path
            ) from None
        except OSError as exc:  # fsspec's and the OS's errors alike: not damage
            raise storage_failed(f.path, exc) from exc
        if len(tail) > n:
            raise CorruptionError(
                f"data file {f.path} is damaged: it is longer than the {f.size} bytes recorded"
            )
        datafiles.check_tail(tail, f)

    if len(todo) == 1:
        one(todo[0])
        return
    with ThreadPoolExecutor(max_workers=min(16, len(todo))) as pool:
        list(pool.map(one, todo))


# -- inlined rows (on the driver) -------------------------------------------------------------
def _out_schema(schema: pa.Schema, positions: bool) -> tuple[T.StructType, pa.Schema]:
    """The rows a scan returns: Spark's schema and the Arrow one Spark converts from."""
    out_spark = T.StructType(
        [T.StructField(f.name, f.dataType, True) for f in spark_schema(schema)]
    )
    if positions:
        out_spark = out_spark.add(FILE_COL, T.StringType(), False).add(ROW_COL, T.LongType(), False)
    return out_spark, pa.schema([pa.field(f.name, arrow_type(f.dataType), True) for f in out_spark])


def _inline_rows(files: Sequence[ScanFileLike], schema: pa.Schema, positions: bool) -> pa.Table:
    """The live rows of inline files, shaped as the scan returns them: each payload
    checked against its recorded size and CRC, decoded, its columns renamed and cast
    to the table's (absent ones null), deleted positions dropped."""
    from lakehouse.data import inline as inline_files

    _, out = _out_schema(schema, positions)
    parts = []
    for f in files:
        payload = f.inline
        assert payload is not None
        datafiles.check_bytes(payload, f)
        t = inline_files.decode(payload, f.path)
        if t.num_rows != f.rows:
            raise CorruptionError(
                f"inline data file {f.path} is damaged: it holds {t.num_rows} rows, "
                f"its record says {f.rows}"
            )
        dead = np.asarray(f.deleted.to_array(), dtype=np.int64)
        parts.append(_shaped(t, base_name(f.path), 0, f.columns, out, dead))
    return pa.concat_tables(parts) if parts else out.empty_table()


def _inline_frame(
    spark: SparkSession, rows: pa.Table, schema: pa.Schema, positions: bool
) -> DataFrame:
    """Rows decoded on the driver as a DataFrame of the scan's schema."""
    out_spark, _ = _out_schema(schema, positions)
    if not rows.num_rows:
        return spark.createDataFrame([], out_spark)
    return spark.createDataFrame(rows, out_spark)


# -- JVM reader -------------------------------------------------------------------------------
#: options of every Parquet scan: verify page checksums; no page skipping by the
#: column index (it lies outside the pages and the footer, so no checksum covers it);
#: whatever the session says: no file skipped as corrupt or missing (rows would
#: silently vanish), dates and times as written (a session's LEGACY rebase would
#: shift those before 1582/1900 in files pyarrow wrote)
SCAN_OPTIONS = {
    "parquet.page.verify-checksum.enabled": "true",
    "parquet.filter.columnindex.enabled": "false",
    "ignoreCorruptFiles": "false",
    "ignoreMissingFiles": "false",
    "datetimeRebaseMode": "CORRECTED",
    "int96RebaseMode": "CORRECTED",
}

_INT_MAX = (1 << 31) - 1


def _file_sizes(files: Sequence[ScanFileLike]) -> list[int] | None:
    """Byte sizes of local files, if they tell the files apart and fit an int, so
    the deletion key is an int (joined as one packed long); else None."""
    sizes = []
    for f in files:
        if not f.url.startswith("file://"):
            return None
        try:
            sizes.append(os.path.getsize(f.url[len("file://") :]))
        except OSError:
            return None
    if len(set(sizes)) != len(sizes) or max(sizes) > _INT_MAX:
        return None
    return sizes


def _jvm_frame(
    spark: SparkSession, files: Sequence[ScanFileLike], schema: pa.Schema, positions: bool
) -> DataFrame:
    groups: dict[tuple[tuple[tuple[str, str], ...], bool], list[ScanFileLike]] = {}
    for f in files:
        key = (tuple(sorted(f.columns.items())), bool(f.deleted))
        groups.setdefault(key, []).append(f)
    frames: list[DataFrame] = []
    for (mapping_items, has_deleted), group in groups.items():
        mapping = dict(mapping_items)
        stored = T.StructType(
            [
                T.StructField(mapping[fld.name], spark_type(fld.type, fld.name), True)
                for fld in schema
                if fld.name in mapping
            ]
        )
        raw = spark.read.schema(stored).options(**SCAN_OPTIONS).parquet(*[f.url for f in group])
        # hidden columns as SQL (one call into the JVM, not one per Column operator)
        meta = []
        if positions:
            meta += [f"_metadata.file_name AS {FILE_COL}", f"_metadata.row_index AS {ROW_COL}"]
        keys: Sequence[Any] = ()
        if has_deleted:
            # the file key: its size as an int when sizes tell the files apart (with the
            # bucket, one packed long to join on), else its base name
            sizes = _file_sizes(group)
            if sizes is not None:
                keys = sizes
                meta.append(f"int(_metadata.file_size) AS {deletions.KEY}")
            else:
                keys = [base_name(f.path) for f in group]
                meta.append(f"_metadata.file_name AS {deletions.KEY}")
            meta.append(f"_metadata.row_index AS {deletions.ROW}")
        if all(mapping.get(n) == n for n in schema.names):
            # the common case: the file's names are the table's; the reader already
            # returns the table's types (and widens narrower stored ones)
            frame = raw.selectExpr("*", *meta) if meta else raw
        else:
            cols = [
                (
                    col(mapping[fld.name]).alias(fld.name)
                    if mapping[fld.name] != fld.name
                    else col(fld.name)
                )
                if fld.name in mapping
                else F.lit(None).cast(spark_type(fld.type, fld.name)).alias(fld.name)
                for fld in schema
            ]
            frame = raw.select(*cols, *[F.expr(m) for m in meta])
        if has_deleted:
            frame = deletions.drop_deleted(spark, frame, group, keys)
        frames.append(frame)
    if not frames:
        return _empty(spark, schema, positions)
    return reduce(lambda a, b: a.unionByName(b), frames)


# -- Python reader ----------------------------------------------------------------------------
def _task_reader(loc: Location, schema: pa.Schema, out: pa.Schema, positions: bool) -> Any:
    """The function each ``mapInArrow`` task runs over its rows of (path, deleted, mapping)."""

    def run(tasks: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyroaring import BitMap

        for batch in tasks:
            for task in batch.to_pylist():
                deleted = BitMap.deserialize(task["deleted"]) if task["deleted"] else BitMap()
                mapping = json.loads(task["mapping"])
                rec = _Recorded(task["path"], task["size"], task["flen"], task["fcrc"], task["crc"])
                try:
                    yield from _read_file(loc, rec, deleted, mapping, schema, out, positions)
                except datafiles.READ_ERRORS as exc:
                    if isinstance(exc, FileNotFoundError):
                        raise
                    raise CorruptionError(
                        f"data file {rec.path} could not be read: {exc}"
                    ) from None

    return run


@dataclass(frozen=True)
class _Recorded:
    """What a task knows of a file's record."""

    path: str
    size: int
    footer_size: int | None
    footer_crc: int | None
    crc: int | None


def _read_file(
    loc: Location,
    rec: _Recorded,
    deleted: Any,
    mapping: dict[str, str],
    schema: pa.Schema,
    out: pa.Schema,
    positions: bool,
) -> Iterator[pa.RecordBatch]:
    dead = np.asarray(deleted.to_array(), dtype=np.int64)
    rel = rec.path
    name = base_name(rel)
    try:
        with loc.open_input(rel) as f:  # whole: every column is read anyway
            data = f.read()
    except FileNotFoundError:
        raise
    except OSError as exc:  # not damage: the bytes were never seen
        raise storage_failed(rel, exc) from exc
    # checked against the record (size, footer, whole-file CRC) before a byte is trusted
    datafiles.check_bytes(data, rec)
    with pq.ParquetFile(pa.BufferReader(data), page_checksum_verification=datafiles.VERIFY) as pf:
        stored = set(pf.schema_arrow.names)
        wanted = [mapping[c] for c in schema.names if mapping.get(c) in stored]
        start = 0
        for rg in range(pf.num_row_groups):
            t = pf.read_row_group(rg, columns=wanted)
            yield from _shaped(t, name, start, mapping, out, dead).to_batches()
            start += t.num_rows


def _shaped(
    t: pa.Table, name: str, start: int, mapping: dict[str, str], out: pa.Schema, dead: Any
) -> pa.Table:
    """Rows ``start ..`` of data file ``name`` (``t``: its columns under their names
    in the file) as the scan returns them: renamed and cast to the table's types
    (``mapping``: table name -> name in the file; absent columns null), with
    ``_lh_file``/``_lh_row`` when ``out`` has them, the deleted positions (``dead``,
    sorted) dropped."""
    n = t.num_rows
    arrays = []
    for fld in out:
        if fld.name == FILE_COL:
            arrays.append(pa.array([name] * n, pa.string()))
        elif fld.name == ROW_COL:
            arrays.append(pa.array(np.arange(start, start + n, dtype=np.int64)))
        elif mapping.get(fld.name) in t.column_names:
            a = t.column(mapping[fld.name])
            safe = not pa.types.is_timestamp(a.type)  # ns -> us truncates
            arrays.append(a.cast(fld.type, safe=safe))
        else:
            arrays.append(pa.nulls(n, fld.type))
    return datafiles.drop_positions(pa.Table.from_arrays(arrays, schema=out), dead, start)


def _python_frame(
    spark: SparkSession,
    files: Sequence[ScanFileLike],
    schema: pa.Schema,
    loc: Location,
    positions: bool,
) -> DataFrame:
    if not files:
        return _empty(spark, schema, positions)
    out_spark, out = _out_schema(schema, positions)
    tasks = pa.table(
        {
            "path": pa.array([f.path for f in files], pa.string()),
            "deleted": pa.array(
                [f.deleted.serialize() if f.deleted else b"" for f in files], pa.binary()
            ),
            "mapping": pa.array([json.dumps(f.columns) for f in files], pa.string()),
            "size": pa.array([f.size for f in files], pa.int64()),
            "flen": pa.array([f.footer_size for f in files], pa.int64()),
            "fcrc": pa.array([f.footer_crc for f in files], pa.int64()),
            "crc": pa.array([f.crc for f in files], pa.int64()),
        }
    )
    slices = max(1, min(len(files), default_parallelism(spark) * 2))
    task_df = spark.createDataFrame(tasks).repartition(slices)
    return task_df.mapInArrow(_task_reader(loc, schema, out, positions), out_spark)
