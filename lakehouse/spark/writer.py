"""Executors write Parquet data files; the driver learns exactly which.

Two writers, both ending in a list of relative paths of complete files that
the driver then registers (``txn.add_files``) and commits:

**JVM writer** (local data directory, every column a type Spark writes
exactly; see :func:`lakehouse.spark.types.jvm_writable`). ``df.write.parquet``
into a staging directory of its own inside the table's directory; Spark's
output committer already guarantees that only the files of the successful
attempt of each task are in it after the job (a retried or speculative
attempt writes under ``_temporary/`` and is discarded). The driver renames
each file to a fresh data-file name (one ``rename`` each, atomic) and removes
the staging directory. This is Spark's fastest path (measured: a
``mapInArrow`` writer takes ~3x as long on 2 cores).

**Python writer** (S3 and other object stores, which this JVM cannot reach,
or types Spark does not write exactly). ``df.mapInArrow`` where each task
streams its batches through pyarrow into files named::

    <table dir>/<epoch ms>-<job id>-<partition>-<attempt>-<group>-<uuid4 hex>.parquet

(the leading creation time is what ``remove_orphan_files`` judges age by)
and returns one ``(group, path, rows, bytes)`` row per file it completed. Task
retries and speculation: Spark hands the driver the rows of exactly one
successful attempt per partition, so the driver registers exactly those
files, then lists ``<table dir>/<job id>-*`` and deletes everything else (a
failed attempt's partial file, the loser of a speculative race)::

    attempt 0 of p3 ── writes <job>-00003-0-….parquet ── dies
    attempt 1 of p3 ── writes <job>-00003-1-….parquet ── returns its row ──┐
    driver: collect() → files of the returned rows ── add_files           │
            list *-<job>-* ── delete <job>-00003-0-…  (never registered) ◀────┘

A failed job deletes every file under its job id (or its staging
directory). A driver killed midway leaves only unregistered files, which
``lh.remove_orphan_files`` reclaims; nothing of the write is visible.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse.model import without_field_ids
from lakehouse.spark.jobs import bad_data, spark_job
from lakehouse.spark.location import Location
from lakehouse.spark.types import ColumnPlan

log = logging.getLogger("lakehouse.spark")

#: rows buffered by a Python task before it writes a row group
ROW_GROUP_ROWS = 1 << 20
#: a Python task starts a new file after this many rows
MAX_FILE_ROWS = 16 << 20

#: joins a file's values of the split columns into its group (``""`` without any)
GROUP_SEP = "/"

Split = str | Sequence[str] | None


def _columns(split: Split) -> tuple[str, ...]:
    """The split columns: none, one (a str) or several."""
    if split is None:
        return ()
    return (split,) if isinstance(split, str) else tuple(split)


_RESULT_SCHEMA = pa.schema(
    [("grp", pa.string()), ("path", pa.string()), ("rows", pa.int64()), ("bytes", pa.int64())]
)


def quote_ident(name: str) -> str:
    """``name`` as one backquoted Spark SQL identifier (backquotes in it doubled), so
    dots and backquotes in it are not syntax: ``a.b`` -> ```a.b```."""
    return "`" + name.replace("`", "``") + "`"


def col(name: str) -> Column:
    """A column by exact name (dots and backquotes are not syntax)."""
    return F.col(quote_ident(name))


def not_null_message(column: str, table: str) -> str:
    """What a write job fails with when a not-nullable column of the data holds a null."""
    return f"column {column!r} of {table} is not nullable but the data holds a null"


def prepare(
    df: DataFrame, plans: list[ColumnPlan], table: str, where: Column | None = None
) -> DataFrame:
    """Project ``df`` onto the table's columns: casts, nulls for missing nullable
    columns, and in-job checks (non-nullable columns hold no null; with
    ``where``, every row matches it) that fail the job with a bad-data message."""
    cols: list[Column] = []
    for p in plans:
        if p.action == "null":
            c = F.lit(None).cast(p.type)
        elif p.action == "cast":
            c = col(p.name).cast(p.type)
        else:
            c = col(p.name)
        if p.check_not_null:
            msg = bad_data(not_null_message(p.name, table))
            c = F.when(c.isNull(), F.raise_error(F.lit(msg))).otherwise(c)
        cols.append(c.alias(p.name))
    out = df.select(*cols)
    if where is not None and plans:
        first = plans[0].name
        msg = bad_data(f"a row of the data for {table} does not match the overwrite condition")
        guarded = F.when(F.coalesce(where, F.lit(False)), col(first)).otherwise(
            F.raise_error(F.lit(msg))
        )
        out = out.select(guarded.alias(first), *[col(p.name) for p in plans[1:]])
    return out


#: the StructField metadata key Spark writes as a Parquet field id
#: (``spark.sql.parquet.fieldId.write.enabled``, on by default)
SPARK_FIELD_ID = "parquet.field.id"


def _no_ids(metadata: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metadata.items() if not k.startswith(SPARK_FIELD_ID)}


def _type_without_ids(t: T.DataType) -> T.DataType:
    if isinstance(t, T.StructType):
        return T.StructType(
            [
                T.StructField(
                    f.name, _type_without_ids(f.dataType), f.nullable, _no_ids(f.metadata)
                )
                for f in t.fields
            ]
        )
    if isinstance(t, T.ArrayType):
        return T.ArrayType(_type_without_ids(t.elementType), t.containsNull)
    if isinstance(t, T.MapType):
        return T.MapType(
            _type_without_ids(t.keyType), _type_without_ids(t.valueType), t.valueContainsNull
        )
    return t


def drop_field_ids(df: DataFrame) -> DataFrame:
    """``df`` without ``parquet.field.id`` in any column's metadata, nested fields
    too (other metadata stays; ``df`` itself when it has none).

    Spark writes that metadata as Parquet field ids (a DataFrame read through a
    Delta table with column mapping, or built with an Iceberg table's ids), and
    Iceberg readers prefer a file's field ids over the name mapping the lakehouse
    gives them: columns would come back swapped or null (see
    :func:`lakehouse.model.without_field_ids`, the same for Arrow schemas). A
    column with ids is cast to its own type without them (nested ids) and
    aliased with explicit metadata (top-level ids); the others pass as they are."""
    schema = df.schema
    if _type_without_ids(schema) == schema:
        return df
    cols: list[Column] = []
    for f in schema.fields:
        clean = _type_without_ids(f.dataType)
        meta = _no_ids(f.metadata)
        if clean == f.dataType and meta == f.metadata:
            cols.append(col(f.name))
            continue
        c = col(f.name) if clean == f.dataType else col(f.name).cast(clean)
        cols.append(c.alias(f.name, metadata=meta))
    return df.select(*cols)


# -- JVM writer ------------------------------------------------------------------------------
def write_jvm(
    df: DataFrame,
    loc: Location,
    table_dir: str,
    new_path: Callable[[], str],
    what: str,
    split: Split = None,
) -> dict[str, list[str]]:
    """Write ``df`` with Spark's Parquet writer; returns the relative paths of the
    non-empty files, renamed into the table's directory (see module doc), by their
    values of the ``split`` columns joined by :data:`GROUP_SEP` (``""`` without
    any; Spark's ``partitionBy`` drops them from the files)."""
    split = _columns(split)
    staging = f"{table_dir}/{time.time_ns() // 1_000_000:013d}-spark-{uuid.uuid4().hex}"
    done: dict[str, list[str]] = {}
    moved: list[str] = []
    try:
        with spark_job(what):
            w = (
                # "error" (= errorifexists): the one spelling Spark Connect accepts too
                df.write.mode("error")
                .option("compression", "snappy")
                .option("parquet.page.write-checksum.enabled", "true")  # parquet-mr's default
            )
            if split:
                w = w.partitionBy(*split)
            w.parquet(loc.url(staging))
        dirs: dict[tuple[str, ...], str] = {(): staging}
        for name in split:
            dirs = {
                (*group, d.rsplit("=", 1)[-1]): d
                for group, parent in dirs.items()
                for d in loc.list(parent, f"{name}=")
            }
        for group, d in dirs.items():
            for rel in loc.list(d):
                name = rel.rsplit("/", 1)[-1]
                if not name.endswith(".parquet") or name.startswith((".", "_")):
                    continue
                if pq.ParquetFile(loc.fs_path(rel)).metadata.num_rows == 0:
                    continue
                dst = new_path()
                loc.rename(rel, dst)
                moved.append(dst)
                done.setdefault(GROUP_SEP.join(group), []).append(dst)
    except BaseException:
        loc.delete(moved)
        raise
    finally:
        loc.delete([staging])
    return done


# -- Python writer ---------------------------------------------------------------------------
class _TaskFiles:
    """One task's open file for one group, rolled at :data:`MAX_FILE_ROWS`."""

    def __init__(self, loc: Location, prefix: str, schema: pa.Schema) -> None:
        self.loc, self.prefix, self.schema = loc, prefix, schema
        self.done: list[tuple[str, int, int]] = []
        self.file: Any = None
        self.writer: Any = None
        self.path = ""
        self.rows = 0
        self.buffered: list[pa.Table] = []
        self.nbuf = 0

    def add(self, table: pa.Table) -> None:
        self.buffered.append(table)
        self.nbuf += table.num_rows
        if self.nbuf >= ROW_GROUP_ROWS:
            self.flush()

    def flush(self) -> None:
        if not self.nbuf:
            return
        if self.writer is None:
            self.path = f"{self.prefix}-{uuid.uuid4().hex}.parquet"
            self.file = self.loc.open_output(self.path)
            self.writer = pq.ParquetWriter(
                self.file, self.schema, compression="snappy", write_page_checksum=True
            )
            self.rows = 0
        self.writer.write_table(pa.concat_tables(self.buffered), row_group_size=ROW_GROUP_ROWS)
        self.rows += self.nbuf
        self.buffered, self.nbuf = [], 0
        if self.rows >= MAX_FILE_ROWS:
            self.close()

    def close(self) -> None:
        self.flush()
        if self.writer is not None:
            self.writer.close()
            size = self.file.tell()
            self.file.close()
            self.done.append((self.path, self.rows, size))
            self.writer = self.file = None


def _task_writer(
    loc: Location,
    table_dir: str,
    job: str,
    schema: pa.Schema,
    split: Split,
    ordered: bool = False,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function each ``mapInArrow`` task runs (pickled to the executors).
    ``ordered``: rows arrive sorted by the ``split`` columns, so a group's file is
    closed as soon as a later group starts (one open file at a time)."""
    split = _columns(split)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        part = ctx.partitionId() if ctx is not None else 0
        attempt = ctx.attemptNumber() if ctx is not None else 0
        ms = time.time_ns() // 1_000_000
        prefix = f"{table_dir}/{ms:013d}-{job}-{part:05d}-{attempt}"
        groups: dict[tuple[str, ...], _TaskFiles] = {}
        out: list[tuple[str, str, int, int]] = []

        def close(group: tuple[str, ...]) -> None:
            files = groups.pop(group)
            files.close()
            out.extend((GROUP_SEP.join(group), *d) for d in files.done)

        for batch in batches:
            if batch.num_rows == 0:
                continue
            table = pa.Table.from_batches([batch])
            parts: list[tuple[tuple[str, ...], pa.Table]] = [((), table)]
            if split:
                keys = [table.column(c).to_numpy(zero_copy_only=False) for c in split]
                table = table.drop_columns(list(split))
                joined = (
                    keys[0]
                    if len(keys) == 1
                    else np.array([GROUP_SEP.join(map(str, k)) for k in zip(*keys)], dtype=object)
                )
                parts = [
                    (tuple(g.split(GROUP_SEP)) if len(keys) > 1 else (g,), table.take(idx))
                    for g, idx in _runs(joined)
                ]
            for group, t in parts:
                try:
                    t = t.cast(schema)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                    raise ValueError(
                        bad_data(f"a value does not fit the table's types: {e}")
                    ) from e
                if group not in groups:
                    n = len(groups) + len(out)
                    groups[group] = _TaskFiles(loc, f"{prefix}-g{n:04d}", schema)
                groups[group].add(t)
            if ordered and parts:
                last = max(g for g, _ in parts)
                for group in [g for g in groups if g < last]:
                    close(group)
        for group in list(groups):
            close(group)
        if out:
            yield pa.RecordBatch.from_arrays(
                [pa.array([o[i] for o in out]) for i in range(4)], schema=_RESULT_SCHEMA
            )

    return run


def _runs(values: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """Row indexes of each distinct value (ascending within a value), by value."""
    order = np.argsort(values, kind="stable")
    sv = values[order]
    cuts = np.flatnonzero(sv[1:] != sv[:-1]) + 1
    return [(str(sv[lo]), order[lo:hi]) for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(sv)])]


def write_python(
    df: DataFrame,
    loc: Location,
    table_dir: str,
    schema: pa.Schema,
    what: str,
    split: Split = None,
    job: str | None = None,
    ordered: bool = False,
) -> dict[str, list[str]]:
    """Write ``df`` through pyarrow in Python tasks; returns the relative paths of the
    files of the successful attempts by the values of the ``split`` columns
    (everything else the job wrote is deleted). ``job``: the job id (default: a
    fresh uuid4 hex); ``ordered``: rows arrive sorted by ``split``."""
    job = job or uuid.uuid4().hex
    fn = _task_writer(loc, table_dir, job, without_field_ids(schema), split, ordered)
    done: dict[str, list[str]] = {}
    try:
        with spark_job(what):
            rows = df.mapInArrow(fn, "grp string, path string, rows long, bytes long").collect()
        for r in rows:
            if r["rows"] > 0:
                done.setdefault(r["grp"], []).append(r["path"])
    finally:
        keep = {p for paths in done.values() for p in paths}
        stray = [p for p in loc.list(table_dir) if f"-{job}-" in p and p not in keep]
        if stray:
            log.debug("deleting %d files of failed or duplicate task attempts", len(stray))
            loc.delete(stray)
    return done


def write_files(
    df: DataFrame,
    loc: Location,
    table_dir: str,
    schema: pa.Schema,
    new_path: Callable[[], str],
    what: str,
    *,
    jvm: bool,
    split: Split = None,
    ordered: bool = False,
) -> dict[str, list[str]]:
    """Write ``df`` (already shaped as the table, plus the ``split`` columns) as data
    files of the table; returns their relative paths by the ``split`` values."""
    if jvm:
        return write_jvm(df, loc, table_dir, new_path, what, split)
    return write_python(df, loc, table_dir, schema, what, split, ordered=ordered)
