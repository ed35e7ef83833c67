"""Commands on table data: ``stats``, ``files``, ``head``, ``changes`` (reads) and
``append``, ``delete``, ``update``, ``merge``, ``restore``, ``clone``, ``compact``,
``remove-orphans`` (writes).

Reads open with :func:`lakehouse.open_reader` and pick a version with
``--version V`` or ``--at TIME`` (default: the latest). A write first checks
its table (and ``WHERE``) through a reader, so a typo is reported without
opening the writer, then runs one transaction as the single writer.
"""

from __future__ import annotations

import os
import re
import sys
from datetime import timedelta
from typing import Any

import pyarrow as pa

import lakehouse
from kvstore.cli.codec import human_bytes, plural
from kvstore.cli.progress import ProgressBar
from lakehouse.cli import partitions
from lakehouse.cli.render import MAX_CELL, arrow_json, arrow_text, data_file_json, data_file_lines
from lakehouse.cli.target import EXIT_OK, CliError, Ctx, transact, usage


def _width(ctx: Ctx) -> int | None:
    return None if getattr(ctx.args, "wide", False) else MAX_CELL


# ---------------------------------------------------------------------------
# reads
# ---------------------------------------------------------------------------
def cmd_stats(ctx: Ctx) -> int:
    table = ctx.args.table
    with ctx.target.open_reader() as r, ctx.view(r) as v:
        s = v.table_stats(table)
        name = v.describe_table(table).qualified_name
    doc = {
        "table": name,
        "version": v.version,
        "rows": s.rows,
        "files": s.files,
        "deleted_rows": s.deleted_rows,
        "bytes": s.bytes,
        "inlined_rows": s.inlined_rows,
    }
    ctx.doc(doc)
    ctx.line(f"{name} at version {v.version}")
    ctx.line(f"  rows          {s.rows}")
    ctx.line(f"  files         {s.files}")
    deleted = f"{s.deleted_rows}"
    if s.deleted_rows:
        deleted += " (marked in deletion vectors; `compact` rewrites them away)"
    ctx.line(f"  deleted rows  {deleted}")
    if s.inlined_rows:
        ctx.line(
            f"  inlined rows  {s.inlined_rows} (in the kvstore; `compact` moves them to Parquet)"
        )
    size = human_bytes(s.bytes)
    ctx.line(f"  bytes         {size}" + ("" if size == f"{s.bytes} B" else f" ({s.bytes})"))
    return EXIT_OK


def cmd_files(ctx: Ctx) -> int:
    """A table's data files; ``--partition F=V`` (repeatable, AND-ed) keeps those of
    matching partitions. A partitioned table's files show their partition."""
    table = ctx.args.table
    with ctx.target.open_reader() as r, ctx.view(r) as v:
        d = v.describe_table(table)
        files = v.list_data_files(table)
    name = d.qualified_name
    chosen = ctx.args.partition
    if chosen:
        keep = partitions.resolve(d, chosen)
        files = [f for f in files if keep.matches(d, f)]
    doc: dict[str, Any] = {"table": name, "version": v.version}
    if chosen:
        doc["partition_filter"] = keep.text
    doc["files"] = [
        {**data_file_json(f), "spec_id": f.spec_id, "partition": partitions.partition_json(d, f)}
        for f in files
    ]
    ctx.doc(doc)
    total = sum(f.bytes for f in files)
    where = f" in partitions matching {keep.text}" if chosen else ""
    ctx.line(
        f"{name} at version {v.version}: {plural(len(files), 'data file')}{where}, "
        f"{human_bytes(total)}"
    )
    shown = any(not s.is_unpartitioned for s in partitions.specs(d))
    for f in files:
        part = None
        if shown:
            part = f"{partitions.path(d, f) or '(unpartitioned)'} (spec {f.spec_id})"
        for text in data_file_lines(f, human_bytes(f.bytes), partition=part):
            ctx.line(text)
    return EXIT_OK


def cmd_head(ctx: Ctx) -> int:
    """The first ``-n`` rows (after ``--where``), read one data file at a time."""
    a = ctx.args
    with ctx.target.open_reader() as r, ctx.view(r) as v:
        name = v.describe_table(a.table).qualified_name
        stream = v.scan_batches(a.table, columns=a.columns, where=a.where)
        batches: list[pa.RecordBatch] = []
        seen = 0
        try:
            for batch in stream:  # one more row than shown says whether more match
                batches.append(batch)
                seen += batch.num_rows
                if seen > a.n:
                    break
        finally:
            stream.close()
        rows = pa.Table.from_batches(batches, schema=stream.schema)
    more = rows.num_rows > a.n
    rows = rows.slice(0, a.n)
    ctx.doc(
        {
            "table": name,
            "version": v.version,
            "columns": rows.column_names,
            "rows": arrow_json(rows),
            "count": rows.num_rows,
            "truncated": more,
        }
    )
    if rows.num_rows:
        ctx.line(arrow_text(rows, width=_width(ctx)))
    if more:
        ctx.line(
            f"(first {plural(rows.num_rows, 'row')} of {name} at version {v.version}; more match)"
        )
    else:
        ctx.line(f"({plural(rows.num_rows, 'row')} of {name} at version {v.version})")
    return EXIT_OK


def cmd_changes(ctx: Ctx) -> int:
    a = ctx.args
    with ctx.target.open_reader() as r:
        end = r.version if a.end is None else a.end
        rows = r.changes(a.table, a.start, end)
    ctx.doc(
        {
            "table": a.table,
            "start_version": a.start,
            "end_version": end,
            "columns": rows.column_names,
            "rows": arrow_json(rows),
            "count": rows.num_rows,
        }
    )
    if rows.num_rows:
        ctx.line(arrow_text(rows, width=_width(ctx)))
    ctx.line(f"({plural(rows.num_rows, 'changed row')} of {a.table} in versions {a.start}..{end})")
    return EXIT_OK


# ---------------------------------------------------------------------------
# writes
# ---------------------------------------------------------------------------
def _check_table(ctx: Ctx, where: str | None = None) -> pa.Schema:
    """The table exists and ``where`` parses (through a reader: no writer opened yet)."""
    with ctx.target.open_reader() as r:
        schema = r.describe_table(ctx.args.table).schema
        if where is not None:
            r.scan_batches(ctx.args.table, where=where).close()  # plans only: reads no file
    return schema


_FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".json": "json"}
_FORMATS.update({".jsonl": "json", ".ndjson": "json"})


def load_file(path: str, fmt: str | None, schema: pa.Schema) -> pa.Table:
    """Rows from a Parquet, CSV (with a header) or JSON-lines file, typed by ``schema``
    where the file's columns match it (the lakehouse then checks and casts)."""
    if fmt is None:
        fmt = _FORMATS.get(os.path.splitext(path)[1].lower())
        if fmt is None:
            raise CliError(
                f"cannot tell the format of {path}; give --format parquet|csv|json", 2, "usage"
            )
    if not os.path.isfile(path):
        raise CliError(f"no such file: {path}")
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path)
    if fmt == "csv":
        return _read_csv(path, schema)
    import pyarrow.json as pjson

    nullable = pa.schema([f.with_nullable(True) for f in schema])
    opts = pjson.ParseOptions(explicit_schema=nullable, unexpected_field_behavior="infer")
    return pjson.read_json(path, parse_options=opts)


def _read_csv(path: str, schema: pa.Schema) -> pa.Table:
    """A CSV file typed by ``schema``; a value that does not convert, or a missing
    value in a NOT NULL column, is a CliError naming the column and the data row
    (1 = the first row after the header)."""
    import pyarrow.csv as pcsv

    types = {f.name: f.type for f in schema}
    try:
        rows = pcsv.read_csv(path, convert_options=pcsv.ConvertOptions(column_types=types))
    except pa.ArrowInvalid as exc:
        raise CliError(f"{path}: {_csv_error(path, types, exc)}") from None
    for f in schema:
        if not f.nullable and f.name in rows.column_names and rows[f.name].null_count:
            row = rows[f.name].is_null().to_pylist().index(True) + 1
            raise CliError(
                f"{path}: row {row}, column {f.name!r}: empty, but the column is NOT NULL"
            )
    return rows


def _csv_error(path: str, types: dict[str, pa.DataType], exc: pa.ArrowInvalid) -> str:
    """pyarrow's message for a failed CSV conversion, with the column's name and the
    first data row whose value does not convert (pyarrow names neither)."""
    import csv

    import pyarrow.csv as pcsv

    text = str(exc)
    m = re.match(r"In CSV column #(\d+): (.*)", text, re.S)
    if m is None:
        return text
    with open(path, newline="", encoding="utf-8", errors="replace") as fh:
        header = next(csv.reader(fh), [])
    index = int(m.group(1))
    if index >= len(header) or header[index] not in types:
        return text
    name, detail = header[index], m.group(2).strip()
    opts = pcsv.ConvertOptions(include_columns=[name], column_types={name: pa.string()})
    values = pcsv.read_csv(path, convert_options=opts)[name]
    row = _first_bad(values, name, types[name])
    where = f"row {row + 1}, " if row is not None else ""
    return f"{where}column {name!r}: {detail}"


def _first_bad(values: pa.ChunkedArray, name: str, typ: pa.DataType) -> int | None:
    """The index of the first value the CSV reader cannot convert to ``typ`` (halving:
    about twice the column's size is converted in all)."""
    import pyarrow.csv as pcsv

    def fails(part: pa.ChunkedArray) -> bool:
        sink = pa.BufferOutputStream()
        pcsv.write_csv(pa.table({name: part}), sink)
        opts = pcsv.ConvertOptions(column_types={name: typ})
        try:
            pcsv.read_csv(pa.BufferReader(sink.getvalue()), convert_options=opts)
        except pa.ArrowInvalid:
            return True
        return False

    lo, hi = 0, len(values)
    if not fails(values):
        return None
    while hi - lo > 1:  # values[lo:hi] fails
        mid = (lo + hi) // 2
        if fails(values.slice(lo, mid - lo)):
            hi = mid
        else:
            lo = mid
    return lo


def cmd_append(ctx: Ctx) -> int:
    a = ctx.args
    schema = _check_table(ctx)
    data = load_file(a.file, a.format, schema)
    with ctx.target.open_writer() as lh:
        version, n = transact(lh, lambda txn: txn.append(a.table, data), keep=bool)
    ctx.doc({"version": version, "table": a.table, "appended": n})
    if version is None:
        ctx.line(f"{a.file} holds no rows; nothing appended")
    else:
        ctx.line(f"version {version}: appended {plural(n, 'row')} to {a.table}")
    return EXIT_OK


def cmd_delete(ctx: Ctx) -> int:
    a = ctx.args
    _check_table(ctx, a.where)
    with ctx.target.open_writer() as lh:
        version, n = transact(lh, lambda txn: txn.delete(a.table, a.where), keep=bool)
    ctx.doc({"version": version, "table": a.table, "deleted": n})
    if version is None:
        ctx.line(f"no rows of {a.table} match; nothing deleted")
    else:
        ctx.line(f"version {version}: deleted {plural(n, 'row')} from {a.table}")
    return EXIT_OK


def cmd_update(ctx: Ctx) -> int:
    a = ctx.args
    _check_table(ctx, a.where)
    values = dict(a.set)
    with ctx.target.open_writer() as lh:
        version, n = transact(lh, lambda txn: txn.update(a.table, a.where, values), keep=bool)
    ctx.doc({"version": version, "table": a.table, "updated": n})
    if version is None:
        ctx.line(f"no rows of {a.table} match; nothing updated")
    else:
        ctx.line(f"version {version}: updated {plural(n, 'row')} of {a.table}")
    return EXIT_OK


def cmd_merge(ctx: Ctx) -> int:
    """Upsert the rows of a file by ``--on`` (default: the table's primary key)."""
    a = ctx.args
    with ctx.target.open_reader() as r:
        d = r.describe_table(a.table)
    on = a.on or list(d.primary_key)
    if not on:
        raise usage(f"{a.table} has no primary key; give the key columns with --on COLUMN")
    data = load_file(a.file, a.format, d.schema)
    kw = {"when_matched": a.when_matched, "when_not_matched": a.when_not_matched}
    with ctx.target.open_writer() as lh:
        version, res = transact(lh, lambda txn: txn.merge(a.table, data, on, **kw))
    ctx.doc(
        {
            "version": version,
            "table": a.table,
            "on": on,
            "inserted": res.inserted,
            "updated": res.updated,
            "deleted": res.deleted,
        }
    )
    counts = (
        f"{plural(res.inserted, 'row')} inserted, {plural(res.updated, 'row')} updated, "
        f"{plural(res.deleted, 'row')} deleted"
    )
    if version is None:
        ctx.line(f"merge into {a.table} on {', '.join(on)} changed nothing ({counts})")
    else:
        ctx.line(f"version {version}: merged into {a.table} on {', '.join(on)}: {counts}")
    return EXIT_OK


def cmd_restore(ctx: Ctx) -> int:
    """The table (schema, properties, rows) as it was at a version, as a new version."""
    a = ctx.args
    with ctx.target.open_writer() as lh:
        version, _ = transact(lh, lambda txn: txn.restore_table(a.table, a.version))
        if version is None:  # already as it was
            version = lh.version
    ctx.doc({"version": version, "table": a.table, "restored_version": a.version})
    ctx.line(f"version {version}: {a.table} restored to its state at version {a.version}")
    return EXIT_OK


def cmd_clone(ctx: Ctx) -> int:
    """A new table sharing the source's data files (no copy), now or at ``--version``."""
    a = ctx.args
    with ctx.target.open_writer() as lh:
        source_version = lh.version if a.version is None else a.version
        version, _ = transact(
            lh, lambda txn: txn.clone_table(a.source, a.target, version=a.version)
        )
    ctx.doc(
        {
            "version": version,
            "source": a.source,
            "target": a.target,
            "source_version": source_version,
        }
    )
    ctx.line(f"version {version}: cloned {a.source} (as of version {source_version}) as {a.target}")
    return EXIT_OK


_COMPACT_FIELDS = ("files_removed", "files_added", "rows", "bytes_before", "bytes_after")


def _compact_scopes(ctx: Ctx) -> list[dict[str, Any]] | None:
    """``compact --partition``: the partitions to compact, as ``DataFile.partition``
    dicts (what ``txn.compact(partition=)`` takes), found through a reader; None: no
    ``--partition`` given."""
    a = ctx.args
    if not a.partition:
        return None
    with ctx.target.open_reader() as r:
        d = r.describe_table(a.table)
        keep = partitions.resolve(d, a.partition)
        files = r.list_data_files(a.table)
    scopes: dict[tuple[int, str], dict[str, Any]] = {}
    for f in files:
        if keep.matches(d, f):
            scopes.setdefault((f.spec_id, repr(f.raw_partition)), dict(f.partition))
    return list(scopes.values())


def cmd_compact(ctx: Ctx) -> int:
    """The whole table, the partitions ``--where`` (on partition columns) selects, or
    those ``--partition F=V`` names (one transaction: one version for them all)."""
    a = ctx.args
    _check_table(ctx, a.where)
    scopes = _compact_scopes(ctx)
    show = a.progress if a.progress is not None else sys.stderr.isatty()
    bar = ProgressBar(0, sys.stderr, enabled=show, label="compact")
    started: list[bool] = []  # no bar at all when there is nothing to rewrite

    def progress(done: int, total: int) -> None:
        started.append(True)
        bar.update(done, total)

    def work(txn: lakehouse.Transaction) -> lakehouse.CompactResult:
        kw: dict[str, Any] = {"target_file_bytes": a.target_file_bytes, "progress": progress}
        if scopes is None:
            return txn.compact(a.table, where=a.where, **kw)
        done = [txn.compact(a.table, partition=scope, **kw) for scope in scopes]
        return lakehouse.CompactResult(*(sum(getattr(r, k) for r in done) for k in _COMPACT_FIELDS))

    with ctx.target.open_writer() as lh:
        try:
            version, res = transact(lh, work)
        finally:
            if started:
                bar.close()
    doc: dict[str, Any] = {
        "version": version,
        "table": a.table,
        "files_removed": res.files_removed,
        "files_added": res.files_added,
        "rows": res.rows,
        "bytes_before": res.bytes_before,
        "bytes_after": res.bytes_after,
    }
    ctx.doc(doc)
    if version is None:
        ctx.line(f"{a.table}: nothing to compact")
    else:
        ctx.line(
            f"version {version}: compacted {a.table}: {plural(res.files_removed, 'file')} -> "
            f"{plural(res.files_added, 'file')} ({plural(res.rows, 'row')}), "
            f"{human_bytes(res.bytes_before)} -> {human_bytes(res.bytes_after)}"
        )
    return EXIT_OK


def cmd_remove_orphans(ctx: Ctx) -> int:
    older: timedelta | None = ctx.args.older_than
    with ctx.target.open_writer() as lh:
        ttl = lh.definition.transaction_ttl
        removed = lh.remove_orphan_files(older_than=older)
    age = older.total_seconds() if older is not None else ttl
    ctx.doc({"removed": removed, "count": len(removed), "older_than_seconds": age})
    ctx.line(
        f"removed {plural(len(removed), 'orphan data file')} "
        f"(unreferenced, created more than {age:g} s ago)"
    )
    for path in removed:
        ctx.line(f"  {path}")
    return EXIT_OK
