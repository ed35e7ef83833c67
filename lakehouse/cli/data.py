"""Commands on table data: ``stats``, ``files``, ``head``, ``changes`` (reads) and
``append``, ``delete``, ``compact``, ``remove-orphans`` (writes).

Reads open with :func:`lakehouse.open_reader` and pick a version with
``--version V`` or ``--at TIME`` (default: the latest). A write first checks
its table (and ``WHERE``) through a reader, so a typo is reported without
opening the writer, then runs one transaction as the single writer.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import pyarrow as pa

from kvstore.cli.codec import human_bytes, plural
from lakehouse.cli.render import MAX_CELL, arrow_json, arrow_text, data_file_json, data_file_lines
from lakehouse.cli.target import EXIT_OK, CliError, Ctx, transact


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
    }
    ctx.doc(doc)
    ctx.line(f"{name} at version {v.version}")
    ctx.line(f"  rows          {s.rows}")
    ctx.line(f"  files         {s.files}")
    deleted = f"{s.deleted_rows}"
    if s.deleted_rows:
        deleted += " (marked in deletion vectors; `compact` rewrites them away)"
    ctx.line(f"  deleted rows  {deleted}")
    size = human_bytes(s.bytes)
    ctx.line(f"  bytes         {size}" + ("" if size == f"{s.bytes} B" else f" ({s.bytes})"))
    return EXIT_OK


def cmd_files(ctx: Ctx) -> int:
    table = ctx.args.table
    with ctx.target.open_reader() as r, ctx.view(r) as v:
        files = v.list_data_files(table)
        name = v.describe_table(table).qualified_name
    ctx.doc({"table": name, "version": v.version, "files": [data_file_json(f) for f in files]})
    total = sum(f.bytes for f in files)
    ctx.line(
        f"{name} at version {v.version}: {plural(len(files), 'data file')}, {human_bytes(total)}"
    )
    for f in files:
        for text in data_file_lines(f, human_bytes(f.bytes)):
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
        import pyarrow.csv as pcsv

        types = {f.name: f.type for f in schema}
        return pcsv.read_csv(path, convert_options=pcsv.ConvertOptions(column_types=types))
    import pyarrow.json as pjson

    nullable = pa.schema([f.with_nullable(True) for f in schema])
    opts = pjson.ParseOptions(explicit_schema=nullable, unexpected_field_behavior="infer")
    return pjson.read_json(path, parse_options=opts)


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


def cmd_compact(ctx: Ctx) -> int:
    a = ctx.args
    _check_table(ctx)
    with ctx.target.open_writer() as lh:
        version, res = transact(
            lh, lambda txn: txn.compact(a.table, target_file_bytes=a.target_file_bytes)
        )
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
